"""Loops (Naiad §2.1): a `LoopContext` is a scope whose times carry one more loop counter.

    loop = LoopContext(scope, "cc")
    edges = loop.ingress(edges_outside)        # (e, c...)      -> (e, c..., 0)
    labels = loop.feedback("labels")           # (e, c..., i)   -> (e, c..., i + 1)
    ...                                        # stages built from loop streams are in the loop
    labels.connect(new_labels)
    result = loop.egress(new_labels)           # (e, c..., i)   -> (e, c...)

Ingress, egress and feedback are ordinary stages whose output path summaries change the
time; the progress tracker learns what loops do from those summaries alone. Contexts nest:
``LoopContext(loop, "inner")``.
"""

from __future__ import annotations

from typing import Any

from .dataflow import Scope, Stream
from .errors import GraphError, ScopeError
from .graph import StageKind
from .progress import PathSummary
from .timestamp import Timestamp
from .vertex import Vertex, emit

__all__ = ["LoopContext", "Feedback"]


class LoopContext(Scope):
    """A loop nested in ``parent`` (the root scope or another loop)."""

    def __init__(self, parent: Scope, name: str) -> None:
        if not isinstance(parent, Scope):
            raise TypeError(f"LoopContext needs a scope to live in, got {parent!r}")
        self.parent = parent
        self._dataflow = parent.dataflow
        self._context = self._dataflow.graph.add_context(parent.context, name)
        self._counter = 0

    def _auto_name(self, kind: str, name: str | None) -> str:
        if name:
            return name
        self._counter += 1
        return f"{kind}{self._counter}"

    def ingress(self, stream: Stream, name: str | None = None) -> Stream:
        """Bring ``stream`` from the enclosing scope into the loop (appends a counter at 0)."""
        if stream.scope is not self.parent:
            raise ScopeError(
                f"loop {self.name!r}: ingress takes a stream of the enclosing scope "
                f"{self.parent.name or '<root>'!r}, but {stream.source_name!r} is in "
                f"{stream.scope.name or '<root>'!r}"
            )
        outer = self.depth - 1
        graph = self._dataflow.graph
        index = graph.add_stage(
            self._auto_name("ingress", name),
            StageKind.INGRESS,
            self._context,
            _Ingress,
            1,
            [PathSummary.ingress(outer)],
            depth=outer,
        )
        graph.connect(stream.source.stage, stream.source.port, index, 0)
        return Stream(self, index)

    def egress(self, stream: Stream, name: str | None = None) -> Stream:
        """Take ``stream`` out of the loop (drops the loop counter)."""
        if stream.scope is not self:
            raise ScopeError(
                f"loop {self.name!r}: egress takes a stream of this loop, but {stream.source_name!r} "
                f"is in {stream.scope.name or '<root>'!r}"
            )
        graph = self._dataflow.graph
        index = graph.add_stage(
            self._auto_name("egress", name),
            StageKind.EGRESS,
            self._context,
            _Egress,
            1,
            [PathSummary.egress(self.depth)],
        )
        graph.connect(stream.source.stage, stream.source.port, index, 0)
        return Stream(self.parent, index)

    def feedback(self, name: str, max_iterations: int | None = None) -> Feedback:
        """A stream that carries what is later `Feedback.connect`-ed back to the next iteration.

        With ``max_iterations``, records that would start iteration ``max_iterations`` or
        later are dropped, so the loop ends even if the data would not.
        """
        if max_iterations is not None and max_iterations < 1:
            raise GraphError(f"feedback {name!r}: max_iterations must be at least 1")
        index = self._dataflow.graph.add_stage(
            name,
            StageKind.FEEDBACK,
            self._context,
            lambda: _Feedback(max_iterations),
            1,
            [PathSummary.feedback(self.depth)],
        )
        return Feedback(self, index)

    def __repr__(self) -> str:
        return f"<LoopContext {self.name!r}>"


class Feedback:
    """The handle of a loop's feedback edge: use `stream` inside the loop, then `connect` the
    stream to send back to the next iteration."""

    def __init__(self, loop: LoopContext, stage: int) -> None:
        self.loop = loop
        self.stream = Stream(loop, stage)
        self._connected = False

    def connect(self, stream: Stream) -> None:
        if self._connected:
            raise GraphError(f"feedback {self.stream.source_name!r} is already connected")
        if stream.scope is not self.loop:
            raise ScopeError(
                f"feedback {self.stream.source_name!r} of loop {self.loop.name!r} was connected to "
                f"{stream.source_name!r}, which is in {stream.scope.name or '<root>'!r}"
            )
        self.loop.dataflow.graph.connect(stream.source.stage, stream.source.port, self.stream.source.stage, 0)
        self._connected = True


class _Ingress(Vertex):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        emit(self, 0, records, time.enter())


class _Egress(Vertex):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        emit(self, 0, records, time.leave())


class _Feedback(Vertex):
    def __init__(self, max_iterations: int | None) -> None:
        self.max_iterations = max_iterations

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if self.max_iterations is not None and time[-1] + 1 >= self.max_iterations:
            return
        emit(self, 0, records, time.advance())
