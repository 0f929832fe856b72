"""The pregel workloads of tests/pregel/test_processes.py, as a program for `Mode.run`.

A workload is a program from `timely_libs.pregel.programs` and a seeded random graph per epoch
(`EPOCHS` of them, each a separate run). One dataflow runs every workload asked for, each on
its own pair of inputs (edges, vertices). Every process builds the same dataflow and feeds only
its share of each epoch's records: those at positions ``i`` with ``i % processes ==
process_index``, so that records reach the owning worker from anywhere. Each process keeps
the ``(vertex, value)`` results its workers emit; the union over processes must be the
answer, with every vertex reported exactly once.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import timely
from tests.support.modes import Run
from timely_libs import pregel
from timely_libs.pregel import programs

EPOCHS = 2
WORKLOADS = ("pagerank", "array_pagerank", "column_pagerank", "components", "shortest_paths", "kcore", "matching")
COLUMNS = ("column_pagerank",)
"""Workloads fed and read as numpy arrays (``pregel(columns=True)``), not a tuple per record."""

Edge = tuple[Any, ...]


@dataclass(frozen=True)
class Graph:
    vertices: list[tuple[Any, Any]]
    edges: list[Edge]


def _random_edges(rng: random.Random, nodes: int, count: int) -> list[tuple[int, int]]:
    edges = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(count)]
    return edges + edges[: count // 10]  # some duplicates


def _both_ways(edges: list[tuple[int, int]]) -> list[Edge]:
    return [*edges, *((v, u) for u, v in edges)]


def length(u: int, v: int) -> int:
    return 1 + (u * 7 + v * 13) % 9


def graph(workload: str, seed: int, epoch: int) -> Graph:
    """The graph of ``workload`` in ``epoch``: a different one each epoch."""
    rng = random.Random(f"{workload}/{seed}/{epoch}")
    if workload in ("pagerank", "array_pagerank", "column_pagerank"):
        n = 50 + 10 * epoch
        return Graph([(i, None) for i in range(n)], list(_random_edges(rng, n, 3 * n)))
    if workload == "components":
        n = 80
        return Graph([(i, None) for i in range(n)], _both_ways(_random_edges(rng, n, 60 + 10 * epoch)))
    if workload == "shortest_paths":
        n = 60
        return Graph([(i, None) for i in range(n)], [(u, v, length(u, v)) for u, v in _random_edges(rng, n, 120)])
    if workload == "kcore":
        n = 50
        return Graph([(i, None) for i in range(n)], _both_ways(_random_edges(rng, n, 110 + 20 * epoch)))
    if workload == "matching":
        left, right = 30, 25
        vertices = [(i, "L") for i in range(left)] + [(left + j, "R") for j in range(right)]
        edges = [(rng.randrange(left), left + rng.randrange(right)) for _ in range(70)]
        return Graph(vertices, edges)
    raise ValueError(f"unknown workload {workload!r}")


PAGERANK_SUPERSTEPS = 120
KCORE_K = 3
SOURCE = 0


def program(workload: str, seed: int) -> Any:
    if workload == "pagerank":
        return programs.PageRank(supersteps=PAGERANK_SUPERSTEPS)
    if workload in ("array_pagerank", "column_pagerank"):
        return programs.ArrayPageRank(supersteps=PAGERANK_SUPERSTEPS)
    if workload == "components":
        return programs.ConnectedComponents()
    if workload == "shortest_paths":
        return programs.ShortestPaths(SOURCE)
    if workload == "kcore":
        return programs.KCore(KCORE_K)
    if workload == "matching":
        return programs.BipartiteMatching(seed)
    raise ValueError(f"unknown workload {workload!r}")


@dataclass
class PregelRun(Run):
    """One process's inputs, and the results its workers emitted: workload -> epoch -> pairs."""

    seed: int
    process_index: int
    processes: int
    inputs: dict[str, tuple[timely.Input, timely.Input]]
    outputs: dict[str, timely.Probe]
    results: dict[str, dict[int, list[tuple[Any, Any]]]] = field(default_factory=dict)
    epochs = EPOCHS

    def probes(self) -> list[timely.Probe]:
        return list(self.outputs.values())

    def share(self, records: list[Any]) -> list[Any]:
        return [r for i, r in enumerate(records) if i % self.processes == self.process_index]

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch``'s graphs and advance past the epoch."""
        for workload, (edges, vertices) in self.inputs.items():
            g = graph(workload, self.seed, epoch)
            if workload in COLUMNS:  # this process's share as one block of arrays each
                src, dst = np.array(self.share(g.edges), dtype=np.int64).reshape(-1, 2).T
                edges.send([(src, dst)])
                vertices.send([(np.array([v for v, _ in self.share(g.vertices)], dtype=np.int64),)])
            else:
                edges.send(self.share(g.edges))
                vertices.send(self.share(g.vertices))
            edges.advance_to(epoch + 1)
            vertices.advance_to(epoch + 1)

    def result(self, comp: Any = None) -> dict[str, dict[str, list[list[Any]]]]:
        """JSON-able: per workload and epoch, the ``[vertex, value]`` pairs, sorted."""
        data = json.loads(json.dumps(self.results))
        return {w: {e: sorted(pairs, key=json.dumps) for e, pairs in by_epoch.items()} for w, by_epoch in data.items()}


def builder(seed: int, workloads: Sequence[str] = WORKLOADS) -> Callable[[timely.Scope], PregelRun]:
    """The program of the workloads of ``seed`` (for `Mode.run`)."""
    for w in workloads:
        if w not in WORKLOADS:
            raise ValueError(f"unknown workload {w!r}")

    def build(scope: timely.Scope) -> PregelRun:
        run = PregelRun(seed, scope.process_index, scope.processes, {}, {})
        for workload in workloads:
            edges = scope.new_input(f"{workload}_edges")
            vertices = scope.new_input(f"{workload}_vertices")
            columns = workload in COLUMNS
            out = pregel.pregel(program(workload, seed), edges, vertices, name=workload, columns=columns)
            box = run.results.setdefault(workload, {})

            def collect(
                time: timely.Timestamp, records: list[Any], box: dict[int, list[Any]] = box, columns: bool = columns
            ) -> None:
                if columns:  # (ids, values) arrays, one pair per worker
                    records = [pair for ids, values in records for pair in zip(ids.tolist(), values.tolist())]
                box.setdefault(time.epoch, []).extend(records)

            run.inputs[workload] = (edges, vertices)
            run.outputs[workload] = out.subscribe(collect, name=f"{workload}_results")
        return run

    return build


def union(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[Any, Any]]]:
    """Several processes' results as one: workload -> epoch -> {vertex: value}. A vertex
    reported by two processes (or twice by one) fails."""
    merged: dict[str, dict[str, dict[Any, Any]]] = {}
    for r in results:
        for workload, by_epoch in json.loads(json.dumps(r)).items():
            for epoch, pairs in by_epoch.items():
                into = merged.setdefault(workload, {}).setdefault(epoch, {})
                for vid, value in pairs:
                    assert vid not in into, f"{workload} epoch {epoch}: vertex {vid} reported twice"
                    into[vid] = value
    return merged
