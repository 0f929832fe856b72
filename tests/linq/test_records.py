"""linq over records that are not integers: strings, tuples, bytes, None, floats, mixed.

Whatever linq does inside (the columnar rebuild encodes such records as integers), what
comes out must be the records that went in, of the same types, and the answers must not
depend on how many workers or processes hold them: keys are routed by a hash every process
computes alike, and a record fed in one process must meet its equal fed in another.

tests/support/linq_records_program.py holds the workload: several queries (counts of strings, a
join on tuple keys whose two sides are fed by different processes, distinct, counts and a
self-join of mixed-type records, components of a graph with tuple node ids). It runs in one
process with one and three workers and in two and three real processes, several epochs in
flight; every epoch's changes must equal the reference's, compared by ``repr`` so that a
record that comes back as an equal value of another type (``1.0`` for ``1``, a list for a
tuple, a numpy scalar) is a difference.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_harness import check, together
from tests.support.linq_records_program import EPOCHS, NONE_KEYS, expected, none_keys, records
from tests.support.modes import Mode
from timely_libs import linq

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def merged(results: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, int]]]:
    """Per output and epoch, each record's (``repr``'s) change summed over the processes."""
    out: dict[str, dict[int, Counter[str]]] = {}
    for result in results:
        for name, part in result.items():
            for epoch, changes in part["changes"].items():
                for r, d in changes:
                    out.setdefault(name, {}).setdefault(int(epoch), Counter())[r] += d
    return {n: {e: {r: d for r, d in c.items() if d} for e, c in per.items()} for n, per in out.items()}


def assert_matches_reference(results: list[dict[str, Any]]) -> None:
    got = merged(results)
    for name, answers in expected().items():
        for e in range(EPOCHS):
            want = {repr(r): d for r, d in ref.difference(answers[e], answers[e - 1] if e else {}).items()}
            have = got.get(name, {}).get(e, {})
            assert have == want, f"{name}, epoch {e}: missing {set(want) - set(have)}, extra {set(have) - set(want)}"
        final: Counter[str] = Counter()
        for result in results:
            final.update({r: c for r, c in result[name]["final"]})
        assert dict(final) == {repr(r): c for r, c in answers[-1].items()}, f"{name}: final contents"


def test_every_mode_matches_the_reference(mode: Mode) -> None:
    results = mode.run(records, lag=2, timeout=90)
    if mode.processes > 1:
        assert all(any(part["final"] for part in r.values()) for r in results), "every process should hold some"
    assert_matches_reference(results)


def test_the_workload_changes_every_output_and_the_comparison_sees_types() -> None:
    """Every output changes in most epochs; and a record that comes back equal but of another
    type (``7.0`` for ``7``) fails the comparison."""
    for name, answers in expected().items():
        changed = sum(answers[e] != answers[e - 1] for e in range(1, EPOCHS))
        assert answers[0] and changed >= EPOCHS // 2, name
    (result,) = Mode("one").run(records, timeout=TIMEOUT)
    assert_matches_reference([result])
    counts = result["word_counts"]["changes"]["0"]
    record, diff = counts[0]
    as_float = repr(tuple(float(x) if isinstance(x, int) else x for x in ast.literal_eval(record)))
    counts[0] = [as_float, diff]
    assert ast.literal_eval(as_float) == ast.literal_eval(record)
    with pytest.raises(AssertionError, match="word_counts, epoch 0"):
        assert_matches_reference([result])


# Operators over mixed records, with Hypothesis ------------------------------------------------------
atoms = st.one_of(
    st.integers(-3, 3),
    st.text("aé", max_size=2),
    st.binary(max_size=1),
    st.none(),
    st.integers(-3, 3).map(lambda i: i + 0.5),  # never equal to an int
)
mixed = st.one_of(atoms, st.tuples(atoms, atoms), st.tuples(st.text("ab", max_size=1), st.tuples(atoms, atoms)))
keyed = st.tuples(atoms, mixed)
WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])


def _key(r: Any) -> Any:
    return r[0]


def _value(r: Any) -> str:
    return repr(r[1])  # orderable whatever the types


def _pair(x: Any, y: Any) -> Any:
    return (x[1], y[1])


MIXED_QUERIES: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], list[Any]]] = {
    # name: (query, reference, one strategy per input)
    "distinct_and_count": (
        lambda c: c.distinct().concat(c.count().select(lambda kn: ("count", kn))),
        lambda c: ref.concat(ref.distinct(c), ref.select(ref.count(c), lambda kn: ("count", kn))),
        [ref.nonnegative_epochs(mixed)],
    ),
    "join_on_mixed_keys": (
        lambda x, y: x.join(y, _key, _key, _pair),
        lambda x, y: ref.join(x, y, _key, _key, _pair),
        [ref.signed_epochs(keyed), ref.signed_epochs(keyed)],
    ),
    "min_per_mixed_key": (
        lambda c: c.min(_key, _value),
        lambda c: ref.min_(c, _key, _value),
        [ref.nonnegative_epochs(keyed)],
    ),
}


@WORKERS
@pytest.mark.parametrize("op", sorted(MIXED_QUERIES))
@FAST
@given(data=st.data())
def test_operators_over_mixed_records(workers: int, op: str, data: st.DataObject) -> None:
    query, reference, strategies = MIXED_QUERIES[op]
    check(query, reference, together(*(data.draw(s) for s in strategies)), workers)


# Equal records of different types ---------------------------------------------------------------------
EQUAL_BUT_DIFFERENT = [r for i in range(12) for r in ((i, "k"), (float(i), "k"), (i, 2), (i + 0.0, 2.0))] + [
    1,
    1.0,
    True,
    (True, "k"),
    (False, 2),
    ((1, True), "nested"),
    ((1, 1), "nested"),
    frozenset({1}),
    frozenset({True}),
]
"""Python counts ``(1, "k")``, ``(1.0, "k")`` and ``(True, "k")`` as one record (equal, same
hash); linq, as the wire codec, keeps them apart, each with its own type."""


RANK = {"(True, 'k')": 0, "1.0": 1, "(4.0, 'k')": 2}
"""A min's order over three records, by their exact form."""


