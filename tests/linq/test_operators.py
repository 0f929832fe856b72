"""Every `timely_libs.linq` operator against the from-scratch reference (tests/support/linq_reference.py).

Hypothesis picks epochs of additions and retractions for each input; the dataflow gets them
epoch by epoch, and after every epoch its accumulated output must equal the reference's
answer on the accumulated inputs, and the changes it reported for that epoch must be
exactly the difference from the previous answer. Each test runs with one and with three
workers.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import linq_reference as ref
from tests.support.linq_harness import Epochs, check, together
from timely_libs import linq

WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOOPS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

small = st.integers(0, 7)
pairs = st.tuples(st.integers(0, 3), st.integers(0, 5))
edges = st.tuples(st.integers(0, 5), st.integers(0, 5))

first = itemgetter(0)
second = itemgetter(1)


# Linear operators --------------------------------------------------------------------------------


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_select(workers: int, epochs: Epochs) -> None:
    f = lambda r: r % 3  # noqa: E731 - several records map to one
    check(lambda c: c.select(f), lambda c: ref.select(c, f), together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_where(workers: int, epochs: Epochs) -> None:
    p = lambda r: r % 3 != 1  # noqa: E731
    check(lambda c: c.where(p), lambda c: ref.where(c, p), together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_select_many(workers: int, epochs: Epochs) -> None:
    f = lambda r: [r // 2, r + 10] * (r % 3)  # noqa: E731 - none, one or two copies of each
    check(lambda c: c.select_many(f), lambda c: ref.select_many(c, f), together(epochs), workers)


@WORKERS
@FAST
@given(a=ref.signed_epochs(small), b=ref.signed_epochs(small), c=ref.signed_epochs(small))
def test_concat(workers: int, a: Epochs, b: Epochs, c: Epochs) -> None:
    f = lambda r: r + 1  # noqa: E731
    check(
        lambda x, y, z: x.concat(y, z.select(f)),
        lambda x, y, z: ref.concat(x, y, ref.select(z, f)),
        together(a, b, c),
        workers,
    )


@WORKERS
@FAST
@given(epochs=ref.subset_pairs(small))
def test_negate_is_multiset_difference(workers: int, epochs: list[tuple[list[ref.Change], list[ref.Change]]]) -> None:
    check(lambda a, b: a.concat(b.negate()), lambda a, b: ref.concat(a, ref.negate(b)), epochs, workers)


@WORKERS
@FAST
@given(epochs=ref.subset_pairs(small))
def test_negate_feeds_a_reduce(workers: int, epochs: list[tuple[list[ref.Change], list[ref.Change]]]) -> None:
    """``a - b`` with ``b <= a`` is a proper multiset, so a reduce may count it."""
    check(
        lambda a, b: a.concat(b.negate()).count(),
        lambda a, b: ref.count(ref.concat(a, ref.negate(b))),
        epochs,
        workers,
    )


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_negate_twice_is_identity(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.negate().negate(), lambda c: c, together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_consolidate(workers: int, epochs: Epochs) -> None:
    """The same collection, with each record sent at most once per time, never with a zero diff."""
    seen: list[tuple[Any, Any, int]] = []
    query = lambda c: (  # noqa: E731
        c.concat(c.negate(), c, c.select(lambda r: r + 1)).consolidate().inspect(lambda r, t, d: seen.append((r, t, d)))
    )

    def after(epoch: int, states: list[ref.Multiset]) -> None:
        assert all(d != 0 for _, _, d in seen), seen
        keys = [(r, t) for r, t, _ in seen]
        assert len(keys) == len(set(keys)), f"a record sent twice at one time: {seen}"

    check(query, lambda c: ref.concat(c, ref.select(c, lambda r: r + 1)), together(epochs), workers, after)


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_inspect(workers: int, epochs: Epochs) -> None:
    """``fn(record, time, diff)`` sees every difference at its epoch; the collection passes unchanged."""
    seen: list[tuple[Any, Any, int]] = []
    fed: list[ref.Multiset] = []

    def after(epoch: int, states: list[ref.Multiset]) -> None:
        fed.append(dict(states[0]))
        assert all(t[0] <= epoch and len(t) == 1 for _, t, _ in seen), seen
        this_epoch = ref.apply({}, [(r, d) for r, t, d in seen if t[0] == epoch])
        assert this_epoch == ref.difference(fed[-1], fed[-2] if len(fed) > 1 else {})

    check(lambda c: c.inspect(lambda r, t, d: seen.append((r, t, d))), lambda c: c, together(epochs), workers, after)


# Keyed operators ------------------------------------------------------------------------------------


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(small))
def test_distinct(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.distinct(), ref.distinct, together(epochs), workers)


def _many_changes(rng: random.Random, universe: list[Any], epochs: int, per_epoch: int) -> list[list[ref.Change]]:
    """Epochs of additions and removals (multiplicities up to 3, never below zero) of records
    drawn from ``universe``: thousands of keys a notification, as a batch of graph changes has."""
    counts: dict[Any, int] = {}
    out = []
    for _ in range(epochs):
        changes = []
        for r in rng.sample(universe, per_epoch):
            d = max(rng.choice([1, 2, -1, -3]), -counts.get(r, 0))
            if d:
                changes.append((r, d))
                counts[r] = counts.get(r, 0) + d
        out.append(changes)
    return out


MANY: dict[str, list[Any]] = {
    "ints": [i * 7 for i in range(4500)],
    "pairs": [(i % 90, i // 90) for i in range(4500)],
    "strings": [f"r{i}" for i in range(4500)],
}


@WORKERS
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), kind=st.sampled_from(sorted(MANY)))
def test_distinct_of_thousands_of_records_an_epoch(workers: int, seed: int, kind: str) -> None:
    """Thousands of keys a notification: `distinct` sums each key's count column-wise (no
    group is built) and must still agree with the reference, removals to zero included."""
    epochs = _many_changes(random.Random(seed), MANY[kind], epochs=4, per_epoch=4000)
    check(lambda c: c.distinct(), ref.distinct, together(epochs), workers)


@WORKERS
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16))
def test_transitive_closure_of_thousands_of_pairs(workers: int, seed: int) -> None:
    """The closure's `distinct` inside the loop meets thousands of paths a notification, and
    rows of earlier epochs at later iterations (not before its time: scheduled, not summed)."""
    rng = random.Random(seed)
    universe = [(a, b) for a in range(60) for b in range(60) if a != b]
    epochs = []
    present: set[tuple[int, int]] = set()
    for _ in range(3):
        changes: list[ref.Change] = [(e, 1) for e in rng.sample([e for e in universe if e not in present], 90)]
        changes += [(e, -1) for e in rng.sample(sorted(present), len(present) // 4)]
        present = (present | {e for e, d in changes if d > 0}) - {e for e, d in changes if d < 0}
        epochs.append(changes)
    check(lambda c: c.fixed_point(lambda x: _step(x, c.enter(x.scope))), ref.closure, together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(small))
def test_count_without_key(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.count(), ref.count, together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_count_with_key(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.count(first), lambda c: ref.count(c, first), together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_sum(workers: int, epochs: Epochs) -> None:
    value = lambda r: r[1] - 2  # noqa: E731 - negative values too, so a sum can return to zero
    check(lambda c: c.sum(first, value), lambda c: ref.sum_(c, first, value), together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_min(workers: int, epochs: Epochs) -> None:
    value = lambda r: r[1] // 2  # noqa: E731 - ties between records, broken by the least record
    check(lambda c: c.min(first, value), lambda c: ref.min_(c, first, value), together(epochs), workers)


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_max(workers: int, epochs: Epochs) -> None:
    value = lambda r: r[1] // 2  # noqa: E731 - ties between records, broken by the greatest record
    check(lambda c: c.max(first, value), lambda c: ref.max_(c, first, value), together(epochs), workers)


def _grouped(k: Any, records: list[Any]) -> list[Any]:
    """Depends on the records' order (sorted) and returns duplicates."""
    return [(k, tuple(records)), *((k, r[1] % 2) for r in records)]


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_group_by(workers: int, epochs: Epochs) -> None:
    check(lambda c: c.group_by(first, _grouped), lambda c: ref.group_by(c, first, _grouped), together(epochs), workers)


