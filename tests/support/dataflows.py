"""Test dataflows of the core that run in every mode (`tests.support.modes`).

A case is a function ``case(scope) -> Case``: it builds the dataflow (the same in every
process), and returns how this process feeds its share of the input and what it observed.
``expected()`` is the plain-Python answer for the whole input. `program` names a case for
`Mode.run`; results are JSON-able, so real processes can print them for the test to merge.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import timely
from tests.core.test_dataflows import Countdown, DistinctCount, IterationBarrier
from tests.support.modes import Run
from timely_examples.connected_components import components, reference_components


class Case(Run):
    """A case's run: it feeds all its input at once (``feed(0)``) and reports what it observed."""

    def __init__(self, feed: Callable[[], None], observed: Callable[[], Any]) -> None:
        self._feed = feed
        self._observed = observed

    def feed(self, epoch: int) -> None:
        self._feed()

    def result(self, comp: Any) -> Any:
        return self._observed()


def _share(items: list[Any], scope: timely.Scope) -> list[Any]:
    return items[scope.process_index :: scope.processes]


WORDS = [[random.Random(e).choice("abcdefghijklmnop") for _ in range(300)] for e in range(5)]


def distinct_count(scope: timely.Scope) -> Case:
    words = scope.new_input("words")
    distinct, counts = words.stage("distinct_count", DistinctCount, outputs=2, exchange=lambda w: ord(w))
    out: dict[str, list[Any]] = {"distinct": [], "counts": []}
    distinct.subscribe(lambda t, b: out["distinct"].extend([t.epoch, r] for r in b))
    counts.subscribe(lambda t, b: out["counts"].extend([t.epoch, list(r)] for r in b))

    def feed() -> None:
        for e, batch in enumerate(WORDS):
            words.send(_share(batch, scope))
            words.advance_to(e + 1)

    return Case(feed, lambda: out)


def distinct_count_expected() -> Any:
    return {
        "distinct": [[e, w] for e, batch in enumerate(WORDS) for w in set(batch)],
        "counts": [[e, [w, n]] for e, batch in enumerate(WORDS) for w, n in Counter(batch).items()],
    }


def _edges() -> list[tuple[int, int]]:
    rng = random.Random(5)
    return [(rng.randrange(300), rng.randrange(300)) for _ in range(260)]


def connected_components(scope: timely.Scope) -> Case:
    edges, best = components(scope)
    return Case(lambda: edges.send(_share(_edges(), scope)), lambda: {"labels": sorted(best.items())})


def connected_components_expected() -> Any:
    return {"labels": sorted(reference_components(_edges()).items())}


def nested_loops(scope: timely.Scope) -> Case:
    seen: list[Any] = []
    inp = scope.new_input("n")
    outer = timely.LoopContext(scope, "outer")
    again = outer.feedback("again")
    start = outer.ingress(inp).concat("outer_in", again.stream)
    inner = timely.LoopContext(outer, "inner")
    back = inner.feedback("back")
    body_in = inner.ingress(start.map("pair", lambda n: (n, n))).concat("inner_in", back.stream)
    more, done = body_in.stage("countdown", lambda: Countdown(seen), outputs=2, exchange=lambda r: r[0])
    back.connect(more)
    after = inner.egress(done)
    again.connect(after.filter("positive", lambda n: n > 0).map("decrement", lambda n: n - 1))
    barrier_log: list[Any] = []
    x = inner.ingress(outer.ingress(inp.map("unit", lambda n: n)), name="bar_in")
    back2 = inner.feedback("back2")
    y = x.concat("bar_merge", back2.stream).stage(
        "barrier", lambda: IterationBarrier(barrier_log), exchange=lambda r: r
    )
    back2.connect(y)

    def feed() -> None:
        inp.send(_share([3, 5, 2], scope))
        inp.advance_to(1)
        inp.send(_share([4], scope))

    def result() -> Any:
        return {
            "seen": [[list(r), list(t)] for r, t in seen],
            "barrier": [list(t) for t, n in barrier_log for _ in range(n)],  # per-worker counts, as a multiset
        }

    return Case(feed, result)


