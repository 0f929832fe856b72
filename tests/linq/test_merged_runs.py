"""A spine's merge of sorted runs in one natural merge (`_kernels._merged_runs`, the compiled tier of
`consolidate_parts` below `MERGED_RUNS_BELOW` rows) against the path it replaces for small merges
and a brute-force sum of every row with the floor applied: runs of several columns, broadcast
columns (a batch's one time), empty runs, negative values, a floor that reorders a run."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from timely_libs import linq
from timely_libs.linq._columns import _kernels


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    linq.preload()


def _run(rng: np.random.Generator, n: int, ncols: int, broadcast: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """``n`` rows sorted by all their columns (the last one broadcast from one value, as a batch
    made at one time holds its times), with diffs."""
    cols = [rng.integers(-5, 40, n) for _ in range(ncols)]
    if broadcast:
        cols[-1] = np.broadcast_to(np.int64(rng.integers(0, 4)), n)
    order = np.lexsort(tuple(reversed(cols)))
    return [np.ascontiguousarray(c[order]) if c.strides[0] else c for c in cols], rng.choice([-2, -1, 1, 3], n)


def _brute(parts: list[tuple[list[np.ndarray], np.ndarray]], floor: tuple[int, int]) -> list[tuple[int, ...]]:
    total: Counter[tuple[int, ...]] = Counter()
    for cols, diffs in parts:
        for i, d in enumerate(diffs.tolist()):
            row = [int(c[i]) for c in cols]
            row[floor[0]] = max(row[floor[0]], floor[1])
            total[tuple(row)] += d
    return sorted((*row, d) for row, d in total.items() if d)


def _rows(cols: list[np.ndarray], diffs: np.ndarray) -> list[tuple[int, ...]]:
    return list(zip(*(c.tolist() for c in cols), diffs.tolist()))


@pytest.mark.parametrize("ncols", [2, 4])
@pytest.mark.parametrize("nparts", [1, 2, 3])
def test_the_natural_merge_equals_the_packed_path_and_a_brute_force_sum(ncols: int, nparts: int) -> None:
    rng = np.random.default_rng(10 * ncols + nparts)
    for _ in range(30):
        parts = [_run(rng, int(rng.integers(0, 400)), ncols, broadcast=bool(rng.integers(2))) for _ in range(nparts)]
        if sum(len(d) for _, d in parts) < 2:
            continue
        floor = (int(rng.integers(0, ncols)), int(rng.integers(-3, 30)))
        merged = _kernels._merged_runs(parts, floor)
        assert merged is not None
        want = _brute(parts, floor)
        assert _rows(*merged) == want
        # the path it replaces, on the same runs
        concatenated = [np.concatenate([c[j] for c, _ in parts]) for j in range(ncols)]
        concatenated[floor[0]] = np.maximum(concatenated[floor[0]], floor[1])
        assert _rows(*_kernels.consolidate(concatenated, np.concatenate([d for _, d in parts]))) == want


def test_a_spine_merge_takes_the_natural_merge_below_its_bound_and_leaves_the_runs_alone() -> None:
    rng = np.random.default_rng(5)
    parts = [_run(rng, 300, 3, broadcast=True), _run(rng, 200, 3, broadcast=False)]
    kept = [[c.copy() for c in cols] for cols, _ in parts]
    assert _kernels.POLICY.merged_runs(500)
    assert not _kernels.POLICY.merged_runs(_kernels.MERGED_RUNS_BELOW)
    cols, diffs = _kernels.consolidate_parts(parts, (2, 2), runs=True)
    assert _rows(cols, diffs) == _brute(parts, (2, 2))
    for (cols_, _), before in zip(parts, kept):  # the floor is applied to a copy, never to a batch's columns
        assert all(np.array_equal(a, b) for a, b in zip(cols_, before))
