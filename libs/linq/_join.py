"""Join (TR §5.2.2): bilinear, so it needs no notification to be correct.

Each input is arranged by key. A block from one input at time ``t`` meets everything the other
input's arrangement holds: per batch, one `numpy.searchsorted` finds the rows of every key of
the block, and the matching pairs come out as columns; then the block joins its own input's
arrangement. So every pair of differences meets exactly once, and their product goes out at
the least upper bound of their two times, the first time at which both are part of the
collections (one message per distinct output time).

Inside a loop a join drains its inputs a time at a time, as differential dataflow's works
through all its pending batches per activation. Each upstream call there sends at several
times, so a join hears many small messages per iteration; met one by one, each costs a read
of both arrangements and a message downstream, and each such message costs every stage of
the loop after it as well. So a message is staged, and when its time is complete (a
notification) every block staged at that time is consolidated per input and met in one pass:
input 0's delta against input 1's arrangement, then input 1's delta against input 0's, its
delta included. What that makes at the notification's time leaves in one message; what it
makes at a later time (a difference meeting history of a later iteration) is held, with a
notification there, and leaves with that time's own output. Outside a loop an epoch's input
usually comes in one message, and it is met at once.

On several processes, waiting for a time to complete costs a round of progress messages
between them every iteration: the join's output waits until every peer has said that its
upstream is done at that time. Where one input changes only at its epochs' first iteration
(a collection entered into the loop: reach's edges) and the other hears once a time from
each upstream worker (reach's reached nodes, from a `distinct` through the loop's
feedback), that round saves nothing. So there, while one input has changed at no later
iteration, a time's first messages, one per worker, are met on arrival, and only those
beyond them are staged (bilinear: the order of meeting does not matter). That includes the
entered input's changes at the first iteration: staged, the output they make at later
iterations (meeting the other input's history) would wait for a notification at each of
them and leave in a message of its own. Where both inputs change at later iterations
(kcore's peel) a time brings messages on both, and staging from the first keeps the loop's
messages few, as on one process, where a notification is a local question.

Inside a loop, joins that take one collection by one key function (the same objects) share
its arrangement, per worker (`_absorb_shared`, `_arrange.SharedSide`): kcore's two joins of
``alive`` by ``node`` keep one arrangement of it, not two. Each reader takes a time's whole
input on that side at its notification; the first to do so makes the batch, the others take
it, and it joins the shared spine once every reader has met it with its own other input.

The selector makes the output records: ``linq.columns(fn)`` receives the matched left and
right records as columns (``fn(left_fields..., right_fields...)``), any other function is
called once per matched pair.

Checkpoint: a `KeyedState` of both arrangements (a shared one as this join has received it),
pieces ``((input, arity), keys, records, times, diffs)`` routed by key (`_stateful.rows_pieces`), and ``(2, time, input, block)`` input
staged at a time not yet complete and ``(3, time, block)`` output held for its time (none
between epochs unless a later epoch's records came early).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from timely import KeyedState, Timestamp, Vertex

from ._columns import (
    SCALAR,
    Block,
    bounds,
    codes_of,
    concat_blocks,
    consolidate,
    consolidation,
    every,
    order,
    route_of,
    some,
    time_runs,
)
from ._columns._functions import Columns, as_block, left
from ._errors import OperatorError
from ._keys import KeyOf
from ._lattice import Lattice
from ._layout import Layout, widened
from ._linear import changes_in
from ._stateful import Stateful, paused_gc, pieces_of, restored_batch, routed, rows_of_piece, rows_pieces
from ._trace import Batch, Rows, Spine, concat_rows, latest, le_time, matches, time_columns


@dataclass(slots=True)
class Published:
    """One time's input on a side that joins share (`SharedSide`), made by the first reader
    to reach the time and taken by the others."""

    seq: int
    """The batch's sequence number in the shared arrangement (0: nothing to add)."""
    block: Block | None
    """The delta's records, consolidated (None: the time's input summed to nothing)."""
    keys: np.ndarray | None
    """The delta's key codes, sorted as the block."""
    readers_left: int
    """Readers yet to take it: the entry goes when the last one has."""


