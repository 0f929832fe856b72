"""What the stateful operators share: epoch completion, compaction, checkpoint pieces.

Compaction. Once every epoch before ``E`` is complete at an operator's inputs, a time
``(e, c...)`` with ``e < E`` can move to ``(E, c...)`` without changing any answer at a time
still to come (TR §5.3); the operator tells its arrangements so (`Spine.advance_to`), and they
sum what then coincides when they next merge. An operator learns that an epoch is complete
through a notification that holds no capability (``notify_at(end_of_epoch, capability=None)``),
which delays no one.

Checkpoints (Naiad §3.4). An arrangement is saved as arrays, not per difference: its rows are
cut into at most `ROUTE_BUCKETS` pieces by ``route % ROUTE_BUCKETS`` (the route of a row's key,
as the operator's exchange routes it), each piece a block of columns. The runtime hands a
piece with route ``r`` to worker ``r % workers``; since ``ROUTE_BUCKETS`` is a multiple of the
new worker count whenever that count divides it (1 to 10, 12, 14, 15, 16, 18, 20, 21, 24, ...),
every row lands on the worker that owns its key. A resume on a count that does not divide it
is refused with an error (`check_owner`), never silently wrong. Codes are process-local, so a
piece carries values (ints as raw int64 bytes, other values as values).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from timely import KeyedState, Timestamp, Vertex

from ._columns import EMPTY, Block, block_of_codes, codes_of, route_of
from ._columns._codes import route_of_value
from ._errors import OperatorError
from ._lattice import FAR, Lattice
from ._trace import Rows, Spine

__all__ = ["ROUTE_BUCKETS", "Stateful", "paused_gc", "pieces_of", "route"]

Time = tuple[int, ...]

ROUTE_BUCKETS = 5040
"""Pieces per saved arrangement at most; a resume works on any worker count dividing it."""


class Stateful(Vertex):
    def __init__(self, op: str, lattice: Lattice) -> None:
        self.op = op
        self.lattice = lattice
        self.latest_epoch = -1
        self.compacted_to = 0

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
            return time[0] + 1
        return None

    def state_size(self) -> tuple[int, int]:
        """The rows and bytes of every trace this operator keeps (its own, not one it reads)."""
        rows = nbytes = 0
        for value in vars(self).values():
            traces = value.values() if isinstance(value, dict) else (value,)
            for trace in traces:
                if isinstance(trace, Spine):
                    r, b = trace.footprint()
                    rows += r
                    nbytes += b
        return rows, nbytes

    def compaction(self, epoch: int) -> bool:
        """Whether compaction to ``epoch`` is news."""
        if epoch <= self.compacted_to:
            return False
        self.compacted_to = epoch
        return True


def route(key: Any) -> int:
    """The route of a value (a stable hash): 0 when it cannot be hashed (such records go to
    worker 0, whose operator names the error)."""
    try:
        return route_of_value(key)
    except Exception:
        return 0


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a checkpoint is built or restored (the collector
    would rescan a growing heap of new objects again and again)."""
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


# Arrangements as pieces ---------------------------------------------------------------------------------


def rows_pieces(tag: Any, rows: Rows, routes: np.ndarray, arity: int) -> list[tuple[int, Any]]:
    """``rows`` cut by ``routes % ROUTE_BUCKETS`` into pieces ``(tag, keys, values, times, diffs)``:
    keys and values as blocks (values, not codes), times and diffs as int64 bytes."""
    if not len(rows):
        return []
    buckets = routes % ROUTE_BUCKETS
    order = np.argsort(buckets, kind="stable")
    buckets = buckets[order]
    rows = rows.take(order)
    starts = np.flatnonzero(np.concatenate([[True], buckets[1:] != buckets[:-1]]))
    ends = np.concatenate([starts[1:], [len(buckets)]])
    keys = block_of_codes([rows.keys], -1, rows.diffs)
    vals = block_of_codes(rows.vals, arity, rows.diffs) if rows.vals else None
    times = np.stack(rows.times, axis=1) if rows.times else np.zeros((len(rows), 0), dtype=np.int64)
    out = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        sl = slice(s, e)
        piece = (
            tag,
            Block([keys.cols[0][sl]], -1, EMPTY),
            None if vals is None else Block([c[sl] for c in vals.cols], arity, EMPTY),
            times[sl].tobytes(),
            rows.diffs[sl].tobytes(),
        )
        out.append((int(buckets[s]), piece))
    return out


def rows_of_piece(piece: Any, ntimes: int, recode: Callable[[Block], list[np.ndarray]]) -> Rows:
    """The rows of a piece made by `rows_pieces` (its tag aside), with codes of this process."""
    _, keys, vals, times, diffs = piece
    d = np.frombuffer(diffs, dtype=np.int64)
    t = np.frombuffer(times, dtype=np.int64).reshape(len(d), ntimes)
    key_codes = codes_of(keys.cols[0])
    val_codes = [] if vals is None else recode(vals)
    return Rows(key_codes, val_codes, [t[:, i].copy() for i in range(ntimes)], d.copy())


def check_owner(op: str, keys: np.ndarray, worker: int, peers: int) -> None:
    """Refuse restored rows whose key another worker owns (a worker count not dividing `ROUTE_BUCKETS`)."""
    if peers > 1 and len(keys) and (route_of(keys) % peers != worker).any():
        raise OperatorError(
            f"{op}: a checkpoint can resume on a number of workers that divides {ROUTE_BUCKETS} "
            f"(1 to 10, 12, 14, 15, 16, ...); not on {peers}"
        )
