"""Misuse of `timely_libs.linq` gets a clear error, not a hang or a silently wrong answer.

A user function that raises, or a key that cannot be hashed, fails the computation with a
`timely.VertexError` whose message carries linq's `OperatorError` text: the operator, the
record (or key) and what went wrong; the `OperatorError` is the ``__cause__``. Collections
of the wrong scope are refused while the dataflow is built (`timely.ScopeError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import linq

WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])

first = itemgetter(0)

Changes = list[tuple[Any, int]]


def failure(
    query: Callable[..., linq.Collection], epochs: Sequence[Sequence[Changes]], workers: int
) -> timely.TimelyError:
    """Run ``query`` on the epochs (one list of changes per input each) and return the error
    the computation fails with; fail the test if it does not."""
    n = len(epochs[0])

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        inputs = [linq.new_input(scope, f"in{i}") for i in range(n)]
        return inputs, linq.CollectionOutput(query(*(i.collection for i in inputs)))

    with pytest.raises(timely.TimelyError) as info:
        with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
            for epoch, changes in enumerate(epochs):
                for inp, batch in zip(inputs, changes):
                    inp.update(batch)
                    inp.advance_to(epoch + 1)
                comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
    assert not isinstance(info.value, timely.StalledError), f"the computation hung instead of failing: {info.value}"
    return info.value


def operator_error(exc: BaseException) -> str:
    """The computation failed because an operator raised `linq.OperatorError`: its text, which
    the VertexError's message must repeat."""
    assert isinstance(exc, timely.VertexError), f"{type(exc).__name__}: {exc}"
    assert isinstance(exc.__cause__, linq.OperatorError), f"cause: {exc.__cause__!r}"
    text = str(exc.__cause__)
    assert text in str(exc)
    return text


def unlucky(x: Any) -> Any:
    if x == 13:
        raise ValueError("unlucky number")
    return x


BAD = ("k", 13)
"""The one record (``BAD[1] == 13``) the user functions below fail on; the others are fine."""
RECORDS = [(("k", 1), 1), (BAD, 1), (("j", 2), 1)]


# A user function raises -------------------------------------------------------------------------------

RECORD_FUNCTIONS: dict[str, tuple[Callable[[linq.Collection], linq.Collection], str]] = {
    # name -> (query, what the message calls the function)
    "select": (lambda c: c.select(lambda r: unlucky(r[1]), name="my_op"), "selector"),
    "where": (lambda c: c.where(lambda r: unlucky(r[1]) > 0, name="my_op"), "predicate"),
    "select_many": (lambda c: c.select_many(lambda r: [unlucky(r[1])], name="my_op"), "selector"),
    "inspect": (lambda c: c.inspect(lambda r, t, d: unlucky(r[1]), name="my_op"), "inspector"),
    "join_key1": (lambda c: c.join(c, lambda r: unlucky(r[1]), lambda r: r[1], lambda a, b: a, name="my_op"), "key"),
    "join_key2": (lambda c: c.join(c, lambda r: r[1], lambda r: unlucky(r[1]), lambda a, b: a, name="my_op"), "key"),
    "join_selector": (
        lambda c: c.join(c, lambda r: r, lambda r: r, lambda a, b: unlucky(a[1]), name="my_op"),
        "selector",
    ),
    "group_by_key": (lambda c: c.group_by(lambda r: unlucky(r[1]), lambda k, rs: [k], name="my_op"), "key"),
    "count_key": (lambda c: c.count(lambda r: unlucky(r[1]), name="my_op"), "key"),
    "co_group_by_key1": (
        lambda c: c.co_group_by(c, lambda r: unlucky(r[1]), lambda r: r[0], lambda k, a, b: [k], name="my_op"),
        "key",
    ),
    "co_group_by_key2": (
        lambda c: c.co_group_by(c, lambda r: r[0], lambda r: unlucky(r[1]), lambda k, a, b: [k], name="my_op"),
        "key",
    ),
    "prioritize": (
        lambda c: c.prioritize(lambda r: unlucky(r[1]), lambda x: x.select(lambda r: r), name="my_op"),
        "priority function",
    ),
}


def _record_function_cases() -> list[Any]:
    return [case for case in sorted(RECORD_FUNCTIONS)]