class Join(Stateful):
    def __init__(
        self,
        op: str,
        lattice: Lattice,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any],
        selector: Callable[[Any, Any], Any],
        sides: tuple[tuple[Any, int] | None, tuple[Any, int] | None] = (None, None),
    ) -> None:
        super().__init__(op, lattice)
        self.keyof = (KeyOf(key1, op), KeyOf(key2, op))
        self.selector = selector
        self.layouts = (Layout(op, key=self.keyof[0].field), Layout(op, key=self.keyof[1].field))
        self.ntimes = lattice.depth + 1
        self.traces: list[Spine | None] = [None, None]
        self.drains = lattice.depth > 0
        """Whether input waits for its time's notification (`_drained`; on several processes
        not always, as the module's docstring says): inside a loop, where a time brings many
        messages; outside one, an epoch's input usually comes in one message, and meeting it
        at once lets the next operator start in the same step."""
        self.staged: dict[Any, list[tuple[int, Block]]] = {}
        """Per time not yet complete, the blocks received at it, with their input, in order."""
        self.met: dict[Any, int] = {}
        """On several processes: per time (of an epoch not yet complete), the messages met on
        arrival; once they are as many as there are workers, the time's next ones are staged."""
        self.varies = [False, False]
        """Per input, whether it has changed at a loop iteration after the first."""
        self.outgoing: dict[tuple[int, ...], list[Block]] | None = None
        """While a notification runs: its output blocks per time, sent once it has met everything."""
        self.held: dict[tuple[int, ...], list[Block]] = {}
        """Output at a time later than the notification that made it, sent at that time's own."""
        self.sides: tuple[Any, ...] = tuple(
            side if side is not None and side[0].readers > 1 else None for side in sides
        )
        """Per input, inside a loop: the `SharedSide` (and this join's reader number) when
        other joins take the same collection by the same key, else None (`_absorb_shared`)."""
        if not self.drains:
            self.sides = (None, None)
        self.shared: list[Any] = [None, None]
        """Per shared input, this worker's `SharedArrangement` of it (found on first use)."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        block = changes_in(records)
        if not len(block):
            return
        if not self.drains:
            self._absorb(edge, block, tuple(time))
            return
        staged = self.staged.get(time)
        if staged is not None:
            staged.append((edge, block))
            return
        if time[-1]:
            self.varies[edge] = True
        if (
            self.processes > 1
            and not all(self.varies)
            and self.sides == (None, None)  # a shared input is taken a whole time at once
            and (met := self.met.get(time, 0)) < self.peers
        ):
            self.met[time] = met + 1  # met at once: no round of progress to wait for
            self._absorb(edge, block, tuple(time))
            return
        self.staged[time] = [(edge, block)]
        self.notify_at(time)

    def on_notify(self, time: Timestamp) -> None:
        staged = self.staged.pop(time, None)
        held = self.held.pop(time, None)
        if staged or held:
            t = tuple(time)
            outgoing = self.outgoing = {t: held} if held else {}
            for edge, block in _drained(staged or [], self.sides):
                if self.sides[edge] is None:
                    self._absorb(edge, block, t)
                else:
                    self._absorb_shared(edge, block, t)
            self.outgoing = None
            for u, blocks in outgoing.items():
                if u == t:
                    self.send_by(self.outputs[0], blocks, time)
                    continue
                # a later time's output waits for it, to leave with everything else at that time
                later = self.held.get(u)
                if later is None:
                    self.held[u] = blocks
                    self.notify_at(u)  # type: ignore[arg-type]
                else:
                    later.extend(blocks)
        self.compact_if_complete(time)

    def compact(self, epoch: int) -> None:
        if self.met:
            self.met = {t: n for t, n in self.met.items() if t[0] >= epoch}
        if self.staged:  # a later epoch's records came early: their times must stay readable
            epoch = min(epoch, min(s[0] for s in self.staged))
        if self.held:
            epoch = min(epoch, min(u[0] for u in self.held))
        if self.compaction(epoch):
            for trace in self.traces:
                if trace is not None:
                    trace.advance_to(epoch)
            for side, shared in zip(self.sides, self.shared):
                if shared is not None:
                    shared.advance(side[1], epoch)

    def _absorb(self, edge: int, block: Block, t: tuple[int, ...]) -> None:
        """One input's delta at ``t`` meets the other input's arrangement, then joins its own."""
        layout = self.layouts[edge]
        if not layout.accept(block):
            self.traces[edge] = widened(self.traces[edge], layout, self.ntimes)
            layout.accept(block)
        delta = delta_batch(block, self.keyof[edge].codes(block), layout.encode(block), t, layout)
        if delta is None:
            return
        block, batch = delta
        self._meet(edge, block, batch.keys, t)
        trace = self.traces[edge]
        if trace is None:
            trace = self.traces[edge] = Spine(layout.width, self.ntimes)
        trace.insert(batch)

    def _absorb_shared(self, edge: int, block: Block, t: tuple[int, ...]) -> None:
        """`_absorb` for an input other joins of this worker take too: the first of them to
        reach time ``t`` makes its delta and batch (a time's whole input, the same for every
        reader), the others take them; each meets it with its own other input, and the batch
        joins the shared arrangement once every reader has (`SharedArrangement.receive`)."""
        side, reader = self.sides[edge]
        shared = self._shared(edge)
        entry = shared.published.get(t)
        if entry is None:
            layout = shared.layout
            if not layout.accept(block):
                shared.widen()
                layout.accept(block)
            delta = delta_batch(block, self.keyof[edge].codes(block), layout.encode(block), t, layout)
            if delta is None:
                entry = Published(0, None, None, side.readers)
            else:
                entry = Published(shared.add(delta[1]), delta[0], delta[1].keys, side.readers)
            shared.published[t] = entry
        entry.readers_left -= 1
        if not entry.readers_left:
            del shared.published[t]
        if entry.block is None or entry.keys is None:
            return
        self._meet(edge, entry.block, entry.keys, t)
        shared.receive(reader, entry.seq)

    def _shared(self, edge: int) -> Any:
        shared = self.shared[edge]
        if shared is None:
            side, reader = self.sides[edge]
            shared = self.shared[edge] = side.state(self.worker_index, reader, self.op, self.ntimes)
            self.layouts = (shared.layout, self.layouts[1]) if edge == 0 else (self.layouts[0], shared.layout)
        return shared

    def _meet(self, edge: int, block: Block, keys: np.ndarray, t: tuple[int, ...]) -> None:
        """``block`` (at ``t``) against every batch of the other input's arrangement (as this
        join has received it, when shared)."""
        if self.sides[1 - edge] is not None:
            batches = self._shared(1 - edge).batches(self.sides[1 - edge][1])
        else:
            other = self.traces[1 - edge]
            if other is None:
                return
            batches = other.batches()
        meet(self, self.selector, block, keys, t, batches, self.layouts[1 - edge], edge == 0, self.outgoing)

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        idle = self.traces[0] is None and self.traces[1] is None and not self.staged and not self.held
        if idle and self.sides == (None, None):
            return None
        with paused_gc():
            pieces: list[tuple[int, Any]] = []
            for edge, trace in enumerate(self.traces):
                if self.sides[edge] is not None:  # the shared arrangement as this join has received it
                    shared = self._shared(edge)
                    rows = concat_rows(shared.batches(self.sides[edge][1]), shared.layout.width, self.ntimes)
                    if len(rows):
                        pieces.extend(arrangement_pieces(edge, rows, shared.layout))
                elif trace is not None:
                    trace.compact()
                    pieces.extend(arrangement_pieces(edge, trace.rows(), self.layouts[edge]))
            for time, staged in self.staged.items():
                for edge, block in staged:
                    pieces.extend(routed((2, tuple(time), edge), self.keyof[edge].routes(block), block))
            for u, held in self.held.items():  # output: any worker may send it, so worker 0 does
                for block in held:
                    pieces.extend(routed((3, u), np.zeros(len(block), dtype=np.int64), block))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        arranged = []
        for route, piece in pieces_of(self.op, state):
            if type(piece[0]) is tuple:
                arranged.append((route, piece))
            elif piece[0] == 2:  # (2, time, input, block): staged at a time not yet complete
                _, t, edge, block = piece
                self.staged.setdefault(tuple(t), []).append((edge, block))
            else:  # (3, time, block): output held for its time
                _, u, block = piece
                self.held.setdefault(tuple(u), []).append(block)
        for edge in (0, 1):
            if self.sides[edge] is not None:
                self._shared(edge)  # its layout, which the restored rows take
        for edge, trace in enumerate(restored(self, arranged, list(self.layouts), self.ntimes)):
            if trace is None:
                continue
            if self.sides[edge] is None:
                self.traces[edge] = trace
                continue
            shared = self.shared[edge]
            if shared.spine is None and not shared.pending:  # the first reader restored brings it
                shared.spine = trace


def delta_batch(
    block: Block, keys: np.ndarray, vals: list[np.ndarray], t: tuple[int, ...], layout: Layout
) -> tuple[Block, Batch] | None:
    """A join's delta (a message's records, their key codes and record codes, all at ``t``)
    consolidated, as differential dataflow's join meets an arranged batch: a record and its
    retraction cancel before they meet anything (a `where` or `select` after a `count` sends
    both when a count moves within the kept range, and each would meet every row of its key),
    and equal records meet once. The block keeps the records as they came (values, not
    codes), one per distinct (key, record), beside the batch that joins the arrangement
    (values stored with ``layout``); None when everything cancelled."""
    stored = layout.stored(block.cols)
    own = not layout.keyed or keys is block.cols[layout.key]  # type: ignore[index]
    if own and len(vals) == len(stored) and all(v is c for v, c in zip(vals, stored)):
        # int fields (the key's too, when the layout leaves it out) are their own codes:
        # consolidate the codes (by digits when many, no index sort) and they are the records
        cols, sums = consolidate([keys, *vals], block.diffs)
        if not len(sums):
            return None
        records = layout.full(cols[1:], cols[0])  # a keyed layout's key field is the key column
        return Block(records, block.arity, sums), Batch.at(cols[0], cols[1:], t, sums, tidy=True)
    idx, sums = consolidation([keys, *vals], block.diffs)
    if not len(sums):
        return None
    if len(sums) < len(block) or some(idx[1:] < idx[:-1]):
        block = block.take(idx).with_diffs(sums)
        keys = keys[idx]
        vals = [v[idx] for v in vals]
    return block, Batch.at(keys, vals, t, sums, tidy=True)


def arrangement_pieces(tag: int, rows: Rows, layout: Layout) -> list[tuple[int, Any]]:
    """An arrangement's rows as checkpoint pieces ``((tag, arity), ...)`` routed by key (with
    every field of the records, a keyed layout's key put back)."""
    arity = layout.arity or SCALAR
    if layout.keyed:
        rows = Rows(rows.keys, layout.full(rows.vals, rows.keys), rows.times, rows.diffs)
    return rows_pieces((tag, arity), rows, route_of(rows.keys), arity)


