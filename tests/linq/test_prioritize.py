"""`prioritize` changes only times: ``c.prioritize(p, f)`` equals ``f(c)`` for any body ``f``.

Each body here is checked against the from-scratch reference of the body alone (so against the
plain operators, and the plain `fixed_point`, of the same body), over random additions and
retractions, several epochs, several priority functions (also ones unrelated to the records'
order), one and two workers; then with epochs in flight. Two processes:
tests/linq/test_more_operators_processes.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_harness import Epochs, check, together
from tests.support.linq_in_flight import assert_epoch, drive
from timely_libs import linq

WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
LOOPS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pairs = st.tuples(st.integers(0, 4), st.integers(0, 4))
first, second = itemgetter(0), itemgetter(1)

PRIORITIES: dict[str, Callable[[Any], int]] = {
    "second": lambda r: r[1],
    "second_mod_2": lambda r: r[1] % 2,
    "reversed": lambda r: 4 - r[0],
    "constant": lambda r: 0,
    "spread": lambda r: 1000 * r[0],
}


def _inc(r: tuple[int, int]) -> tuple[int, int]:
    return (r[0], min(r[1] + 1, 4))


def _closure(x: linq.Collection) -> linq.Collection:
    """The pairs connected by a path of ``x``'s pairs (a nested fixed point)."""

    def step(y: linq.Collection) -> linq.Collection:
        edges = x.enter(y.scope)
        return y.concat(y.join(edges, second, first, lambda a, b: (a[0], b[1]))).distinct()

    return x.fixed_point(step)


def _ref_closure(c: ref.Multiset) -> ref.Multiset:
    return ref.closure(r for r, n in c.items() if n > 0)


def _twice_nested(x: linq.Collection) -> linq.Collection:
    """A fixed point around a fixed point: each round, the closure of the pairs grown by one."""

    def outer(y: linq.Collection) -> linq.Collection:
        return _closure(y.select(_inc).concat(y).distinct())

    return x.fixed_point(outer, max_iterations=3)


def _ref_twice_nested(c: ref.Multiset) -> ref.Multiset:
    return ref.iterate(c, lambda y: _ref_closure(ref.distinct(ref.concat(ref.select(y, _inc), y))), 3)


BODIES: dict[str, tuple[Callable[[linq.Collection], linq.Collection], Callable[[ref.Multiset], ref.Multiset]]] = {
    "count": (lambda x: x.count(first), lambda c: ref.count(c, first)),
    "count_all": (lambda x: x.count_all(), lambda c: {sum(c.values()): 1} if c else {}),
    "select": (lambda x: x.select(lambda r: r[0] + r[1]), lambda c: ref.select(c, lambda r: r[0] + r[1])),
    "distinct": (lambda x: x.select(_inc).distinct(), lambda c: ref.distinct(ref.select(c, _inc))),
    "self_join": (
        lambda x: x.join(x, second, first, lambda a, b: (a[0], b[1])),
        lambda c: ref.join(c, c, second, first, lambda a, b: (a[0], b[1])),
    ),
    "sum": (lambda x: x.sum(first, second), lambda c: ref.sum_(c, first, second)),
    "fixed_point_count": (lambda x: _closure(x).count(first), lambda c: ref.count(_ref_closure(c), first)),
    "fixed_point_of_a_select": (
        lambda x: x.fixed_point(lambda y: y.select(_inc)),
        lambda c: ref.fixed_point(c, lambda y: ref.select(y, _inc)),
    ),
    "nested_fixed_point": (_twice_nested, _ref_twice_nested),
}


@WORKERS
@pytest.mark.parametrize("body", sorted(BODIES))
@LOOPS
@given(epochs=ref.nonnegative_epochs(pairs, max_epochs=5), priority=st.sampled_from(sorted(PRIORITIES)))
def test_prioritize_equals_its_body(workers: int, body: str, epochs: Epochs, priority: str) -> None:
    query, reference = BODIES[body]
    check(lambda c: c.prioritize(PRIORITIES[priority], query), reference, together(epochs), workers)


@WORKERS
@LOOPS
@given(a=ref.nonnegative_epochs(pairs, max_epochs=5), b=ref.nonnegative_epochs(pairs, max_epochs=5))
def test_prioritize_with_a_collection_from_outside(workers: int, a: Epochs, b: Epochs) -> None:
    """The body joins with another collection brought into the priority loop."""

    def query(x: linq.Collection, y: linq.Collection) -> linq.Collection:
        return x.prioritize(second, lambda p: p.join(y.enter(p.scope), first, first, lambda u, v: (u[1], v[1])))

    check(query, lambda x, y: ref.join(x, y, first, first, lambda u, v: (u[1], v[1])), together(a, b), workers)


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(pairs, max_epochs=5))
def test_prioritize_inside_a_fixed_point(workers: int, epochs: Epochs) -> None:
    """A priority loop inside an iteration (times with three coordinates)."""

    def query(c: linq.Collection) -> linq.Collection:
        return c.fixed_point(lambda y: y.prioritize(second, lambda p: p.select(_inc).distinct()))

    check(query, lambda c: ref.fixed_point(c, lambda y: ref.distinct(ref.select(y, _inc))), together(epochs), workers)


def test_the_bodies_the_old_prioritize_got_wrong() -> None:
    """A count body gave 1 where 7 is right, a select body never finished, and a fixed point
    followed by a count was wrong (or overflowed the stack on a larger input)."""
    records = [((0, i), 1) for i in range(7)]
    check(lambda c: c.prioritize(second, lambda x: x.count(first)), lambda c: {(0, 7): 1}, [(records,)], 1)
    check(lambda c: c.prioritize(second, lambda x: x.select(first)), lambda c: {0: 7}, [(records,)], 1)
    rng = random.Random(4)
    chain = [((i, i + 1), 1) for i in range(60)] + [((rng.randrange(60), rng.randrange(60)), 1) for _ in range(20)]
    check(
        lambda c: c.prioritize(first, lambda x: _closure(x).count(first)),
        lambda c: ref.count(_ref_closure(c), first),
        [(list(ref._clean(chain).items()),)],
        1,
    )


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", [1, 2])
def test_prioritize_with_epochs_in_flight(workers: int, seed: int) -> None:
    rng = random.Random(seed)
    epochs = ref.random_epochs(rng, lambda: (rng.randrange(5), rng.randrange(5)), initial=10, epochs=8)
    expected: list[ref.Multiset] = []
    state: ref.Multiset = {}
    for changes in epochs:
        state = ref.apply(state, changes)
        expected.append(ref.concat(ref.count(_ref_closure(state), first), ref.count(state, second)))

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope)
        c = inp.collection
        out = c.prioritize(second, lambda x: _closure(x).count(first)).concat(
            c.prioritize(first, lambda x: x.count(second))
        )
        return inp, linq.CollectionOutput(out)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, out)):
        drive(
            comp,
            [inp],
            [(e,) for e in epochs],
            out.probe,
            lambda e: assert_epoch(out, e, expected[e], expected[e - 1] if e else {}),
            lag=4,
        )