def _cogrouped(k: Any, left: list[Any], right: list[Any]) -> list[Any]:
    return [(k, tuple(left), tuple(right)), *((k, x[1] + y) for x in left for y in right if y % 2 == 0)]


@WORKERS
@FAST
@given(a=ref.nonnegative_epochs(pairs), b=ref.nonnegative_epochs(small))
def test_co_group_by(workers: int, a: Epochs, b: Epochs) -> None:
    key2 = lambda r: r % 4  # noqa: E731
    check(
        lambda x, y: x.co_group_by(y, first, key2, _cogrouped),
        lambda x, y: ref.co_group_by(x, y, first, key2, _cogrouped),
        together(a, b),
        workers,
    )


@WORKERS
@FAST
@given(a=ref.signed_epochs(pairs), b=ref.signed_epochs(pairs))
def test_join(workers: int, a: Epochs, b: Epochs) -> None:
    """Bilinear: counts multiply, negative ones too."""
    key2 = lambda r: r[1] % 4  # noqa: E731
    sel = lambda x, y: (x[0], x[1] + y[0])  # noqa: E731 - several pairs give one record
    check(
        lambda x, y: x.join(y, first, key2, sel),
        lambda x, y: ref.join(x, y, first, key2, sel),
        together(a, b),
        workers,
    )