def restored(vertex: Stateful, state: Any, layouts: list[Layout], ntimes: int) -> list[Spine | None]:
    """The arrangements saved by `arrangement_pieces` (piece tag ``i`` into ``layouts[i]``), each
    one batch of this process's codes; refused if a row's key belongs to another worker."""
    parts: list[list[Rows]] = [[] for _ in layouts]
    with paused_gc():
        for _, piece in pieces_of(vertex.op, state):
            tag, arity = piece[0]
            layout = layouts[tag]
            if layout.arity is None:
                layout.arity = arity
            parts[tag].append(rows_of_piece(piece, ntimes, recoder(layout)))
        out: list[Spine | None] = []
        for layout, rows_list in zip(layouts, parts):
            if not rows_list:
                out.append(None)
                continue
            spine = Spine(layout.width, ntimes)
            spine.insert(restored_batch(vertex.op, rows_list, layout.width, ntimes, vertex.worker_index, vertex.peers))
            out.append(spine)
    return out


def meet(
    vertex: Stateful,
    selector: Callable[[Any, Any], Any],
    delta: Block,
    keys: np.ndarray,
    times: list[np.ndarray] | tuple[int, ...],
    batches: list[Batch],
    layout: Layout,
    delta_first: bool,
    outgoing: dict[tuple[int, ...], list[Block]] | None = None,
) -> None:
    """A join's delta (records, their key codes and times: a list of columns, one per
    coordinate, or a tuple, one time for them all) against arranged ``batches`` (records stored
    with ``layout``): the selector's records for every match, each sent at the join of the two
    times, or added to ``outgoing`` per time for the caller to send. ``delta_first``: the delta
    is the join's left input.

    A delta of more than `MEET_CHUNK` rows meets the batches a chunk of rows at a time, each
    chunk's output sent (inside a loop: added to ``outgoing``) before the next is read: every delta row makes its pairs alone (the
    history it meets is consolidated per delta row, `_advanced`), so the output is the same,
    while the matched rows, the pairs and the selector's columns held at once stay bounded by
    a chunk's share instead of the whole delta's (an SCC's first answer joins two million
    labelled edges against labels with several rows each: about 800 MiB of matches at once)."""
    n = len(keys)
    if n <= MEET_CHUNK:
        _meet_rows(vertex, selector, delta, keys, times, batches, layout, delta_first, outgoing)
        return
    for start in range(0, n, MEET_CHUNK):
        part = slice(start, min(start + MEET_CHUNK, n))
        chunk_times = times if isinstance(times, tuple) else [c[part] for c in times]
        _meet_rows(vertex, selector, delta.take(part), keys[part], chunk_times, batches, layout, delta_first, outgoing)