def nested_loops_expected() -> Any:
    seen = []
    barrier: Counter[tuple[int, ...]] = Counter()
    for epoch, values in ((0, [3, 5, 2]), (1, [4])):
        for big_n in values:
            for i in range(big_n + 1):
                n = big_n - i
                for j in range(n + 1):
                    seen.append([[n, n - j], [epoch, i, j]])
            for j in range(big_n):  # the barrier loop: value v lives while v > j, at (epoch, 0, j)
                barrier[(epoch, 0, j)] += 1
    return {"seen": seen, "barrier": [list(t) for t, n in barrier.items() for _ in range(n)]}


class Celsius:
    """A user type that crosses processes through a codec registered at import time."""

    __slots__ = ("degrees",)

    def __init__(self, degrees: float) -> None:
        self.degrees = degrees

    def __repr__(self) -> str:
        return f"Celsius({self.degrees!r})"


class Series:
    """A user type whose encoding holds a list and a tuple: they must come back as such."""

    __slots__ = ("name", "points")

    def __init__(self, name: str, points: list[tuple[int, int]]) -> None:
        self.name, self.points = name, points

    def __repr__(self) -> str:
        return f"Series({self.name!r}, {self.points!r})"


timely.register_codec(Celsius, lambda c: c.degrees, Celsius, code=120)  # explicit: derived codes may collide
timely.register_codec(Series, lambda s: (s.name, s.points), lambda v: Series(*v), code=121)


class Opaque:
    """A user type with no codec: it crosses processes only with pickle enabled."""

    def __init__(self, tag: Any) -> None:
        self.tag = tag

    def __repr__(self) -> str:
        return f"Opaque({self.tag!r})"


class Recorder(timely.Vertex):
    """Keeps the ``repr`` of every record it receives: repr tells a list from a tuple, a set
    from a frozenset, and names user types, so comparing reprs compares types too."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.seen.extend(repr(r) for r in records)


def _typed_case(make: Callable[[int], list[Any]]) -> Callable[[timely.Scope], Case]:
    """Records from ``make(key)`` for 48 keys, exchanged by their first item (so most cross to
    another worker, and between processes to another process), recorded as they arrive."""

    def case(scope: timely.Scope) -> Case:
        records = scope.new_input("records")
        seen: list[str] = []
        records.stage("recorder", lambda: Recorder(seen), exchange=lambda r: r[0])
        everything = [r for key in range(48) for r in make(key)]

        def feed() -> None:
            records.send(_share(everything, scope))
            records.advance_to(1)
            records.send(_share(everything[::-1], scope))

        return Case(feed, lambda: {"records": seen})

    return case


def _typed_expected(make: Callable[[int], list[Any]]) -> Callable[[], Any]:
    return lambda: {"records": [repr(r) for key in range(48) for r in make(key)] * 2}


def _list_records(key: int) -> list[Any]:
    # lists and tuples at the top and nested in each other and in dict values; sets, frozensets
    return [
        [key, key + 1],
        (key, [key, (key, "x")]),
        [key, (key, [1.5, None]), []],
        (key, {"list": [key], "tuple": (key,), "nested": [{"k": (1, [2])}]}),
        (key, {key, key + 1}, frozenset({(key, 2)}), ()),
        (key, timely.Timestamp(key, (1,))),
    ]


def _registered_records(key: int) -> list[Any]:
    return [
        (key, Celsius(key / 2)),
        [key, Series(f"s{key}", [(key, 1), (key, 2)])],
        (key, [Celsius(-1.0), (Series("t", []),)]),
    ]


def _pickled_records(key: int) -> list[Any]:
    return [(key, Opaque(key)), [key, {"o": Opaque([key, (key,)])}]]


CASES = {
    "distinct_count": (distinct_count, distinct_count_expected),
    "connected_components": (connected_components, connected_components_expected),
    "nested_loops": (nested_loops, nested_loops_expected),
    "list_records": (_typed_case(_list_records), _typed_expected(_list_records)),
    "registered_records": (_typed_case(_registered_records), _typed_expected(_registered_records)),
    "pickled_records": (_typed_case(_pickled_records), _typed_expected(_pickled_records)),
}
PICKLED = {"pickled_records"}
"""Cases whose records cross processes only pickled: run with ``pickle=True`` or ``timely run --pickle``."""


def program(name: str) -> Callable[[timely.Scope], Case]:
    """The case called ``name``, as a program for `Mode.run`."""
    return CASES[name][0]
