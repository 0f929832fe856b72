"""Reduce: the one stateful operator behind group_by, co_group_by, distinct, count, sum, min,
max, union, intersect, except and consolidate (TR §5.2, Figure 18).

For each key the operator keeps its input trace (time -> record -> diff) and its output
trace. When a time ``t`` is complete (a notification), it evaluates each key that changed at
``t``: the group is the sum of the input differences at times ``<= t``, the output is the
reducer's answer for that group, and what it sends is that answer minus what it already
sent at times ``<= t``. A change at ``t`` can also change the answer at ``join(t, s)`` for an
incomparable time ``s`` in the key's history (TR §4.3), so those times are scheduled too.

The fast path: when every time in a key's history is ``<= t`` (always so within one epoch
of a loop), the group at ``t`` is simply the key's running total, kept alongside the trace.

Checkpoint: a `KeyedState` routed by key hash with three kinds of piece, told apart by
their first item:

- ``(0, key, tidy, dirty, upper, inputs, outputs)``: a key's traces, ``inputs`` as
  ``{time: ((record, diff), ...)}`` (records tagged ``(input, record)`` with two
  inputs) and ``outputs`` as ``{time: {record: diff}}``; the running totals are their sums,
  rebuilt on restore;
- ``(1, key, times)``: the key is to be evaluated at each of ``times`` (pending notifications);
- ``(2, time, input, pairs)``: input differences received at ``time`` and not yet absorbed.

The last two are empty at a checkpoint unless a time after the checkpoint's epoch had
records before it was complete; the runtime restores the notifications they wait for.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from timely import KeyedState, Timestamp, Vertex

from ._errors import OperatorError
from ._lattice import Lattice
from ._stateful import Stateful, compact_times, merge_lists, paused_gc, pieces_of, route

Counts = dict[Any, int]
Evaluate = Callable[[Any, Counts], Counts]
"""``evaluate(key, group)``: the output records (with counts) of one key's group (record -> count > 0)."""


def merge_counts(a: Counts, b: Counts) -> Counts:
    out = dict(a)
    for d, r in b.items():
        c = out.get(d, 0) + r
        if c:
            out[d] = c
        else:
            del out[d]
    return out


def _add(counts: Counts, d: Any, r: int) -> None:
    c = counts.get(d, 0) + r
    if c:
        counts[d] = c
    else:
        del counts[d]


class _Key:
    """One key's state: its input trace (time -> differences, consolidated lazily), its output
    trace (time -> consolidated differences), the running totals of both, and ``upper``, the
    join of every time in the two traces."""

    __slots__ = ("inputs", "out_total", "outputs", "tidy", "total", "upper")

    def __init__(self, time: Any) -> None:
        self.tidy = 0
        """The input lists at times of epochs before ``tidy`` are consolidated."""
        self.inputs: dict[Any, list[tuple[Any, int]]] = {}
        self.outputs: dict[Any, Counts] = {}
        self.total: Counts = {}
        self.out_total: Counts = {}
        self.upper = time


