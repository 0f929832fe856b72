"""libs/bloom's programs give the same answer in every mode (the ``mode`` fixture: one process
with one and several workers, simulated processes under seeded interleavings, real processes
over loopback TCP), in lockstep and with every epoch in flight at once
(tests/support/bloom_program.py): reachability, asynchronous and coordinated, and shortest paths
equal NetworkX per epoch; quorum equals a naive count of distinct voters per request, with each
request's votes fed by several processes; every fact and every tally is held by exactly one
process; the asynchronous loops requested no notification in any process, the coordinated
``reach`` table some in every process.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.bloom.test_programs import cumulative, reach_nx, sssp_nx
from tests.support import bloom_program as program
from tests.support.modes import Mode

TIMEOUT = 45.0
"""Seconds a whole run (start, join, every epoch, exit) may take."""
ASYNC_LOOPS = {"reach": "reach.reach", "sssp": "sssp.dist", "quorum": "quorum.tally"}
"""The asynchronous loops, and one of their stages (to be sure the names are what we think)."""


@functools.cache
def shares(mode: Mode, seed: int, lockstep: bool) -> tuple[dict[str, Any], ...]:
    """Each process's result, in process order (computed once per arguments)."""
    results = mode.run(program.build, seed, lag=0 if lockstep else None, timeout=TIMEOUT)
    assert [r["process"] for r in results] == list(range(mode.processes))
    return tuple(results)


def expected(seed: int) -> dict[str, list[Any]]:
    """Per output, per epoch: NetworkX's reachability and distances, and a naive count of voters."""
    edges = cumulative(program.edge_epochs(seed))
    weighted = cumulative(program.weighted_epochs(seed))
    sources = cumulative(program.source_epochs(seed))
    votes = cumulative(program.vote_epochs(seed))
    out: dict[str, list[Any]] = {"reach": [], "dist": [], "committed": [], "tally": []}
    for e in range(program.EPOCHS):
        out["reach"].append(reach_nx(edges[e], sources[e]))
        out["dist"].append(sssp_nx(weighted[e], sources[e]))
        voters: dict[str, set[int]] = {}
        for request, voter in votes[e]:
            voters.setdefault(request, set()).add(voter)
        out["tally"].append(voters)
        out["committed"].append({r for r, v in voters.items() if len(v) >= program.QUORUM})
    out["reach_sync"] = out["reach"]
    return out


def union_of_shares(results: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per output and epoch, the union of the processes' shares; a fact (or a key's lattice value)
    held by two processes fails: each lives on the one worker that owns it."""
    out: dict[str, list[Any]] = {}
    for name in ("reach", "reach_sync", "committed"):
        out[name] = []
        for e in range(program.EPOCHS):
            merged: set[Any] = set()
            for r in results:
                share = {tuple(f) if isinstance(f, list) else f for f in r["answers"][name][str(e)]}
                assert not share & merged, f"{name} epoch {e}: {sorted(share & merged)} held twice"
                merged |= share
            out[name].append(merged)
    for name, key in (("tally", str), ("dist", int)):
        out[name] = []
        for e in range(program.EPOCHS):
            values: dict[Any, Any] = {}
            for r in results:
                for k, value in r["answers"][name][str(e)].items():
                    assert key(k) not in values, f"{name} epoch {e}: {k} held twice"
                    values[key(k)] = set(value) if name == "tally" else value
            out[name].append(values)
    return out


def assert_no_notifications_except_coordinated(results: tuple[dict[str, Any], ...]) -> None:
    for r in results:
        asked = r["notifications"]
        for loop, table in ASYNC_LOOPS.items():
            assert table in asked[loop], asked[loop]  # the stage names are what we think
            assert set(asked[loop].values()) == {0}, f"process {r['process']}: {asked[loop]}"
        assert asked["reach_sync"]["reach_sync.reach"] > 0, f"process {r['process']}: {asked['reach_sync']}"


@pytest.mark.parametrize(("seed", "lockstep"), [(21, True), (22, False)], ids=["lockstep", "in-flight"])
def test_every_mode_agrees_with_networkx_and_a_naive_count(mode: Mode, seed: int, lockstep: bool) -> None:
    results = shares(mode, seed, lockstep)
    want = expected(seed)
    assert union_of_shares(results) == want
    assert want["reach"][0] < want["reach"][1] and want["committed"][1]  # a workload that grows
    assert [r["workers"] for r in results] == [mode.workers] * mode.processes
    if mode.processes > 1:
        for name in ("reach", "reach_sync", "dist", "tally"):  # every process holds part of every answer
            sizes = [len(r["answers"][name][str(program.EPOCHS - 1)]) for r in results]
            assert all(sizes), f"{name}: a process holds none of the answer: {sizes}"
    assert_no_notifications_except_coordinated(results)


TWO = Mode("simulated", processes=2, seed=5)


def test_quorum_counts_votes_fed_by_different_processes() -> None:
    """A committed request's voters were fed by several processes: no single process could
    have counted its quorum alone."""
    seed = 21
    committed = union_of_shares(shares(TWO, seed, True))["committed"][-1]
    feeders: dict[str, set[int]] = {}
    for epoch in program.vote_epochs(seed):
        for p in range(TWO.processes):
            for request, _ in program.share(epoch, p, TWO.processes):
                feeders.setdefault(request, set()).add(p)
    assert any(len(feeders[r]) > 1 for r in committed), feeders


def test_the_comparison_can_fail() -> None:
    """The checks notice a missing share, a share held twice, and a notification requested."""
    results = shares(TWO, 21, True)
    want = expected(21)
    assert union_of_shares(results) == want
    assert union_of_shares(results[:1]) != want
    with pytest.raises(AssertionError, match="held twice"):
        union_of_shares([*results, results[1]])
    changed = [dict(results[0], notifications=dict(results[0]["notifications"], quorum={"quorum.tally": 1}))]
    with pytest.raises(AssertionError):
        assert_no_notifications_except_coordinated((*changed, results[1]))