MEET_CHUNK = 1 << 17
"""Delta rows a join pairs at once (`meet`): a larger delta is split into chunks of this many.
Large enough that a chunk's fixed cost (a read of every batch) is small beside its pairs."""


def _meet_rows(
    vertex: Stateful,
    selector: Callable[[Any, Any], Any],
    delta: Block,
    keys: np.ndarray,
    times: list[np.ndarray] | tuple[int, ...],
    batches: list[Batch],
    layout: Layout,
    delta_first: bool,
    outgoing: dict[tuple[int, ...], list[Block]] | None,
) -> None:
    """`meet` for one chunk of the delta."""
    fixed: tuple[bool, ...] = ()
    if isinstance(times, tuple):
        # the join of the history's times (kept with the spine's batches): in each coordinate
        # where it is <= the delta's time, so is every row's, and the output's is the delta's
        hist = latest(batches)
        if hist is None:
            return
        fixed = tuple(h <= c for h, c in zip(hist, times))
    found = matches(keys, batches, layout.width, len(times))
    if found is None:
        return
    left, right = found
    if isinstance(times, tuple):
        left, right = _advanced(keys, left, right, times, fixed)
        if not len(left):
            return
    one = delta.take(left)
    other = layout.decode(right.vals, right.diffs, right.keys)
    first, second = (one, other) if delta_first else (other, one)
    out = select_pairs(vertex.op, selector, first, second, one.diffs * right.diffs)
    met: list[np.ndarray] | list[np.ndarray | int]
    if isinstance(times, tuple):  # one time for the whole delta: no column of it to build and gather
        # each coordinate the history met does not pass stays the delta's (most often all of
        # them: one output time, no column of times to build and split)
        met = [c if f or bounds(b)[1] <= c else np.maximum(b, c) for b, c, f in zip(right.times, times, fixed)]
        if not any(isinstance(c, np.ndarray) for c in met):
            if outgoing is None:
                vertex.send_by(vertex.outputs[0], [out], times)
            else:
                outgoing.setdefault(times, []).append(out)
            return
    else:
        met = [np.maximum(a[left], b) for a, b in zip(times, right.times)]
    if outgoing is None:
        send_by_time(vertex, out, met)
    else:
        for u, part in by_time(out, met):
            outgoing.setdefault(u, []).append(part)


