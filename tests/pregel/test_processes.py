"""pregel programs give NetworkX's answer in every mode (the ``mode`` fixture: one process
with one and several workers, simulated processes, real processes over TCP).

For PageRank (per-vertex and array), connected components, shortest paths, k-core and
bipartite matching, each over a seeded random graph per epoch (tests/support/pregel_program.py),
the final values gathered from every process (each holds the vertices its workers own; every
vertex must be reported exactly once) equal NetworkX's, PageRank within 1e-6; a matching must
be a valid maximal one. The epochs are fed in lockstep or all at once.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import pytest

from tests.support.modes import Mode
from tests.support.pregel_program import EPOCHS, KCORE_K, SOURCE, WORKLOADS, builder, graph, union

TIMEOUT = 60.0
"""Seconds a whole computation (all its processes) may take."""

Answer = dict[str, dict[str, dict[Any, Any]]]
"""workload -> epoch (a string, as in JSON) -> {vertex: value}"""


# NetworkX ------------------------------------------------------------------------------------------------


def reference(workload: str, seed: int, epoch: int) -> dict[Any, Any] | None:
    """NetworkX's answer for the workload's graph of ``epoch`` (None for the matching, which
    is checked for validity instead)."""
    g = graph(workload, seed, epoch)
    nodes = [v for v, _ in g.vertices]
    if workload in ("pagerank", "array_pagerank"):
        d = nx.DiGraph()
        d.add_nodes_from(nodes)
        d.add_edges_from(g.edges)
        return nx.pagerank(d, tol=1e-13, max_iter=1000)
    if workload in ("components", "kcore"):
        u = nx.Graph()
        u.add_nodes_from(nodes)
        u.add_edges_from((a, b) for a, b in g.edges if a != b)
        if workload == "components":
            return {n: min(c) for c in nx.connected_components(u) for n in c}
        return dict.fromkeys(nx.k_core(u, KCORE_K))
    if workload == "shortest_paths":
        d = nx.DiGraph()
        d.add_nodes_from(nodes)
        d.add_weighted_edges_from(g.edges)
        found = nx.single_source_dijkstra_path_length(d, SOURCE)
        return {n: found.get(n, math.inf) for n in nodes}
    return None


def assert_valid_matching(answer: dict[Any, Any], seed: int, epoch: int) -> None:
    g = graph("matching", seed, epoch)
    sides = dict(g.vertices)
    edges = set(g.edges)
    assert set(answer) == set(sides)
    for v, (side, partner) in answer.items():
        assert side == sides[v]
        if partner is not None:
            assert answer[partner] == [sides[partner], v]
            assert (v, partner) in edges or (partner, v) in edges
    assert all(answer[u][1] is not None or answer[v][1] is not None for u, v in edges), "not maximal"


def assert_matches_reference(answer: Answer, seed: int) -> None:
    for workload in WORKLOADS:
        assert sorted(answer[workload]) == [str(e) for e in range(EPOCHS)]
        for epoch in range(EPOCHS):
            got = answer[workload][str(epoch)]
            want = reference(workload, seed, epoch)
            if want is None:
                assert_valid_matching(got, seed, epoch)
            elif workload.endswith("pagerank"):
                assert set(got) == set(want)
                assert max(abs(got[k] - want[k]) for k in want) < 1e-6, f"{workload} epoch {epoch}"
            else:
                assert got == want, f"{workload} epoch {epoch}"


def assert_shared(results: list[dict[str, Any]]) -> None:
    """Every process holds part of every answer, so that the union means something."""
    for workload in WORKLOADS:
        sizes = [sum(len(pairs) for pairs in r[workload].values()) for r in results]
        assert all(sizes), f"{workload}: a process holds none of the output: {sizes}"


# The tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_every_mode_matches_networkx(mode: Mode, seed: int) -> None:
    results = mode.run(builder, seed, timeout=TIMEOUT)
    if mode.processes > 1:
        assert_shared(results)
    assert_matches_reference(union(results), seed)


def test_every_mode_fed_all_epochs_at_once_matches_networkx(mode: Mode) -> None:
    results = mode.run(builder, 2, lag=None, timeout=TIMEOUT)
    if mode.processes > 1:
        assert_shared(results)
    assert_matches_reference(union(results), 2)


def test_the_comparison_notices_a_missing_or_duplicated_share() -> None:
    """The comparison can fail: one process's share dropped, or reported twice, is a difference."""
    results = Mode("simulated", processes=2, seed=1).run(builder, 1, timeout=TIMEOUT)
    assert_matches_reference(union(results), 1)
    with pytest.raises(AssertionError):
        assert_matches_reference(union(results[:1]), 1)
    with pytest.raises(AssertionError, match="reported twice"):
        union([*results, results[1]])
