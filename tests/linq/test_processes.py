"""linq's graph algorithms give plain Python's answer in every mode (the ``mode`` fixture: one
process with one and several workers, simulated processes with several seeds, real processes
over TCP).

For connected components, strongly connected components and shortest paths over a seeded
random graph changing for ten epochs (tests/support/linq_program.py), the per-epoch changes,
the per-epoch snapshots of the output and its final contents, gathered from every process
(each `linq.CollectionOutput` holds its process's share; their union is the answer), equal what
plain Python computes from each epoch's whole graph. The processes move in lockstep (each
epoch fed, then awaited everywhere), and also with every epoch fed before anything has passed
(many epochs in flight).
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

import networkx as nx
import pytest

from tests.support.linq_program import (
    ALGORITHMS,
    EPOCHS,
    builder,
    canonical,
    edge_epochs,
    source_epochs,
    union,
    weight,
)
from tests.support.linq_reference import nx_components
from tests.support.modes import Mode

TIMEOUT = 60.0
"""Seconds a whole computation (all its processes) may take."""


# Plain Python -------------------------------------------------------------------------------------
def _accumulate(epochs: list[list[tuple[Any, int]]]) -> list[set[Any]]:
    """The set after each epoch (the workloads keep sets: counts are 0 or 1)."""
    current: Counter[Any] = Counter()
    states = []
    for changes in epochs:
        for record, diff in changes:
            current[record] += diff
        assert all(c in (0, 1) for c in current.values())
        states.append({r for r, c in current.items() if c})
    return states


def strongly_connected(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    graph = nx.DiGraph(list(edges))
    component = {n: i for i, nodes in enumerate(nx.strongly_connected_components(graph)) for n in nodes}
    return {(u, v) for u, v in edges if component[u] == component[v]}


def distances(edges: set[tuple[int, int]], sources: set[int]) -> set[tuple[int, int]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for u, v in edges:
        out.setdefault(u, []).append((v, weight(u, v)))
    best: dict[int, int] = {}
    heap = [(0, s) for s in sources]
    while heap:
        d, n = heapq.heappop(heap)
        if n in best:
            continue
        best[n] = d
        for m, w in out.get(n, []):
            if m not in best:
                heapq.heappush(heap, (d + w, m))
    return set(best.items())


def reference(algorithm: str, seed: int) -> list[set[Any]]:
    """The algorithm's answer after each epoch, from the whole graph of that epoch."""
    graphs = _accumulate(edge_epochs(algorithm, seed))
    if algorithm == "connected_components":
        return [set(nx_components(dict.fromkeys(g, 1))) for g in graphs]
    if algorithm == "strongly_connected_components":
        return [strongly_connected(g) for g in graphs]
    return [distances(g, s) for g, s in zip(graphs, _accumulate(source_epochs(seed)), strict=True)]


def as_result(states: list[set[Any]]) -> dict[str, Any]:
    """What a one-process run should report for these successive answers."""
    changes: dict[str, list[list[Any]]] = {}
    previous: set[Any] = set()
    for epoch, state in enumerate(states):
        diff = [[r, 1] for r in state - previous] + [[r, -1] for r in previous - state]
        if diff:
            changes[str(epoch)] = diff
        previous = state
    snapshots = {str(e): [[r, 1] for r in s] for e, s in enumerate(states)}
    return canonical({"changes": changes, "snapshots": snapshots, "final": [[r, 1] for r in states[-1]]})


def assert_same(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal results; on a difference, name the first epoch and part that differ."""
    for part in ("changes", "snapshots"):
        for epoch in sorted(set(actual[part]) | set(expected[part]), key=int):
            got, want = actual[part].get(epoch), expected[part].get(epoch)
            assert got == want, f"{part} of epoch {epoch} differ:\n got  {got}\n want {want}"
    assert actual["final"] == expected["final"], "final contents differ"
    assert actual == expected


def assert_shared(results: list[dict[str, Any]]) -> None:
    """Every process holds part of the answer, so that the union means something."""
    sizes = [len(r["final"]) for r in results]
    assert all(sizes), f"a process holds none of the output: {sizes}"


# The tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("seed", [1, 2])
def test_every_mode_matches_plain_python(mode: Mode, algorithm: str, seed: int) -> None:
    expected = as_result(reference(algorithm, seed))
    assert len(expected["changes"]) >= EPOCHS // 2, "the workload should change the answer in most epochs"
    results = mode.run(builder, algorithm, seed, timeout=TIMEOUT)
    if mode.processes > 1:
        assert_shared(results)
    assert_same(union(results), expected)


@pytest.mark.parametrize("algorithm", ["connected_components", "shortest_paths"])
def test_every_mode_fed_all_epochs_at_once_matches_plain_python(mode: Mode, algorithm: str) -> None:
    check_all_at_once(mode, algorithm)


@pytest.mark.slow  # with all epochs in flight SCC does ~10x the work of the lockstep runs
@pytest.mark.parametrize("mode", [Mode("simulated", processes=2, seed=1), Mode("tcp", processes=3, workers=2)], ids=str)
def test_scc_fed_all_epochs_at_once_matches_plain_python(mode: Mode) -> None:
    check_all_at_once(mode, "strongly_connected_components")


def check_all_at_once(mode: Mode, algorithm: str) -> None:
    seed = 3
    results = mode.run(builder, algorithm, seed, lag=None, timeout=TIMEOUT)
    if mode.processes > 1:
        assert_shared(results)
    assert all(r["snapshots"] == {} for r in results)
    assert_same(union(results), dict(as_result(reference(algorithm, seed)), snapshots={}))


def test_the_union_notices_a_missing_or_duplicated_share() -> None:
    """The comparison can fail: one process's share dropped, or counted twice, is a difference."""
    results = Mode("simulated", processes=2, seed=1).run(builder, "connected_components", 1, timeout=TIMEOUT)
    expected = as_result(reference("connected_components", 1))
    assert_same(union(results), expected)
    with pytest.raises(AssertionError):
        assert_same(union(results[:1]), expected)
    with pytest.raises(AssertionError):
        assert_same(union([*results, results[1]]), expected)