@WORKERS
@FAST
@given(epochs=ref.nonnegative_epochs(pairs))
def test_self_join(workers: int, epochs: Epochs) -> None:
    sel = lambda x, y: (x[1], y[1])  # noqa: E731
    check(
        lambda c: c.join(c, first, first, sel), lambda c: ref.join(c, c, first, first, sel), together(epochs), workers
    )


SET_OPS = {
    "union": (lambda a, b: a.union(b), ref.union),
    "intersect": (lambda a, b: a.intersect(b), ref.intersect),
    "except": (lambda a, b: a.except_(b), ref.except_),
}


@WORKERS
@pytest.mark.parametrize("op", sorted(SET_OPS))
@FAST
@given(a=ref.nonnegative_epochs(st.integers(0, 4)), b=ref.nonnegative_epochs(st.integers(0, 4)))
def test_set_operations(workers: int, op: str, a: Epochs, b: Epochs) -> None:
    query, reference = SET_OPS[op]
    check(query, reference, together(a, b), workers)


@WORKERS
@FAST
@given(a=ref.nonnegative_epochs(pairs), b=ref.nonnegative_epochs(pairs))
def test_pipeline_of_reduces(workers: int, a: Epochs, b: Epochs) -> None:
    """Reduces feeding reduces: the count of each key's least record, joined with a distinct."""
    sel = lambda x, y: (x[0], x[1], y[1])  # noqa: E731
    value = lambda r: r[1]  # noqa: E731
    check(
        lambda x, y: x.min(first, value).join(y.distinct(), first, first, sel).count(first).except_(x.count(first)),
        lambda x, y: ref.except_(
            ref.count(ref.join(ref.min_(x, first, value), ref.distinct(y), first, first, sel), first),
            ref.count(x, first),
        ),
        together(a, b),
        workers,
    )


# To and from plain timely streams ----------------------------------------------------------------------


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_to_stream_from_stream_round_trip(workers: int, epochs: Epochs) -> None:
    """Through a plain timely stage and back; every triple carries its message's time."""
    stamped: list[tuple[Any, Any]] = []

    def query(c: linq.Collection) -> linq.Collection:
        stream = c.to_stream().inspect_batch("look", lambda t, batch: stamped.extend((t, x[1]) for x in batch))
        return linq.Collection.from_stream(stream.map("plain", lambda x: x))

    def after(epoch: int, states: list[ref.Multiset]) -> None:
        assert all(t == s for t, s in stamped), stamped

    check(query, lambda c: c, together(epochs), workers, after)


