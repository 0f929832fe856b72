"""Reduce: the one stateful operator behind group_by, co_group_by, distinct, count, sum, min,
max, union, intersect and except (TR §5.2, Figure 18), on two arrangements.

The operator arranges its input (key, record, time, diff) and its own output (key, output
record, time, diff). Input blocks at time ``t`` wait until ``t`` is complete (a notification),
join the input arrangement, and then every key they touched is evaluated at ``t``, all keys of
the notification at once, column-wise:

1. the input accumulated at ``t`` (rows at times ``<= t``, summed per (key, record)), read
   from each batch of the arrangement; a batch whose times are all ``<= t`` gives its rows
   compacted: one row per (record, time), times of finished epochs moved to the first open one;
2. the reducer's answer for each key's group (typed reducers over columns, or the user's
   Python function per key);
3. less the output accumulated at ``t``: what is sent, and added to the output arrangement.

A change at ``t`` can also change the answer at ``join(t, s)`` for every time ``s`` of the
key's history that is not ``<= t`` (TR §4.3): those (key, time) pairs are computed for the
whole notification at once and scheduled as notifications; evaluating there schedules the
joins with the rest of the history in turn, which covers every least upper bound. Keys that
did not change at ``t`` are not touched: a deletion at a hub evaluates the hub and the keys the
deletion reaches, nothing else.

Checkpoint: a `KeyedState` of pieces routed by key (`_stateful.rows_pieces`): ``0`` the input
arrangement, ``1`` the output arrangement, each as blocks of columns, and ``(2, time, input,
block)`` input not yet absorbed and ``(3, time, keys)`` keys scheduled at later times (both
empty between epochs unless a later time had records before it was complete).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from timely import KeyedState, Timestamp

from ._columns import (
    EMPTY,
    SCALAR,
    Block,
    all_ints,
    block_of_codes,
    blocks_of,
    codes_of,
    concat_blocks,
    consolidate,
    consolidate_parts,
    distinct,
    every,
    group_starts,
    order,
    route_of,
    some,
    time_runs,
    values_of,
)
from ._columns._functions import Columns, apply_columns, fields_of
from ._errors import OperatorError
from ._keys import KeyOf
from ._lattice import Lattice
from ._layout import Layout, widened
from ._stateful import Stateful, paused_gc, pieces_of, restored_batch, routed, rows_of_piece, rows_pieces
from ._trace import Batch, Rows, Spine, concat_rows, count_changes, lub_time

Counts = dict[Any, int]
Evaluate = Callable[[Any, Counts], Counts]
"""``evaluate(key, group)``: the output records (with counts) of one key's group (record -> count > 0)."""


class Group:
    """One notification's input, accumulated: rows sorted by (key, record) with counts > 0."""

    __slots__ = ("counts", "keys", "layout", "starts", "vals")

    def __init__(self, keys: np.ndarray, vals: list[np.ndarray], counts: np.ndarray, layout: Layout) -> None:
        self.keys = keys
        self.vals = vals
        self.counts = counts
        self.layout = layout
        self.starts = group_starts([keys])

    def ukeys(self) -> np.ndarray:
        return self.keys[self.starts]


Output = tuple[np.ndarray, list[np.ndarray], int, np.ndarray]
"""A reducer's answer: keys, output record codes (columns), their arity, counts."""


class Reducer:
    """How a key's group becomes output records. ``evaluate`` answers for every key at once."""

    inputs = 1
    summed = False
    """The answer for a key depends only on the sum of its diffs (`of_totals`): the reduce then
    arranges its input by key alone, with no record (as differential dataflow's ``count``
    arranges ``(key, ())``), so a key's rows consolidate to one per time whatever its records
    (an edge's insertion and another's deletion at one node cancel), and it reads its keys'
    totals (`Spine.totals`, one pass, no sort of a group's records): a count over a few large
    groups does not re-reduce them."""

    keyed = False
    """Its output records are ``(key, value)`` tuples whose first field is the group's key:
    the output arrangement then stores only the value (`Layout` with ``key=0``), as a join's
    arrangement by a field does, so a read of a key's output rows gathers one column less."""

    counted = False
    """Its answer is ``(key, total)`` for each key whose total is positive, and nothing else:
    once its output arrangement exists, the reduce reads both spines and makes its change in
    one compiled call (`count_changes`), with no group or answer built."""

    def evaluate(self, group: Group, op: str) -> Output:
        raise NotImplementedError

    def of_totals(self, keys: np.ndarray, totals: np.ndarray) -> Output:
        """The answer from each key's sum of diffs (``keys`` sorted, distinct; ``totals`` >= 0),
        for a `summed` reducer."""
        raise NotImplementedError