class Reduce(Stateful):
    """``keys[i]`` extracts the key of a record of input ``i``. With two inputs the group's
    records are tagged ``(input, record)``."""

    def __init__(self, op: str, lattice: Lattice, keys: list[Callable[[Any], Any]], evaluate: Evaluate) -> None:
        super().__init__(op, lattice)
        self.keys = keys
        self.evaluate = evaluate
        self.tagged = len(keys) > 1
        self.state: dict[Any, _Key] = {}
        self.staged: dict[Any, list[tuple[int, Any]]] = {}
        self.pending: dict[Any, set[Any]] = {}

    def on_recv(self, edge: int, records: list[tuple[Any, int]], time: Timestamp) -> None:
        self.watch(time)
        staged = self.staged.get(time)
        if staged is None:
            self.staged[time] = [(edge, records)]
            if time not in self.pending:
                self.pending[time] = set()
                self.notify_at(time)
        else:
            staged.append((edge, records))

    def on_notify(self, time: Timestamp) -> None:
        keys = self.pending.pop(time, None)
        if keys is not None:
            staged = self.staged.pop(time, None)
            if staged:
                self.absorb(staged, time, keys)
            if keys:
                self.process(keys, time)
        epoch = self.epoch_completed(time)
        if epoch is not None:
            if self.pending:
                epoch = min(epoch, min(t[0] for t in self.pending))
            self.compact_state(epoch)

    def absorb(self, staged: list[tuple[int, Any]], time: Timestamp, keys: set[Any]) -> None:
        """Add a time's input differences to the traces and running totals."""
        state, dirty = self.state, self.dirty
        join, tagged = self.lattice.join, self.tagged
        d = raw = None
        for edge, records in staged:
            keyfn = self.keys[edge]
            try:
                for pair in records:
                    d = raw = pair[0]
                    if not pair[1]:
                        continue  # a zero diff changes nothing (and must not leave a zero count)
                    k = keyfn(d)
                    if tagged:
                        d = (edge, d)
                        pair = (d, pair[1])
                    st = state.get(k)
                    if st is None:
                        st = state[k] = _Key(time)
                        st.inputs[time] = [pair]
                        st.total[d] = pair[1]
                        keys.add(k)
                        dirty.add(k)
                        continue
                    lst = st.inputs.get(time)
                    if lst is None:
                        st.inputs[time] = [pair]
                        up = st.upper
                        if up != time:
                            st.upper = join(up, time)
                        dirty.add(k)
                    else:
                        lst.append(pair)
                    total = st.total
                    c = total.get(d, 0) + pair[1]
                    if c:
                        total[d] = c
                    else:
                        del total[d]
                    keys.add(k)
            except Exception as exc:
                raise self.explain(exc, raw, keyfn, "key function") from exc

    def process(self, keys: set[Any], time: Timestamp) -> None:
        le, join = self.lattice.le, self.lattice.join
        state = self.state
        evaluate = self.evaluate
        sent: list[tuple[Any, int]] = []
        for k in keys:
            st = state.get(k)
            if st is None:  # compacted away entirely
                continue
            up = st.upper
            if le(up, time):
                group = st.total
                before = st.out_total
            else:
                if st.tidy < time[0]:
                    st.inputs = {
                        t: merge_lists(diffs, []) if t[0] < time[0] else diffs for t, diffs in st.inputs.items()
                    }
                    st.tidy = time[0]
                group = _accumulate_lists(st.inputs, st.total, time, le)
                before = _accumulate(st.outputs, time, le)
                self.schedule(k, st, time)
            if group:
                for d, c in group.items():
                    if c < 0:
                        record = d[1] if self.tagged else d
                        raise OperatorError(
                            f"{self.op}: record {record!r} has multiplicity {c} at time {time}: a record was "
                            "removed more often than it was added"
                        )
                try:
                    after = evaluate(k, group)
                except OperatorError as exc:
                    raise OperatorError(f"{self.op}: {exc}") from exc
                except Exception as exc:
                    raise OperatorError(
                        f"{self.op}: the reducer raised {type(exc).__name__}: {exc} on key {k!r} "
                        f"with records {sorted(group, key=repr)[:5]!r}"
                    ) from exc
            else:
                after = {}
            if after == before:
                continue
            changes = [(o, c - b) for o, c in after.items() if c != (b := before.get(o, 0))]
            changes.extend((o, -c) for o, c in before.items() if o not in after)
            sent.extend(changes)
            at = st.outputs.get(time)
            if at is None:
                st.outputs[time] = dict(changes)
                self.dirty.add(k)
            else:
                for o, c in changes:
                    _add(at, o, c)
            total = st.out_total
            for o, c in changes:
                _add(total, o, c)
            st.upper = time if le(up, time) else join(up, time)
        if sent:
            self.send_by(self.outputs[0], sent, time)

    def schedule(self, k: Any, st: _Key, time: Any) -> None:
        """Times ``join(time, s)`` for each ``s`` in the key's history not before ``time``: the
        answer may change there, though no input need arrive at it (TR §4.3). That includes
        ``s`` itself when ``s`` is later than ``time``: compaction may have moved an old,
        already evaluated time to where it now follows ``time``."""
        le, join = self.lattice.le, self.lattice.join
        for s in chain(st.inputs, st.outputs):
            if le(s, time):
                continue
            u = join(s, time)
            keys = self.pending.get(u)
            if keys is None:
                self.pending[u] = {k}
                self.notify_at(u)  # type: ignore[arg-type]
            else:
                keys.add(k)

    def compact_state(self, epoch: int) -> None:
        dirty = self.compaction(epoch)
        if not dirty:
            return
        state, join = self.state, self.lattice.join
        for k in dirty:
            st = state.get(k)
            if st is None:
                continue
            inputs = compact_times(st.inputs, epoch, merge_lists)
            if inputs is not None:
                st.inputs = inputs
            outputs = compact_times(st.outputs, epoch, merge_counts)
            if outputs is not None:
                st.outputs = outputs
            if inputs is None and outputs is None:
                continue
            if not st.inputs and not st.outputs:
                del state[k]
                continue
            up = None
            for t in chain(st.inputs, st.outputs):
                up = t if up is None else join(up, t)
            st.upper = up

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        if not self.state and not self.pending:
            return None
        dirty = self.dirty
        with paused_gc():
            pieces: list[tuple[int, Any]] = [
                (
                    route(k),
                    (
                        0,
                        k,
                        st.tidy,
                        k in dirty,
                        st.upper,
                        {t: tuple(diffs) for t, diffs in st.inputs.items()},
                        {t: dict(diffs) for t, diffs in st.outputs.items()},
                    ),
                )
                for k, st in self.state.items()
            ]
            scheduled: dict[Any, list[Any]] = {}
            for t, due in self.pending.items():
                for k in due:
                    scheduled.setdefault(k, []).append(t)
            pieces.extend((route(k), (1, k, tuple(times))) for k, times in scheduled.items())
            for t, batches in self.staged.items():
                by_route: dict[tuple[int, int], list[tuple[Any, int]]] = {}
                for edge, records in batches:
                    keyfn = self.keys[edge]
                    for pair in records:
                        try:
                            r = route(keyfn(pair[0]))
                        except Exception:
                            r = 0  # as the exchange routed it; absorbing it will name the error
                        by_route.setdefault((r, edge), []).append(pair)
                pieces.extend((r, (2, t, edge, tuple(pairs))) for (r, edge), pairs in by_route.items())
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        with paused_gc():
            for _, piece in pieces_of(self.op, state):
                kind = piece[0]
                if kind == 0:
                    self._restore_key(*piece[1:])
                elif kind == 1:
                    _, k, times = piece
                    for t in times:
                        self.pending.setdefault(tuple(t), set()).add(k)
                else:
                    _, t, edge, pairs = piece
                    t = tuple(t)
                    self.staged.setdefault(t, []).append((edge, list(pairs)))
                    self.pending.setdefault(t, set())

    def _restore_key(self, k: Any, tidy: int, is_dirty: bool, upper: Any, inputs: Any, outputs: Any) -> None:
        st = _Key(tuple(upper))
        st.tidy = tidy
        st.inputs = {t: list(pairs) for t, pairs in inputs.items()}
        st.outputs = {t: dict(diffs) for t, diffs in outputs.items()}
        old = self.state.get(k)
        if old is not None:  # the key came from two instances: their differences add up
            st = _merged(old, st, self.lattice)
        total: Counts = {}
        for diffs in st.inputs.values():
            for d, r in diffs:
                total[d] = total.get(d, 0) + r
        st.total = {d: c for d, c in total.items() if c}
        total = {}
        for counts in st.outputs.values():
            for d, r in counts.items():
                total[d] = total.get(d, 0) + r
        st.out_total = {d: c for d, c in total.items() if c}
        self.state[k] = st
        if is_dirty:
            self.dirty.add(k)