@WORKERS
@FAST
@given(epochs=ref.signed_epochs(small))
def test_from_stream_moves_triples_to_later_times(workers: int, epochs: Epochs) -> None:
    """A user's vertex may move a triple to a later time: every difference one epoch late."""
    fed: list[ref.Multiset] = [{}]

    def query(c: linq.Collection) -> linq.Collection:
        later = c.to_stream().map("later", lambda x: (x[0], (x[1][0] + 1,), x[2]))
        return linq.Collection.from_stream(later)

    def reference(c: ref.Multiset) -> ref.Multiset:
        fed.append(c)
        return fed[-2]

    check(query, reference, together(epochs), workers)


# Loops ---------------------------------------------------------------------------------------------------


def _step(x: linq.Collection, e: linq.Collection) -> linq.Collection:
    """One step of transitive closure: paths one edge longer, and the edges themselves."""
    return x.join(e, second, first, lambda p, f: (p[0], f[1])).concat(e).distinct()


def _ref_step(x: ref.Multiset, e: ref.Multiset) -> ref.Multiset:
    return ref.distinct(ref.concat(ref.join(x, e, second, first, lambda p, f: (p[0], f[1])), e))


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(edges, max_epochs=6))
def test_fixed_point_transitive_closure(workers: int, epochs: Epochs) -> None:
    check(
        lambda c: c.fixed_point(lambda x: _step(x, c.enter(x.scope))),
        lambda c: ref.closure(c),
        together(epochs),
        workers,
    )


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(edges, max_epochs=6))
def test_fixed_point_through_plain_streams(workers: int, epochs: Epochs) -> None:
    """to_stream / from_stream inside a loop: the triples carry (epoch, iteration) times."""

    def body(x: linq.Collection, e: linq.Collection) -> linq.Collection:
        stream = x.join(e, second, first, lambda p, f: (p[0], f[1])).to_stream().map("plain", lambda t: t)
        return linq.Collection.from_stream(stream).concat(e).distinct()

    check(lambda c: c.fixed_point(lambda x: body(x, c.enter(x.scope))), ref.closure, together(epochs), workers)


def _multiply(x: linq.Collection, e: linq.Collection) -> linq.Collection:
    return x.select(lambda r: (2 * r + 1) % 7).concat(e)


def _ref_multiply(x: ref.Multiset, e: ref.Multiset) -> ref.Multiset:
    return ref.concat(ref.select(x, lambda r: (2 * r + 1) % 7), e)


def _oscillate(x: linq.Collection, e: linq.Collection) -> linq.Collection:
    return x.count(lambda r: r % 3).select(lambda kn: (kn[0] + kn[1]) % 7).concat(e.where(lambda r: r > 3))


def _ref_oscillate(x: ref.Multiset, e: ref.Multiset) -> ref.Multiset:
    counted = ref.select(ref.count(x, lambda r: r % 3), lambda kn: (kn[0] + kn[1]) % 7)
    return ref.concat(counted, ref.where(e, lambda r: r > 3))


BODIES = {
    # monotone, converges: bounded here to paths of at most k + 1 edges
    "closure": (_step, _ref_step, edges),
    # linear, counts grow for ever without a bound
    "multiply": (_multiply, _ref_multiply, st.integers(0, 6)),
    # a reduce whose answer need not settle
    "oscillate": (_oscillate, _ref_oscillate, st.integers(0, 6)),
}