class PerKey(Reducer):
    """A Python function per key: ``evaluate(key, {record: count})`` -> ``{record: count}``.
    With two inputs, records are tagged ``(input, record)``."""

    def __init__(self, evaluate: Evaluate, inputs: int = 1) -> None:
        self.fn = evaluate
        self.inputs = inputs

    def evaluate(self, group: Group, op: str) -> Output:
        starts = [*group.starts.tolist(), len(group.keys)]
        keys = values_of(group.ukeys())
        if self.inputs == 2:
            records = list(zip(group.vals[0].tolist(), values_of(group.vals[1])))
        else:
            records = group.layout.records(group.vals)
        counts = group.counts.tolist()
        out_keys: list[int] = []
        out_records: list[Any] = []
        out_counts: list[int] = []
        key_codes = group.ukeys().tolist()
        fn = self.fn
        for i, k in enumerate(keys):
            lo, hi = starts[i], starts[i + 1]
            g = dict(zip(records[lo:hi], counts[lo:hi]))
            if len(g) < hi - lo:
                raise _equal_records(op, k, records[lo:hi])
            try:
                answer = fn(k, g)
            except OperatorError as exc:
                raise OperatorError(f"{op}: {exc}") from exc
            except Exception as exc:
                shown = sorted((r[1] if self.inputs == 2 else r for r in g), key=repr)[:5]
                raise OperatorError(
                    f"{op}: the reducer raised {type(exc).__name__}: {exc} on key {k!r} with records {shown!r}"
                ) from exc
            for r, c in answer.items():
                if c:
                    out_keys.append(key_codes[i])
                    out_records.append(r)
                    out_counts.append(c)
        block = Block.of_records(out_records, np.asarray(out_counts, dtype=np.int64))
        try:
            if block.arity > 0:
                cols = [codes_of(c) for c in block.cols]
                arity = block.arity
            else:
                cols = [block.record_codes()]
                arity = SCALAR
        except TypeError:
            raise OperatorError(f"{op}: the reducer returned a record that cannot be hashed") from None
        return np.asarray(out_keys, dtype=np.int64), cols, arity, block.diffs


def _equal_records(op: str, key: Any, records: list[Any]) -> OperatorError:
    """Two records of one group that differ only in type (``1`` and ``1.0``): linq keeps them
    apart, a Python reducer's ``{record: count}`` could not."""
    seen: dict[Any, Any] = {}
    for r in records:
        if r in seen:
            return OperatorError(
                f"{op}: key {key!r} has records {seen[r]!r} and {r!r}, equal in Python but of different "
                "types; linq keeps them apart, but this reducer sees its group as a dict, which cannot: "
                "convert them to one type first"
            )
        seen[r] = r
    return OperatorError(f"{op}: key {key!r} has two records equal in Python but of different types")


def _value_column(value: Any, group: Group) -> np.ndarray | None:
    """The int value of every row, column-wise, when ``value`` allows it (else None)."""
    fields = fields_of(value)
    arity = group.layout.arity or SCALAR
    if fields is not None and len(fields) == 1 and 0 <= fields[0] < arity:
        col = group.vals[fields[0]]
        return col if all_ints(col) else None
    if type(value) is Columns and arity != SCALAR:
        blk = group.layout.decode(group.vals, group.counts)
        out = np.asarray(apply_columns(value, blk))
        return out.astype(np.int64) if out.dtype.kind in "iu" else None
    return None


