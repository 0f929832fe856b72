"""The ``linq.ddir`` benchmark's oracles and workload, against independent references.

The benchmark fails when linq's answer differs from its oracle, so each oracle (SciPy,
vectorised numpy) is checked here against a plain recomputation on the same multiset of
edges: NetworkX for components, the multiset reference (`tests.support.linq_reference`)
run as the same program for reach and the 2-core peel, and a brute force over triples for
triangles. The window must slide as DDIR's does: each round retracts the oldest edges.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest

from bench.linq_ddir import Spec, oracle, present, window
from tests.support import linq_reference as ref

NODES = 40


def _edges(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, NODES, count), rng.integers(0, NODES, count)


def _as_multiset(rows: np.ndarray, counts: np.ndarray) -> ref.Multiset:
    return {tuple(int(x) for x in row) if len(row) > 1 else int(row[0]): int(c) for row, c in zip(rows, counts)}


def _reference(workload: str, edges: ref.Multiset) -> ref.Multiset:
    if workload == "cc":
        return ref.nx_components(edges)
    if workload == "scc":
        return ref.nx_scc_edges(edges)
    if workload == "reach":
        roots = {0: 1}

        def step(reach: ref.Multiset) -> ref.Multiset:
            proposals = ref.join(reach, edges, lambda n: n, lambda e: e[0], lambda n, e: e[1])
            return ref.distinct(ref.concat(roots, proposals))

        return ref.fixed_point(roots, step)
    if workload == "kcore":
        symmetric = ref.concat(edges, ref.select(edges, lambda e: (e[1], e[0])))

        def peel(active: ref.Multiset) -> ref.Multiset:
            alive = {n: 1 for (n, k) in ref.count(active, lambda e: e[0]) if k >= 2}
            kept = ref.join(active, alive, lambda e: e[0], lambda n: n, lambda e, n: e)
            return ref.join(kept, alive, lambda e: e[1], lambda n: n, lambda e, n: e)

        return ref.count(ref.fixed_point(symmetric, peel), lambda e: e[0])
    forward = {e for e in edges if e[0] < e[1]}
    total = sum(1 for a, b, c in itertools.combinations(range(NODES), 3) if {(a, b), (b, c), (a, c)} <= forward)
    return {(0, total): 1} if total else {}


@pytest.mark.parametrize("workload", ["cc", "scc", "reach", "kcore", "triangles"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_oracle_matches_plain_recomputation(workload: str, seed: int) -> None:
    src, dst = _edges(seed, 90 if workload == "triangles" else 60)
    edges: ref.Multiset = dict(Counter(zip(src.tolist(), dst.tolist())))
    rows, counts = oracle(workload, NODES, src, dst)
    assert _as_multiset(rows, counts) == _reference(workload, edges)


def test_rounds_retract_the_oldest_edges_and_insert_fresh_ones() -> None:
    spec = Spec("cc", 100, 50, 7, 4)
    src, dst = window(spec)
    assert len(src) == len(dst) == 50 + 4 * 7
    window_edges: list[Any] = list(zip(src[:50].tolist(), dst[:50].tolist()))
    for r in range(1, 5):
        window_edges = window_edges[7:] + list(
            zip(src[50 + (r - 1) * 7 : 50 + r * 7].tolist(), dst[50 + (r - 1) * 7 : 50 + r * 7].tolist())
        )
        now = present(spec, r)
        assert list(zip(now[0].tolist(), now[1].tolist())) == window_edges
