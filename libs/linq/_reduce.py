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
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from timely import Timestamp

from ._errors import OperatorError
from ._lattice import Lattice
from ._stateful import Stateful

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


class Reduce(Stateful):
    """``keys[i]`` extracts the key of a record of input ``i``. With two inputs the group's
    records are tagged ``(input, record)``."""

    def __init__(self, op: str, lattice: Lattice, keys: list[Callable[[Any], Any]], evaluate: Evaluate) -> None:
        super().__init__(op, lattice)
        self.keys = keys
        self.evaluate = evaluate
        self.tagged = len(keys) > 1
        self.input: dict[Any, dict[Any, Counts]] = {}
        self.output: dict[Any, dict[Any, Counts]] = {}
        self.input_total: dict[Any, Counts] = {}
        self.output_total: dict[Any, Counts] = {}
        self.upper: dict[Any, Any] = {}
        """Per key, the join of every time in its input and output traces."""
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
            self.compact((self.input, self.output), epoch, merge_counts)

    def absorb(self, staged: list[tuple[int, Any]], time: Timestamp, keys: set[Any]) -> None:
        """Add a time's input differences to the traces and running totals."""
        inp, totals, upper, dirty = self.input, self.input_total, self.upper, self.dirty
        join, tagged = self.lattice.join, self.tagged
        d = None
        for edge, records in staged:
            keyfn = self.keys[edge]
            try:
                for d, r in records:
                    k = keyfn(d)
                    if tagged:
                        d = (edge, d)
                    times = inp.get(k)
                    if times is None:
                        inp[k] = {time: {d: r}}
                        totals[k] = {d: r}
                        upper[k] = time
                        keys.add(k)
                        dirty.add(k)
                        continue
                    at = times.get(time)
                    if at is None:
                        times[time] = {d: r}
                        up = upper[k]
                        if up != time:
                            upper[k] = join(up, time)
                        dirty.add(k)
                    else:
                        c = at.get(d, 0) + r
                        if c:
                            at[d] = c
                        else:
                            del at[d]
                    total = totals[k]
                    c = total.get(d, 0) + r
                    if c:
                        total[d] = c
                    else:
                        del total[d]
                    keys.add(k)
            except Exception as exc:
                raw = d[1] if tagged and isinstance(d, tuple) and len(d) == 2 else d
                raise self.explain(exc, raw, keyfn, "key function") from exc

    def process(self, keys: set[Any], time: Timestamp) -> None:
        le, join = self.lattice.le, self.lattice.join
        inp, out = self.input, self.output
        upper, out_totals = self.upper, self.output_total
        evaluate = self.evaluate
        sent: list[tuple[Any, int]] = []
        for k in keys:
            up = upper.get(k)
            if up is None:  # compacted away entirely
                continue
            if le(up, time):
                group = self.input_total.get(k, {})
                before = out_totals.get(k, {})
            else:
                group = _accumulate(inp.get(k), time, le)
                before = _accumulate(out.get(k), time, le)
                self.schedule(k, time, up)
            if group:
                for d, c in group.items():
                    if c < 0:
                        raise OperatorError(
                            f"{self.op}: record {d!r} has multiplicity {c} at time {time}: a record was "
                            "removed more often than it was added"
                        )
                try:
                    after = evaluate(k, group)
                except OperatorError:
                    raise
                except Exception as exc:
                    raise OperatorError(
                        f"{self.op}: the reducer raised {type(exc).__name__}: {exc} on key {k!r} "
                        f"with records {sorted(group, key=repr)[:5]!r}"
                    ) from exc
            else:
                after = {}
            if after == before:
                continue
            changes = [(o, c - before.get(o, 0)) for o, c in after.items() if c != before.get(o, 0)]
            changes.extend((o, -c) for o, c in before.items() if o not in after)
            if not changes:
                continue
            sent.extend(changes)
            times = out.get(k)
            if times is None:
                out[k] = {time: dict(changes)}
                self.dirty.add(k)
            else:
                at = times.get(time)
                if at is None:
                    times[time] = dict(changes)
                    self.dirty.add(k)
                else:
                    for o, c in changes:
                        _add(at, o, c)
            total = out_totals.get(k)
            if total is None:
                out_totals[k] = dict(changes)
            else:
                for o, c in changes:
                    _add(total, o, c)
            upper[k] = time if le(up, time) else join(up, time)
        if sent:
            self.send_by(self.outputs[0], sent, time)

    def schedule(self, k: Any, time: Any, up: Any) -> None:
        """Times ``join(time, s)`` for each ``s`` in the key's history not before ``time``: the
        answer may change there, though no input need arrive at it (TR §4.3). That includes
        ``s`` itself when ``s`` is later than ``time``: compaction may have moved an old,
        already evaluated time to where it now follows ``time``."""
        le, join = self.lattice.le, self.lattice.join
        for s in chain(self.input.get(k, ()), self.output.get(k, ())):
            if le(s, time):
                continue
            u = join(s, time)
            keys = self.pending.get(u)
            if keys is None:
                self.pending[u] = {k}
                self.notify_at(u)  # type: ignore[arg-type]
            else:
                keys.add(k)

    def after_compaction(self, keys: set[Any]) -> None:
        join = self.lattice.join
        for k in keys:
            up = None
            for t in chain(self.input.get(k, ()), self.output.get(k, ())):
                up = t if up is None else join(up, t)
            if up is None:
                self.upper.pop(k, None)
                self.input_total.pop(k, None)
                self.output_total.pop(k, None)
            else:
                self.upper[k] = up


def _accumulate(times: dict[Any, Counts] | None, time: Any, le: Callable[[Any, Any], bool]) -> Counts:
    """The sum of the differences at times ``<= time``."""
    total: Counts = {}
    if times:
        for s, diffs in times.items():
            if le(s, time):
                for d, r in diffs.items():
                    c = total.get(d, 0) + r
                    if c:
                        total[d] = c
                    else:
                        del total[d]
    return total


class Consolidate(Stateful):
    """Sums the differences of each record at each time once the time is complete; keeps nothing after."""

    def __init__(self, op: str, lattice: Lattice) -> None:
        super().__init__(op, lattice)
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
