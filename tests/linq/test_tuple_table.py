"""The tuple table (`_tuples.TupleTable`) against a plain dict of Python tuples: every tuple keeps
one id for as long as it is held, distinct tuples get distinct ids, ids come back as the very
tuples (Python ints), routes are `stable_hash`'s, through collisions, growth, sweeps and the
reuse of freed ids, in either tier (numpy rounds, compiled loop) and in both mixed on one
table."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_libs._hash import stable_hash
from timely_libs.linq._columns import _codes, _tuples
from timely_libs.linq._columns._codes import code_of, codes_of_tuples, codes_of_values, route_of, values_of
from timely_libs.linq._columns._tuples import EMPTY, TupleTable

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUTE = (1 << 62) - 1
M61 = 1 << 61


class Tier:
    """A stand-in for `_kernels.POLICY` that picks one tier of the table for every block."""

    def __init__(self, compiled: bool | None) -> None:
        self.compiled = compiled
        self.calls = 0

    def compiled_rows(self, n: int) -> bool:
        self.calls += 1
        return bool(self.compiled) if self.compiled is not None else self.calls % 2 == 0

    def fused_rows(self, n: int) -> bool:
        return False  # compiled_rows alone decides


TIERS = [pytest.param(False, id="numpy"), pytest.param(True, id="compiled"), pytest.param(None, id="alternating")]


class Oracle:
    """A table and the dict it must agree with."""

    def __init__(self, width: int) -> None:
        self.table = TupleTable(width)
        self.ids: dict[tuple[int, ...], int] = {}

    def code(self, rows: Sequence[tuple[int, ...]]) -> np.ndarray:
        cols = [np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True)]
        got = self.table.ids(cols)
        for row, i in zip(rows, got.tolist(), strict=True):
            assert self.ids.setdefault(row, i) == i, (row, i, self.ids[row])
        assert len(set(self.ids.values())) == len(self.ids) == self.table.held
        back = self.table.values(got)
        assert back == rows and all(type(x) is int for r in back for x in r)
        assert self.table.routes[got].tolist() == [stable_hash(r) & ROUTE for r in rows]
        check_index(self.table)
        return got

    def sweep(self, keep: Collection[tuple[int, ...]], stale: Sequence[int] = ()) -> None:
        live = np.zeros(self.table.size, dtype=bool)
        live[[self.ids[r] for r in keep]] = True
        live[list(stale)] = True  # codes that only look live: ids already freed
        before = len(self.ids)
        self.ids = {r: i for r, i in self.ids.items() if r in keep}
        assert self.table.sweep(live) == before - len(self.ids)
        assert self.table.held == len(self.ids)
        check_index(self.table)


def check_index(table: TupleTable) -> None:
    """Every held id sits in the index once, reachable from its home with no empty slot between."""
    index, mask = table.index, len(table.index) - 1
    slots = np.flatnonzero(index != EMPTY)
    assert len(slots) == table.held == len(set(index[slots].tolist()))
    assert not set(index[slots].tolist()) & set(table.free.tolist())
    homes = _tuples._homes(table.routes[index[slots]], table.bits)
    for slot, home in zip(slots.tolist(), homes.tolist(), strict=True):
        s = home
        while s != slot:
            assert index[s] != EMPTY
            s = (s + 1) & mask


ints = st.one_of(
    st.integers(-3, 3),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**61 - 1, 2**61, -(2**61) + 1, -1, -2, 2**63 - 1, -(2**63), 2**30]),
)


@FAST
@given(
    st.integers(1, 4).flatmap(lambda w: st.lists(st.lists(st.tuples(*[ints] * w), min_size=1, max_size=40), max_size=6))
)
@pytest.mark.parametrize("compiled", TIERS)
def test_ids_agree_with_a_dict(compiled: bool | None, batches: list[list[tuple[int, ...]]]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tuples, "POLICY", Tier(compiled))
        if not batches:
            return
        oracle = Oracle(len(batches[0][0]))
        for rows in batches:
            oracle.code(rows)
        oracle.code([r for rows in batches for r in rows][::-1])  # all found again


@pytest.mark.parametrize("compiled", TIERS)
def test_colliding_routes_and_growth(compiled: bool | None) -> None:
    """Tuples whose routes are equal (fields that differ by multiples of 2**61 hash alike), so
    they share a home slot, and enough of them to grow the index many times."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tuples, "POLICY", Tier(compiled))
        oracle = Oracle(3)
        same = [(5, 6, 7 + k * M61) for k in range(-4, 4)]
        assert len({stable_hash(r) for r in same}) == 1
        oracle.code(same)
        oracle.code([*same[::2], (1, 2, 3), *same])
        rng = np.random.default_rng(7)
        for _ in range(12):
            rows = [tuple(r) for r in rng.integers(0, 40, (700, 3)).tolist()]
            rows += [(a, b, c + k * M61) for a, b, c in rows[:20] for k in (-1, 1)]
            oracle.code(rows)
        assert oracle.table.held > 1 << _tuples.MIN_BITS  # the index grew
        oracle.code(list(oracle.ids))


@pytest.mark.parametrize("compiled", TIERS)
def test_sweep_frees_reuses_and_never_resurrects(compiled: bool | None) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tuples, "POLICY", Tier(compiled))
        oracle = Oracle(2)
        first = [(i, -i - 10**15) for i in range(300)]
        ids = oracle.code(first)
        keep = set(first[::3])
        dead = [int(ids[i]) for i in range(300) if first[i] not in keep]
        oracle.sweep(keep)
        oracle.sweep(keep, stale=dead[:5])  # a stale code of a freed id does not bring it back
        assert sorted(oracle.table.free.tolist()) == sorted(dead)
        assert oracle.table.free[-1] == min(dead)  # lowest reused first
        second = [(i, 10**15 + i) for i in range(150)]
        got = oracle.code(second + first[:6])
        assert set(got.tolist()) <= set(range(300))  # every new id is a freed one: none handed out anew
        assert oracle.table.size == 300
        oracle.sweep(set())
        assert oracle.table.held == 0
        oracle.code(first)


def test_codes_of_int_tuples_every_way_in_give_the_same_code() -> None:
    """Columns, a list of tuples and one value at a time meet in one table code; values and
    routes come back exactly, beside the other kinds of code."""
    rows = [(1, 2, 3), (-1, 2**62, 0), (1, 2, 3), (2**63 - 1, -(2**63), 5)]
    cols = [np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    by_cols = codes_of_tuples(cols)
    assert by_cols is not None and (by_cols >= _codes.TUPLES).all()
    assert codes_of_values(rows).tolist() == by_cols.tolist() == [code_of(r) for r in rows]
    values: list[Any] = [*rows, 7, (1, 2), (3, 2**40), "x", (4,), (5, 6, 7, 8), (2**70, 1), (True, 2), 1.5, ()]
    codes = np.asarray([code_of(v) for v in values], dtype=np.int64)
    assert [repr(v) for v in values_of(codes)] == [repr(v) for v in values]
    assert route_of(codes).tolist() == [stable_hash(v) & ROUTE for v in values]
    assert code_of((2**70, 1)) < _codes.TUPLES  # beyond int64: an object, as in an object column
    assert code_of((True, 2)) < _codes.TUPLES  # a bool is not an int here
