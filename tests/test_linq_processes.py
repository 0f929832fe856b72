"""linq's graph algorithms give the same answer whatever the number of processes.

For connected components, strongly connected components and shortest paths over a seeded
random graph changing for ten epochs (tests/linq_cluster_program.py), the per-epoch
changes, the per-epoch snapshots of the output and its final contents, gathered from every
process (each `linq.CollectionOutput` holds its process's share; their union is the
answer), equal those of a one-process run: for 2 and 4 processes, simulated in one event
loop (`timely.testing.simulated`, several seeds) and as real processes over loopback TCP
(`timely run`). The processes move in lockstep (each epoch fed, then awaited everywhere), and
in simulated mode also with every epoch fed before anything has passed (many epochs in
flight). The one-process run is itself checked against plain Python, epoch by epoch.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from typing import Any

import networkx as nx
import pytest

import timely
import timely.testing
from tests.linq_cluster_program import (
    ALGORITHMS,
    EPOCHS,
    WAIT,
    builder,
    canonical,
    edge_epochs,
    source_epochs,
    union,
    weight,
)
from tests.support import real_processes as real

PROGRAM = "tests.linq_cluster_program"
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


def components(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the root stays the least node of its set
    return {(n, find(n)) for n in list(parent)}


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
        return [components(g) for g in graphs]
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


# Running the dataflow ------------------------------------------------------------------------------
_one_process: dict[tuple[str, int], dict[str, Any]] = {}


async def one_process(algorithm: str, seed: int) -> dict[str, Any]:
    """The result of one process with one worker (computed once per algorithm and seed)."""
    key = (algorithm, seed)
    if key not in _one_process:
        async with timely.execute_async(builder(algorithm, seed), workers=1, timeout=TIMEOUT) as (comp, run):
            for epoch in range(EPOCHS):
                run.feed(epoch)
                await comp.wait_passed(run.output.probe, epoch, timeout=WAIT)
                run.snapshot(epoch)
        _one_process[key] = canonical(run.result())
    return _one_process[key]


async def simulated(algorithm: str, seed: int, processes: int, workers: int = 1) -> list[dict[str, Any]]:
    """Each process's result: the processes feed and wait in lockstep, epoch by epoch."""
    build = builder(algorithm, seed)
    async with timely.testing.simulated(
        build, processes=processes, workers=workers, seed=seed, timeout=TIMEOUT
    ) as runs:
        for epoch in range(EPOCHS):
            for _, run in runs:
                run.feed(epoch)
            await asyncio.gather(*(comp.wait_passed(run.output.probe, epoch, timeout=WAIT) for comp, run in runs))
            for _, run in runs:
                run.snapshot(epoch)
    return [run.result() for _, run in runs]


async def simulated_all_at_once(algorithm: str, seed: int, processes: int) -> list[dict[str, Any]]:
    """Each process's result when every process feeds all epochs before anything has passed:
    many epochs in flight at once, each process's inputs running ahead of the others'."""
    async with timely.testing.simulated(
        builder(algorithm, seed), processes=processes, seed=seed, timeout=TIMEOUT
    ) as runs:
        for epoch in range(EPOCHS):
            for _, run in runs:
                run.feed(epoch)
    return [run.result() for _, run in runs]


def real_processes(algorithm: str, seed: int, processes: int) -> list[dict[str, Any]]:
    return real.run(PROGRAM, algorithm, seed, processes=processes, timeout=TIMEOUT + 30)


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
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_one_process_matches_plain_python(algorithm: str, seed: int) -> None:
    expected = as_result(reference(algorithm, seed))
    assert len(expected["changes"]) >= EPOCHS // 2, "the workload should change the answer in most epochs"
    assert_same(await one_process(algorithm, seed), expected)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("processes", "workers", "seed"), [(2, 1, 1), (2, 1, 2), (4, 1, 3), (4, 1, 1), (2, 2, 3)])
async def test_simulated_processes_match_one_process(algorithm: str, processes: int, workers: int, seed: int) -> None:
    results = await simulated(algorithm, seed, processes, workers)
    assert_shared(results)
    assert_same(union(results), await one_process(algorithm, seed))


@pytest.mark.parametrize(
    "algorithm",
    [
        "connected_components",
        # with all epochs in flight SCC does ~10x the work of the lockstep runs (several seconds)
        pytest.param("strongly_connected_components", marks=pytest.mark.slow),
        "shortest_paths",
    ],
)
@pytest.mark.parametrize(("processes", "seed"), [(2, 1), (4, 2)])
async def test_simulated_processes_fed_all_epochs_at_once_match_one_process(
    algorithm: str, processes: int, seed: int
) -> None:
    results = await simulated_all_at_once(algorithm, seed, processes)
    assert_shared(results)
    assert all(r["snapshots"] == {} for r in results)
    assert_same(union(results), dict(await one_process(algorithm, seed), snapshots={}))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("processes", [2, 4])
async def test_real_processes_over_tcp_match_one_process(algorithm: str, processes: int) -> None:
    seed = 2
    expected = await one_process(algorithm, seed)
    results = real_processes(algorithm, seed, processes)  # blocks this test's event loop: nothing else runs on it
    assert_shared(results)
    assert_same(union(results), expected)


async def test_the_union_notices_a_missing_or_duplicated_share() -> None:
    """The comparison can fail: one process's share dropped, or counted twice, is a difference."""
    results = await simulated("connected_components", 1, 2)
    baseline = await one_process("connected_components", 1)
    assert_same(union(results), baseline)
    with pytest.raises(AssertionError):
        assert_same(union(results[:1]), baseline)
    with pytest.raises(AssertionError):
        assert_same(union([*results, results[1]]), baseline)
