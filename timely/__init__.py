"""timely: Naiad's timely dataflow for Python.

Write vertices (`Vertex`: ``on_recv``, ``on_notify``; call ``send_by``, ``notify_at``),
wire them into stages and loops (`LoopContext`), and run the dataflow with `execute`
(from ordinary code) or `execute_async` (from async code).
"""

from ._runtime.computation import AsyncComputation, Computation, execute, execute_async
from ._runtime.config import ClusterConfig
from ._runtime.statistics import ComputationStatistics, WorkerStatistics
from .checkpoint import CheckpointError, Checkpoints, verify_delivery
from .dataflow import Input, Probe, Scope, Stream, Subscription
from .errors import (
    CodecError,
    ComputationFailed,
    CycleError,
    FrameError,
    GraphError,
    HandshakeError,
    InputError,
    LibraryError,
    PeerError,
    ScopeError,
    StalledError,
    TimelyError,
    TimestampError,
    VertexError,
)
from .loop_context import Feedback, LoopContext
from .net.codec import Codec, register_codec
from .progress import Antichain
from .timestamp import Timestamp
from .vertex import KeyedState, Output, RoutedPiece, Vertex, VertexStatistics

__all__ = [
    "Antichain",
    "Checkpoints",
    "CheckpointError",
    "verify_delivery",
    "Codec",
    "CodecError",
    "FrameError",
    "HandshakeError",
    "PeerError",
    "register_codec",
    "AsyncComputation",
    "ClusterConfig",
    "Computation",
    "ComputationFailed",
    "ComputationStatistics",
    "CycleError",
    "Feedback",
    "GraphError",
    "Input",
    "InputError",
    "KeyedState",
    "RoutedPiece",
    "LibraryError",
    "LoopContext",
    "Output",
    "Probe",
    "Scope",
    "ScopeError",
    "StalledError",
    "Stream",
    "Subscription",
    "Timestamp",
    "TimelyError",
    "TimestampError",
    "Vertex",
    "VertexError",
    "VertexStatistics",
    "WorkerStatistics",
    "execute",
    "execute_async",
]
