"""libs/bloom's programs give the same answer on 1, 2 and 4 processes and under seeded random
interleavings of the channels between them (`timely.testing.simulated`): the union of every
process's share equals the one-process answer, which equals NetworkX's.

And as real OS processes over loopback TCP (`timely run`, tests/support/bloom_program.py):
reachability, asynchronous and coordinated, equals NetworkX per epoch; quorum equals a naive
count of distinct voters per request, with each request's votes fed by several processes;
every fact and every tally is held by exactly one process; the asynchronous loops requested no
notification in any process, the coordinated ``reach`` table some in every process.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

import timely
import timely.testing
from libs import bloom
from tests.bloom.test_programs import (
    EPOCHS,
    cumulative,
    graph_epochs,
    reach_nx,
    source_epochs,
    sssp_nx,
    vote_epochs,
)
from tests.support import bloom_program as cluster
from tests.support import real_processes as real

TIMEOUT = 60.0


def build_all(scope: timely.Scope) -> Any:
    edges = scope.new_input("edges")
    weighted = scope.new_input("weighted")
    sources = scope.new_input("sources")
    votes = scope.new_input("votes")
    reach = bloom.programs.reachability(edges, sources)
    dist = bloom.programs.shortest_paths(weighted, sources)
    committed, _ = bloom.programs.quorum(votes, 3)
    return (edges, weighted, sources, votes), (reach, dist, committed)


def feeds(seed: int) -> list[list[list[Any]]]:
    return [graph_epochs(seed), graph_epochs(seed, weighted=True), source_epochs(seed), vote_epochs(seed)]


async def run(seed: int, processes: int, lockstep: bool) -> list[list[Any]]:
    """Per epoch, the union over processes of (reach, dist, committed). Process p feeds the
    records at positions p, p + n, ... of each epoch (each process its own share)."""
    data = feeds(seed)
    async with timely.testing.simulated(build_all, processes=processes, seed=seed, timeout=TIMEOUT) as runs:
        for epoch in range(EPOCHS):
            for p, (_, (inputs, _)) in enumerate(runs):
                for inp, feed in zip(inputs, data, strict=True):
                    inp.send(feed[epoch][p::processes])
                    inp.advance_to(epoch + 1)
            if lockstep:
                await asyncio.gather(
                    *(comp.wait_passed(out.probe, epoch, timeout=TIMEOUT) for comp, (_, outs) in runs for out in outs)
                )
    answers = []
    for epoch in range(EPOCHS):
        reach: set[Any] = set()
        dist: dict[Any, int] = {}
        committed: set[Any] = set()
        for _, (_, (r, d, c)) in runs:
            reach |= r.answer(epoch)
            for k, v in d.answer(epoch).items():
                assert k not in dist, "a key's lattice value lives on one worker"
                dist[k] = v.reveal()
            committed |= c.answer(epoch)
        answers.append([reach, dist, committed])
    return answers


def expected(seed: int) -> list[list[Any]]:
    edges, weighted, sources, votes = (cumulative(f) for f in feeds(seed))
    out = []
    for e in range(EPOCHS):
        voters: dict[str, set[int]] = {}
        for req, voter in votes[e]:
            voters.setdefault(req, set()).add(voter)
        out.append(
            [
                reach_nx(edges[e], sources[e]),
                sssp_nx(weighted[e], sources[e]),
                {r for r, v in voters.items() if len(v) >= 3},
            ]
        )
    return out


@pytest.mark.parametrize("processes", [1, 2, 4])
@pytest.mark.parametrize("seed", [11, 12])
def test_processes_in_lockstep_agree_with_networkx(processes: int, seed: int) -> None:
    assert asyncio.run(run(seed, processes, lockstep=True)) == expected(seed)


@pytest.mark.parametrize("seed", [13, 14, 15])
def test_all_epochs_in_flight_at_once_on_four_processes(seed: int) -> None:
    assert asyncio.run(run(seed, 4, lockstep=False)) == expected(seed)


# Real processes over TCP -------------------------------------------------------------------------------
PROGRAM = "tests.support.bloom_program"
REAL_TIMEOUT = 45.0
"""Seconds a whole cluster run (start, join, every epoch, exit) may take."""


@functools.cache
def real_run(seed: int, processes: int, mode: str, workers: int) -> tuple[dict[str, Any], ...]:
    """Each process's result, in process order (computed once per arguments)."""
    results = real.run(PROGRAM, seed, mode, workers, processes=processes, timeout=REAL_TIMEOUT)
    results.sort(key=lambda r: r["process"])
    assert [r["process"] for r in results] == list(range(processes))
    return tuple(results)


