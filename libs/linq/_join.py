"""Join (TR §5.2.2): bilinear, so it needs no notification.

Each input is arranged by key. A block from one input at time ``t`` meets everything the other
input's arrangement holds: per batch, one `numpy.searchsorted` finds the rows of every key of
the block, and the matching pairs come out as columns; then the block joins its own input's
arrangement. So every pair of differences meets exactly once, and their product goes out at
the least upper bound of their two times, the first time at which both are part of the
collections (one message per distinct output time).

The selector makes the output records: ``linq.columns(fn)`` receives the matched left and
right records as columns (``fn(left_fields..., right_fields...)``), any other function is
called once per matched pair.

Checkpoint: a `KeyedState` of both arrangements, pieces ``((input, arity), keys, records,
times, diffs)`` routed by key (`_stateful.rows_pieces`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from timely import KeyedState, Timestamp, Vertex

from ._columns import SCALAR, Block, blocks_of, codes_of, concat_blocks, group_starts, order, ranges, route_of
from ._columns._functions import Columns, as_block
from ._errors import OperatorError
from ._keys import KeyOf
from ._lattice import Lattice
from ._layout import Layout
from ._stateful import Stateful, check_owner, paused_gc, pieces_of, rows_of_piece, rows_pieces
from ._trace import Batch, Rows, Spine, concat_rows


class Join(Stateful):
    def __init__(
        self,
        op: str,
        lattice: Lattice,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any],
        selector: Callable[[Any, Any], Any],
    ) -> None:
        super().__init__(op, lattice)
        self.keyof = (KeyOf(key1, op), KeyOf(key2, op))
        self.selector = selector
        self.layouts = (Layout(op), Layout(op))
        self.ntimes = lattice.depth + 1
        self.traces: list[Spine | None] = [None, None]

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        block = concat_blocks(blocks_of(records))
        if not block.diffs.all():
            block = block.take(block.diffs != 0)
        if not len(block):
            return
        keys = self.keyof[edge].codes(block)
        t = tuple(time)
        other = self.traces[1 - edge]
        if other is not None:
            self._meet(edge, block, keys, t, other)
        layout = self.layouts[edge]
        if not layout.accept(block):
            self.traces[edge] = _widen(self.traces[edge], layout, self.ntimes)
            layout.accept(block)
        vals = layout.encode(block)
        trace = self.traces[edge]
        if trace is None:
            trace = self.traces[edge] = Spine(layout.width, self.ntimes)
        trace.insert(Batch(Rows.at(keys, vals, t, block.diffs)))

    def _meet(self, edge: int, block: Block, keys: np.ndarray, t: tuple[int, ...], other: Spine) -> None:
        """``block`` (at ``t``) against every batch of the other input's arrangement."""
        layout = self.layouts[1 - edge]
        lefts: list[np.ndarray] = []
        matched: list[Rows] = []
        for batch in other.batches():
            lo, hi = batch.key_ranges(keys)
            counts = hi - lo
            total = int(counts.sum())
            if not total:
                continue
            lefts.append(np.repeat(np.arange(len(keys)), counts))
            matched.append(batch.take(ranges(lo, hi)))
        if not matched:
            return
        left_idx = np.concatenate(lefts)
        right = concat_rows(matched, layout.width, self.ntimes)
        mine = block.take(left_idx)
        theirs = layout.decode(right.vals, right.diffs)
        diffs = mine.diffs * right.diffs
        first, second = (mine, theirs) if edge == 0 else (theirs, mine)
        out = select_pairs(self.op, self.selector, first, second, diffs)
        send_by_time(self, out, [np.maximum(c, x) for c, x in zip(right.times, t)])

    def on_notify(self, time: Timestamp) -> None:
        epoch = self.epoch_completed(time)
        if epoch is not None and self.compaction(epoch):
            for trace in self.traces:
                if trace is not None:
                    trace.advance_to(epoch)

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        if self.traces[0] is None and self.traces[1] is None:
            return None
        pieces: list[tuple[int, Any]] = []
        with paused_gc():
            for edge, trace in enumerate(self.traces):
                if trace is None:
                    continue
                trace.compact()
                rows = trace.rows()
                arity = self.layouts[edge].arity or SCALAR
                pieces.extend(rows_pieces((edge, arity), rows, route_of(rows.keys), arity))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        with paused_gc():
            parts: list[list[Rows]] = [[], []]
            for _, piece in pieces_of(self.op, state):
                edge, arity = piece[0]
                layout = self.layouts[edge]
                if layout.arity is None:
                    layout.arity = arity
                parts[edge].append(rows_of_piece(piece, self.ntimes, recoder(layout)))
            for edge, rows_list in enumerate(parts):
                if not rows_list:
                    continue
                rows = concat_rows(rows_list, self.layouts[edge].width, self.ntimes)
                check_owner(self.op, rows.keys, self.worker_index, self.peers)
                trace = Spine(self.layouts[edge].width, self.ntimes)
                trace.insert(Batch(rows))
                self.traces[edge] = trace


def select_pairs(op: str, sel: Callable[[Any, Any], Any], first: Block, second: Block, diffs: np.ndarray) -> Block:
    """A join's output records for matched pairs (``first`` and ``second`` aligned): column-wise
    for `linq.columns`, else one call per pair (an error names both records)."""
    if type(sel) is Columns:
        cols = [*(first.cols if first.arity != 0 else ()), *(second.cols if second.arity != 0 else ())]
        return as_block(sel.fn(*cols), diffs, "join selector")
    a, b = first.records(), second.records()
    try:
        out = [sel(x, y) for x, y in zip(a, b)]
    except Exception:
        for x, y in zip(a, b):
            try:
                sel(x, y)
            except Exception as exc:
                raise OperatorError(
                    f"{op}: the selector raised {type(exc).__name__}: {exc} on records {x!r} and {y!r}"
                ) from exc
        raise
    return Block.of_records(out, diffs)


def send_by_time(vertex: Vertex, out: Block, times: list[np.ndarray]) -> None:
    """Send ``out``, each row at its time: one message per distinct time."""
    first = [int(c[0]) for c in times]
    if all(bool((c == f).all()) for c, f in zip(times, first)):
        vertex.send_by(vertex.outputs[0], [out], tuple(first))  # type: ignore[arg-type]
        return
    idx = order(times)
    times = [c[idx] for c in times]
    out = out.take(idx)
    starts = group_starts(times).tolist()
    ends = [*starts[1:], len(idx)]
    for s, e in zip(starts, ends):
        u = tuple(int(c[s]) for c in times)
        vertex.send_by(vertex.outputs[0], [out.take(slice(s, e))], u)  # type: ignore[arg-type]


def recoder(layout: Layout) -> Callable[[Block], list[np.ndarray]]:
    """How a restored piece's record values become this process's codes, in ``layout``."""
    return lambda block: [codes_of(block.cols[0])] if layout.arity == SCALAR else [codes_of(c) for c in block.cols]


def _widen(trace: Spine | None, layout: Layout, ntimes: int) -> Spine | None:
    from ._reduce import _widened

    return _widened(trace, layout, 0, ntimes)