@WORKERS
@pytest.mark.parametrize("body", sorted(BODIES))
@pytest.mark.parametrize("k", [1, 2, 4])
@LOOPS
@given(data=st.data())
def test_fixed_point_max_iterations(workers: int, body: str, k: int, data: st.DataObject) -> None:
    """``fixed_point(body, max_iterations=k)`` is ``body`` applied ``k`` times from scratch."""
    step, ref_step, records = BODIES[body]
    epochs = data.draw(ref.nonnegative_epochs(records, max_epochs=4))
    check(
        lambda c: c.fixed_point(lambda x: step(x, c.enter(x.scope)), max_iterations=k),
        lambda c: ref.iterate(c, lambda x: ref_step(x, c), k),
        together(epochs),
        workers,
    )


def _outer(s: linq.Collection, marks: linq.Collection) -> linq.Collection:
    """The closure of ``s`` (an inner fixed point over the outer loop variable), plus the
    reverse of each of its pairs whose source is marked."""
    closed = s.fixed_point(lambda y: _step(y, s.enter(y.scope)))
    reverse = closed.join(marks, first, lambda m: m, lambda p, m: (p[1], p[0]))
    return closed.concat(reverse).distinct()


def _ref_outer(s: ref.Multiset, marks: ref.Multiset) -> ref.Multiset:
    closed = ref.closure(s)
    reverse = ref.join(closed, marks, first, lambda m: m, lambda p, m: (p[1], p[0]))
    return ref.distinct(ref.concat(closed, reverse))


@WORKERS
@LOOPS
@given(
    e=ref.nonnegative_epochs(edges, max_epochs=5, max_changes=6),
    m=ref.nonnegative_epochs(st.integers(0, 5), max_epochs=5, max_changes=3),
)
def test_nested_fixed_point(workers: int, e: Epochs, m: Epochs) -> None:
    check(
        lambda c, marks: c.fixed_point(lambda s: _outer(s, marks.enter(s.scope))),
        lambda c, marks: ref.fixed_point(c, lambda s: _ref_outer(s, marks)),
        together(e, m),
        workers,
    )


@WORKERS
@LOOPS
@given(
    e=ref.nonnegative_epochs(edges, max_epochs=5, max_changes=6),
    m=ref.nonnegative_epochs(st.integers(0, 5), max_epochs=5, max_changes=3),
)
def test_nested_fixed_point_with_a_twice_entered_collection(workers: int, e: Epochs, m: Epochs) -> None:
    """The inner loop extends paths only through marked nodes, a root collection entered twice."""

    def inner_step(y: linq.Collection, s: linq.Collection, marks: linq.Collection) -> linq.Collection:
        via = y.join(marks, second, lambda m: m, lambda p, m: p)
        return via.join(s, second, first, lambda p, f: (p[0], f[1])).concat(s).distinct()

    def outer(s: linq.Collection, marks: linq.Collection) -> linq.Collection:
        inner = s.fixed_point(lambda y: inner_step(y, s.enter(y.scope), marks.enter(y.scope)))
        return inner.select(lambda p: (min(p), max(p))).concat(s).distinct()

    def ref_outer(s: ref.Multiset, marks: ref.Multiset) -> ref.Multiset:
        def step(y: ref.Multiset) -> ref.Multiset:
            via = ref.join(y, marks, second, lambda m: m, lambda p, m: p)
            return ref.distinct(ref.concat(ref.join(via, s, second, first, lambda p, f: (p[0], f[1])), s))

        inner = ref.fixed_point(s, step)
        return ref.distinct(ref.concat(ref.select(inner, lambda p: (min(p), max(p))), s))

    check(
        lambda c, marks: c.fixed_point(lambda s: outer(s, marks.enter(s.scope))),
        lambda c, marks: ref.fixed_point(c, lambda s: ref_outer(s, marks)),
        together(e, m),
        workers,
    )


def _local_min(x: linq.Collection, e: linq.Collection) -> linq.Collection:
    return x.join(e, first, first, lambda n, f: (f[1], n[1])).concat(x).min(first, second)


PRIORITIES: dict[str, Callable[[Any], int]] = {
    "label": lambda node: node[1],
    "label_mod_3": lambda node: node[1] % 3,
    "reversed": lambda node: 5 - node[1],
    "constant": lambda node: 0,
}