class Distinct(Reducer):
    """Each record once (the key is the record)."""

    def evaluate(self, group: Group, op: str) -> Output:
        s = group.starts
        return group.keys[s], [v[s] for v in group.vals], group.layout.arity or SCALAR, np.ones(len(s), np.int64)


class Count(Reducer):
    """``(key, n)``."""

    summed = True
    keyed = True
    counted = True

    def evaluate(self, group: Group, op: str) -> Output:
        s = group.starts
        n = np.add.reduceat(group.counts, s) if len(s) else EMPTY
        keys = group.keys[s]
        return keys, [keys, n], 2, np.ones(len(s), np.int64)

    def of_totals(self, keys: np.ndarray, totals: np.ndarray) -> Output:
        here = totals > 0
        if not every(here):
            keys, totals = keys[here], totals[here]
        return keys, [keys, totals], 2, np.ones(len(keys), np.int64)


class Sum(Reducer):
    """``(key, sum of value(record) * count)``; column-wise for int values."""

    keyed = True

    def __init__(self, value: Callable[[Any], Any], fallback: Evaluate) -> None:
        self.value = value
        self.fallback = PerKey(fallback)

    def evaluate(self, group: Group, op: str) -> Output:
        col = _value_column(self.value, group)
        if col is None:
            return self.fallback.evaluate(group, op)
        s = group.starts
        totals = np.add.reduceat(col * group.counts, s) if len(s) else EMPTY
        keys = group.keys[s]
        return keys, [keys, codes_of(totals)], 2, np.ones(len(s), np.int64)


class Extreme(Reducer):
    """Per key the record with the least (``largest=False``) or greatest value; ties go to
    the least (greatest) record. Column-wise for int values of records of int fields."""

    def __init__(self, value: Callable[[Any], Any], largest: bool, fallback: Evaluate) -> None:
        self.value = value
        self.largest = largest
        self.fallback = PerKey(fallback)

    def evaluate(self, group: Group, op: str) -> Output:
        col = _value_column(self.value, group)
        if col is None or not all(all_ints(v) for v in group.vals):
            return self.fallback.evaluate(group, op)
        sign = -1 if self.largest else 1
        idx = order([group.keys, sign * col, *(sign * v for v in group.vals)])
        keys = group.keys[idx]
        first = group_starts([keys])
        pick = idx[first]
        return (
            group.keys[pick],
            [v[pick] for v in group.vals],
            group.layout.arity or SCALAR,
            np.ones(len(pick), np.int64),
        )