@WORKERS
@pytest.mark.parametrize("case", _record_function_cases())
def test_a_raising_function_names_the_operator_and_the_record(workers: int, case: str) -> None:
    query, what = RECORD_FUNCTIONS[case]
    exc = failure(query, [(RECORDS,)], workers)
    text = operator_error(exc)
    assert "my_op" in text or (isinstance(exc, timely.VertexError) and exc.stage.startswith("my_op")), str(exc)
    assert what in text, text
    assert "ValueError: unlucky number" in text, text
    assert repr(BAD) in text, text


@WORKERS
@pytest.mark.parametrize("side", [0, 1])
def test_a_raising_co_group_by_key_on_records_that_are_not_pairs(workers: int, side: int) -> None:
    keys: list[Callable[[Any], Any]] = [abs, abs]
    keys[side] = unlucky
    query = lambda c: c.co_group_by(c, keys[0], keys[1], lambda k, a, b: [k], name="my_op")  # noqa: E731
    text = operator_error(failure(query, [([(1, 1), (13, 1), (2, 1)],)], workers))
    assert text.startswith("my_op: the key function raised ValueError: unlucky number on record 13"), text


@WORKERS
def test_a_raising_join_selector_names_both_records(workers: int) -> None:
    """``("k", 13)`` is in the trace of the second input when ``("k", 1)`` arrives at the first."""
    query = lambda a, b: a.join(b, first, first, lambda x, y: unlucky(y[1]), name="my_op")  # noqa: E731
    text = operator_error(failure(query, [([], [(BAD, 1)]), ([(("k", 1), 1)], [])], workers))
    assert repr(BAD) in text and repr(("k", 1)) in text, text


REDUCERS: dict[str, Callable[[linq.Collection], linq.Collection]] = {
    "group_by": lambda c: c.group_by(lambda r: r[0], lambda k, rs: [unlucky(r[1]) for r in rs], name="my_op"),
    "co_group_by": lambda c: c.co_group_by(
        c, lambda r: r[0], lambda r: r[0], lambda k, a, b: [unlucky(r[1]) for r in b], name="my_op"
    ),
    "sum_value": lambda c: c.sum(lambda r: r[0], lambda r: unlucky(r[1]), name="my_op"),
    "min_value": lambda c: c.min(lambda r: r[0], lambda r: unlucky(r[1]), name="my_op"),
    "max_value": lambda c: c.max(lambda r: r[0], lambda r: unlucky(r[1]), name="my_op"),
}


@WORKERS
@pytest.mark.parametrize("case", sorted(REDUCERS))
def test_a_raising_reducer_names_the_operator_and_the_key(workers: int, case: str) -> None:
    records = [*RECORDS, (("k", 5), 1)]  # two records for key "k": min / max must compare values
    text = operator_error(failure(REDUCERS[case], [(records,)], workers))
    assert text.startswith("my_op"), text
    assert "reducer raised ValueError: unlucky number" in text, text
    assert repr("k") in text, text
    assert repr(BAD) in text, text


@WORKERS
def test_a_raising_function_inside_a_loop_names_the_stage_in_its_loop(workers: int) -> None:
    def query(c: linq.Collection) -> linq.Collection:
        return c.fixed_point(lambda x: x.select(lambda r: (r[0], unlucky(r[1] + 1)), name="step"), name="loop")

    exc = failure(query, [([(("k", 11), 1)],)], workers)  # fails at the second iteration, on ("k", 12)
    text = operator_error(exc)
    assert "step" in text and repr(("k", 12)) in text, text
    assert isinstance(exc, timely.VertexError)
    assert exc.stage.startswith("loop"), exc.stage
    assert exc.time == (0, 1), exc.time


@WORKERS
def test_a_raising_function_in_a_later_epoch(workers: int) -> None:
    """Fine for the first epoch's records; the error comes with the epoch that has the bad record."""
    exc = failure(
        lambda c: c.group_by(lambda r: unlucky(r[1]), lambda k, rs: [k], name="my_op"),
        [
            ([(("k", 1), 1)],),
            ([(BAD, 1)],),
        ],
        workers,
    )
    text = operator_error(exc)
    assert repr(BAD) in text, text
    assert isinstance(exc, timely.VertexError)
    assert exc.time == (1,), exc.time


