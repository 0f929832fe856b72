"""linq's reduces and joins at partially ordered times, against recomputation from scratch.

The model is differential-dataflow's ``tests/reduce_reference.rs`` (its oracle tests): random
additions and retractions at random times of a product order, and after the run, at every
time ``q``, the operator's output accumulated over the times ``<= q`` must equal the operator
applied, from scratch, to the inputs accumulated over the times ``<= q``.

Making the times. Inside one loop (times ``(epoch, i)``) or two nested loops (``(epoch, i,
j)``), a plain timely stage moves each input difference to a time of its own, later than its
message's time (`Collection.from_stream` allows that): the operators see differences at
``(1, 2)`` and ``(2, 0)``, which the product order leaves incomparable, and the output may
change at their least upper bound ``(2, 2)``, where no input changed. Some differences are
sent at an epoch earlier than the one they land in, and the inputs run several epochs ahead
of the outputs (`tests/support/linq_in_flight.drive`), so an operator holds several epochs at once.
Retractions come at a time no earlier than the addition they undo, so every multiset a
reduce sees, at every time, has no negative counts.

The check. The output is captured inside the loop with `Collection.inspect`. Once the root
output has passed epoch ``w`` nothing at a time of epoch ``w`` can change any more, so at
every time ``q = (w, ...)`` of the grid ``{w} x [0, SPAN]^depth`` (input coordinates stay
below `SPAN`, so ``(w, SPAN, ...)`` is "after every iteration") the accumulations must agree;
and the root output, what leaves the loops, must report for ``w`` the change of the answer
at ``(w, SPAN, ...)``.

The loop tests at the end check `fixed_point` the same way at every (epoch, iteration): the
loop variable at ``(e, i)`` is the body applied ``i`` times to the input of epoch ``e``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from itertools import product
from operator import itemgetter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import timely
from tests.linq.test_operators import _ref_outer, _ref_step, _step
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_harness import Epochs, together
from tests.support.linq_in_flight import assert_epoch, drive
from timely_libs import linq

EPOCHS = 4
SPAN = 3
"""Loop coordinates of input differences are below SPAN; the check's grid goes up to SPAN."""

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Time = tuple[int, ...]
Update = tuple[Any, Time, int]
"""``(record, time, diff)``."""
Sent = tuple[int, Update]
"""An update and the epoch it is sent in (at most its time's epoch)."""

first = itemgetter(0)
second = itemgetter(1)
pairs = st.tuples(st.integers(0, 3), st.integers(0, 5))


# The product order ------------------------------------------------------------------------------


def leq(s: Time, t: Time) -> bool:
    return all(a <= b for a, b in zip(s, t, strict=True))


def lub(s: Time, t: Time) -> Time:
    return tuple(max(a, b) for a, b in zip(s, t, strict=True))


def at(updates: Sequence[Update], q: Time) -> ref.Multiset:
    """The collection at ``q``: the differences at times ``<= q``, summed."""
    return ref.apply({}, [(r, d) for r, t, d in updates if leq(t, q)])


@st.composite
def timed_updates(
    draw: st.DrawFn, records: st.SearchStrategy[Any], depth: int, signed: bool = False, max_size: int = 20
) -> list[Sent]:
    """Additions at random times of ``EPOCHS x SPAN^depth``, about half of them retracted
    (wholly or in part) at a random time no earlier; each sent at a random epoch no later
    than its time's. With ``signed``, some "additions" are negative (for joins, which are
    bilinear and never look at a whole group)."""
    time = st.tuples(st.integers(0, EPOCHS - 1), *[st.integers(0, SPAN - 1)] * depth)
    counts = st.sampled_from([1, 1, 2, -1, -2] if signed else [1, 1, 2])
    raw = draw(
        st.lists(
            st.tuples(records, time, counts, st.none() | time, st.integers(1, 2), st.integers(0, EPOCHS - 1)),
            max_size=max_size,
        )
    )
    out: list[Sent] = []
    for record, t, n, later, part, early in raw:
        out.append((min(early, t[0]), (record, t, n)))
        if later is not None:
            retract = lub(t, later)
            undo = min(abs(n), part) * (-1 if n > 0 else 1)
            out.append((min(early, retract[0]), (record, retract, undo)))
    return out


# The driver --------------------------------------------------------------------------------------


def _place(triple: tuple[Any, Any, int]) -> tuple[Any, Time, int]:
    """``((record, time), message time, diff)`` to ``(record, time, diff)``."""
    (record, time), _, diff = triple
    return (record, time, diff)


