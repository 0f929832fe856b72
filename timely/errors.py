"""The error tree. Every error ``timely`` raises on purpose is a `TimelyError`.

::

    TimelyError
    ├── GraphError              the dataflow graph is malformed (found while it is built)
    │   ├── CycleError          a cycle that does not pass through a feedback
    │   └── ScopeError          a stream used in a loop context it does not belong to
    ├── TimestampError          a send or notification earlier than the time held
    ├── InputError              misuse of an input (send after close, epochs going back)
    ├── VertexError             a user callback raised; the user's exception is chained
    ├── StalledError            a wait gave up; the message says what holds progress back
    ├── ComputationFailed       the computation already failed; raised on further use
    ├── CodecError              a record cannot be encoded, or received bytes cannot be decoded
    ├── FrameError              a network frame is malformed or larger than the frame limit
    ├── HandshakeError          a process could not join the cluster (unreachable, refused)
    ├── PeerError               another process failed or was lost; says which and why
    ├── CheckpointError         a checkpoint directory that cannot be used as asked
    └── LibraryError            what a library built on timely raises:
        ├── timely_libs.linq.OperatorError      a user function given to an operator failed
        ├── timely_libs.pregel.PregelError      a Pregel program went wrong
        ├── timely_libs.bloom.BloomError        a Bloom program is malformed, or a function failed
        └── timely_libs.spark.SparkBridgeError  a computation run through Spark failed

So ``except timely.TimelyError`` catches every error of timely and its libraries.

Messages name the stage (with its loop path, e.g. ``cc.loop.min``), the worker and the
time, so that a failure can be found in a large graph.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TimelyError",
    "GraphError",
    "CycleError",
    "ScopeError",
    "TimestampError",
    "InputError",
    "VertexError",
    "StalledError",
    "ComputationFailed",
    "CodecError",
    "FrameError",
    "HandshakeError",
    "PeerError",
    "LibraryError",
]


class TimelyError(Exception):
    """Base of every error raised by timely."""


class GraphError(TimelyError):
    """The dataflow graph is malformed."""


class CycleError(GraphError):
    """A cycle in the graph does not pass through a feedback; ``stages`` lists it."""

    def __init__(self, message: str, stages: list[str]) -> None:
        super().__init__(message)
        self.stages = stages


class ScopeError(GraphError):
    """A stream was used in a loop context it does not belong to."""


class TimestampError(TimelyError):
    """A vertex sent or asked for a notification at a time it may not use."""

    def __init__(self, message: str, stage: str, time: object, held: object) -> None:
        super().__init__(message)
        self.stage = stage
        self.time = time
        self.held = held


class InputError(TimelyError):
    """An input was misused."""


class VertexError(TimelyError):
    """A user callback raised. The original exception is ``__cause__``."""

    def __init__(self, message: str, stage: str, worker: int, time: object, callback: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.worker = worker
        self.time = time
        self.callback = callback


class StalledError(TimelyError):
    """A wait gave up. ``explanation`` lists the pointstamps that hold progress back."""

    def __init__(self, message: str, explanation: str) -> None:
        super().__init__(f"{message}\n{explanation}")
        self.explanation = explanation


class ComputationFailed(TimelyError):
    """The computation has already failed; the first failure is ``__cause__``."""


class CodecError(TimelyError):
    """A record cannot be encoded for the wire, or received bytes cannot be decoded.

    The message names the offending type (or what was wrong with the bytes) and what to do.
    """


class FrameError(TimelyError):
    """A network frame is malformed: its declared length exceeds the limit, or the stream
    ended in the middle of a frame."""


class HandshakeError(TimelyError):
    """This process could not join the cluster: a peer was unreachable or refused it."""


class PeerError(TimelyError):
    """Another process of the computation failed, or its connection was lost.

    ``info`` holds what the failing process reported: ``process``, ``stage``, ``worker``,
    ``time``, ``kind`` (the exception's type) and ``message``.
    """

    def __init__(self, message: str, info: dict[str, Any]) -> None:
        super().__init__(message)
        self.info = info
        self.process = info.get("process")
        self.stage = info.get("stage")


class LibraryError(TimelyError):
    """The base of the errors a library built on timely raises (`timely_libs.linq`'s ``OperatorError``,
    `timely_libs.pregel`'s ``PregelError``, ...).

    Raised inside a vertex callback it is treated as the user's own exception: the runtime
    fails the computation with a `VertexError` that names the stage, worker and time, and has
    this error as its ``__cause__``.
    """
