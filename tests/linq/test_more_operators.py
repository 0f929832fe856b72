"""`semijoin`, `antijoin`, `count_all` and `enter_at` against from-scratch recomputation.

Hypothesis picks epochs of additions and retractions; after every epoch the output must equal
the reference (tests/support/linq_reference.py) on the accumulated inputs, and the reported
changes must be exactly the difference from the previous answer. One and two workers here,
several epochs in flight below, and two processes in tests/linq/test_more_operators_processes.py.
"""

from __future__ import annotations

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
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pairs = st.tuples(st.integers(0, 4), st.integers(0, 5))
keys = st.integers(0, 5)
edges = st.tuples(st.integers(0, 5), st.integers(0, 5))
first = itemgetter(0)
second = itemgetter(1)


# References ------------------------------------------------------------------------------------------


def ref_semijoin(
    a: ref.Multiset, b: ref.Multiset, key1: Callable[[Any], Any], key2: Callable[[Any], Any]
) -> ref.Multiset:
    present = {key2(r) for r, n in b.items() if n > 0}
    return {r: n for r, n in a.items() if key1(r) in present}


def ref_antijoin(
    a: ref.Multiset, b: ref.Multiset, key1: Callable[[Any], Any], key2: Callable[[Any], Any]
) -> ref.Multiset:
    present = {key2(r) for r, n in b.items() if n > 0}
    return {r: n for r, n in a.items() if key1(r) not in present}


def ref_count_all(c: ref.Multiset) -> ref.Multiset:
    total = sum(c.values())
    return {total: 1} if c else {}


def _self(r: Any) -> Any:
    return r


# semijoin and antijoin -----------------------------------------------------------------------------


@WORKERS
@FAST
@given(epochs=ref.subset_pairs(pairs, max_epochs=6))
def test_semijoin_keeps_the_records_whose_key_is_present(workers: int, epochs: list[Any]) -> None:
    """The keys are the other collection's records, which it may hold several times (a key
    counts once) and lose again."""
    a_epochs = [[c for c in ea] for ea, _ in epochs]
    b_epochs = [[(r[1] % 5, d) for r, d in eb] for _, eb in epochs]  # keys 0..4, with repeats
    check(
        lambda a, b: a.semijoin(b, first),
        lambda a, b: ref_semijoin(a, b, first, _self),
        together(a_epochs, b_epochs),
        workers,
    )


@WORKERS
@FAST
@given(a=ref.nonnegative_epochs(pairs, max_epochs=6), b=ref.nonnegative_epochs(pairs, max_epochs=6))
def test_semijoin_and_antijoin_by_a_key_of_the_other(workers: int, a: Epochs, b: Epochs) -> None:
    """``key2`` picks the other collection's key; semijoin plus antijoin is the whole input."""
    key2 = lambda r: r[1] % 5  # noqa: E731
    check(
        lambda x, y: x.semijoin(y, second, key2),
        lambda x, y: ref_semijoin(x, y, second, key2),
        together(a, b),
        workers,
    )
    check(
        lambda x, y: x.antijoin(y, second, key2),
        lambda x, y: ref_antijoin(x, y, second, key2),
        together(a, b),
        workers,
    )
    check(
        lambda x, y: x.semijoin(y, second, key2).concat(x.antijoin(y, second, key2)),
        lambda x, y: x,
        together(a, b),
        workers,
    )


@WORKERS
@FAST
@given(a=ref.nonnegative_epochs(st.text("ab", max_size=2), max_epochs=5), b=ref.nonnegative_epochs(keys))
def test_semijoin_of_string_records_by_length(workers: int, a: Epochs, b: Epochs) -> None:
    """Records that are not ints (object columns) with a Python key function."""
    check(lambda x, y: x.semijoin(y, len), lambda x, y: ref_semijoin(x, y, len, _self), together(a, b), workers)
    check(lambda x, y: x.antijoin(y, len), lambda x, y: ref_antijoin(x, y, len, _self), together(a, b), workers)


# count_all -------------------------------------------------------------------------------------------


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs, max_epochs=6))
def test_count_all_is_the_number_of_records(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.count_all(), ref_count_all, together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(st.integers(0, 3), max_epochs=6))
def test_count_all_of_scalars_after_a_filter(workers: int, epochs: Epochs) -> None:
    """Scalar records, and a count that goes to nothing when every record is filtered out."""
    odd = lambda r: r % 2 == 1  # noqa: E731
    check(lambda c: c.where(odd).count_all(), lambda c: ref_count_all(ref.where(c, odd)), together(epochs), workers)


# enter_at ----------------------------------------------------------------------------------------------


def _reach(roots: linq.Collection, graph: linq.Collection, at: Callable[[Any], int]) -> linq.Collection:
    """The nodes reachable from ``roots`` along ``graph``, each root let into the loop at
    iteration ``at(root)`` (the loop starts empty)."""

    def body(x: linq.Collection) -> linq.Collection:
        late = roots.enter_at(x.scope, at)
        step = x.join(graph.enter(x.scope), _self, first, lambda n, e: e[1])
        return step.concat(late).distinct()

    return roots.where(lambda r: False).fixed_point(body)


def ref_reach(roots: ref.Multiset, graph: ref.Multiset) -> ref.Multiset:
    seen = {r for r, n in roots.items() if n > 0}
    todo = list(seen)
    succ: dict[Any, set[Any]] = {}
    for (a, b), n in graph.items():
        if n > 0:
            succ.setdefault(a, set()).add(b)
    while todo:
        for m in succ.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return dict.fromkeys(seen, 1)