UNUSABLE_ANSWERS: dict[str, Callable[[linq.Collection], linq.Collection]] = {
    # what the tests are about: reducers whose answer is unusable (mypy sees it too)
    "group_by_returns_none": lambda c: c.group_by(lambda r: r % 2, lambda k, rs: None, name="my_op"),  # type: ignore[arg-type,return-value]
    "co_group_by_returns_none": lambda c: c.co_group_by(c, abs, abs, lambda k, a, b: None, name="my_op"),  # type: ignore[arg-type,return-value]
    "group_by_returns_a_dict": lambda c: c.group_by(lambda r: r % 2, lambda k, rs: {k: "many"}, name="my_op"),
}


@WORKERS
@pytest.mark.parametrize("case", sorted(UNUSABLE_ANSWERS))
def test_a_reducer_answer_that_is_not_an_iterable_of_records_is_an_error(workers: int, case: str) -> None:
    text = operator_error(failure(UNUSABLE_ANSWERS[case], [([(1, 1), (2, 1)],)], workers))
    assert text.startswith("my_op") and "reducer" in text, text


# A key that cannot be hashed ------------------------------------------------------------------------------

UNHASHABLE: dict[str, Callable[[linq.Collection], linq.Collection]] = {
    "group_by_key": lambda c: c.group_by(lambda r: [r], lambda k, rs: [1], name="my_op"),
    "count_key": lambda c: c.count(lambda r: [r], name="my_op"),
    "min_key": lambda c: c.min(lambda r: [r], lambda r: r, name="my_op"),
    "join_key": lambda c: c.join(c, lambda r: [r], lambda r: r, lambda a, b: a, name="my_op"),
    "distinct_record": lambda c: c.select(lambda r: [r]).distinct(name="my_op"),
    "union_record": lambda c: c.select(lambda r: [r]).union(c, name="my_op"),
    "consolidate_record": lambda c: c.select(lambda r: [r]).consolidate(name="my_op"),
}


@WORKERS
@pytest.mark.parametrize("case", sorted(UNHASHABLE))
def test_an_unhashable_key_is_named(workers: int, case: str) -> None:
    text = operator_error(failure(UNHASHABLE[case], [([(7, 1)],)], workers))
    assert text.startswith("my_op"), text
    assert "cannot be hashed" in text, text
    assert "[7]" in text, text


# A record removed more often than it was added -------------------------------------------------------------

REDUCES: dict[str, Callable[[linq.Collection], linq.Collection]] = {
    "distinct": lambda c: c.distinct(name="my_op"),
    "count": lambda c: c.count(name="my_op"),
    "sum": lambda c: c.sum(lambda r: r, lambda r: r, name="my_op"),
    "min": lambda c: c.min(lambda r: r % 2, lambda r: r, name="my_op"),
    "group_by": lambda c: c.group_by(lambda r: r, lambda k, rs: rs, name="my_op"),
    "in_a_loop": lambda c: c.fixed_point(lambda x: x.distinct(name="my_op")),
}

TWO_INPUT_REDUCES: dict[str, Callable[[linq.Collection, linq.Collection], linq.Collection]] = {
    "union": lambda a, b: a.union(b, name="my_op"),
    "intersect": lambda a, b: a.intersect(b, name="my_op"),
    "except": lambda a, b: a.except_(b, name="my_op"),
    "co_group_by": lambda a, b: a.co_group_by(b, abs, abs, lambda k, x, y: [k], name="my_op"),
}

NEGATIVE = [(5, 1), (7, 1), (7, -2)]
"""Record 7 is removed twice but added once."""


@WORKERS
@pytest.mark.parametrize("case", sorted(REDUCES))
def test_a_negative_multiplicity_reaching_a_reduce_is_an_error(workers: int, case: str) -> None:
    text = operator_error(failure(REDUCES[case], [(NEGATIVE,)], workers))
    assert text.startswith("my_op"), text
    # a count keeps each key's total alone, no record (as differential dataflow's): it names the key
    named = "key 7 has multiplicity -1" if case == "count" else "record 7 has multiplicity -1"
    assert named in text, text
    assert "removed more often than it was added" in text, text


@WORKERS
@pytest.mark.parametrize("side", [0, 1])
@pytest.mark.parametrize("case", sorted(TWO_INPUT_REDUCES))
def test_a_negative_multiplicity_reaching_a_two_input_reduce_is_an_error(workers: int, case: str, side: int) -> None:
    inputs = ([(5, 1)], NEGATIVE) if side else (NEGATIVE, [(5, 1)])
    text = operator_error(failure(TWO_INPUT_REDUCES[case], [inputs], workers))
    assert text.startswith("my_op"), text
    assert "has multiplicity -1" in text, text
    assert "removed more often than it was added" in text, text