def _merged(a: _Key, b: _Key, lattice: Lattice) -> _Key:
    for t, diffs in b.inputs.items():
        a.inputs.setdefault(t, []).extend(diffs)
    for t, counts in b.outputs.items():
        a.outputs[t] = merge_counts(a.outputs.get(t, {}), counts)
    a.tidy = 0  # lists of one time from both are not consolidated together
    a.upper = lattice.join(a.upper, b.upper)
    return a


def _accumulate_lists(
    times: dict[Any, list[tuple[Any, int]]], everything: Counts, time: Any, le: Callable[[Any, Any], bool]
) -> Counts:
    """The sum of the differences at times ``<= time``: summed directly, or as ``everything``
    (the sum over all times) less the differences at the other times, whichever is less work."""
    before, after = [], []
    size_before = size_after = 0
    for s, diffs in times.items():
        if le(s, time):
            before.append(diffs)
            size_before += len(diffs)
        else:
            after.append(diffs)
            size_after += len(diffs)
    if size_before <= size_after + len(everything):
        total: Counts = {}
        sign = 1
        lists = before
    else:
        total = dict(everything)
        sign = -1
        lists = after
    for diffs in lists:
        for d, r in diffs:
            total[d] = total.get(d, 0) + sign * r
    return {d: c for d, c in total.items() if c}


def _accumulate(times: dict[Any, Counts], time: Any, le: Callable[[Any, Any], bool]) -> Counts:
    """The sum of the differences at times ``<= time``."""
    total: Counts = {}
    for s, diffs in times.items():
        if le(s, time):
            for d, r in diffs.items():
                total[d] = total.get(d, 0) + r
    return {d: c for d, c in total.items() if c}


class Consolidate(Vertex):
    """Sums the differences of each record at each time once the time is complete; keeps nothing after.

    Checkpoint: what awaits a time that is not complete, as pieces ``(time, ((record, diff),
    ...))`` routed by each record's hash (its exchange); None (nothing) at a
    checkpoint taken between epochs, unless a later time had records before it was complete."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.staged: dict[Any, list[list[tuple[Any, int]]]] = {}

    def on_recv(self, edge: int, records: list[tuple[Any, int]], time: Timestamp) -> None:
        staged = self.staged.get(time)
        if staged is None:
            self.staged[time] = [records]
            self.notify_at(time)
        else:
            staged.append(records)

    def on_notify(self, time: Timestamp) -> None:
        staged = self.staged.pop(time, None)
        if not staged:
            return
        total: Counts = {}
        d = None
        try:
            for records in staged:
                for d, r in records:
                    total[d] = total.get(d, 0) + r
        except TypeError as exc:
            raise OperatorError(f"{self.op}: record {d!r} cannot be hashed: {exc}") from exc
        out = [(d, r) for d, r in total.items() if r]
        if out:
            self.send_by(self.outputs[0], out, time)

    def checkpoint(self) -> KeyedState | None:
        if not self.staged:
            return None
        pieces: list[tuple[int, Any]] = []
        for t, batches in self.staged.items():
            by_route: dict[int, list[tuple[Any, int]]] = {}
            for records in batches:
                for pair in records:
                    by_route.setdefault(route(pair[0]), []).append(pair)
            pieces.extend((r, (t, tuple(pairs))) for r, pairs in by_route.items())
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        staged = self.staged
        for _, (t, pairs) in pieces_of(self.op, state):
            staged.setdefault(tuple(t), []).append(list(pairs))
