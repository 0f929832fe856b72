"""Stateless operators (TR §3): each difference maps to differences at the same time.

Records travel as ``(record, diff)`` pairs; the time of a difference is the time of the
timely message that carries it, so a batch never repeats its time per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from timely import Timestamp, Vertex

from ._errors import OperatorError

Pairs = list[tuple[Any, int]]


def find_failure(what: str, op: str, fn: Callable[..., Any], records: Iterable[Any], exc: BaseException) -> Exception:
    """After a batch comprehension raised, call ``fn`` record by record to name the one it fails on."""
    for record in records:
        try:
            fn(record)
        except Exception as again:
            return OperatorError(f"{op}: the {what} raised {type(again).__name__}: {again} on record {record!r}")
    return OperatorError(f"{op}: the {what} raised {type(exc).__name__}: {exc}")


class _Linear(Vertex):
    def __init__(self, op: str, fn: Callable[[Any], Any]) -> None:
        self.op = op
        self.fn = fn

    def fail(self, what: str, records: Pairs, exc: BaseException) -> Exception:
        return find_failure(what, self.op, self.fn, [d for d, _ in records], exc)


class Select(_Linear):
    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        fn = self.fn
        try:
            out = [(fn(d), r) for d, r in records]
        except Exception as exc:
            raise self.fail("selector", records, exc) from exc
        self.send_by(self.outputs[0], out, time)


class Where(_Linear):
    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        keep = self.fn
        try:
            out = [pair for pair in records if keep(pair[0])]
        except Exception as exc:
            raise self.fail("predicate", records, exc) from exc
        if out:
            self.send_by(self.outputs[0], out, time)


class SelectMany(_Linear):
    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        fn = self.fn
        try:
            out = [(y, r) for d, r in records for y in fn(d)]
        except Exception as exc:
            raise self.fail("selector", records, exc) from exc
        if out:
            self.send_by(self.outputs[0], out, time)


class Negate(Vertex):
    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        self.send_by(self.outputs[0], [(d, -r) for d, r in records], time)


class Inspect(_Linear):
    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        fn = self.fn
        for d, r in records:
            try:
                fn(d, time, r)
            except Exception as exc:
                raise OperatorError(
                    f"{self.op}: the inspector raised {type(exc).__name__}: {exc} on record {d!r}"
                ) from exc
        self.send_by(self.outputs[0], records, time)


class ToTriples(Vertex):
    """``(record, diff)`` at time t becomes ``(record, t, diff)``: a plain timely stream."""

    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        self.send_by(self.outputs[0], [(d, time, r) for d, r in records], time)


class FromTriples(Vertex):
    """``(record, time, diff)`` triples back into a collection: each difference leaves at its time."""

    def __init__(self, op: str, depth: int) -> None:
        self.op = op
        self.width = depth + 1

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        by_time: dict[Any, Pairs] = {}
        for triple in records:
            try:
                d, t, r = triple
                t = tuple(t)
            except (TypeError, ValueError):
                raise OperatorError(f"{self.op}: expected (record, time, diff) triples, got {triple!r}") from None
            if type(r) is not int or len(t) != self.width:
                raise OperatorError(
                    f"{self.op}: {triple!r} needs an int diff and a time with {self.width} coordinate(s)"
                )
            if t == time:
                t = time
            batch = by_time.get(t)
            if batch is None:
                by_time[t] = [(d, r)]
            else:
                batch.append((d, r))
        for t, batch in by_time.items():
            # send_by refuses a time before the batch's own: a difference cannot travel back in time
            self.send_by(self.outputs[0], batch, t)


class Delay(_Linear):
    """Moves each difference to the time whose innermost coordinate is ``fn(record) + extra``:
    how `prioritize` introduces records at their priority (and retracts them one round later)."""

    def __init__(self, op: str, fn: Callable[[Any], Any], extra: int) -> None:
        super().__init__(op, fn)
        self.extra = extra

    def on_recv(self, edge: int, records: Pairs, time: Timestamp) -> None:
        fn = self.fn
        prefix = tuple(time[:-1])
        by_time: dict[Any, Pairs] = {}
        for pair in records:
            try:
                p = fn(pair[0])
            except Exception as exc:
                raise self.fail("priority function", records, exc) from exc
            if type(p) is not int or p < 0:
                raise OperatorError(f"{self.op}: priority {p!r} of record {pair[0]!r} is not a non-negative int")
            t = (*prefix, time[-1] + p + self.extra)
            batch = by_time.get(t)
            if batch is None:
                by_time[t] = [pair]
            else:
                batch.append(pair)
        for t, batch in by_time.items():
            self.send_by(self.outputs[0], batch, t)