def _advanced(
    keys: np.ndarray, left: np.ndarray, right: Rows, t: tuple[int, ...], fixed: tuple[bool, ...] = ()
) -> tuple[np.ndarray, Rows]:
    """The matches (``left``: each one's delta row, of ``keys``) of a delta all at ``t`` with
    the arranged history, the history at times ``<= t`` advanced to ``t`` and consolidated
    first (differential-dataflow's join advances the history by the delta's times before it
    meets it): every such row meets the delta at ``t`` anyway, so a value added at one
    iteration and retracted at a later one (a label inside a loop) cancels before it makes a
    pair, instead of making two that cancel downstream. Only when some delta row meets
    several rows at or before ``t``; otherwise the matches as they were. ``fixed``: per
    coordinate, whether every row's is known to be at most ``t``'s (no column to compare)."""
    if len(left) < CONSOLIDATE_MATCHES or len(left) <= len(keys):  # no delta row meets two rows
        return left, right
    check = [(col, c) for col, c, f in zip(right.times, t, fixed or (False,) * len(t)) if not f]
    early: np.ndarray | None = None
    if check:
        early = le_time([col for col, _ in check], [c for _, c in check])
        if every(early):
            early = None
    rank = left if early is None else left[early]
    if len(rank) < 2 or int(np.bincount(rank).max()) < 2:
        return left, right
    if early is None:
        (left, *vals), diffs = consolidate([left, *right.vals], right.diffs)
        return left, Rows(keys[left], vals, time_columns(t, len(diffs)), diffs)
    late = ~early
    (a, *vals), diffs = consolidate([rank, *(v[early] for v in right.vals)], right.diffs[early])
    left = np.concatenate([a, left[late]])
    return left, Rows(
        keys[left],
        [np.concatenate([v, w[late]]) for v, w in zip(vals, right.vals)],
        [np.concatenate([np.full(len(diffs), c, dtype=np.int64), col[late]]) for c, col in zip(t, right.times)],
        np.concatenate([diffs, right.diffs[late]]),
    )