def _inspected(seen: list[Update]) -> Callable[[linq.Collection], linq.Collection]:
    """The collection passed on unchanged, each of its differences added to ``seen``."""
    return lambda c: c.inspect(lambda r, t, d: seen.append((r, tuple(t), d)))


def check_at_times(
    query: Callable[..., linq.Collection],
    reference: Callable[..., ref.Multiset],
    per_input: Sequence[Sequence[Sent]],
    depth: int,
    workers: int,
    lag: int,
    close: bool,
) -> None:
    """Run ``query`` over collections holding ``per_input``'s updates inside ``depth`` nested
    loops; check its output at every time of the grid against ``reference``, epoch by epoch."""
    seen: list[Update] = []

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        inputs = [linq.new_input(scope, f"in{i}") for i in range(len(per_input))]
        loops: list[timely.LoopContext] = []
        for d in range(depth):
            loops.append(timely.LoopContext(loops[-1] if loops else scope, f"loop{d}"))
        placed = []
        for i, inp in enumerate(inputs):
            c = inp.collection
            for loop in loops:
                c = c.enter(loop)
            placed.append(linq.Collection.from_stream(c.to_stream().map(f"place{i}", _place)))
        result = _inspected(seen)(query(*placed))
        for _ in loops:
            result = result.leave()
        return inputs, linq.CollectionOutput(result)

    updates = [[u for _, u in sent] for sent in per_input]
    epochs = [[[((r, t), d) for s, (r, t, d) in sent if s == e] for sent in per_input] for e in range(EPOCHS)]
    end = (SPAN,) * depth

    def answer(q: Time) -> ref.Multiset:
        return reference(*(at(u, q) for u in updates))

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):

        def on_passed(w: int) -> None:
            late = [(r, t, d) for r, t, d in seen if t[0] <= w and not all(c < SPAN for c in t[1:])]
            assert not late, f"output at times after every input time: {late}"
            for q in product([w], *[range(SPAN + 1)] * depth):
                expected, got = answer(q), at(seen, q)
                assert got == expected, (
                    f"at {q}: missing {ref.difference(expected, got)}, extra {ref.difference(got, expected)}\n"
                    f"inputs at {q}: {[at(u, q) for u in updates]}"
                )
            assert_epoch(out, w, answer((w, *end)), answer((w - 1, *end)) if w else {})

        drive(
            comp,
            inputs,
            epochs,
            out.probe,
            on_passed,
            lag=lag,
            close_after=[EPOCHS - 1] * len(inputs) if close else None,
        )


def _running(data: st.DataObject) -> dict[str, Any]:
    """How to run: workers, epochs in flight, inputs closed with the last epoch or left open."""
    return {
        "workers": data.draw(st.sampled_from([1, 3])),
        "lag": data.draw(st.integers(0, EPOCHS)),
        "close": data.draw(st.booleans()),
    }


# Reduces -----------------------------------------------------------------------------------------


def _grouped(k: Any, records: list[Any]) -> list[Any]:
    """Depends on the records' order (sorted) and returns duplicates."""
    return [(k, tuple(records)), *((k, r[1] % 2) for r in records)]


def _value(r: tuple[int, int]) -> int:
    return r[1] // 2  # ties between records, broken by the records


def _signed_value(r: tuple[int, int]) -> int:
    return r[1] - 2  # a sum can return to zero


REDUCES: dict[str, tuple[Callable[[linq.Collection], linq.Collection], Callable[[ref.Multiset], ref.Multiset]]] = {
    "count": (lambda c: c.count(first), lambda c: ref.count(c, first)),
    "sum": (lambda c: c.sum(first, _signed_value), lambda c: ref.sum_(c, first, _signed_value)),
    "min": (lambda c: c.min(first, _value), lambda c: ref.min_(c, first, _value)),
    "max": (lambda c: c.max(first, _value), lambda c: ref.max_(c, first, _value)),
    "distinct": (lambda c: c.distinct(), ref.distinct),
    "group_by": (lambda c: c.group_by(first, _grouped), lambda c: ref.group_by(c, first, _grouped)),
}


@pytest.mark.parametrize("depth", [1, 2], ids=["loop", "nested"])
@pytest.mark.parametrize("op", sorted(REDUCES))
@EXAMPLES
@given(data=st.data())
def test_reduce_at_partially_ordered_times(op: str, depth: int, data: st.DataObject) -> None:
    query, reference = REDUCES[op]
    updates = data.draw(timed_updates(pairs, depth), label="updates")
    check_at_times(query, reference, [updates], depth, **_running(data))


# Joins, and joins feeding reduces ------------------------------------------------------------------


def _sel(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0], x[1] + y[1])  # several pairs give one record


