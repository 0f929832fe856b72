"""What join and reduce share: compaction of traces as epochs complete.

A trace maps key -> time -> differences. Times are never dropped while a later time could
still need them, but once every epoch before ``E`` is complete at an operator's inputs, a
time ``(e, c...)`` with ``e < E`` can move to ``(E, c...)`` without changing any answer at
a time still to come (TR §5.3). Differences that then share a time consolidate, so a trace
stops growing with the number of epochs: it holds one entry per record and loop position.

An operator learns that an epoch is complete through a notification that holds no
capability (``notify_at(end_of_epoch, capability=None)``), which delays no one.

Checkpoints (Naiad §3.4). Every stateful operator's `checkpoint` returns a
`timely.KeyedState`: one piece per key (or per record), routed as the operator's exchange
function routes that key's records (`route`), so a computation can resume on another number
of workers. The per-instance bookkeeping is not saved: a restored operator starts with
``latest_epoch = -1`` (it asks again to hear of the next epoch's end) and ``compacted_to =
0`` (it compacts again at the next epoch's end), both of which only cost a spare
notification or compaction pass; which keys await compaction is saved with each key.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from timely import KeyedState, Timestamp, Vertex

from .._hash import stable_hash
from ._errors import OperatorError
from ._lattice import FAR, Lattice, advance_epoch

Time = tuple[int, ...]


class Stateful(Vertex):
    def __init__(self, op: str, lattice: Lattice) -> None:
        self.op = op
        self.lattice = lattice
        self.latest_epoch = -1
        self.compacted_to = 0
        self.dirty: set[Any] = set()

    def watch(self, time: Timestamp) -> None:
        """Ask to hear when the epoch of ``time`` completes (once per epoch)."""
        if time[0] > self.latest_epoch:
            self.latest_epoch = time[0]
            if self.lattice.depth == 0:
                # the end of epoch e is the time (e,) itself; holding it costs nothing, and shares
                # the request a reduce makes anyway
                self.notify_at(time)
            else:
                self.notify_at(self.lattice.end_of_epoch(time[0]), capability=None)  # type: ignore[arg-type]

    def epoch_completed(self, time: Time) -> int | None:
        """If the notification at ``time`` means an epoch is complete, the first epoch still open."""
        if len(time) == 1 or time[1] == FAR:
            return time[0] + 1  # type: ignore[no-any-return]
        return None

    def compaction(self, epoch: int) -> set[Any] | None:
        """The keys to compact now that every epoch before ``epoch`` is complete (None: nothing new)."""
        if epoch <= self.compacted_to:
            return None
        self.compacted_to = epoch
        dirty, self.dirty = self.dirty, set()
        return dirty

    def explain(self, exc: BaseException, record: Any, key: Callable[[Any], Any], what: str) -> OperatorError:
        """Name the record behind ``exc``, and whether its key function, its key or ``what`` failed."""
        try:
            k = key(record)
        except Exception as again:
            return OperatorError(
                f"{self.op}: the key function raised {type(again).__name__}: {again} on record {record!r}"
            )
        try:
            hash(k)
        except TypeError:
            return OperatorError(
                f"{self.op}: the key {k!r} of record {record!r} cannot be hashed; keys must be hashable "
                "(use tuples, not lists)"
            )
        return OperatorError(f"{self.op}: the {what} raised {type(exc).__name__}: {exc} on record {record!r}")


def route(key: Any) -> int:
    """The int the exchange functions of `collection` (``by_key``, ``by_record``) give the
    records of ``key``: its stable hash, or 0 when that fails (such records go to worker 0)."""
    try:
        return stable_hash(key)
    except Exception:
        return 0


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a checkpoint is built or restored: they make millions
    of tuples and lists (no cycles among them), and the collector would scan the growing heap
    again and again (two to three times the work of building them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def pieces_of(op: str, state: Any) -> Any:
    """The ``(route, piece)`` pairs of a restored `KeyedState` (or of a bare sequence of them)."""
    if isinstance(state, KeyedState):
        return state.pieces
    if isinstance(state, list | tuple):
        return state
    raise OperatorError(f"{op}: cannot restore from {type(state).__name__}; expected the KeyedState of a checkpoint")


def compact_times(times: dict[Time, Any], epoch: int, merge: Callable[[Any, Any], Any]) -> dict[Time, Any] | None:
    """``times`` with every time before ``epoch`` moved to ``epoch`` and what then shares a time
    merged, or None if that would merge nothing (renaming alone buys nothing)."""
    if len(times) < 2:
        return None
    early = {t[0] for t in times if t[0] < epoch}
    if not early or (len(early) == 1 and all(t[0] < epoch for t in times)):
        return None
    moved: dict[Time, Any] = {}
    for t, diffs in times.items():
        t = advance_epoch(t, epoch)
        moved[t] = merge(moved[t], diffs) if t in moved else diffs
    return {t: d for t, d in moved.items() if d}


def merge_lists(a: list[tuple[Any, int]], b: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """Two lists of differences as one, consolidated."""
    total: dict[Any, int] = {}
    for d, r in a:
        total[d] = total.get(d, 0) + r
    for d, r in b:
        total[d] = total.get(d, 0) + r
    return [(d, r) for d, r in total.items() if r]
