"""Checkpoint and restore of libs/pregel's stages (Naiad §3.4), taken by hand: run epochs 0..F,
wait until the outputs pass F, collect every vertex's `checkpoint()` through the codec, start a
fresh computation of the same dataflow (with the same or another number of workers), `restore`
every instance, and feed epochs F+1..N. The answers of the resumed run must equal those of an
undisturbed run over 0..N and NetworkX's.

Pregel keeps no state from one epoch to the next (each epoch's graph is a separate run), so its
stages checkpoint None; what is tested is that a resumed computation, on any number of workers,
gives the same answers, and that a checkpoint taken in the middle of a run is refused instead of
silently losing the run.

The helpers here (`resume`, `take_checkpoint`, `restore_all`) are shared with
tests/bloom/test_checkpoint.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import networkx as nx
import pytest

import timely
from tests.support import TIMEOUT
from tests.support.pregel_harness import both_ways, digraph, random_edges
from timely_libs import pregel
from timely_libs.pregel import programs

CODEC = timely.Codec(allow_pickle=True)

Build = Callable[[timely.Scope], tuple[list[timely.Input], list[timely.Probe]]]
"""A dataflow: returns its inputs (fed one list of records per epoch each) and the probes to wait on."""


# The checkpoint harness ---------------------------------------------------------------------------
def round_trip(state: Any) -> Any:
    """``state`` after the checkpoint codec, as the runtime stores it (a `KeyedState`'s pieces
    each go through the codec: lists come back as tuples)."""
    if isinstance(state, timely.KeyedState):
        return timely.KeyedState(list(CODEC.decode(CODEC.encode(tuple(state.pieces)))))
    return CODEC.decode(CODEC.encode(state))


def take_checkpoint(comp: timely.Computation) -> dict[str, list[Any]]:
    """Per stage, the state of each instance (by worker index), after the codec. Every piece
    of a `KeyedState` must belong to the worker it was taken on: its route goes there."""
    states: dict[str, list[Any]] = {}
    for spec in comp.graph.stages:
        vertices = comp.vertices(spec.name)
        states[spec.name] = [v.checkpoint() for v in vertices]
        for index, state in enumerate(states[spec.name]):
            if isinstance(state, timely.KeyedState):
                for route, _ in state.pieces:
                    assert type(route) is int, f"{spec.name}: route {route!r}"
                    assert route % len(vertices) == index, f"{spec.name}: a piece routed to {route} on worker {index}"
        states[spec.name] = [round_trip(s) for s in states[spec.name]]
    return states


def restore_all(comp: timely.Computation, states: dict[str, list[Any]], seed: int = 0) -> None:
    """Restore every instance of a fresh computation. On another number of workers each
    `KeyedState` piece goes to ``route % peers``, the pieces of several old instances mixed in a
    shuffled order; a stage with any other state cannot be rescaled."""
    rng = random.Random(seed)
    for name, old in states.items():
        if all(s is None for s in old):
            continue
        vertices = comp.vertices(name)
        if len(vertices) == len(old):
            for vertex, state in zip(vertices, old, strict=True):
                if state is not None:
                    vertex.restore(state)
            continue
        assert all(s is None or isinstance(s, timely.KeyedState) for s in old), f"{name} cannot be rescaled"
        pieces = [piece for s in old if s is not None for piece in s.pieces]
        rng.shuffle(pieces)
        shares: list[list[tuple[int, Any]]] = [[] for _ in vertices]
        for route, piece in pieces:
            shares[route % len(vertices)].append((route, piece))
        for vertex, share in zip(vertices, shares, strict=True):
            vertex.restore(timely.KeyedState(share))


def feed(
    comp: timely.Computation,
    inputs: Sequence[timely.Input],
    probes: Sequence[timely.Probe],
    feeds: Sequence[Sequence[Sequence[Any]]],
    epochs: range,
) -> None:
    """Feed each epoch's records to every input and wait until every probe has passed it."""
    for epoch in epochs:
        for inp, records in zip(inputs, feeds, strict=True):
            if inp.epoch < epoch:
                inp.advance_to(epoch)
            if records[epoch]:
                inp.send(list(records[epoch]))
            inp.advance_to(epoch + 1)
        for probe in probes:
            comp.wait_passed(probe, epoch, timeout=TIMEOUT)


def resume(
    make: Callable[[], tuple[Build, Any]],
    feeds: Sequence[Sequence[Sequence[Any]]],
    *,
    after: int,
    workers: int,
    resume_workers: int,
) -> tuple[Any, Any, dict[str, list[Any]]]:
    """Run epochs 0..``after`` on ``workers``, checkpoint, and run the rest on ``resume_workers``
    from the restored state. ``make()`` gives a build and the object its outputs are collected
    in; returns the first run's and the resumed run's, and the checkpoint."""
    epochs = len(feeds[0])
    build, first = make()
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, probes)):
        feed(comp, inputs, probes, feeds, range(after + 1))
        states = take_checkpoint(comp)
    build, second = make()
    with timely.execute(build, workers=resume_workers, timeout=TIMEOUT) as (comp, (inputs, probes)):
        restore_all(comp, states, seed=after)
        for inp in inputs:
            inp.advance_to(after + 1)
        feed(comp, inputs, probes, feeds, range(after + 1, epochs))
    return first, second, states


def undisturbed(make: Callable[[], tuple[Build, Any]], feeds: Sequence[Sequence[Sequence[Any]]], workers: int) -> Any:
    build, out = make()
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, probes)):
        feed(comp, inputs, probes, feeds, range(len(feeds[0])))
    return out


