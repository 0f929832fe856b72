"""A reduce's new output less its old (`_reduce._difference`: one natural merge of the two runs
through `consolidate_parts` with no floor) against the concatenation and sort it replaces and a
brute-force sum: runs sorted or not (a user's reducer answers in its own order), empty sides,
several value columns, many rows (the tier past the natural merge)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from timely_libs import linq
from timely_libs.linq._columns import consolidate
from timely_libs.linq._reduce import _difference
from timely_libs.linq._trace import Rows, concat_rows


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    linq.preload()


def _rows(rng: np.random.Generator, n: int, width: int, ordered: bool) -> Rows:
    keys = rng.integers(0, max(n, 1) * 3, n)
    vals = [rng.integers(-3, 9, n) for _ in range(width)]
    diffs = rng.choice([-1, 1, 2], n)
    if ordered:  # consolidated: sorted by key and values, equal rows summed
        cols, diffs = consolidate([keys, *vals], diffs)
        keys, vals = cols[0], cols[1:]
    return Rows(keys, vals, (), diffs)


def _brute(new: Rows, before: Rows) -> list[tuple[int, ...]]:
    total: Counter[tuple[int, ...]] = Counter()
    for rows, sign in ((new, 1), (before, -1)):
        for i, d in enumerate(rows.diffs.tolist()):
            total[(int(rows.keys[i]), *(int(v[i]) for v in rows.vals))] += sign * d
    return sorted((*row, d) for row, d in total.items() if d)


def _listed(rows: Rows) -> list[tuple[int, ...]]:
    return list(zip(rows.keys.tolist(), *(v.tolist() for v in rows.vals), rows.diffs.tolist()))


@pytest.mark.parametrize("n", [0, 1, 7, 110, 400, 3000])
@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("ordered", [True, False], ids=["sorted", "unsorted"])
def test_the_difference_equals_a_sort_of_both_and_a_brute_force_sum(n: int, width: int, ordered: bool) -> None:
    rng = np.random.default_rng(n * 10 + width + ordered)
    for _ in range(5):
        new = _rows(rng, n, width, ordered)
        before = _rows(rng, int(rng.integers(0, n + 2)), width, ordered)
        got = _difference(new, before, width)
        assert len(got.vals) == width
        assert _listed(got) == _brute(new, before)
        sorted_afresh = concat_rows([new, before.negated()], width, 0).consolidated()
        assert _listed(got) == _listed(sorted_afresh)


def test_equal_outputs_leave_no_difference() -> None:
    rng = np.random.default_rng(5)
    rows = _rows(rng, 200, 1, True)
    assert len(_difference(rows, rows, 1)) == 0
