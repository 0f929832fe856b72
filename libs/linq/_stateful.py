"""What the stateful operators share: epoch completion, compaction, checkpoint pieces.

Compaction. Once every epoch before ``E`` is complete at an operator's inputs, a time
``(e, c...)`` with ``e < E`` can move to ``(E, c...)`` without changing any answer at a time
still to come (TR §5.3); the operator tells its arrangements so (`Spine.advance_to`), and they
sum what then coincides when they next merge. Outside loops an operator learns that an epoch
is complete through a notification at the epoch itself, which costs nothing: it holds the
capability the callback holds anyway, and a reduce asks for it regardless. Inside a loop such a
notification would have to be one of its own at the end of the epoch, a round of the runtime
per epoch and operator; there the operator reads its input frontier instead when it is
scheduled (`Stateful.catch_up`), as differential dataflow's operators do.

Checkpoints (Naiad §3.4). An arrangement is saved as arrays, not per difference: a piece is
a `Routed` — columns of rows with each row's route (the route of its key, as the operator's
exchange routes it), a `timely.RoutedPiece`. On the same worker count each worker gets its
pieces back as saved; on another count the runtime asks each piece to `Routed.split` itself
by the new count, so every row lands on the worker that now owns its key, whatever the count.
Codes are process-local, so a piece carries values (ints as raw int64 bytes, other values as
values), and routes are saved rather than recomputed (a key function may be the user's).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from timely import KeyedState, RoutedPiece, Timestamp, Vertex, register_codec

from ._columns import EMPTY, Block, block_of_codes, codes_of, route_of
from ._columns._codes import hold_codes, release_unused, route_of_value
from ._errors import OperatorError
from ._lattice import FAR, Lattice
from ._trace import Batch, Rows, Spine, concat_rows

__all__ = ["Routed", "Stateful", "paused_gc", "pieces_of", "route"]

Time = tuple[int, ...]


class Stateful(Vertex):
    def __init__(self, op: str, lattice: Lattice) -> None:
        self.op = op
        self.lattice = lattice
        self.latest_epoch = -1
        self.compacted_to = 0
        self.asked = -1
        """Inside a loop, the latest epoch whose end `catch_up` asked to hear of."""
        hold_codes(self)  # its state holds codes: they must outlive a sweep of the interner

    def watch(self, time: Timestamp) -> None:
        """Follow the epochs of ``time``'s callback for compaction. Every stateful operator
        calls it first thing on receiving: no linq callback of this thread is half-way then,
        so it is where the interner may free the codes no operator holds.

        Outside loops: ask for a notification at each new epoch (`on_notify` then calls
        `compact`). Inside a loop: `catch_up`, but only while an epoch later than the one
        compacted to has been seen (before that, compacting further moves every row alike
        and sums nothing new), so an operator that sees one epoch at a time reads its frontier
        about once an epoch."""
        release_unused()
        if time[0] > self.latest_epoch:
            self.latest_epoch = time[0]
            if self.lattice.depth == 0:
                # the end of epoch e is the time (e,) itself; holding it costs nothing, and shares
                # the request a reduce makes anyway
                self.notify_at(time)
                return
        if self.lattice.depth and self.latest_epoch > self.compacted_to:
            self.catch_up()

    def catch_up(self) -> None:
        """Compact to the least epoch of the input frontier, when that is news.

        Safe: compaction to ``E`` needs every epoch before ``E`` complete at this operator,
        nothing at an earlier time still to arrive (TR §5.3), and the input frontier holds the
        earliest times at which anything can still arrive, records on any input and this
        operator's own pending notifications alike; its view of progress may lag, never lead.
        Inside a callback the frontier is never empty (the callback's time, or what caused it,
        is not retired yet). Called on receiving only: a notification's callback may hold no
        capability, and then may not ask for the notification below."""
        frontier = self.input_frontier().elements
        latest = self.latest_epoch
        epoch = min([t[0] for t in frontier]) if frontier else latest + 1
        if epoch > self.compacted_to:
            self.compact(epoch)
        if epoch < latest and self.asked < latest:
            # epochs overlap (fed ahead of the answers): the callbacks of the latest may all
            # run before the earlier ones end, and nothing would read the frontier after, so the
            # end of the latest epoch is asked for, once (the end of an epoch follows every time
            # of it, so this callback may ask); one epoch at a time never gets here
            self.asked = latest
            self.notify_at(self.lattice.end_of_epoch(latest), capability=None)  # type: ignore[arg-type]

    def compact(self, epoch: int) -> None:
        """Every epoch before ``epoch`` is complete at the inputs: advance the traces to it, no
        further than what the operator still holds back (a later epoch's work waiting for its
        notification keeps that epoch readable). Each operator says which traces, and what it
        holds back; `compaction` says whether the advance is news."""
        raise NotImplementedError

    def compact_if_complete(self, time: Time) -> None:
        """At the end of a notification's callback: compact when the notification at ``time``
        says an epoch is complete (`epoch_completed`)."""
        epoch = self.epoch_completed(time)
        if epoch is not None:
            self.compact(epoch)

    def epoch_completed(self, time: Time) -> int | None:
        """If the notification at ``time`` means an epoch is complete, the first epoch still
        open: outside loops any notification; inside, one at the end of an epoch (asked for
        before operators read their frontier, and still pending in a checkpoint of then)."""
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


class Routed(RoutedPiece):
    """A checkpoint piece: ``head`` (what the rows are: a tag, a time; never split) and
    ``parts``, blocks whose rows align with ``routes`` (None for a part that is absent). Seen
    by `restore` through `pieces_of` as the tuple ``(*head, *parts)``."""

    __slots__ = ("head", "parts", "routes")

    def __init__(self, head: tuple[Any, ...], routes: np.ndarray, parts: tuple[Block | None, ...]) -> None:
        self.head = head
        self.routes = routes
        self.parts = parts

    def __len__(self) -> int:
        return len(self.routes)

    def split(self, peers: int, workers: Collection[int]) -> Iterable[tuple[int, Any]]:
        owner = self.routes % peers
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(peers + 1))
        for worker in sorted(workers):
            idx = order[bounds[worker] : bounds[worker + 1]]
            if len(idx):
                parts = tuple(None if p is None else _take(p, idx) for p in self.parts)
                yield worker, Routed(self.head, self.routes[idx], parts)

    def piece(self) -> tuple[Any, ...]:
        return (*self.head, *self.parts)


def _take(part: Block, idx: np.ndarray) -> Block:
    """The rows ``idx`` of a part; a part without diffs (`EMPTY`: the rows' diffs are in
    another part) stays without."""
    diffs = part.diffs[idx] if len(part.diffs) else part.diffs
    return Block([c[idx] for c in part.cols], part.arity, diffs)


def _encode_routed(piece: Routed) -> Any:
    """The routes are written unless they are the first part's first column (int keys route by
    themselves: an arrangement of int keys would write its keys twice), then None."""
    return (piece.head, None if _routes_are_keys(piece) else piece.routes.tobytes(), piece.parts)


def _routes_are_keys(piece: Routed) -> bool:
    first = piece.parts[0] if piece.parts else None
    if first is None or not first.cols:
        return False
    keys = first.cols[0]
    return keys.dtype == np.int64 and keys.shape == piece.routes.shape and bool(np.array_equal(keys, piece.routes))


def _decode_routed(value: Any) -> Routed:
    head, routes, parts = value
    if routes is None:
        return Routed(tuple(head), np.ascontiguousarray(parts[0].cols[0], dtype=np.int64), tuple(parts))
    return Routed(tuple(head), np.frombuffer(routes, dtype=np.int64), tuple(parts))


register_codec(Routed, _encode_routed, _decode_routed, code=26)  # explicit: stable if the module moves


def routed(head: tuple[Any, ...], routes: np.ndarray, *parts: Block | None) -> list[tuple[int, Any]]:
    """``parts`` (rows routed by ``routes``) as the pieces of a `KeyedState`: none when empty."""
    if not len(routes):
        return []
    return [(0, Routed(head, np.ascontiguousarray(routes, dtype=np.int64), parts))]


def pieces_of(op: str, state: Any) -> Any:
    """The ``(route, piece)`` pairs of a restored `KeyedState` (or of a bare sequence of them),
    a `Routed` as its tuple ``(*head, *parts)``."""
    pieces: Any
    if isinstance(state, KeyedState):
        pieces = state.pieces
    elif isinstance(state, list | tuple):
        pieces = state
    else:
        raise OperatorError(
            f"{op}: cannot restore from {type(state).__name__}; expected the KeyedState of a checkpoint"
        )
    return [(r, p.piece() if isinstance(p, Routed) else p) for r, p in pieces]


# Arrangements as pieces ---------------------------------------------------------------------------------


def rows_pieces(tag: Any, rows: Rows, routes: np.ndarray, arity: int) -> list[tuple[int, Any]]:
    """``rows`` as a piece ``(tag, keys, values, times)``: keys and values as blocks (values,
    not codes), the times as the columns of a block whose diffs are the rows' diffs."""
    keys = block_of_codes([rows.keys], -1, EMPTY)
    vals = block_of_codes(rows.vals, arity, EMPTY) if rows.vals else None
    times = Block(rows.times, len(rows.times), rows.diffs)
    return routed((tag,), routes, keys, vals, times)