@WORKERS
@FAST
@given(roots=ref.nonnegative_epochs(keys, max_epochs=5), graph=ref.nonnegative_epochs(edges, max_epochs=5))
def test_enter_at_lets_roots_in_late_and_the_fixed_point_is_the_same(
    workers: int, roots: Epochs, graph: Epochs
) -> None:
    """Each root enters at iteration ``3 * root``: later, but the reachable set is the same."""
    check(lambda r, g: _reach(r, g, lambda n: 3 * n), ref_reach, together(roots, graph), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(keys, max_epochs=5))
def test_enter_at_iteration_is_exact(workers: int, epochs: Epochs) -> None:
    """Every difference, a retraction too, is inside the loop at iteration ``iteration(record)``
    of its epoch, nowhere else (read from the times `inspect` sees)."""
    seen: list[tuple[Any, tuple[int, ...], int]] = []

    def query(c: linq.Collection) -> linq.Collection:
        def body(x: linq.Collection) -> linq.Collection:
            late = c.enter_at(x.scope, lambda r: 2 * r).inspect(lambda r, t, d: seen.append((r, tuple(t), d)))
            return late.distinct()

        return c.where(lambda r: False).fixed_point(body)

    check(query, ref.distinct, together(epochs), workers)
    expected = ref._clean(((r, (e, 2 * r)), d) for e, changes in enumerate(epochs) for r, d in changes)
    assert ref._clean(((r, t), d) for r, t, d in seen) == expected


@pytest.mark.parametrize("workers", [1, 2])
def test_enter_at_columns_function_and_a_bad_iteration(workers: int) -> None:
    """A `columns` iteration function runs once per block; a negative iteration fails the
    computation with an error that names the operator and the record."""
    seen: list[tuple[Any, int]] = []

    def late(c: linq.Collection, x: linq.Collection) -> linq.Collection:
        entered = c.enter_at(x.scope, linq.columns(lambda a: a % 3))
        return entered.inspect(lambda r, t, d: seen.append((r, t[-1])))

    check(
        lambda c: c.where(lambda r: False).fixed_point(lambda x: late(c, x).distinct()),
        ref.distinct,
        [([(r, 1) for r in range(9)],)],
        workers,
    )
    assert sorted(seen) == [(r, r % 3) for r in range(9)]

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope)
        c = inp.collection
        out = c.fixed_point(lambda x: c.enter_at(x.scope, lambda r: r - 5, name="late").concat(x).distinct())
        return inp, linq.CollectionOutput(out)

    with pytest.raises(timely.VertexError, match=r"iteration -4 of record 1 is not a non-negative int") as info:
        with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, out)):
            inp.insert_all([7, 1])
            inp.advance_to(1)
            comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
    assert "late" in str(info.value)


# Several epochs in flight ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("lag", [2, 10])
@pytest.mark.parametrize("seed", [1, 2])
def test_in_flight(workers: int, lag: int, seed: int) -> None:
    """Every operator here at once, its inputs running ``lag`` epochs ahead of the output."""
    import random

    rng = random.Random(seed)
    a_epochs = ref.random_epochs(rng, lambda: (rng.randrange(6), rng.randrange(6)), initial=12, epochs=10)
    b_epochs = ref.random_epochs(rng, lambda: rng.randrange(6), initial=3, epochs=10)

    def query(a: linq.Collection, b: linq.Collection) -> linq.Collection:
        semi = a.semijoin(b, first).select(lambda r: ("semi", r))
        anti = a.antijoin(b, second).select(lambda r: ("anti", r))
        total = a.count_all().select(lambda n: ("total", n))
        reach = _reach(b, a, lambda n: 2 * n).select(lambda n: ("reach", n))
        return semi.concat(anti, total, reach)

    def reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
        return ref.concat(
            ref.select(ref_semijoin(a, b, first, _self), lambda r: ("semi", r)),
            ref.select(ref_antijoin(a, b, second, _self), lambda r: ("anti", r)),
            ref.select(ref_count_all(a), lambda n: ("total", n)),
            ref.select(ref_reach(b, a), lambda n: ("reach", n)),
        )

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        inputs = [linq.new_input(scope, "a"), linq.new_input(scope, "b")]
        return inputs, linq.CollectionOutput(query(inputs[0].collection, inputs[1].collection))

    states: list[ref.Multiset] = [{}, {}]
    expected: list[ref.Multiset] = []
    for ea, eb in zip(a_epochs, b_epochs):
        states = [ref.apply(states[0], ea), ref.apply(states[1], eb)]
        expected.append(reference(*states))
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        drive(
            comp,
            inputs,
            list(zip(a_epochs, b_epochs)),
            out.probe,
            lambda e: assert_epoch(out, e, expected[e], expected[e - 1] if e else {}),
            lag=lag,
        )


def test_count_all_of_records_with_no_fields() -> None:
    """Empty tuples have no column to count by: the whole-collection key needs none."""
    check(lambda c: c.count_all(), ref_count_all, [([((), 2), (("a",), 1)],), ([((), -1)],)], 1)
    check(lambda c: c.count_all(), ref_count_all, [([((), 2)],), ([((), -2)],)], 1)


def test_a_columns_key_of_the_wrong_length_is_refused() -> None:
    """A `columns` key function must give one key per record; otherwise the computation fails
    with an error naming the operator, rather than keys silently paired with other records."""

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope)
        return inp, linq.CollectionOutput(inp.collection.count(linq.columns(lambda a: a[:1]), name="short"))

    with pytest.raises(timely.VertexError, match=r"short.*gave keys of shape \(1,\) for 3 records"):
        with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, out)):
            inp.insert_all([1, 2, 3])
            inp.advance_to(1)
            comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