@WORKERS
def test_a_negative_multiplicity_in_a_two_input_reduce_names_the_users_record(workers: int) -> None:
    text = operator_error(failure(lambda a, b: a.union(b, name="my_op"), [([(5, 1)], NEGATIVE)], workers))
    assert "record 7 has multiplicity -1" in text, text


@WORKERS
def test_a_negative_multiplicity_in_a_later_epoch(workers: int) -> None:
    exc = failure(lambda c: c.distinct(name="my_op"), [([(7, 2)],), ([(7, -1)],), ([(7, -2)],)], workers)
    assert "multiplicity -1" in operator_error(exc)
    assert isinstance(exc, timely.VertexError)
    assert exc.time == (2,), exc.time


@WORKERS
def test_a_retraction_before_its_addition_in_one_epoch_is_fine(workers: int) -> None:
    """Only an epoch's sum counts: ``-1`` sent before ``+1`` is no error."""

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "in")
        return inp, linq.CollectionOutput(inp.collection.distinct())

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, out)):
        inp.remove(7)
        inp.insert(7, count=2)
        inp.insert(8)
        inp.advance_to(1)
        comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
        assert out.contents() == {7: 1, 8: 1}


# Collections of the wrong scope -------------------------------------------------------------------------------


def build_error(make: Callable[[linq.Collection, linq.Collection], Any]) -> BaseException:
    """The error ``timely.execute`` raises while building a dataflow with two inputs."""

    def build(scope: timely.Scope) -> Any:
        a, b = linq.new_input(scope, "a"), linq.new_input(scope, "b")
        return make(a.collection, b.collection)

    with pytest.raises(Exception) as info:
        with timely.execute(build, workers=1, timeout=TIMEOUT):
            pass
    return info.value


OUTER_IN_LOOP: dict[str, Callable[[linq.Collection, linq.Collection], Any]] = {
    "join": lambda a, b: a.fixed_point(lambda x: x.join(b, lambda r: r, lambda r: r, lambda p, q: p)),
    "join_other_side": lambda a, b: a.fixed_point(lambda x: b.join(x, lambda r: r, lambda r: r, lambda p, q: p)),
    "concat": lambda a, b: a.fixed_point(lambda x: x.concat(b)),
    "co_group_by": lambda a, b: a.fixed_point(lambda x: x.co_group_by(b, abs, abs, lambda k, p, q: p)),
    "except": lambda a, b: a.fixed_point(lambda x: x.except_(b)),
    "outer_loop_variable_in_inner_loop": lambda a, b: a.fixed_point(
        lambda x: x.fixed_point(lambda y: y.concat(x)).concat(x)
    ),
}


@pytest.mark.parametrize("case", sorted(OUTER_IN_LOOP))
def test_an_outer_collection_used_in_a_loop_without_enter(case: str) -> None:
    exc = build_error(OUTER_IN_LOOP[case])
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "enter" in str(exc), str(exc)


def test_the_loop_variable_used_outside_its_loop() -> None:
    leaked: list[linq.Collection] = []

    def make(a: linq.Collection, b: linq.Collection) -> Any:
        a.fixed_point(lambda x: leaked.append(x) or x)  # type: ignore[func-returns-value]
        return b.concat(leaked[0])

    exc = build_error(make)
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "enter" in str(exc), str(exc)


def test_a_loop_body_that_returns_an_outer_collection() -> None:
    exc = build_error(lambda a, b: a.fixed_point(lambda x: b, name="my_loop"))
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "my_loop" in str(exc) and "must return one of the loop" in str(exc), str(exc)


def test_a_loop_body_that_returns_a_collection_of_an_inner_loop() -> None:
    inner: list[linq.Collection] = []

    def body(x: linq.Collection) -> linq.Collection:
        x.fixed_point(lambda y: inner.append(y) or y, name="inner")  # type: ignore[func-returns-value]
        return inner[0]

    exc = build_error(lambda a, b: a.fixed_point(body, name="outer"))
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "outer.inner" in str(exc) and "must return one of the loop" in str(exc), str(exc)


