"""`propagate` on rings split across two processes, against NetworkX.

The rings' nodes alternate between the two processes (an int node's worker is the node
modulo the workers) and are joined to the least node by bridges: removing a bridge makes a
whole ring's labels rise. That is the case any evaluation of loop iterations ahead of a
peer's proposals must survive: a stale low label can chase its own correction round the
ring for ever (an in-process run of this workload with such a speculation and no check for
rising labels stalls at the removal epoch). Epochs of additions only come before and after
the removals. Two OS processes over loopback TCP; every epoch's reported change and the
final contents must be NetworkX's. The same rings with string nodes, on two workers of one
process with epochs in flight and on two processes, check the proposals that travel between
workers with their places on a line (a receiver that staged them all at the message's time
fails both).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import timely
from tests.linq.test_graph_processes import merged
from tests.support.graph_workloads import answer, dataflow
from tests.support.linq_graph_program import GraphRun
from tests.support.linq_reference import Change, apply, difference
from tests.support.modes import Mode

Edge = tuple[int, int]


def ring_epochs(seed: int, rings: int, size: int) -> list[list[Change]]:
    """A chain of ``rings`` rings of ``size`` nodes, each joined by a bridge to the one before
    (ring 0 holds node 0, the least label), then: every bridge removed (the rings' labels
    rise), bridges added back at other nodes (they fall again), a mixed epoch of removals and
    additions, and an epoch of chords added inside the rings."""
    rng = random.Random(seed)
    ring = [[r * size + i for i in range(size)] for r in range(rings)]
    edges: list[Edge] = [(nodes[i], nodes[(i + 1) % size]) for nodes in ring for i in range(size)]
    bridges: list[Edge] = [(rng.choice(ring[r - 1]), rng.choice(ring[r])) for r in range(1, rings)]
    rebuilt: list[Edge] = [(rng.choice(ring[r - 1]), rng.choice(ring[r])) for r in range(1, rings)]
    mixed: list[Change] = [(b, -1) for b in rebuilt[::2]]
    mixed += [((rng.choice(ring[0]), rng.choice(ring[r])), 1) for r in range(1, rings, 2)]
    chords = [(rng.choice(nodes), rng.choice(nodes)) for nodes in ring for _ in range(2)]
    return [
        [(e, 1) for e in edges + bridges],
        [(b, -1) for b in bridges],
        [(b, 1) for b in rebuilt],
        mixed,
        [(c, 1) for c in chords],
    ]


def program(seed: int, rings: int, size: int) -> Callable[[timely.Scope], GraphRun]:
    """Connected components of `ring_epochs` (for `Mode.run`)."""
    epochs: list[tuple[list[Any], ...]] = [(changes,) for changes in ring_epochs(seed, rings, size)]
    build = dataflow("cc")

    def located(scope: timely.Scope) -> GraphRun:
        inputs, output = build(scope)
        return GraphRun(epochs, inputs, output, scope.process_index, scope.processes)

    return located


def test_rings_on_two_processes_match_networkx() -> None:
    seed, rings, size = 3, 12, 41
    results = Mode("tcp", processes=2).run(program, seed, rings, size, lag=0, timeout=100)
    assert all(r["final"] for r in results), "every process should hold part of the answer"
    changes, final = merged(results)
    state: dict[Any, int] = {}
    previous: dict[Any, int] = {}
    for e, epoch in enumerate(ring_epochs(seed, rings, size)):
        state = apply(state, epoch)
        expected = answer("cc", state)
        assert changes.get(e, {}) == difference(expected, previous), f"epoch {e}"
        previous = expected
    assert final == previous


def named_program(seed: int, rings: int, size: int) -> Callable[[timely.Scope], GraphRun]:
    """`program` with string nodes (``"n7"``): labels that are not ints travel between workers
    as values, beside each proposal's place on its line (`propagate._exchange`)."""
    epochs: list[tuple[list[Any], ...]] = [(named(changes),) for changes in ring_epochs(seed, rings, size)]
    build = dataflow("cc")

    def located(scope: timely.Scope) -> GraphRun:
        inputs, output = build(scope)
        return GraphRun(epochs, inputs, output, scope.process_index, scope.processes)

    return located


def named(changes: list[Change]) -> list[Change]:
    return [((f"n{a}", f"n{b}"), d) for (a, b), d in changes]


@pytest.mark.parametrize(
    ("mode", "lag"), [(Mode("one", workers=2), 2), (Mode("tcp", processes=2), 1)], ids=["one-w2-in-flight", "tcp-p2"]
)
def test_rings_of_string_nodes_match_networkx(mode: Mode, lag: int) -> None:
    """Several epochs in flight: a worker's proposals for a later epoch's times reach its peer
    while an earlier epoch's are still on their way."""
    seed, rings, size = 5, 8, 23
    results = mode.run(named_program, seed, rings, size, lag=lag, timeout=100)
    changes, final = merged(results)
    state: dict[Any, int] = {}
    previous: dict[Any, int] = {}
    for e, epoch in enumerate(ring_epochs(seed, rings, size)):
        state = apply(state, named(epoch))
        expected = answer("cc", state)
        assert changes.get(e, {}) == difference(expected, previous), f"epoch {e}"
        previous = expected
    assert final == previous
