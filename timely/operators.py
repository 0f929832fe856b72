"""Basic operators, written as any user would write them: small `Vertex` subclasses.

`Stream` exposes them as methods (``stream.map("double", f)``); they are here so that the
code of each is short and visible. One liberty a user's vertex does not take: ``Map``,
``Filter`` and ``FlatMap`` hand the lists they build to the runtime with `give`, which keeps
them, where `Vertex.send_by` copies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from .timestamp import Timestamp
from .vertex import Vertex, give

__all__ = ["Map", "Filter", "FlatMap", "Forward", "Inspect", "InspectBatch", "Collect"]


class Map(Vertex):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        fn = self.fn
        give(self, 0, [fn(r) for r in records], time)


class Filter(Vertex):
    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self.predicate = predicate

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        keep = self.predicate
        give(self, 0, [r for r in records if keep(r)], time)


class FlatMap(Vertex):
    def __init__(self, fn: Callable[[Any], Iterable[Any]]) -> None:
        self.fn = fn

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        fn = self.fn
        give(self, 0, [y for r in records for y in fn(r)], time)


class Forward(Vertex):
    """Sends every batch on unchanged: the body of concat and exchange."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(self.outputs[0], records, time)


class Inspect(Vertex):
    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        fn = self.fn
        for r in records:
            fn(r)
        self.send_by(self.outputs[0], records, time)


class InspectBatch(Vertex):
    def __init__(self, fn: Callable[[Timestamp, list[Any]], object]) -> None:
        self.fn = fn

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.fn(time, records)
        self.send_by(self.outputs[0], records, time)


class Collect(Vertex):
    """Keeps records per time until the runtime hands a completed time to a subscriber."""

    def __init__(self) -> None:
        self.pending: defaultdict[Timestamp, list[Any]] = defaultdict(list)

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.pending[time].extend(records)


class ProbeVertex(Vertex):
    """A sink whose only purpose is a location at which to watch the frontier."""
