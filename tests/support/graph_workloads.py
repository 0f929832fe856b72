"""Changing graphs for the linq graph tests: uniform and skewed, changed epoch by epoch.

A `Workload` is a seeded initial graph (uniform, or power-law with one hub:
`bench.linq_graphs.power_law_graph`) and epochs of changes, each of a named kind:
single insertions and deletions, insertions and deletions at the hub, deletions that split
the answer (a bridge of the undirected graph, an edge inside a strongly connected
component, an edge on a shortest path), batches mixing all of these, and churn (an edge
added and removed again in one epoch). Every deletion removes an edge present at the time;
duplicates and self-loops occur, as in real data. A workload is plain data, the same in
every process that builds it with the same arguments.

The oracles are NetworkX's, from `tests/support/linq_reference.py`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

import timely
from bench.linq_graphs import power_law_graph
from tests.support import linq_reference as ref
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths
from timely_libs import linq

__all__ = ["ALGORITHMS", "KINDS", "Workload", "answer", "closing_early", "dataflow", "workload"]

Edge = tuple[int, ...]
"""``(src, dst)``, or ``(src, dst, weight)`` for shortest paths."""
Change = tuple[Any, int]

ALGORITHMS = ("cc", "scc", "sssp")

KINDS = ("insert", "delete", "hub_insert", "hub_delete", "split", "batch", "churn")
"""What an epoch after the first does; `Workload` cycles through a shuffled list of them."""


@dataclass
class Workload:
    """Epochs of changes to the edges (and, for shortest paths, to the source nodes)."""

    algorithm: str
    hub: int
    edges: list[list[Change]]
    sources: list[list[Change]]
    kinds: list[str]
    """The kind of each epoch after the first (which loads the graph)."""

    def epochs(self) -> list[tuple[list[Change], ...]]:
        """Per epoch, the changes of each input: edges, then sources for shortest paths."""
        if self.algorithm == "sssp":
            return list(zip(self.edges, self.sources))
        return [(e,) for e in self.edges]

    def states(self) -> list[tuple[ref.Multiset, ...]]:
        """Each input's multiset after each epoch."""
        out: list[tuple[ref.Multiset, ...]] = []
        for per_input in self.epochs():
            before = out[-1] if out else tuple({} for _ in per_input)
            out.append(tuple(ref.apply(s, c) for s, c in zip(before, per_input)))
        return out


def answer(algorithm: str, *inputs: ref.Multiset) -> ref.Multiset:
    """NetworkX's answer for the accumulated inputs, as the linq function reports it."""
    if algorithm == "cc":
        return nx_components(*inputs)
    if algorithm == "scc":
        return nx_scc_edges(*inputs)
    return nx_shortest_paths(*inputs)


def _weight(rng: random.Random) -> int:
    return rng.randint(1, 9)


