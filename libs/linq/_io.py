"""Getting differences in and out of a dataflow."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from timely import Input, Probe, Scope, Timestamp

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


class CollectionOutput:
    """The changes of a collection, per completed epoch, and its accumulated contents.

    Holds what this process's workers own: with several processes, each has its share.
    ``on_change(epoch, changes)`` is called for each epoch whose changes are not empty.
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
        self.changes: dict[int, list[tuple[Any, int]]] = {}
        self._contents: dict[Any, int] = {}
        self._on_change = on_change
        self.probe: Probe = consolidated.stream.subscribe(self._receive, name=full)

    def _receive(self, time: Timestamp, records: list[tuple[Any, int]]) -> None:
        total: dict[Any, int] = {}
        for d, r in records:
            total[d] = total.get(d, 0) + r
        changes = [(d, r) for d, r in total.items() if r]
        if not changes:
            return
        contents = self._contents
        for d, r in changes:
            c = contents.get(d, 0) + r
            if c:
                contents[d] = c
            else:
                del contents[d]
        self.changes[time[0]] = changes
        if self._on_change is not None:
            self._on_change(time[0], changes)

    def contents(self) -> dict[Any, int]:
        """The accumulated collection (record -> count) over the epochs completed so far."""
        return dict(self._contents)

    def passed(self, epoch: int) -> bool:
        """Every change of ``epoch`` has been reported."""
        return self.probe.passed(epoch)