class Reduce(Stateful):
    """``keys[i]`` gives the key of a record of input ``i``."""

    def __init__(
        self, op: str, lattice: Lattice, keys: list[Callable[[Any], Any]], reducer: Reducer | Evaluate
    ) -> None:
        super().__init__(op, lattice)
        self.keyof = [KeyOf(k, op) for k in keys]
        if not isinstance(reducer, Reducer):
            reducer = PerKey(reducer, len(keys))
        self.reducer = reducer
        self.two = len(keys) > 1
        self.layout = Layout(op, SCALAR if self.two else None)
        self.out_layout = Layout(op, key=0 if reducer.keyed else None)
        self.ntimes = lattice.depth + 1
        self.keys_only = reducer.summed and not self.two
        """The input arrangement holds keys and their diffs, no records (`Reducer.summed`)."""
        self.counts = self.keys_only and reducer.counted
        """A count (`Reducer.counted`) of keys alone."""
        self.input_trace: Spine | None = None
        self.output_trace: Spine | None = None
        self.staged: dict[Any, list[tuple[int, Block]]] = {}
        self.pending: dict[Any, list[np.ndarray]] = {}

    # Receiving ---------------------------------------------------------------------------------
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        block = concat_blocks(blocks_of(records))
        staged = self.staged.get(time)
        if staged is None:
            self.staged[time] = [(edge, block)]
            if time not in self.pending:
                self.pending[time] = []
                self.notify_at(time)
        else:
            staged.append((edge, block))

    def on_notify(self, time: Timestamp) -> None:
        due = self.pending.pop(time, None)
        if due is not None:
            staged = self.staged.pop(time, None)
            if staged:
                due.append(self.absorb(staged, tuple(time)))
            # each part is sorted and distinct (an absorbed batch's keys, a time's run of
            # `schedule`): one part, the common case, needs no sort
            keys = (due[0] if len(due) == 1 else distinct(np.concatenate(due))) if due else EMPTY
            if len(keys):
                self.process(keys, time)
        self.compact_if_complete(time)

    def compact(self, epoch: int) -> None:
        if self.pending:
            epoch = min(epoch, min(t[0] for t in self.pending))
        if self.compaction(epoch):
            for spine in (self.input_trace, self.output_trace):
                if spine is not None:
                    spine.advance_to(epoch)

    def _input_width(self) -> int:
        return 0 if self.keys_only else 2 if self.two else self.layout.width

    def _input_vals(self, edge: int, block: Block) -> list[np.ndarray]:
        if self.keys_only:
            return []
        if self.two:
            try:
                codes = block.record_codes()
            except TypeError:
                from ._keys import unhashable

                raise unhashable(self.op, "record", block.records()) from None
            return [np.full(len(block), edge, dtype=np.int64), codes]
        if not self.layout.accept(block):
            self.input_trace = widened(self.input_trace, self.layout, self.ntimes)
            self.layout.accept(block)
        return self.layout.encode(block)

    def absorb(self, staged: list[tuple[int, Block]], time: tuple[int, ...]) -> np.ndarray:
        """Add a time's input blocks to the input arrangement; the keys they touch."""
        parts = []
        if not self.two and len(staged) > 1:  # one layout for the whole time
            staged = [(0, concat_blocks([b for _, b in staged]))]
        for edge, block in staged:
            block = block.take(block.diffs != 0) if not every(block.diffs) else block
            if not len(block):
                continue
            keys = self.keyof[edge].codes(block)
            parts.append((keys, self._input_vals(edge, block), block.diffs))
        if not parts:
            return EMPTY
        width = self._input_width()
        if len(parts) == 1:
            keys, vals, diffs = parts[0]
        else:
            keys = np.concatenate([k for k, _, _ in parts])
            vals = [np.concatenate([v[i] for _, v, _ in parts]) for i in range(width)]
            diffs = np.concatenate([d for _, _, d in parts])
        batch = Batch.at(keys, vals, time, diffs)
        if self.input_trace is None:
            self.input_trace = Spine(width, self.ntimes)
        self.input_trace.insert(batch)
        return batch.ukeys

    # Evaluating --------------------------------------------------------------------------------
    def process(self, keys: np.ndarray, time: Timestamp) -> None:
        t = tuple(time)
        if self.input_trace is None:
            return
        if type(self.reducer) is Distinct and self._distinct(keys, time):
            return
        if self.counts and self.output_trace is not None:
            fused = count_changes(keys, t, self.input_trace.batches(), self.output_trace.batches(), self.ntimes)
            if fused is not None:
                self._changed(*fused, t, time)
                return
        answer: Output | None = None
        if self.reducer.summed:
            totals, _, later = self.input_trace.totals(keys, t, values=False)
            if some(totals < 0):
                if self.keys_only:  # no record is kept to name: the key is
                    self._negative_key(keys, totals, time)
            else:
                answer = self.reducer.of_totals(keys, totals)
        if answer is None:
            acc, later = self.input_trace.accumulate(keys, t)
            if len(acc) and (acc.diffs < 0).any():
                self._negative(acc, time)
            group = Group(acc.keys, list(acc.vals), acc.diffs, self.layout)
            answer = self.reducer.evaluate(group, self.op) if len(acc) else (EMPTY, [], SCALAR, EMPTY)
        out_keys, out_cols, arity, out_counts = answer
        if len(out_keys):
            out_cols = self.out_layout.stored(self._accept_output(out_cols, arity))
        width = self.out_layout.width
        if self.output_trace is not None:
            before, out_later = self.output_trace.accumulate(keys, t)
            later = concat_rows([later, out_later], 0, self.ntimes)
        else:
            before = Rows.empty(width, 0)
        if len(out_keys) or len(before):
            delta = _difference(Rows(out_keys, out_cols, (), out_counts), before, width)
        else:
            delta = before
        self._changed(delta, later, t, time)

    def _changed(self, delta: Rows, later: Rows, t: tuple[int, ...], time: Timestamp) -> None:
        """The output's change at ``t`` (consolidated rows without times), into the output
        arrangement and sent; notifications at the later times."""
        if len(delta):
            if self.output_trace is None:
                self.output_trace = Spine(self.out_layout.width, self.ntimes)
            self.output_trace.insert(Batch.at(delta.keys, delta.vals, t, delta.diffs, tidy=True))
            self.send_by(self.outputs[0], [self.out_layout.decode(delta.vals, delta.diffs, delta.keys)], time)
        if len(later):
            self.schedule(later, t)

    def _distinct(self, keys: np.ndarray, time: Timestamp) -> bool:
        """`process` for `distinct`, from each key's count alone: the key is the record, so a
        key's rows sum to its record's count with no sort and no group, and its output changes
        only when that count crosses zero (a batch of edge changes touches thousands of nodes,
        and few appear or vanish; an update, a few). False, having changed nothing, where the
        general path must answer: a negative count (it names the record), an output layout
        still to settle."""
        t = tuple(time)
        arity = self.layout.arity or SCALAR
        if self.out_layout.arity != arity:
            return False
        assert self.input_trace is not None  # `process` returns before without one
        counts, vals, later = self.input_trace.totals(keys, t)
        if (counts < 0).any():
            return False
        if self.output_trace is not None:
            before, old, out_later = self.output_trace.totals(keys, t)
            later = concat_rows([later, out_later], 0, self.ntimes)
        else:
            before, old = np.zeros(len(keys), dtype=np.int64), vals
        # The output accumulated at t may be any count in a partial order (rows at (0, 1) and
        # (1, 0) both count at (1, 1)): the change is what makes it 1 or 0.
        present = counts > 0
        delta = present.astype(np.int64) - before
        changed = np.flatnonzero(delta)
        if len(changed):
            diffs = delta[changed]
            here = present[changed]  # its values from the input's rows, else from the output's
            cols = [np.where(here, v[changed], o[changed]) for v, o in zip(vals, old)]
            if self.output_trace is None:
                self.output_trace = Spine(len(cols), self.ntimes)
            self.output_trace.insert(Batch.at(keys[changed], cols, t, diffs, tidy=True))
            self.send_by(self.outputs[0], [self.out_layout.decode(cols, diffs)], time)
        if len(later):
            self.schedule(later, t)
        return True

    def _accept_output(self, cols: list[np.ndarray], arity: int) -> list[np.ndarray]:
        layout = self.out_layout
        if layout.arity is None:
            layout.arity = arity
            return cols
        if layout.arity == arity:
            return cols
        if layout.arity != SCALAR:
            self.output_trace = widened(self.output_trace, layout, self.ntimes)
        return Layout(self.op, arity).widen(cols)

    def schedule(self, later: Rows, t: tuple[int, ...]) -> None:
        """Notifications at ``join(t, s)`` for the (key, s) of the history not ``<= t``."""
        times = lub_time(later.times, t)
        cols, _ = consolidate([*times, later.keys], np.ones(len(later), dtype=np.int64))
        for u, s, e in time_runs(cols[:-1]):
            due = self.pending.get(u)
            if due is None:
                self.pending[u] = [cols[-1][s:e]]
                self.notify_at(u)  # type: ignore[arg-type]
            else:
                due.append(cols[-1][s:e])

    def _negative_key(self, keys: np.ndarray, totals: np.ndarray, time: Timestamp) -> None:
        i = int(np.flatnonzero(totals < 0)[0])
        key = values_of(keys[i : i + 1])[0]
        raise OperatorError(
            f"{self.op}: key {key!r} has multiplicity {int(totals[i])} at time {time} (its records "
            "together): a record was removed more often than it was added"
        )

    def _negative(self, acc: Rows, time: Timestamp) -> None:
        i = int(np.flatnonzero(acc.diffs < 0)[0])
        if self.two:
            record = values_of(acc.vals[1][i : i + 1])[0]
        else:
            record = self.layout.records([v[i : i + 1] for v in acc.vals])[0]
        raise OperatorError(
            f"{self.op}: record {record!r} has multiplicity {int(acc.diffs[i])} at time {time}: a record was "
            "removed more often than it was added"
        )

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        if self.input_trace is None and not self.pending and not self.staged:
            return None
        with paused_gc():
            pieces: list[tuple[int, Any]] = []
            for tag, spine, layout in ((0, self.input_trace, self.layout), (1, self.output_trace, self.out_layout)):
                if spine is not None:
                    spine.compact()
                    rows = spine.rows()
                    arity = (
                        (0 if self.keys_only else 2 if self.two else layout.arity or SCALAR)
                        if tag == 0
                        else layout.arity or SCALAR
                    )
                    if tag == 0 and self.two:
                        rows = Rows(rows.keys, [rows.vals[0], rows.vals[1]], rows.times, rows.diffs)
                    if tag == 1:  # every field of the records, a keyed layout's key put back
                        rows = Rows(rows.keys, layout.full(rows.vals, rows.keys), rows.times, rows.diffs)
                    pieces.extend(rows_pieces((tag, arity), rows, route_of(rows.keys), arity))
            for t, batches in self.staged.items():
                for edge, block in batches:
                    pieces.extend(routed((2, tuple(t), edge), self.keyof[edge].routes(block), block))
            for t, due in self.pending.items():
                keys = distinct(np.concatenate(due)) if due else EMPTY
                pieces.extend(routed((3, tuple(t)), route_of(keys), block_of_codes([keys], SCALAR, EMPTY)))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        with paused_gc():
            parts: dict[int, list[Rows]] = {0: [], 1: []}
            for _, piece in pieces_of(self.op, state):
                kind = piece[0]
                if type(kind) is tuple:
                    tag, arity = kind
                    layout = self.layout if tag == 0 else self.out_layout
                    if not ((self.two or self.keys_only) and tag == 0) and layout.arity is None:
                        layout.arity = arity
                    parts[tag].append(rows_of_piece(piece, self.ntimes, self._recode(tag)))
                elif kind == 2:
                    _, t, edge, block = piece
                    t = tuple(t)
                    self.staged.setdefault(t, []).append((edge, block))
                    self.pending.setdefault(t, [])
                else:
                    _, t, keys = piece
                    self.pending.setdefault(tuple(t), []).append(distinct(codes_of(keys.cols[0])))
            for tag, rows_list in parts.items():
                if not rows_list:
                    continue
                width = self._input_width() if tag == 0 else self.out_layout.width
                spine = Spine(width, self.ntimes)
                spine.insert(restored_batch(self.op, rows_list, width, self.ntimes, self.worker_index, self.peers))
                if tag == 0:
                    self.input_trace = spine
                else:
                    self.output_trace = spine

    def _recode(self, tag: int) -> Callable[[Block], list[np.ndarray]]:
        def recode(block: Block) -> list[np.ndarray]:
            if self.two and tag == 0:
                return [block.cols[0], codes_of(block.cols[1])]
            layout = self.layout if tag == 0 else self.out_layout
            if layout.arity == SCALAR:
                return [codes_of(block.cols[0])]
            return layout.stored([codes_of(c) for c in block.cols])

        return recode


def _difference(new: Rows, before: Rows, width: int) -> Rows:
    """``new - before`` (rows without times), consolidated. Both come sorted, or nearly (a
    typed reducer's answer by key, the output read back consolidated): one natural merge of
    the two runs (`consolidate_parts`), no sort of the rows afresh."""
    parts = [(r.columns(), d) for r, d in ((new, new.diffs), (before, -before.diffs)) if len(r)]
    if not parts:
        return Rows.empty(width, 0)
    cols, sums = consolidate_parts(parts, None, runs=True)
    return Rows(cols[0], cols[1:], (), sums)
