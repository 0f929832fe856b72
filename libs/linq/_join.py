"""Join (TR §5.2.2): bilinear, so it needs no notification.

A batch from one input at time ``t`` joins with everything the other input has sent so far,
then enters its own input's trace; every pair of differences meets exactly once, and their
product is sent at the least upper bound of their two times, the first time at which both
are part of the collections.

Checkpoint: one piece per key, ``(key, dirty, trace0, trace1)``, each trace
``{time: ((record, diff), ...)}`` or None when that side has nothing for the key; routed
by the key's hash, the route of both inputs' records of the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timely import KeyedState, Timestamp

from ._lattice import Lattice
from ._stateful import Stateful, compact_times, merge_lists, paused_gc, pieces_of, route

Pairs = list[tuple[Any, int]]


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
        self.keys = (key1, key2)
        self.selector = selector
        self.traces: tuple[dict[Any, dict[Any, Pairs]], dict[Any, dict[Any, Pairs]]] = ({}, {})

    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        self.watch(time)
        keyfn = self.keys[edge]
        mine, other = self.traces[edge], self.traces[1 - edge]
        sel = self.selector
        le, join = self.lattice.le, self.lattice.join
        dirty = self.dirty
        out: dict[Any, Pairs] = {}
        d = None
        try:
            for pair in records:
                d, r = pair
                k = keyfn(d)
                found = other.get(k)
                if found is not None:
                    for s, lst in found.items():
                        u = time if le(s, time) else join(s, time)
                        o = out.get(u)
                        if o is None:
                            o = out[u] = []
                        if edge == 0:
                            o.extend([(sel(d, d2), r * r2) for d2, r2 in lst])
                        else:
                            o.extend([(sel(d2, d), r * r2) for d2, r2 in lst])
                times = mine.get(k)
                if times is None:
                    mine[k] = {time: [pair]}
                    dirty.add(k)
                else:
                    lst = times.get(time)
                    if lst is None:
                        times[time] = [pair]
                        dirty.add(k)
                    else:
                        lst.append(pair)
        except Exception as exc:
            raise self.explain(exc, d, keyfn, "selector") from exc
        output = self.outputs[0]
        for u, o in out.items():
            if o:
                self.send_by(output, o, u)

    def on_notify(self, time: Timestamp) -> None:
        epoch = self.epoch_completed(time)
        if epoch is None:
            return
        dirty = self.compaction(epoch)
        if not dirty:
            return
        for trace in self.traces:
            for k in dirty:
                times = trace.get(k)
                if times is None:
                    continue
                moved = compact_times(times, epoch, merge_lists)
                if moved is None:
                    continue
                if moved:
                    trace[k] = moved
                else:
                    del trace[k]

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        first, second = self.traces
        if not first and not second:
            return None
        dirty = self.dirty
        with paused_gc():
            pieces: list[tuple[int, Any]] = []
            add = pieces.append
            for k, times in first.items():
                other = second.get(k)
                add((route(k), (k, k in dirty, _flat(times), None if other is None else _flat(other))))
            for k, times in second.items():
                if k not in first:
                    add((route(k), (k, k in dirty, None, _flat(times))))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        dirty = self.dirty
        with paused_gc():
            for _, (k, is_dirty, *sides) in pieces_of(self.op, state):
                for trace, saved in zip(self.traces, sides):
                    if saved is None:
                        continue
                    times = trace.get(k)
                    if times is None:
                        trace[k] = {t: list(pairs) for t, pairs in saved.items()}
                    else:  # the key came from two instances: their differences add up
                        for t, pairs in saved.items():
                            times.setdefault(t, []).extend(pairs)
                if is_dirty:
                    dirty.add(k)


def _flat(times: dict[Any, Pairs]) -> dict[Any, tuple[Any, ...]]:
    return {t: tuple(lst) for t, lst in times.items()}