def _key2(r: tuple[int, int]) -> int:
    return r[1] % 4


def _cogrouped(k: Any, left: list[Any], right: list[Any]) -> list[Any]:
    return [(k, len(left), tuple(right))]


JOINS: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], bool]] = {
    # name: (query, reference, signed inputs)
    "join": (
        lambda a, b: a.join(b, first, _key2, _sel),
        lambda a, b: ref.join(a, b, first, _key2, _sel),
        True,
    ),
    "join_then_count": (
        lambda a, b: a.join(b, first, _key2, _sel).count(first),
        lambda a, b: ref.count(ref.join(a, b, first, _key2, _sel), first),
        False,
    ),
    "min_then_join": (
        lambda a, b: a.min(first, second).join(b.distinct(), first, first, _sel),
        lambda a, b: ref.join(ref.min_(a, first, second), ref.distinct(b), first, first, _sel),
        False,
    ),
    "co_group_by": (
        lambda a, b: a.co_group_by(b, first, _key2, _cogrouped),
        lambda a, b: ref.co_group_by(a, b, first, _key2, _cogrouped),
        False,
    ),
}


@pytest.mark.parametrize("depth", [1, 2], ids=["loop", "nested"])
@pytest.mark.parametrize("op", sorted(JOINS))
@EXAMPLES
@given(data=st.data())
def test_join_at_partially_ordered_times(op: str, depth: int, data: st.DataObject) -> None:
    query, reference, signed = JOINS[op]
    a = data.draw(timed_updates(pairs, depth, signed), label="a")
    b = data.draw(timed_updates(pairs, depth, signed), label="b")
    check_at_times(query, reference, [a, b], depth, **_running(data))


def test_the_check_sees_an_answer_that_is_right_only_after_the_last_iteration() -> None:
    """The grid check can fail where the root output cannot: the same differences, each moved
    to the loop's last iteration, give the right answer after every epoch and a wrong one at
    ``(0, 0)``."""
    updates: list[Sent] = [(0, ((0, 1), (0, 0), 1)), (1, ((0, 1), (1, 1), -1))]

    def at_the_last_iteration(c: linq.Collection) -> linq.Collection:
        stream = c.distinct().to_stream().map("late", lambda x: (x[0], (x[1][0], SPAN - 1), x[2]))
        return linq.Collection.from_stream(stream)

    check_at_times(lambda c: c.distinct(), ref.distinct, [updates], depth=1, workers=1, lag=0, close=False)
    with pytest.raises(AssertionError, match=r"at \(0, 0\): missing \{\(0, 1\): 1\}"):
        check_at_times(at_the_last_iteration, ref.distinct, [updates], depth=1, workers=1, lag=0, close=False)


# Loops, checked at every iteration ------------------------------------------------------------------
LOOP_EPOCHS = 5
nodes = st.integers(0, 5)
edges = st.tuples(nodes, nodes)
Build = Callable[[timely.Scope], tuple[list[linq.CollectionInput], linq.CollectionOutput]]


def _iterations(seen: Sequence[Update], w: int, coordinate: int) -> range:
    """0 .. one past the last iteration (``coordinate`` of the time) seen up to epoch ``w``."""
    return range(max((t[coordinate] for _, t, _ in seen if t[0] <= w), default=0) + 2)


def _assert_at(seen: Sequence[Update], q: Time, expected: ref.Multiset) -> None:
    got = at(seen, q)
    assert got == expected, f"at {q}: missing {ref.difference(expected, got)}, extra {ref.difference(got, expected)}"


def run_loop(
    build: Build,
    epochs: Sequence[tuple[list[ref.Change], ...]],
    on_passed: Callable[[int, list[ref.Multiset]], None],
    answer: Callable[..., ref.Multiset],
    running: dict[str, Any],
) -> None:
    """Feed ``epochs`` as ``running`` says (workers, epochs in flight, inputs closed or not);
    as each epoch ``w`` passes, call ``on_passed(w, inputs accumulated to w)`` and check that
    the root output reported the change of ``answer(*inputs)``."""
    states: list[list[ref.Multiset]] = []
    for changes in epochs:
        before = states[-1] if states else [{} for _ in changes]
        states.append([ref.apply(s, c) for s, c in zip(before, changes)])

    with timely.execute(build, workers=running["workers"], timeout=TIMEOUT) as (comp, (inputs, out)):

        def passed(w: int) -> None:
            on_passed(w, states[w])
            assert_epoch(out, w, answer(*states[w]), answer(*states[w - 1]) if w else {})

        close = [len(epochs) - 1] * len(inputs) if running["close"] else None
        drive(comp, inputs, epochs, out.probe, passed, lag=running["lag"], close_after=close)