# Pregel over several epochs ------------------------------------------------------------------------
EPOCHS = 4


def pregel_make(program: Callable[[], Any], name: str = "pg", **kwargs: Any) -> Callable[[], tuple[Build, Any]]:
    """A dataflow running ``program`` on each epoch's graph; collects ``{epoch: {id: value}}``."""

    def make() -> tuple[Build, Any]:
        results: dict[int, dict[Any, Any]] = {}

        def collect(time: timely.Timestamp, records: list[Any]) -> None:
            out = results.setdefault(time.epoch, {})
            for vid, value in records:
                assert vid not in out, f"epoch {time.epoch}: vertex {vid!r} reported twice"
                out[vid] = value

        def build(scope: timely.Scope) -> tuple[list[timely.Input], list[timely.Probe]]:
            edges = scope.new_input("edges")
            return [edges], [pregel.pregel(program(), edges, name=name, **kwargs).subscribe(collect)]

        return build, results

    return make


def growing_graph(seed: int, nodes: int = 40, per_epoch: int = 12) -> list[list[tuple[int, int]]]:
    """Each epoch's whole graph: the edges of the previous epoch and some more (so the answers change)."""
    rng = random.Random(seed)
    graphs: list[list[tuple[int, int]]] = []
    edges: list[tuple[int, int]] = [(i, i + 1) for i in range(0, nodes, 7)]  # every id appears at least once
    for _ in range(EPOCHS):
        edges = edges + random_edges(rng, nodes, per_epoch, self_loops=False, duplicates=False)
        graphs.append(list(edges))
    return graphs


def components_nx(edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    g = nx.Graph(list(edges))
    return {v: min(c) for c in nx.connected_components(g) for v in c}


def joined(first: dict[int, Any], second: dict[int, Any], after: int) -> dict[int, Any]:
    """The resumed computation's answers: the first run's up to the checkpoint, then the second's."""
    assert all(e <= after for e in first), sorted(first)
    assert all(e > after for e in second), f"the resumed run answered for epochs {sorted(second)}"
    return {**first, **second}


@pytest.mark.parametrize(("workers", "resume_workers"), [(1, 1), (3, 3), (2, 3), (3, 1)])
@pytest.mark.parametrize("after", [0, 2])
def test_connected_components_resume_after_a_checkpoint(workers: int, resume_workers: int, after: int) -> None:
    graphs = [both_ways(g) for g in growing_graph(seed=after * 10 + workers)]
    make = pregel_make(programs.ConnectedComponents, "cc")
    first, second, states = resume(make, [graphs], after=after, workers=workers, resume_workers=resume_workers)
    assert states["cc.superstep"] == [None] * workers  # nothing outlives an epoch's run
    assert states["cc.master"] == [None] * workers
    got = joined(first, second, after)
    assert got == undisturbed(make, [graphs], workers)
    for epoch, edges in enumerate(graphs):
        assert got[epoch] == components_nx(edges), f"epoch {epoch}"


@pytest.mark.parametrize("kind", ["PageRank", "ArrayPageRank"])
def test_pagerank_over_epochs_resumes_on_more_workers(kind: str) -> None:
    program = {"PageRank": programs.PageRank, "ArrayPageRank": programs.ArrayPageRank}[kind]
    graphs = growing_graph(seed=5, nodes=30, per_epoch=30)
    make = pregel_make(lambda: program(supersteps=200, tolerance=1e-12), "pr")
    first, second, states = resume(make, [graphs], after=0, workers=2, resume_workers=3)
    assert set(map(type, states["pr.superstep"])) == {type(None)}
    got = joined(first, second, 0)
    plain = undisturbed(make, [graphs], 2)
    for epoch, edges in enumerate(graphs):
        want = nx.pagerank(digraph(sorted({x for e in edges for x in e}), edges), tol=1e-13, max_iter=1000)
        assert set(got[epoch]) == set(want) == set(plain[epoch]), f"epoch {epoch}"
        for v in want:
            assert math.isclose(got[epoch][v], want[v], abs_tol=1e-6), (epoch, v, got[epoch][v], want[v])
            assert math.isclose(got[epoch][v], plain[epoch][v], rel_tol=1e-9, abs_tol=1e-12), (epoch, v)


def test_a_checkpoint_in_the_middle_of_a_run_is_refused() -> None:
    """The contract says a checkpoint comes after every epoch it covers is complete; one taken
    while a run's supersteps are going on would lose the run, so both stages refuse it."""
    errors: list[str] = []
    handles: dict[str, timely.Computation] = {}

    def progress(report: pregel.SuperstepReport) -> None:
        if report.superstep == 1 and not report.halting and not errors:
            for stage in ("cc.superstep", "cc.master"):
                for vertex in handles["comp"].vertices(stage)[:1]:
                    with pytest.raises(pregel.PregelError) as info:
                        vertex.checkpoint()
                    errors.append(str(info.value))

    def build(scope: timely.Scope) -> timely.Input:
        edges = scope.new_input("edges")
        pregel.pregel(programs.ConnectedComponents(), edges, name="cc", progress=progress)
        return edges

    with timely.execute(build, workers=2, timeout=TIMEOUT) as (comp, edges):
        handles["comp"] = comp
        edges.send(both_ways([(i, i + 1) for i in range(10)]))
    assert len(errors) == 2, errors
    for text in errors:
        assert "epoch(s) [0] are in flight" in text and "'cc'" in text
    for stage in ("cc.superstep", "cc.master"):  # once the run is over, nothing is left
        assert [v.checkpoint() for v in comp.vertices(stage)] == [None, None]