def rows_of_piece(piece: Any, ntimes: int, recode: Callable[[Block], list[np.ndarray]]) -> Rows:
    """The rows of a piece made by `rows_pieces` (its tag aside), with codes of this process."""
    _, keys, vals, times = piece
    assert len(times.cols) == ntimes
    key_codes = codes_of(keys.cols[0])
    val_codes = [] if vals is None else recode(vals)
    return Rows(key_codes, val_codes, [np.array(c) for c in times.cols], np.array(times.diffs))


def restored_batch(op: str, parts: list[Rows], nvals: int, ntimes: int, worker: int, peers: int) -> Batch:
    """One batch of an arrangement's restored rows, each part from a piece of a saved batch
    (checked to be this worker's). A part whose keys come in order (ints: their codes are the
    values, and a piece keeps its batch's order when split) is a sorted run, and the batch
    merges the runs (a stable sort, linear in them) instead of sorting every row afresh."""
    rows = concat_rows(parts, nvals, ntimes)
    check_owner(op, rows.keys, worker, peers)
    runs = all(bool((p.keys[1:] >= p.keys[:-1]).all()) for p in parts)
    return Batch(rows.consolidated(runs=runs), tidy=True)


def check_owner(op: str, keys: np.ndarray, worker: int, peers: int) -> None:
    """Refuse restored rows whose key another worker owns: the pieces were split wrongly (a bug,
    never the user's doing)."""
    if peers > 1 and len(keys) and (route_of(keys) % peers != worker).any():
        raise OperatorError(f"{op}: restored rows whose keys worker {worker} of {peers} does not own")
