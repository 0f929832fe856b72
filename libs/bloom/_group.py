"""Bud's non-monotone aggregation, stratified: ``group`` with aggregates, ``argmin``, ``argmax``.

A group's count can go down only if facts go away, but its *answer* changes as facts arrive
(count 2 is not a lower bound of count 3 as a fact), so these wait for each epoch to be
complete (one notification per epoch) and read a lower stratum: a root-scope stream, such as
an input or another program's `Output.stream`. Over persistent facts (the default) the answer
at epoch ``e`` covers every fact sent at epochs up to ``e`` and is sent as *changes*
``(fact, +1 | -1)`` (read it with ``Output(stream, "mutable", False)``); over scratch facts it
covers that epoch's facts and is sent as scratch facts of the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from timely import Stream, Timestamp, Vertex

from .._hash import stable_hash
from ._errors import BloomError

__all__ = ["accum", "argmax", "argmin", "average", "count", "group", "maximum", "minimum", "total"]

Aggregate = Callable[[list[Any]], Any]


def count() -> Aggregate:
    """Bud's ``count``: how many facts the group has."""
    return len


def total(fn: Callable[[Any], Any]) -> Aggregate:
    """Bud's ``sum(col)``."""
    return lambda facts: sum(fn(f) for f in facts)


def minimum(fn: Callable[[Any], Any]) -> Aggregate:
    """Bud's ``min(col)``."""
    return lambda facts: min(fn(f) for f in facts)


def maximum(fn: Callable[[Any], Any]) -> Aggregate:
    """Bud's ``max(col)``."""
    return lambda facts: max(fn(f) for f in facts)


def average(fn: Callable[[Any], Any]) -> Aggregate:
    """Bud's ``avg(col)``."""
    return lambda facts: sum(fn(f) for f in facts) / len(facts)


def accum(fn: Callable[[Any], Any]) -> Aggregate:
    """Bud's ``accum(col)``: the set of the column's values, as a sorted tuple (hashable)."""
    return lambda facts: tuple(sorted({fn(f) for f in facts}, key=repr))


class _Group(Vertex):
    """Per key, the facts of the group and, once each epoch is complete, ``summarize(facts)``."""

    def __init__(
        self,
        name: str,
        key: Callable[[Any], Any],
        summarize: Callable[[Any, list[Any]], Iterable[Any]],
        persistent: bool,
    ) -> None:
        self.name = name
        self.key = key
        self.summarize = summarize
        self.persistent = persistent
        self.facts: dict[Any, dict[Any, int]] = {}
        """Persistent: key -> fact -> first epoch."""
        self.by_epoch: dict[int, dict[Any, set[Any]]] = {}
        """Scratch: epoch -> key -> facts."""
        self.touched: dict[Timestamp, set[Any]] = {}
        self.current: dict[Any, set[Any]] = {}
        """Persistent: key -> the answer last sent."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = time.epoch
        touched = self.touched.get(time)
        if touched is None:
            touched = self.touched[time] = set()
            self.notify_at(time)
        for r in records:
            try:
                k = self.key(r)
            except Exception as exc:
                raise BloomError(f"{self.name!r}: the key failed on {r!r}: {exc!r}") from exc
            touched.add(k)
            if self.persistent:
                group = self.facts.setdefault(k, {})
                seen = group.get(r)
                if seen is None or epoch < seen:
                    group[r] = epoch
            else:
                self.by_epoch.setdefault(epoch, {}).setdefault(k, set()).add(r)

    def on_notify(self, time: Timestamp) -> None:
        epoch = time.epoch
        out: list[Any] = []
        for k in self.touched.pop(time):
            if self.persistent:
                facts = [f for f, since in self.facts[k].items() if since <= epoch]
            else:
                facts = list(self.by_epoch.get(epoch, {}).get(k, ()))
            try:
                new = set(self.summarize(k, facts))
            except Exception as exc:
                raise BloomError(f"{self.name!r}: the aggregate failed on group {k!r}: {exc!r}") from exc
            if not self.persistent:
                out.extend(new)
                continue
            old = self.current.get(k, set())
            out.extend((f, -1) for f in old - new)
            out.extend((f, 1) for f in new - old)
            self.current[k] = new
        if not self.persistent:
            self.by_epoch.pop(epoch, None)
        if out:
            self.send_by(self.outputs[0], out, time)


def _stratified(op: str, stream: Stream) -> None:
    if not isinstance(stream, Stream) or stream.scope.depth != 0:
        raise BloomError(
            f"{op}: reads a lower stratum, a root-scope stream (an input, or Output.stream of a program), "
            f"got {stream!r}; inside a program's loop a group could not know when its facts are all there"
        )


def group(
    stream: Stream,
    key: Callable[[Any], Any],
    *aggregates: Aggregate,
    name: str = "group",
    persistent: bool = True,
) -> Stream:
    """Bud's ``group(key, aggs...)``: per group, ``(key, agg1, agg2, ...)`` (coordinated: once per
    complete epoch); see the module's docstring for what is sent."""
    _stratified(f"group {name!r}", stream)
    if not aggregates:
        raise BloomError(f"group {name!r}: give at least one aggregate (count(), total(fn), ...)")

    def summarize(k: Any, facts: list[Any]) -> list[Any]:
        return [(k, *(agg(facts) for agg in aggregates))] if facts else []

    return _stage(stream, name, key, summarize, persistent)


def argmin(
    stream: Stream,
    key: Callable[[Any], Any],
    value: Callable[[Any], Any],
    *,
    name: str = "argmin",
    persistent: bool = True,
) -> Stream:
    """Bud's ``argmin(key, col)``: per group, the facts whose ``value`` is the smallest."""
    return _arg(stream, key, value, name, persistent, min)


def argmax(
    stream: Stream,
    key: Callable[[Any], Any],
    value: Callable[[Any], Any],
    *,
    name: str = "argmax",
    persistent: bool = True,
) -> Stream:
    """Bud's ``argmax(key, col)``: per group, the facts whose ``value`` is the largest."""
    return _arg(stream, key, value, name, persistent, max)


def _arg(
    stream: Stream,
    key: Callable[[Any], Any],
    value: Callable[[Any], Any],
    name: str,
    persistent: bool,
    best: Callable[[Iterable[Any]], Any],
) -> Stream:
    _stratified(f"{best.__name__} {name!r}", stream)

    def summarize(k: Any, facts: list[Any]) -> list[Any]:
        if not facts:
            return []
        target = best(value(f) for f in facts)
        return [f for f in facts if value(f) == target]

    return _stage(stream, name, key, summarize, persistent)


def _stage(
    stream: Stream, name: str, key: Callable[[Any], Any], summarize: Callable[[Any, list[Any]], Any], persistent: bool
) -> Stream:
    return stream.stage(  # type: ignore[no-any-return]
        name, lambda: _Group(name, key, summarize, persistent), exchange=lambda r: stable_hash(key(r))
    )