@WORKERS
@pytest.mark.parametrize("priority", sorted(PRIORITIES))
@LOOPS
@given(epochs=ref.nonnegative_epochs(edges, max_epochs=6))
def test_prioritize_min_labels_equals_the_fixed_point(workers: int, priority: str, epochs: Epochs) -> None:
    """Least reaching label along directed edges, labels introduced by priority: the same
    answer as the plain fixed point, whatever the order."""

    def query(c: linq.Collection) -> linq.Collection:
        nodes = c.select_many(lambda f: [(f[0], f[0]), (f[1], f[1])])

        def body(p: linq.Collection) -> linq.Collection:
            inner = c.enter(p.scope)
            return p.fixed_point(lambda x: _local_min(x, inner.enter(x.scope)))

        return nodes.prioritize(PRIORITIES[priority], body)

    check(query, ref.least_reaching_label, together(epochs), workers)


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(edges, max_epochs=6))
def test_plain_fixed_point_min_labels(workers: int, epochs: Epochs) -> None:
    """The fixed point the prioritized version is compared with, on its own."""

    def query(c: linq.Collection) -> linq.Collection:
        nodes = c.select_many(lambda f: [(f[0], f[0]), (f[1], f[1])])
        return nodes.fixed_point(lambda x: _local_min(x, c.enter(x.scope)))

    check(query, ref.least_reaching_label, together(epochs), workers)


def _first_come(k: Any, records: list[Any]) -> list[Any]:
    """A key's record once taken stays; otherwise the least value present is taken."""
    taken = [r for r in records if len(r) == 3]
    return [min(taken)] if taken else [(k, min(r[1] for r in records), "taken")]


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(pairs, max_epochs=6))
def test_prioritize_changes_only_times(workers: int, epochs: Epochs) -> None:
    """A body that is not idempotent (applied to its own result it changes it): prioritize
    gives exactly the body's result on the whole input, whatever order the records come in."""
    priority = lambda r: r[1] % 3  # noqa: E731 - not the order of the values
    check(
        lambda c: c.prioritize(priority, lambda x: x.group_by(first, _first_come)),
        lambda c: ref.group_by(c, first, _first_come),
        together(epochs),
        workers,
    )


@WORKERS
@LOOPS
@given(
    epochs=ref.nonnegative_epochs(edges, max_epochs=5),
    gaps=st.lists(st.integers(1, 3), min_size=5, max_size=5),
    start=st.integers(0, 2),
)
def test_epochs_need_not_be_consecutive(workers: int, epochs: Epochs, gaps: list[int], start: int) -> None:
    """Epoch numbers with gaps (and a first epoch after 0): traces are compacted to the next
    epoch that actually comes."""
    numbers = [start + sum(gaps[:i]) for i in range(len(epochs))]

    def query(c: linq.Collection) -> linq.Collection:
        closed = c.fixed_point(lambda x: _step(x, c.enter(x.scope)))
        return closed.count(first).concat(c.min(first, second))

    def reference(c: ref.Multiset) -> ref.Multiset:
        return ref.concat(ref.count(ref.closure(c), first), ref.min_(c, first, second))

    check(query, reference, together(epochs), workers, numbers=numbers)


@WORKERS
@LOOPS
@given(epochs=ref.nonnegative_epochs(edges, max_epochs=5), k=st.integers(1, 3))
def test_nested_fixed_point_with_bounded_inner_loop(workers: int, epochs: Epochs, k: int) -> None:
    """An outer fixed point around an inner loop of at most ``k`` iterations: each outer step
    adds the reverse of the paths of up to ``k + 1`` edges."""

    def outer(s: linq.Collection) -> linq.Collection:
        bounded = s.fixed_point(lambda y: _step(y, s.enter(y.scope)), max_iterations=k)
        return bounded.select(lambda p: (p[1], p[0])).concat(s).distinct()

    def ref_outer(s: ref.Multiset) -> ref.Multiset:
        bounded = ref.iterate(s, lambda y: _ref_step(y, s), k)
        return ref.distinct(ref.concat(ref.select(bounded, lambda p: (p[1], p[0])), s))

    check(
        lambda c: c.fixed_point(outer),
        lambda c: ref.fixed_point(c, ref_outer),
        together(epochs),
        workers,
    )