def test_a_prioritize_body_that_returns_an_outer_collection() -> None:
    exc = build_error(lambda a, b: a.prioritize(lambda r: 0, lambda x: b, name="my_loop"))
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "must return one of the loop" in str(exc), str(exc)


def test_a_loop_body_that_returns_no_collection() -> None:
    exc = build_error(lambda a, b: a.fixed_point(lambda x: x.stream))  # type: ignore[arg-type,return-value]
    assert isinstance(exc, TypeError), repr(exc)
    assert "must return a Collection" in str(exc), str(exc)


def test_enter_skipping_a_loop_level() -> None:
    exc = build_error(
        lambda a, b: a.fixed_point(lambda x: x.fixed_point(lambda y: y.concat(b.enter(y.scope))).concat(x))
    )
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "not a loop directly inside" in str(exc), str(exc)


def test_leave_in_the_root_scope() -> None:
    exc = build_error(lambda a, b: a.leave())
    assert isinstance(exc, timely.ScopeError), repr(exc)
    assert "not inside a loop" in str(exc), str(exc)


def test_an_output_inside_a_loop() -> None:
    exc = build_error(lambda a, b: a.fixed_point(lambda x: (linq.CollectionOutput(x), x)[1]))
    assert isinstance(exc, ValueError), repr(exc)
    assert "leave its loops first" in str(exc), str(exc)


# Triples from a user's stream ------------------------------------------------------------------------------------


def via_stream(fn: Callable[[Any], Any]) -> Callable[[linq.Collection], linq.Collection]:
    return lambda c: linq.Collection.from_stream(c.to_stream().map("user", fn), name="my_op")


@WORKERS
def test_from_stream_refuses_a_time_earlier_than_its_batch(workers: int) -> None:
    """Epoch 0 is fine; in epoch 1 the user's vertex moves a triple back to epoch 0."""
    back = via_stream(lambda t: (t[0], (max(t[1][0] - 1, 0),), t[2]))
    exc = failure(back, [([(1, 1)],), ([(2, 1)],)], workers)
    assert isinstance(exc, timely.TimestampError), repr(exc)
    assert "my_op" in str(exc) and "earlier than" in str(exc), str(exc)


@WORKERS
def test_from_stream_refuses_a_time_earlier_than_its_batch_in_a_loop(workers: int) -> None:
    def body(x: linq.Collection) -> linq.Collection:
        back = x.select(lambda r: min(r + 1, 3)).to_stream().map("user", lambda t: (t[0], (t[1][0], 0), t[2]))
        return linq.Collection.from_stream(back, name="my_op")

    exc = failure(lambda c: c.fixed_point(body), [([(1, 1)],)], workers)
    assert isinstance(exc, timely.TimestampError), repr(exc)
    assert "my_op" in str(exc) and "earlier than" in str(exc), str(exc)


MALFORMED: dict[str, tuple[Callable[[Any], Any], str]] = {
    "not_a_triple": (lambda t: (t[0], t[2]), "expected (record, time, diff) triples"),
    "time_too_long": (lambda t: (t[0], (*t[1], 0), t[2]), "coordinate"),
    "diff_not_an_int": (lambda t: (t[0], t[1], 1.0), "int diff"),
}


@WORKERS
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_from_stream_refuses_malformed_triples(workers: int, case: str) -> None:
    fn, says = MALFORMED[case]
    text = operator_error(failure(via_stream(fn), [([(1, 1)],)], workers))
    assert text.startswith("my_op") and says in text, text


# Other misuse -----------------------------------------------------------------------------------------------------


@WORKERS
def test_a_negative_priority_is_refused(workers: int) -> None:
    text = operator_error(
        failure(lambda c: c.prioritize(lambda r: r - 5, lambda x: x, name="p"), [([(1, 1)],)], workers)
    )
    assert "priority -4 of record 1 is not a non-negative int" in text, text


def test_update_refuses_a_diff_that_is_not_an_int() -> None:
    def build(scope: timely.Scope) -> linq.CollectionInput:
        return linq.new_input(scope, "in")

    with timely.execute(build, workers=1, timeout=TIMEOUT) as (comp, inp):
        with pytest.raises(TypeError, match="must be an int"):
            inp.update([(1, 1.5)])  # type: ignore[list-item]


def test_a_collection_wraps_only_a_stream() -> None:
    with pytest.raises(TypeError, match="timely Stream"):
        linq.Collection([1, 2, 3])  # type: ignore[arg-type]
