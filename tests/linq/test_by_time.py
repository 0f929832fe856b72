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