ZERO_DIFFS: dict[str, tuple[Callable[[linq.Collection], linq.Collection], Callable[[ref.Multiset], ref.Multiset]]] = {
    "distinct": (lambda c: c.distinct(), ref.distinct),
    "min": (lambda c: c.min(lambda r: 0, lambda r: r), lambda c: ref.min_(c, lambda r: 0, lambda r: r)),
    "count_by_key": (lambda c: c.count(lambda r: r % 2), lambda c: ref.count(c, lambda r: r % 2)),
}


@WORKERS
@pytest.mark.parametrize("case", sorted(ZERO_DIFFS))
def test_a_zero_diff_changes_nothing(workers: int, case: str) -> None:
    query, reference = ZERO_DIFFS[case]
    check(query, reference, [([(1, 0), (2, 1), (3, 0)],), ([(4, 0)],)], workers)


@WORKERS
@FAST
@given(a=ref.nonnegative_epochs(pairs), b=st.lists(pairs, max_size=8))
def test_a_join_meets_a_record_and_its_retraction_at_one_time_not_at_all(
    workers: int, a: Epochs, b: list[tuple[int, int]]
) -> None:
    """A `count`, `where` and `select` send ``-k`` and ``+k`` in one message when ``k``'s count
    moves within the kept range. The join consolidates its delta before it meets the other
    side (as differential dataflow's join meets arranged batches), so neither meets anything:
    no output record has differences of both signs at one time (each output record is one
    record of each side, and the other side only grows, at its first epoch), and the result
    is the recomputation's."""
    seen: list[tuple[Any, Any, int]] = []

    def query(x: linq.Collection, y: linq.Collection) -> linq.Collection:
        keys = x.count(first).where(lambda kn: kn[1] >= 1).select(first)
        joined = keys.join(y, lambda k: k, first, lambda k, r: (k, r))
        return joined.inspect(lambda r, t, d: seen.append((r, tuple(t), d)))

    def reference(x: ref.Multiset, y: ref.Multiset) -> ref.Multiset:
        keys = ref.select(ref.where(ref.count(x, first), lambda kn: kn[1] >= 1), first)
        return ref.join(keys, y, lambda k: k, first, lambda k, r: (k, r))

    def after(epoch: int, states: list[ref.Multiset]) -> None:
        signs: dict[tuple[Any, Any], set[bool]] = {}
        for r, t, d in seen:
            signs.setdefault((r, t), set()).add(d > 0)
        assert all(len(s) == 1 for s in signs.values()), seen

    check(query, reference, together(a, [[(r, 1) for r in b]]), workers, after)


triples = st.tuples(st.integers(-2, 3), st.sampled_from([0, 1, 2, 1 << 40]), st.integers(0, 3))


@WORKERS
@FAST
@given(a=ref.signed_epochs(triples), b=ref.signed_epochs(triples))
def test_a_join_on_two_fields_meets_a_key_function_of_the_same_pairs(workers: int, a: Epochs, b: Epochs) -> None:
    """An ``itemgetter(i, j)`` key of int fields is coded column-wise; a Python function giving
    the same pairs must meet it (same codes, same workers), also for negative and large ints,
    which the column-wise form leaves to the general one."""
    pair = itemgetter(0, 1)
    sel = lambda x, y: (x[2], y[2])  # noqa: E731
    check(
        lambda x, y: x.join(y, pair, lambda r: (r[0], r[1]), sel),
        lambda x, y: ref.join(x, y, pair, pair, sel),
        together(a, b),
        workers,
    )
