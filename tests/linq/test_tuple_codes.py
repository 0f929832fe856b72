"""Tuples coded column-wise (`codes_of_tuples`, `codes_of_ints`) get exactly the codes, routes
and values that coding each record on its own (`code_of`, `stable_hash`) gives them: pairs of
small ints packed, everything else interned once, whether the value is new, already
interned, repeated within the batch or given an id a sweep freed."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_libs._hash import stable_hash
from timely_libs.linq._columns import Block, _codes
from timely_libs.linq._columns._codes import (
    code_of,
    codes_of_ints,
    codes_of_tuples,
    codes_of_values,
    route_of,
    values_of,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUTE = (1 << 62) - 1

ints = st.one_of(
    st.integers(0, 3),  # small: packed pairs, and repeats within a batch
    st.integers(-(2**63), 2**63 - 1),  # anywhere in int64: interned outside the int range
    st.sampled_from([2**30 - 1, 2**30, -1, 2**61 - 1, 2**61, -(2**61), -(2**61) - 1]),
)
texts = st.one_of(st.none(), st.text(max_size=3), st.binary(max_size=2))


def column(values: list[Any]) -> np.ndarray:
    if all(type(v) is int for v in values):
        return np.asarray(values, dtype=np.int64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def check(rows: list[tuple[Any, ...]]) -> None:
    cols = [column(list(c)) for c in zip(*rows, strict=True)]
    got = codes_of_tuples(cols)
    assert got is not None
    want = np.asarray([code_of(r) for r in rows], dtype=np.int64)
    assert got.tolist() == want.tolist()
    assert values_of(got) == rows
    assert [type(x) for r in values_of(got) for x in r] == [type(x) for r in rows for x in r]
    assert route_of(got).tolist() == [stable_hash(r) & ROUTE for r in rows]


@FAST
@given(st.integers(1, 4).flatmap(lambda k: st.lists(st.tuples(*[ints] * k), min_size=1, max_size=30)))
def test_int_tuples_as_each_record_alone(rows: list[tuple[int, ...]]) -> None:
    check(rows)
    check(rows[::-1])  # now every value is interned already


@FAST
@given(st.lists(st.tuples(ints, texts, ints), min_size=1, max_size=30), st.lists(st.tuples(texts, texts), max_size=10))
def test_tuples_of_ints_and_strings_as_each_record_alone(rows: list[Any], pairs: list[Any]) -> None:
    check(rows + rows[:3])
    if pairs:
        check(pairs)


def test_big_ints_as_each_value_alone() -> None:
    values = [5, 2**62, -(2**62), 2**62, 7, -(2**63)]
    got = codes_of_ints(np.asarray(values, dtype=np.int64))
    assert got.tolist() == [code_of(v) for v in values]
    assert codes_of_values(values).tolist() == got.tolist()  # a list of them, as an object column gives
    beyond = [*values, 2**70]
    assert codes_of_values(beyond).tolist() == [code_of(v) for v in beyond]
    assert values_of(codes_of_values(beyond)) == beyond
    assert values_of(got) == values
    assert route_of(got).tolist() == [stable_hash(v) & ROUTE for v in values]


def test_ids_a_sweep_freed_are_reused_for_the_right_values() -> None:
    gc.collect()
    _codes.release_unused(force=True)
    old = [(i, 2**40 + i) for i in range(100)]
    codes_of_tuples([column([a for a, _ in old]), column([b for _, b in old])])
    freed = _codes.release_unused(force=True)  # nothing holds them
    assert freed >= 100
    new = [(i, 2**41 + i) for i in range(150)]
    got = codes_of_tuples([column([a for a, _ in new]), column([b for _, b in new])])
    assert got is not None and len(set(got.tolist())) == 150
    assert values_of(got) == new
    assert got.tolist() == [code_of(r) for r in new]
    assert route_of(got).tolist() == [stable_hash(r) & ROUTE for r in new]


def test_columns_it_does_not_take() -> None:
    assert codes_of_tuples([np.asarray([1.5]), np.asarray([1], dtype=np.int64)]) is None  # floats: exact keys
    mixed = np.empty(2, dtype=object)
    mixed[:] = [1, "a"]  # an int among the strings could make a packed pair
    assert codes_of_tuples([mixed, np.asarray([1, 2], dtype=np.int64)]) is None
    # and a block of them still gets each record's own code, by the slower path
    block = Block.of_records([(1.5, 2), (1, "a"), (True, 3)])
    assert block.record_codes().tolist() == [code_of(r) for r in block.records()]


@FAST
@given(st.lists(st.one_of(ints, texts, st.tuples(ints, ints), st.tuples(texts, ints, st.booleans())), max_size=40))
def test_values_of_codes_of_every_kind(values: list[Any]) -> None:
    codes = np.asarray([code_of(v) for v in values], dtype=np.int64)
    got = values_of(codes)
    assert got == values
    assert [repr(v) for v in got] == [repr(v) for v in values]  # types too: True stays True, 1 stays 1


class _Holder:
    codes: np.ndarray | None = None


def test_a_sweep_that_finds_most_values_held_keeps_them_and_frees_the_rest() -> None:
    gc.collect()
    _codes.release_unused(force=True)
    holder = _Holder()
    _codes.hold_codes(holder)
    rows = [(i, 2**42 + i) for i in range(200)]
    codes = codes_of_tuples([column([a for a, _ in rows]), column([b for _, b in rows])])
    assert codes is not None
    holder.codes = codes[:150]  # three quarters still held: the dead are deleted in place
    assert _codes.release_unused(force=True) == 50
    again = codes_of_tuples([column([a for a, _ in rows]), column([b for _, b in rows])])
    assert again is not None
    assert again[:150].tolist() == codes[:150].tolist()  # the held keep their codes
    assert values_of(again) == rows
    assert route_of(again).tolist() == [stable_hash(r) & ROUTE for r in rows]
    assert len(set(again.tolist())) == 200
