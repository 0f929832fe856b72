"""pregel programs give the same answer whatever the number of processes.

For PageRank (per-vertex and array), connected components, shortest paths, k-core and
bipartite matching, each over a seeded random graph per epoch (tests/support/pregel_program.py),
the final values gathered from every process (each holds the vertices its workers own; every
vertex must be reported exactly once) equal those of a one-process run: for 1, 2 and 4
processes simulated in one event loop (`timely.testing.simulated`), with the epochs fed in
lockstep or all at once, and for 2 and 4 real processes over loopback TCP (`timely run`).
PageRank may differ in the last bits (messages are summed in another order); everything
else, the matching included (same seed), is identical. The one-process run is itself
checked against NetworkX.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import networkx as nx
import pytest

import timely
import timely.testing
from tests.support import real_processes as real
from tests.support.pregel_program import (
    EPOCHS,
    KCORE_K,
    SOURCE,
    WAIT,
    WORKLOADS,
    builder,
    graph,
    union,
)

PROGRAM = "tests.support.pregel_program"
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


def assert_same(actual: Answer, expected: Answer) -> None:
    """Equal answers (PageRank within 1e-12 per vertex); on a difference, name the workload and epoch."""
    assert sorted(actual) == sorted(expected)
    for workload in expected:
        assert sorted(actual[workload]) == sorted(expected[workload]), workload
        for epoch, want in expected[workload].items():
            got = actual[workload][epoch]
            if workload.endswith("pagerank"):
                assert set(got) == set(want), f"{workload} epoch {epoch}: vertices differ"
                worst = max((abs(got[k] - want[k]) for k in want), default=0.0)
                assert worst < 1e-12, f"{workload} epoch {epoch}: ranks differ by {worst}"
            else:
                assert got == want, f"{workload} epoch {epoch} differs"


def assert_shared(results: list[dict[str, Any]]) -> None:
    """Every process holds part of every answer, so that the union means something."""
    for workload in WORKLOADS:
        sizes = [sum(len(pairs) for pairs in r[workload].values()) for r in results]
        assert all(sizes), f"{workload}: a process holds none of the output: {sizes}"


# Running the dataflow -----------------------------------------------------------------------------------

_one_process: dict[int, Answer] = {}


async def one_process(seed: int) -> Answer:
    """The answer of one process with one worker (computed once per seed)."""
    if seed not in _one_process:
        async with timely.execute_async(builder(seed), workers=1, timeout=TIMEOUT) as (comp, run):
            for epoch in range(EPOCHS):
                run.feed(epoch)
                for probe in run.probes.values():
                    await comp.wait_passed(probe, epoch, timeout=WAIT)
        _one_process[seed] = union([run.result()])
    return _one_process[seed]


async def simulated(seed: int, processes: int, workers: int = 1, lockstep: bool = True) -> list[dict[str, Any]]:
    """Each process's result; with ``lockstep`` the processes feed and wait epoch by epoch,
    otherwise every epoch is fed before anything has passed."""
    async with timely.testing.simulated(
        builder(seed), processes=processes, workers=workers, seed=seed, timeout=TIMEOUT
    ) as runs:
        for epoch in range(EPOCHS):
            for _, run in runs:
                run.feed(epoch)
            if lockstep:
                await asyncio.gather(
                    *(
                        comp.wait_passed(probe, epoch, timeout=WAIT)
                        for comp, run in runs
                        for probe in run.probes.values()
                    )
                )
    return [run.result() for _, run in runs]


def real_processes(seed: int, processes: int) -> list[dict[str, Any]]:
    return real.run(PROGRAM, seed, processes=processes, timeout=TIMEOUT + 30)


# The tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
async def test_one_process_matches_networkx(seed: int) -> None:
    assert_matches_reference(await one_process(seed), seed)


@pytest.mark.parametrize(
    ("processes", "workers", "seed"),
    [(1, 1, 1), (1, 3, 2), (2, 1, 1), (2, 1, 2), (4, 1, 1), (4, 1, 2), (2, 2, 1)],
)
async def test_simulated_processes_match_one_process(processes: int, workers: int, seed: int) -> None:
    results = await simulated(seed, processes, workers)
    if processes > 1:
        assert_shared(results)
    assert_same(union(results), await one_process(seed))


@pytest.mark.parametrize(("processes", "seed"), [(2, 2), (4, 1)])
async def test_simulated_processes_fed_all_epochs_at_once_match_one_process(processes: int, seed: int) -> None:
    results = await simulated(seed, processes, lockstep=False)
    assert_shared(results)
    assert_same(union(results), await one_process(seed))


@pytest.mark.parametrize("processes", [2, 4])
async def test_real_processes_over_tcp_match_one_process(processes: int) -> None:
    seed = 2
    expected = await one_process(seed)
    results = real_processes(seed, processes)  # blocks this test's event loop: nothing else runs on it
    assert_shared(results)
    assert_same(union(results), expected)


async def test_the_comparison_notices_a_missing_or_duplicated_share() -> None:
    """The comparison can fail: one process's share dropped, or reported twice, is a difference."""
    results = await simulated(1, 2)
    baseline = await one_process(1)
    assert_same(union(results), baseline)
    with pytest.raises(AssertionError):
        assert_same(union(results[:1]), baseline)
    with pytest.raises(AssertionError, match="reported twice"):
        union([*results, results[1]])
