"""libs/bloom's programs give the same answer on 1, 2 and 4 processes and under seeded random
interleavings of the channels between them (`timely.testing.simulated`): the union of every
process's share equals the one-process answer, which equals NetworkX's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import timely
import timely.testing
from libs import bloom
from tests.test_bloom_programs import (
    EPOCHS,
    cumulative,
    graph_epochs,
    reach_nx,
    source_epochs,
    sssp_nx,
    vote_epochs,
)

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