def exactly(changes: list[tuple[Any, int]]) -> Counter[str]:
    """Changes compared by ``repr``, which tells ``1``, ``1.0`` and ``True`` apart at every level."""
    out: Counter[str] = Counter()
    for record, diff in changes:
        out[repr(record)] += diff
    return +out


@pytest.mark.parametrize("workers", [1, 3])
def test_records_keep_their_exact_types(workers: int) -> None:
    """Through arrangements (distinct, a count by a key, a join) every record comes out exactly
    as it went in: ``True`` stays ``True``, ``1.0`` stays ``1.0``, also inside tuples and sets;
    equal values of different types are different records and different keys."""

    def key(r: Any) -> Any:
        return r[0] if type(r) is tuple else r

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, list[linq.CollectionOutput]]:
        inp = linq.new_input(scope, "records")
        c = inp.collection
        queries = [
            c.distinct(),
            c.count(key),
            c.join(c, key, key, lambda a, b: (a, b)).where(lambda p: type(key(p[0])) is not type(key(p[1]))),
            c.where(lambda r: repr(r) in RANK).min(lambda r: 0, lambda r: RANK[repr(r)]),
        ]
        return inp, [linq.CollectionOutput(q) for q in queries]

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, outs)):
        inp.insert_all(EQUAL_BUT_DIFFERENT)
        inp.advance_to(1)
        inp.remove_all([1.0, (True, "k")])
        inp.advance_to(2)
        for out in outs:
            comp.wait_passed(out.probe, 1, timeout=TIMEOUT)
    distinct, counted, joined, least = outs
    assert exactly(distinct.changes[0]) == exactly([(r, 1) for r in EQUAL_BUT_DIFFERENT])
    assert exactly(distinct.changes[1]) == exactly([(1.0, -1), ((True, "k"), -1)])
    keys = Counter(repr(key(r)) for r in EQUAL_BUT_DIFFERENT)
    assert exactly(counted.changes[0]) == Counter(f"({k}, {n})" for k, n in keys.items())
    assert joined.changes == {}, "keys of different types met in a join"
    assert exactly(least.changes[0]) == exactly([((True, "k"), 1)])
    assert exactly(least.changes[1]) == exactly([((True, "k"), -1), ((4.0, "k"), 1)])