CONSOLIDATE_MATCHES = 64
"""From this many matches, a join at one time consolidates the arranged history it meets
(`_advanced`); fewer cost less to pair than to check."""


def select_pairs(op: str, sel: Callable[[Any, Any], Any], first: Block, second: Block, diffs: np.ndarray) -> Block:
    """A join's output records for matched pairs (``first`` and ``second`` aligned): column-wise
    for `linq.columns`, else one call per pair (an error names both records)."""
    if sel is left:
        return Block(first.cols, first.arity, diffs)
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


def send_by_time(vertex: Vertex, out: Block, times: Sequence[np.ndarray | int]) -> None:
    """Send ``out``, each row at its time: one message per distinct time."""
    for u, part in by_time(out, times):
        vertex.send_by(vertex.outputs[0], [part], u)  # type: ignore[arg-type]


def by_time(out: Block, times: Sequence[np.ndarray | int]) -> list[tuple[tuple[int, ...], Block]]:
    """``out`` split by its rows' ``times`` (per coordinate a column, or an int that every row
    shares: a loop's output varies in its iteration alone, most often, and is grouped by that
    one column): each distinct time with its rows, in time order. A few rows
    (`FEW_TIMED_ROWS`) by a dict of Python values."""
    cols = [c for c in times if isinstance(c, np.ndarray)]
    if len(cols) == 1:
        return _by_one_column(out, times, cols[0])
    if len(cols) < len(times):
        if not cols:
            return [(tuple(int(c) for c in times), out)]  # type: ignore[arg-type]
        return [(_with_fixed(u, times), part) for u, part in by_time(out, cols)]
    if len(out) <= FEW_TIMED_ROWS:
        return _by_time_few(out, cols)
    first = [int(c[0]) for c in cols]
    if all(bool((c == f).all()) for c, f in zip(cols, first)):
        return [(tuple(first), out)]
    idx = order(cols)
    cols = [c[idx] for c in cols]
    out = out.take(idx)
    return [(u, out.take(slice(s, e))) for u, s, e in time_runs(cols)]  # type: ignore[arg-type]