def workload(
    algorithm: str,
    graph: str,
    seed: int,
    nodes: int,
    edges: int,
    epochs: int,
    hub_degree: int = 0,
    batch: int = 40,
) -> Workload:
    """A seeded ``graph`` (``"uniform"`` or ``"skewed"``) of ``nodes`` and ``edges``, then
    ``epochs`` epochs of changes for ``algorithm``. A skewed graph's hub has ``hub_degree``
    neighbours; a uniform graph's "hub" is its node of highest degree."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    rng = random.Random(f"{algorithm}/{graph}/{seed}")
    if graph == "skewed":
        pairs, hub = power_law_graph(seed, nodes, edges, hub_degree)
    elif graph == "uniform":
        pairs = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]
        hub = Counter(n for e in pairs for n in e).most_common(1)[0][0]
    else:
        raise ValueError(f"unknown graph {graph!r}")
    if algorithm == "sssp":
        initial: list[Edge] = [(a, b, _weight(rng)) for a, b in pairs]
        roots = [hub, rng.randrange(nodes)]
    else:
        initial = list(pairs)
        roots = []
    changer = _Changer(algorithm, rng, nodes, hub, initial, roots)
    kinds = [KINDS[i % len(KINDS)] for i in range(epochs)]
    rng.shuffle(kinds)
    edge_epochs = [[(e, 1) for e in initial]]
    for kind in kinds:
        edge_epochs.append(changer.epoch(kind, batch))
    source_epochs = [[(r, 1) for r in roots]] + [[] for _ in kinds]
    if algorithm == "sssp" and epochs >= 3:  # one source moves to another node, once
        moved = rng.randrange(nodes)
        source_epochs[epochs // 2] = [(roots[1], -1), (moved, 1)]
    return Workload(algorithm, hub, edge_epochs, source_epochs, kinds)


class _Changer:
    """Makes each epoch's changes, keeping the edge multiset so deletions remove present edges."""

    def __init__(
        self, algorithm: str, rng: random.Random, nodes: int, hub: int, edges: list[Edge], roots: list[int]
    ) -> None:
        self.algorithm = algorithm
        self.rng = rng
        self.nodes = nodes
        self.hub = hub
        self.present: Counter[Edge] = Counter(edges)
        self.roots = roots

    # single changes ---------------------------------------------------------------------------
    def _new(self, at_hub: bool) -> Edge:
        rng = self.rng
        a, b = rng.randrange(self.nodes), rng.randrange(self.nodes)
        if at_hub:
            a, b = (self.hub, b) if rng.random() < 0.5 else (a, self.hub)
        return (a, b, _weight(rng)) if self.algorithm == "sssp" else (a, b)

    def _insert(self, edge: Edge) -> Change:
        self.present[edge] += 1
        return (edge, 1)

    def _delete(self, edge: Edge) -> Change:
        self.present[edge] -= 1
        if not self.present[edge]:
            del self.present[edge]
        return (edge, -1)

    def _some(self, edges: list[Edge]) -> Edge:
        """A random edge of ``edges`` that is still present."""
        while True:
            edge = edges[self.rng.randrange(len(edges))]
            if edge in self.present:
                return edge

    def _hub_edge(self) -> Edge | None:
        """A present edge at the hub; half the time one whose other end has no other edge,
        so that deleting it splits that node off."""
        hub = self.hub
        spokes = sorted(e for e in self.present if hub in e[:2] and e[0] != e[1])
        if not spokes:
            return None
        if self.rng.random() < 0.5:
            degree = Counter(n for e, c in self.present.items() for n in e[:2] for _ in range(c))
            leaves = [e for e in spokes if degree[e[0] if e[1] == hub else e[1]] == 1]
            if leaves:
                return self._some(leaves)
        return self._some(spokes)

    def _splitting(self) -> Edge | None:
        """A present edge whose deletion changes the answer: a bridge (components), an edge
        inside a strongly connected component that then falls apart, an edge on a shortest
        path with no other path as short."""
        present = self.present
        candidates: list[Edge]
        if self.algorithm == "cc":
            pairs = Counter(tuple(sorted(e)) for e, c in present.items() for _ in range(c) if e[0] != e[1])
            graph = nx.Graph(list(pairs))
            bridges = _bridges(graph, pairs)
            candidates = sorted(e for e in present if tuple(sorted(e)) in bridges)
            return self._some(candidates) if candidates else None
        before = self._answer(dict(present))
        if self.algorithm == "scc":
            candidates = sorted(e for e in present if e in before and present[e] == 1 and e[0] != e[1])
        else:
            dist = {node: d for node, d in before}
            candidates = sorted(
                e for e in present if present[e] == 1 and e[0] in dist and dist[e[0]] + e[2] == dist.get(e[1])
            )
        self.rng.shuffle(candidates)
        for edge in candidates[:20]:
            after = dict(present)
            del after[edge]
            if self._answer(after) != before:
                return edge
        return None

    def _answer(self, edges: ref.Multiset) -> ref.Multiset:
        if self.algorithm == "sssp":
            return answer("sssp", edges, {r: 1 for r in self.roots})
        return answer(self.algorithm, edges)

    # epochs -----------------------------------------------------------------------------------
    def epoch(self, kind: str, batch: int) -> list[Change]:
        rng = self.rng
        everything = sorted(self.present)
        if kind == "insert":
            return [self._insert(self._new(at_hub=False))]
        if kind == "hub_insert":
            return [self._insert(self._new(at_hub=True))]
        if kind == "delete":
            return [self._delete(self._some(everything))]
        if kind == "hub_delete":
            edge = self._hub_edge()
            return [self._delete(edge)] if edge else []
        if kind == "split":
            edge = self._splitting()
            return [self._delete(edge)] if edge else [self._delete(self._some(everything))]
        if kind == "churn":
            new = self._new(at_hub=rng.random() < 0.5)
            old = self._some(everything)
            return [(new, 1), (new, -1), self._delete(old), self._insert(old)]
        if kind == "batch":
            changes: list[Change] = []
            for _ in range(batch):
                roll = rng.random()
                if roll < 0.4:
                    changes.append(self._delete(self._some(everything)))
                elif roll < 0.5:
                    edge = self._hub_edge()
                    if edge:
                        changes.append(self._delete(edge))
                elif roll < 0.6:
                    changes.append(self._insert(self._new(at_hub=True)))
                else:
                    changes.append(self._insert(self._new(at_hub=False)))
            return changes
        raise ValueError(f"unknown kind of epoch {kind!r}")


def _bridges(graph: nx.Graph, pairs: Counter[tuple[int, ...]]) -> set[tuple[int, ...]]:
    """The bridges of ``graph`` that are single edges (a doubled edge is no bridge)."""
    return {tuple(sorted(e)) for e in nx.bridges(graph) if pairs[tuple(sorted(e))] == 1}


def dataflow(algorithm: str) -> Callable[[timely.Scope], tuple[list[linq.CollectionInput], linq.CollectionOutput]]:
    """The dataflow computing ``algorithm``: its inputs (edges, and sources for shortest
    paths) and its output."""

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        edges = linq.new_input(scope, "edges")
        if algorithm == "cc":
            return [edges], linq.CollectionOutput(linq.connected_components(edges.collection), name="result")
        if algorithm == "scc":
            return [edges], linq.CollectionOutput(linq.strongly_connected_components(edges.collection), name="result")
        sources = linq.new_input(scope, "sources")
        result = linq.shortest_paths(edges.collection, sources.collection)
        return [edges, sources], linq.CollectionOutput(result, name="result")

    return build


def closing_early(epochs: list[tuple[list[Change], ...]]) -> list[int | None]:
    """Per input, the epoch of its last change: close it right after feeding that epoch."""
    return [max((e for e, per_input in enumerate(epochs) if per_input[i]), default=0) for i in range(len(epochs[0]))]
