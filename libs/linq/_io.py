"""Getting differences in and out of a dataflow."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from timely import Input, KeyedState, Probe, Scope, Timestamp, Vertex

from ._stateful import paused_gc, pieces_of, route
from .collection import Collection, operator_name

__all__ = ["CollectionInput", "CollectionOutput", "new_input"]


def new_input(scope: Scope, name: str | None = None) -> CollectionInput:
    """An input collection in the root scope, changed epoch by epoch from outside."""
    return CollectionInput(scope, operator_name(scope, "input", name))


class CollectionInput:
    """Adds and removes records, epoch by epoch.

    Changes sent before ``advance_to(e)`` belong to the current epoch; the outputs report the
    epoch's consequences once every process has advanced past it. In a computation with
    several processes, each process feeds its own share (any share: records are routed by key).
    """

    def __init__(self, scope: Scope, name: str) -> None:
        self.input: Input = scope.new_input(name)
        self.collection = Collection(self.input)

    @property
    def epoch(self) -> int:
        return self.input.epoch

    def insert(self, record: Any, count: int = 1) -> None:
        self.input.send([(record, count)])

    def remove(self, record: Any, count: int = 1) -> None:
        self.input.send([(record, -count)])

    def insert_all(self, records: Iterable[Any]) -> None:
        self.input.send([(r, 1) for r in records])

    def remove_all(self, records: Iterable[Any]) -> None:
        self.input.send([(r, -1) for r in records])

    def update(self, changes: Iterable[tuple[Any, int]]) -> None:
        """Apply ``(record, diff)`` changes: a positive diff adds copies, a negative one removes them."""
        batch = []
        for change in changes:
            record, diff = change
            if type(diff) is not int:
                raise TypeError(f"update: the diff of {change!r} must be an int")
            batch.append((record, diff))
        self.input.send(batch)

    def advance_to(self, epoch: int) -> None:
        self.input.advance_to(epoch)

    def close(self) -> None:
        self.input.close()


class Contents(Vertex):
    """The share of an output's accumulated collection that one worker owns (the consolidation
    before it routes each record to one worker), passing the differences on unchanged.

    Checkpoint: one piece ``(record, count)`` per record, routed by the record's hash as the
    consolidation routes it."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.contents: dict[Any, int] = {}

    def on_recv(self, edge: int, records: list[tuple[Any, int]], time: Timestamp) -> None:
        contents = self.contents
        for d, r in records:
            c = contents.get(d, 0) + r
            if c:
                contents[d] = c
            else:
                contents.pop(d, None)
        self.send_by(self.outputs[0], records, time)

    def checkpoint(self) -> KeyedState | None:
        if not self.contents:
            return None
        with paused_gc():
            return KeyedState([(route(d), (d, c)) for d, c in self.contents.items()])

    def restore(self, state: Any) -> None:
        contents = self.contents
        with paused_gc():
            for _, (d, c) in pieces_of(self.op, state):
                c += contents.get(d, 0)
                if c:
                    contents[d] = c
                else:
                    contents.pop(d, None)


class CollectionOutput:
    """The changes of a collection, per completed epoch, and its accumulated contents.

    Holds what this process's workers own: with several processes, each has its share.
    ``on_change(epoch, changes)`` is called for each epoch whose changes are not empty.

    The accumulated contents live in the workers' vertices (stage ``<name>.contents``), so a
    checkpoint saves them and a computation resumed from it starts with them; ``changes`` is
    the log of what this run reported, and starts empty.
    """

    def __init__(
        self,
        collection: Collection,
        on_change: Callable[[int, list[tuple[Any, int]]], None] | None = None,
        name: str | None = None,
    ) -> None:
        if collection.scope.depth != 0:
            raise ValueError("output: the collection must be in the root scope; leave its loops first")
        full = operator_name(collection.scope, "output", name)
        consolidated = collection.consolidate(name=f"{full}.consolidate")
        self._parts: list[Contents] = []
        held = consolidated._unary("contents", f"{full}.contents", self._part)
        self.changes: dict[int, list[tuple[Any, int]]] = {}
        self._on_change = on_change
        self.probe: Probe = held.stream.subscribe(self._receive, name=full)

    def _part(self, op: str) -> Contents:
        part = Contents(op)
        self._parts.append(part)
        return part

    def _receive(self, time: Timestamp, records: list[tuple[Any, int]]) -> None:
        total: dict[Any, int] = {}
        for d, r in records:
            total[d] = total.get(d, 0) + r
        changes = [(d, r) for d, r in total.items() if r]
        if not changes:
            return
        self.changes[time[0]] = changes
        if self._on_change is not None:
            self._on_change(time[0], changes)

    def contents(self) -> dict[Any, int]:
        """The accumulated collection (record -> count) that this process's workers hold: every
        epoch the probe has passed (and possibly a later epoch that completed meanwhile)."""
        out: dict[Any, int] = {}
        for part in self._parts:
            out.update(part.contents)
        return out

    def passed(self, epoch: int) -> bool:
        """Every change of ``epoch`` has been reported."""
        return self.probe.passed(epoch)
