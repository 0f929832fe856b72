"""Antichains of timestamps under the product order: the shape of a frontier."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from ..timestamp import product_le

__all__ = ["Antichain", "MutableAntichain"]


class Antichain:
    """A set of mutually incomparable times; ``less_equal(t)`` asks if some element is <= t."""

    __slots__ = ("elements",)

    def __init__(self, times: Iterable[tuple[int, ...]] = ()) -> None:
        self.elements: list[tuple[int, ...]] = []
        for t in times:
            self.insert(t)

    def insert(self, time: tuple[int, ...]) -> bool:
        """Add ``time`` unless an element is <= it; drop the elements it is <= to."""
        for e in self.elements:
            if product_le(e, time):
                return False
        self.elements = [e for e in self.elements if not product_le(time, e)]
        self.elements.append(time)
        return True

    def less_equal(self, time: tuple[int, ...]) -> bool:
        """Some element is <= ``time``: ``time`` has not passed this frontier."""
        for e in self.elements:
            if product_le(e, time):
                return True
        return False

    def less_than(self, time: tuple[int, ...]) -> bool:
        for e in self.elements:
            if e != time and product_le(e, time):
                return True
        return False

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self.elements))

    def __len__(self) -> int:
        return len(self.elements)

    def __bool__(self) -> bool:
        return bool(self.elements)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return sorted(self.elements) == sorted(other.elements)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Antichain({sorted(self.elements)!r})"


class MutableAntichain:
    """A multiset of times (counts may dip below zero) and its frontier: the minimal times whose
    count is positive. `update` takes a batch of count changes and returns how the frontier
    changed, as ``(time, +1)`` for a time that joined it and ``(time, -1)`` for one that left.

    This is timely-dataflow's ``MutableAntichain``. Where every time is a bare epoch (``total``:
    a location outside every loop, so the order is total) the frontier is the least positive
    time, found through a heap, so retiring the earliest of N open epochs costs ``log N``. Inside
    loops a departing frontier element is replaced by scanning the positive times it was below.
    """

    __slots__ = ("_heap", "_in_heap", "_total", "counts", "frontier")

    def __init__(self, total: bool = False) -> None:
        self.counts: dict[tuple[int, ...], int] = {}
        """Nonzero counts only."""
        self.frontier: list[tuple[int, ...]] = []
        self._total = total
        self._heap: list[tuple[int, ...]] = []
        """With ``total``: every positive time (and some that no longer are, dropped when seen)."""
        self._in_heap: set[tuple[int, ...]] = set()

    def less_equal(self, time: tuple[int, ...]) -> bool:
        """Some frontier element is <= ``time``."""
        for f in self.frontier:
            if product_le(f, time):
                return True
        return False

    def count(self, time: tuple[int, ...]) -> int:
        return self.counts.get(time, 0)

    def update(self, changes: Iterable[tuple[tuple[int, ...], int]]) -> list[tuple[tuple[int, ...], int]]:
        """Apply count changes (one atomic batch); the frontier's changes."""
        counts = self.counts
        rose: list[tuple[int, ...]] = []
        fell = False
        for t, d in changes:
            if not d:
                continue
            old = counts.get(t, 0)
            new = old + d
            if new:
                counts[t] = new
            else:
                del counts[t]
            if old <= 0 < new:
                rose.append(t)
            elif new <= 0 < old:
                fell = True
        if not rose and not fell:
            return []
        old_frontier = self.frontier
        if self._total:
            return self._move_least(rose)
        if fell and any(counts.get(f, 0) <= 0 for f in old_frontier):
            new_frontier = _minimal(t for t, c in counts.items() if c > 0)
        else:
            new_frontier = [f for f in old_frontier if counts.get(f, 0) > 0]
            for t in rose:
                if counts.get(t, 0) > 0 and not any(product_le(f, t) for f in new_frontier):
                    new_frontier = [f for f in new_frontier if not product_le(t, f)]
                    new_frontier.append(t)
        if new_frontier == old_frontier:
            return []
        self.frontier = new_frontier
        changed = [(t, -1) for t in old_frontier if t not in new_frontier]
        changed.extend((t, 1) for t in new_frontier if t not in old_frontier)
        return changed

    def _move_least(self, rose: list[tuple[int, ...]]) -> list[tuple[tuple[int, ...], int]]:
        """`update`'s frontier step where the order is total: the frontier is the heap's least
        positive time, and its change is at most one time leaving and one joining. Every epoch
        that retires moves every location's frontier by one, so this is the tracker's most
        frequent step when many epochs are in flight; it builds no lists it can avoid."""
        counts, heap, in_heap = self.counts, self._heap, self._in_heap
        for t in rose:
            if t not in in_heap:
                in_heap.add(t)
                heapq.heappush(heap, t)
        while heap and counts.get(heap[0], 0) <= 0:
            in_heap.discard(heapq.heappop(heap))
        old_frontier = self.frontier
        if heap:
            least = heap[0]
            if old_frontier:
                old = old_frontier[0]
                if old == least:
                    return []
                self.frontier = [least]
                return [(old, -1), (least, 1)]
            self.frontier = [least]
            return [(least, 1)]
        if old_frontier:
            self.frontier = []
            return [(old_frontier[0], -1)]
        return []

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={sorted(self.frontier)!r})"


def _minimal(times: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The minimal elements of ``times`` under the product order. Taken in lexicographic order
    (which extends the product order), a time is minimal iff no earlier minimal one is below it."""
    found: list[tuple[int, ...]] = []
    for t in sorted(times):
        if not any(product_le(f, t) for f in found):
            found.append(t)
    return found
