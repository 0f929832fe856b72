"""A join's output split by time (`_join.by_time`): the Python path for a few rows and the numpy
path for many, on the same rows, against a brute-force grouping."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from timely_libs.linq import _join
from timely_libs.linq._columns import Block


def _brute(out: Block, times: list[np.ndarray]) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
    groups: dict[tuple[int, ...], list[tuple[int, ...]]] = defaultdict(list)
    for i, record in enumerate(zip(*(c.tolist() for c in out.cols), out.diffs.tolist())):
        groups[tuple(int(c[i]) for c in times)].append(record)
    return [(u, sorted(groups[u])) for u in sorted(groups)]


def _seen(parts: list[tuple[tuple[int, ...], Block]]) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
    return [(u, sorted(zip(*(c.tolist() for c in b.cols), b.diffs.tolist()))) for u, b in parts]


@pytest.mark.parametrize("ntimes", [1, 2, 3])
def test_both_paths_split_like_a_brute_force_grouping(ntimes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(ntimes)
    for _ in range(40):
        n = int(rng.integers(1, 300))
        out = Block([rng.integers(0, 50, n), rng.integers(0, 50, n)], 2, rng.choice([-1, 1, 2], n))
        spread = int(rng.integers(1, 4))
        times = [rng.integers(0, spread, n) + 7 * j for j in range(ntimes)]
        want = _brute(out, times)
        for few in (0, 10_000):  # the numpy path, then the Python path, on the same rows
            monkeypatch.setattr(_join, "FEW_TIMED_ROWS", few)
            parts = _join.by_time(out, times)
            assert all(type(x) is int for u, _ in parts for x in u)
            assert _seen(parts) == want, f"{len(want)} times, {'python' if few else 'numpy'} path"


@pytest.mark.parametrize("fixed", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_fixed_coordinates_are_put_back_in_place(fixed: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """A coordinate every row shares may be given as an int (a loop's output varies in its
    iteration alone): the split is the one of the full columns, the int back in its place."""
    rng = np.random.default_rng(len(fixed))
    for _ in range(30):
        n = int(rng.integers(1, 300))
        out = Block([rng.integers(0, 50, n)], 2, rng.choice([-1, 1, 2], n))
        out = Block([out.cols[0], rng.integers(0, 9, n)], 2, out.diffs)
        full = [rng.integers(0, int(rng.integers(1, 4)), n) + 7 * j for j in range(3)]
        given: list[np.ndarray | int] = list(full)
        for j in fixed:
            full[j] = np.full(n, 5 + j, dtype=np.int64)
            given[j] = 5 + j
        want = _brute(out, full)
        for few in (0, 10_000):
            monkeypatch.setattr(_join, "FEW_TIMED_ROWS", few)
            parts = _join.by_time(out, given)
            assert all(type(x) is int for u, _ in parts for x in u)
            assert _seen(parts) == want, f"fixed {fixed}, {'python' if few else 'numpy'} path"


@pytest.mark.parametrize("spread", [1, 3, 40])
def test_one_varying_coordinate_splits_like_a_brute_force_grouping(
    spread: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One coordinate varies, the others are ints (a loop's join output, by its iteration):
    one time, a few (taken by a mask each), more than `FEW_SPLIT_TIMES` (by a dict), and
    the sorted path for many rows, each against the brute-force grouping of full columns."""
    rng = np.random.default_rng(spread)
    for _ in range(30):
        n = int(rng.integers(1, 300))
        out = Block([rng.integers(0, 50, n), rng.integers(0, 9, n)], 2, rng.choice([-1, 1, 2], n))
        at = int(rng.integers(0, 3))
        given: list[np.ndarray | int] = [4, 5, 6]
        given[at] = rng.integers(0, spread, n) + 3
        full = [c if isinstance(c, np.ndarray) else np.full(n, c, dtype=np.int64) for c in given]
        want = _brute(out, full)
        for few in (0, 10_000):
            monkeypatch.setattr(_join, "FEW_TIMED_ROWS", few)
            parts = _join.by_time(out, given)
            assert all(type(x) is int for u, _ in parts for x in u)
            assert _seen(parts) == want, f"spread {spread}, varying {at}, {'python' if few else 'numpy'} path"