def real_expected(seed: int) -> dict[str, list[Any]]:
    """Per output, per epoch: NetworkX's reachability, and a naive count of distinct voters."""
    edges = cumulative(cluster.edge_epochs(seed))
    sources = cumulative(cluster.source_epochs(seed))
    votes = cumulative(cluster.vote_epochs(seed))
    out: dict[str, list[Any]] = {"reach": [], "committed": [], "tally": []}
    for e in range(cluster.EPOCHS):
        out["reach"].append(reach_nx(edges[e], sources[e]))
        voters: dict[str, set[int]] = {}
        for request, voter in votes[e]:
            voters.setdefault(request, set()).add(voter)
        out["tally"].append(voters)
        out["committed"].append({r for r, v in voters.items() if len(v) >= cluster.QUORUM})
    out["reach_sync"] = out["reach"]
    return out


def union_of_shares(results: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per output and epoch, the union of the processes' shares; a fact (or a request's tally)
    held by two processes fails: each lives on the one worker that owns it."""
    out: dict[str, list[Any]] = {}
    for name in ("reach", "reach_sync", "committed"):
        out[name] = []
        for e in range(cluster.EPOCHS):
            merged: set[Any] = set()
            for r in results:
                share = {tuple(f) if isinstance(f, list) else f for f in r["answers"][name][str(e)]}
                assert not share & merged, f"{name} epoch {e}: {sorted(share & merged)} held twice"
                merged |= share
            out[name].append(merged)
    out["tally"] = []
    for e in range(cluster.EPOCHS):
        tallies: dict[str, set[int]] = {}
        for r in results:
            for request, voters in r["answers"]["tally"][str(e)].items():
                assert request not in tallies, f"tally epoch {e}: {request} held twice"
                tallies[request] = set(voters)
        out["tally"].append(tallies)
    return out


def assert_no_notifications_except_coordinated(results: tuple[dict[str, Any], ...]) -> None:
    for r in results:
        asked = r["notifications"]
        for loop, table in (("reach", "reach.reach"), ("quorum", "quorum.tally")):
            assert table in asked[loop], asked[loop]  # the stage names are what we think
            assert set(asked[loop].values()) == {0}, f"process {r['process']}: {asked[loop]}"
        assert asked["reach_sync"]["reach_sync.reach"] > 0, f"process {r['process']}: {asked['reach_sync']}"


@pytest.mark.parametrize(
    ("processes", "mode", "workers", "seed"),
    [(2, "lockstep", 1, 21), (3, "inflight", 1, 22), (2, "inflight", 2, 23)],
)
def test_real_processes_over_tcp_agree_with_networkx_and_a_naive_count(
    processes: int, mode: str, workers: int, seed: int
) -> None:
    results = real_run(seed, processes, mode, workers)
    expected = real_expected(seed)
    assert union_of_shares(results) == expected
    assert expected["reach"][0] < expected["reach"][1] and expected["committed"][1]  # a workload that grows
    assert [r["workers"] for r in results] == [workers] * processes
    for name in ("reach", "reach_sync", "tally"):  # every process holds part of every answer
        sizes = [len(r["answers"][name][str(cluster.EPOCHS - 1)]) for r in results]
        assert all(sizes), f"{name}: a process holds none of the answer: {sizes}"
    assert_no_notifications_except_coordinated(results)


def test_real_quorum_counts_votes_fed_by_different_processes() -> None:
    """A committed request's voters were fed by several processes: no single process could
    have counted its quorum alone."""
    processes, seed = 2, 21
    results = real_run(seed, processes, "lockstep", 1)
    committed = union_of_shares(results)["committed"][-1]
    feeders: dict[str, set[int]] = {}
    for epoch in cluster.vote_epochs(seed):
        for p in range(processes):
            for request, _ in cluster.share(epoch, p, processes):
                feeders.setdefault(request, set()).add(p)
    assert any(len(feeders[r]) > 1 for r in committed), feeders


def test_real_process_comparison_can_fail() -> None:
    """The checks notice a missing share, a share held twice, and a notification requested."""
    results = real_run(21, 2, "lockstep", 1)
    expected = real_expected(21)
    assert union_of_shares(results) == expected
    assert union_of_shares(results[:1]) != expected
    with pytest.raises(AssertionError, match="held twice"):
        union_of_shares([*results, results[1]])
    changed = [dict(results[0], notifications=dict(results[0]["notifications"], quorum={"quorum.tally": 1}))]
    with pytest.raises(AssertionError):
        assert_no_notifications_except_coordinated((*changed, results[1]))