def _hop(x: linq.Collection, e: linq.Collection) -> linq.Collection:
    """One step of breadth-first search: each node's least hop count, its own or one more
    than an in-neighbour's. A node's count settles at the iteration of its distance."""
    return x.join(e, first, first, lambda n, f: (f[1], n[1] + 1)).concat(x).min(first, second)


def _ref_hop(x: ref.Multiset, e: ref.Multiset) -> ref.Multiset:
    return ref.min_(ref.concat(ref.join(x, e, first, first, lambda n, f: (f[1], n[1] + 1)), x), first, second)


def _bfs(roots: ref.Multiset, e: ref.Multiset, hops: int | None = None) -> ref.Multiset:
    start = ref.select(ref.distinct(roots), lambda n: (n, 0))
    step = lambda x: _ref_hop(x, e)  # noqa: E731
    return ref.fixed_point(start, step) if hops is None else ref.iterate(start, step, hops)


@EXAMPLES
@given(
    roots=ref.nonnegative_epochs(nodes, max_epochs=LOOP_EPOCHS, max_changes=3),
    e=ref.nonnegative_epochs(edges, max_epochs=LOOP_EPOCHS),
    data=st.data(),
)
def test_fixed_point_at_every_iteration(roots: Epochs, e: Epochs, data: st.DataObject) -> None:
    """Breadth-first search with sources and edges changing, several epochs in flight: the
    loop variable at ``(epoch, i)`` is the search after ``i`` hops over that epoch's graph."""
    seen: list[Update] = []

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        r, g = linq.new_input(scope, "roots"), linq.new_input(scope, "edges")
        start = r.collection.distinct().select(lambda n: (n, 0))
        result = start.fixed_point(lambda x: _hop(_inspected(seen)(x), g.collection.enter(x.scope)))
        return [r, g], linq.CollectionOutput(result)

    def on_passed(w: int, inputs: list[ref.Multiset]) -> None:
        for i in _iterations(seen, w, 1):
            roots, edges = inputs
            _assert_at(seen, (w, i), _bfs(roots, edges, hops=i))

    run_loop(build, together(roots, e), on_passed, _bfs, _running(data))


def _outer(s: linq.Collection, marks: linq.Collection, inner_seen: list[Update]) -> linq.Collection:
    """The closure of ``s`` (an inner fixed point, its variable inspected), plus the reverse
    of each of its pairs whose source is marked."""
    closed = s.fixed_point(lambda y: _step(_inspected(inner_seen)(y), s.enter(y.scope)))
    reverse = closed.join(marks, first, lambda m: m, lambda p, m: (p[1], p[0]))
    return closed.concat(reverse).distinct()


def _outer_fixed_point(c: ref.Multiset, marks: ref.Multiset, iterations: int | None = None) -> ref.Multiset:
    step = lambda s: _ref_outer(s, marks)  # noqa: E731
    return ref.fixed_point(c, step) if iterations is None else ref.iterate(c, step, iterations)


@EXAMPLES
@given(
    e=ref.nonnegative_epochs(edges, max_epochs=LOOP_EPOCHS, max_changes=6),
    m=ref.nonnegative_epochs(nodes, max_epochs=LOOP_EPOCHS, max_changes=3),
    data=st.data(),
)
def test_nested_fixed_point_at_every_iteration(e: Epochs, m: Epochs, data: st.DataObject) -> None:
    """A fixed point around a fixed point, several epochs in flight: the outer variable at
    ``(epoch, i)`` is the outer body applied ``i`` times, and the inner variable at ``(epoch,
    i, j)`` is the inner body applied ``j`` times to the outer variable at ``(epoch, i)``."""
    outer_seen: list[Update] = []
    inner_seen: list[Update] = []

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        c, marks = linq.new_input(scope, "edges"), linq.new_input(scope, "marks")
        result = c.collection.fixed_point(
            lambda s: _outer(_inspected(outer_seen)(s), marks.collection.enter(s.scope), inner_seen)
        )
        return [c, marks], linq.CollectionOutput(result)

    def on_passed(w: int, inputs: list[ref.Multiset]) -> None:
        c, marks = inputs
        for i in _iterations(outer_seen, w, 1):
            s_i = _outer_fixed_point(c, marks, i)
            _assert_at(outer_seen, (w, i), s_i)
            for j in _iterations(inner_seen, w, 2):
                _assert_at(inner_seen, (w, i, j), ref.iterate(s_i, functools.partial(_ref_step, e=s_i), j))

    run_loop(build, together(e, m), on_passed, _outer_fixed_point, _running(data))