def _by_one_column(
    out: Block, times: Sequence[np.ndarray | int], col: np.ndarray
) -> list[tuple[tuple[int, ...], Block]]:
    """`by_time` where one coordinate varies (``col``; the others are ints): a loop's join
    output, by its iteration. A few rows with a few distinct values (`FEW_SPLIT_TIMES`) are
    taken by a mask per value, many by one stable sort; each time's tuple is built once, not
    recovered from the varying coordinate (a split of a kcore round's output, some 56 rows at
    two or three times, took 41 us through `_by_time_few` and `_with_fixed`, 32 this way)."""
    at = next(i for i, c in enumerate(times) if c is col)
    head = tuple(int(c) for c in times[:at])  # type: ignore[arg-type]
    tail = tuple(int(c) for c in times[at + 1 :])  # type: ignore[arg-type]
    if len(col) <= FEW_TIMED_ROWS:
        values = col.tolist()
        distinct = set(values)
        if len(distinct) == 1:
            return [((*head, values[0], *tail), out)]
        if len(distinct) <= FEW_SPLIT_TIMES:
            return [((*head, u, *tail), out.take(col == u)) for u in sorted(distinct)]
        return [((*head, u[0], *tail), part) for u, part in _by_time_few(out, [col])]
    least, greatest = bounds(col)
    if least == greatest:
        return [((*head, int(least), *tail), out)]
    idx = np.argsort(col, kind="stable")
    col = col[idx]
    out = out.take(idx)
    starts = [0, *(np.flatnonzero(col[1:] != col[:-1]) + 1).tolist(), len(col)]
    return [
        ((*head, u, *tail), out.take(slice(s, e))) for u, s, e in zip(col[starts[:-1]].tolist(), starts, starts[1:])
    ]


FEW_SPLIT_TIMES = 8
"""Up to this many distinct times, a few rows (`FEW_TIMED_ROWS`) varying in one coordinate are
split by a mask per time (a comparison and a gather each); more, by a dict of their rows."""


def _with_fixed(varying: tuple[int, ...], times: Sequence[np.ndarray | int]) -> tuple[int, ...]:
    """A time of the coordinates that vary, with the fixed ones of ``times`` put back."""
    it = iter(varying)
    return tuple(next(it) if isinstance(c, np.ndarray) else int(c) for c in times)


FEW_TIMED_ROWS = 128
"""Up to this many rows, `by_time` groups them in Python: a loop's join output of a few dozen
rows at two or three times took 43-45 us through numpy's sort and group calls and 10-11 in
Python (75 against 109 at 400 rows; measured, a loaded 2-core machine)."""


def _by_time_few(out: Block, times: list[np.ndarray]) -> list[tuple[tuple[int, ...], Block]]:
    rows: dict[Any, list[int]] = {}
    values = times[0].tolist() if len(times) == 1 else zip(*(c.tolist() for c in times))
    for i, u in enumerate(values):
        at = rows.get(u)
        if at is None:
            rows[u] = [i]
        else:
            at.append(i)
    if len(rows) == 1:
        u = next(iter(rows))
        return [(u if type(u) is tuple else (u,), out)]
    return [(u if type(u) is tuple else (u,), out.take(np.array(rows[u], dtype=np.int64))) for u in sorted(rows)]


def _drained(staged: list[tuple[int, Block]], sides: tuple[Any, ...] = (None, None)) -> list[tuple[int, Block]]:
    """A time's staged blocks as one delta per input (input 0's first), each at most
    `DRAIN_ROWS` rows (a shared input's in one: each reader must make the same delta of a
    time): a join's product is bilinear, so input 0's delta meets input 1's
    arrangement as it was, and input 1's delta then meets input 0's with that delta in it;
    every pair meets once, whatever the order the blocks came in."""
    out: list[tuple[int, Block]] = []
    for edge in (0, 1):
        run: list[Block] = []
        rows = 0
        for e, block in staged:
            if e != edge:
                continue
            if run and rows + len(block) > DRAIN_ROWS and sides[edge] is None:
                out.append((edge, concat_blocks(run)))
                run, rows = [], 0
            run.append(block)
            rows += len(block)
        if run:
            out.append((edge, run[0] if len(run) == 1 else concat_blocks(run)))
    return out


DRAIN_ROWS = 1 << 16
"""A time's staged blocks of one input are met together up to this many rows (a load's many
large messages are met a few at a time, not copied into one delta)."""


def recoder(layout: Layout) -> Callable[[Block], list[np.ndarray]]:
    """How a restored piece's record values become this process's codes, in ``layout``."""
    return lambda block: (
        [codes_of(block.cols[0])] if layout.arity == SCALAR else [codes_of(c) for c in layout.stored(block.cols)]
    )