def test_a_python_reducer_refuses_a_group_of_equal_records_of_different_types() -> None:
    """``group_by`` sees a key's group as ``{record: count}``, which cannot hold both ``1`` and
    ``1.0``: a clear error names them, rather than a count silently lost."""

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "records")
        return inp, linq.CollectionOutput(inp.collection.group_by(lambda r: 0, lambda k, rs: [len(rs)], name="sizes"))

    with pytest.raises(timely.VertexError, match=r"sizes: key 0 has records 1 and 1\.0, equal in Python"):
        with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, out)):
            inp.insert_all([1, 1.0])
            inp.advance_to(1)
            comp.wait_passed(out.probe, 0, timeout=TIMEOUT)


def test_records_holding_none_meet_across_processes(mode: Mode) -> None:
    # in real processes hash(None) comes from None's address, a multiple of 16 in every process,
    # so with two workers even an address-based route would happen to agree: the tcp mode has six
    # (stable_hash(None) is a constant)
    results = mode.run(none_keys, lag=1, timeout=60)
    assert sum(r["after_insert"] for r in results) == len(NONE_KEYS)
    assert [r["after_remove"] for r in results] == [[]] * mode.processes


@FAST
@given(
    st.integers(0, 40).flatmap(
        lambda n: st.tuples(
            st.lists(
                st.one_of(
                    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n),
                    st.integers(-(2**63), 2**63 - 1).map(lambda v: [v] * n),  # one value: sent as it
                    st.lists(st.floats(allow_nan=False), min_size=n, max_size=n),
                    st.lists(st.text(max_size=3), min_size=n, max_size=n),
                ),
                min_size=1,
                max_size=3,
            ),
            st.one_of(st.lists(st.integers(-5, 5), min_size=n, max_size=n), st.integers(-3, 3).map(lambda d: [d] * n)),
        )
    )
)
def test_blocks_cross_processes_as_they_are(columns_and_diffs: tuple[list[list[Any]], list[int]]) -> None:
    """A block through the codec a data frame uses comes back with the same columns (values
    and dtypes) and diffs; a column of one int travels as that int (a few bytes, not 8 a row)."""
    from timely_libs.linq._columns import Block, column_of

    columns, diffs = columns_and_diffs
    block = Block([column_of(c) for c in columns], len(columns), np.asarray(diffs, dtype=np.int64))
    codec = timely.Codec()
    frame = codec.encode_records([block])
    (back,) = codec.decode_records(frame)
    assert back.arity == block.arity and len(back.cols) == len(block.cols)
    for a, b in zip(back.cols, block.cols):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert back.diffs.dtype == np.int64 and back.diffs.tolist() == diffs


def test_a_column_of_one_int_travels_as_that_int() -> None:
    """Proposals of a label flooding the graph: (node, label 0) with diff 1, 10,000 rows. The
    labels and the diffs take a few bytes, the nodes 8 bytes each."""
    from timely_libs.linq._columns import Block

    n = 10_000
    nodes = np.arange(n, dtype=np.int64)
    codec = timely.Codec()
    flood = codec.encode_records([Block([nodes, np.zeros(n, np.int64)], 2, np.ones(n, np.int64))])
    mixed = codec.encode_records([Block([nodes, nodes % 7], 2, np.where(nodes % 2, 1, -1))])
    assert 8 * n < len(flood) < 8 * n + 100
    assert 24 * n < len(mixed) < 24 * n + 100
    (back,) = codec.decode_records(flood)
    assert back.cols[1].tolist() == [0] * n and back.diffs.tolist() == [1] * n
