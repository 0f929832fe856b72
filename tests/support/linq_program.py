"""The linq graph workloads of tests/linq/test_processes.py, as a program for `Mode.run`.

A workload is a seeded random directed graph that changes over `EPOCHS` epochs: epoch 0
inserts a batch of edges, every later epoch inserts a few new ones and deletes a few present
ones (the edge set stays a set: no duplicates, deletions only of present edges). Shortest
paths also gets a changing set of source nodes, and weights derived from each edge.

Every process builds the same dataflow and feeds only its share of each epoch's changes: the
changes ``i`` with ``i % processes == process_index``. In lockstep, after epoch ``e`` has
passed everywhere, each process takes a snapshot of what its `linq.CollectionOutput` holds. A
result (`LinqRun.result`) is JSON-able: per epoch the changes and the snapshot this process saw,
and the final contents after the inputs closed. The union over processes of those must equal
what one process sees alone.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import timely
from tests.support.linq_in_flight import share
from tests.support.modes import Run
from timely_libs import linq

EPOCHS = 10
ALGORITHMS = ("connected_components", "strongly_connected_components", "shortest_paths")

Edge = tuple[int, int]
Change = tuple[Any, int]


@dataclass(frozen=True)
class Size:
    nodes: int
    initial: int
    inserts: int
    deletes: int


# Strongly connected components runs a fixed point around four nested ones: keep its graph small.
SIZES = {
    "connected_components": Size(nodes=40, initial=40, inserts=6, deletes=4),
    "strongly_connected_components": Size(nodes=16, initial=24, inserts=4, deletes=3),
    "shortest_paths": Size(nodes=40, initial=60, inserts=6, deletes=4),
}


def edge_epochs(algorithm: str, seed: int) -> list[list[Change]]:
    """Per epoch, the ``((src, dst), diff)`` changes of the edge set."""
    size = SIZES[algorithm]
    rng = random.Random(f"{algorithm}/{seed}")
    present: set[Edge] = set()
    epochs: list[list[Change]] = []
    for epoch in range(EPOCHS):
        changes: list[Change] = []
        # deletions first, so that an edge is never deleted in the epoch that inserts it
        if epoch > 0:
            for edge in rng.sample(sorted(present), min(len(present), size.deletes)):
                present.discard(edge)
                changes.append((edge, -1))
        added = 0
        while added < (size.initial if epoch == 0 else size.inserts):
            edge = (rng.randrange(size.nodes), rng.randrange(size.nodes))
            if edge not in present and (edge, -1) not in changes:
                present.add(edge)
                changes.append((edge, 1))
                added += 1
        rng.shuffle(changes)
        epochs.append(changes)
    return epochs


def source_epochs(seed: int) -> list[list[Change]]:
    """Per epoch, the ``(node, diff)`` changes of the shortest-path sources."""
    nodes = SIZES["shortest_paths"].nodes
    rng = random.Random(f"sources/{seed}")
    present = set(rng.sample(range(nodes), 2))
    epochs: list[list[Change]] = [[(s, 1) for s in sorted(present)]]
    for epoch in range(1, EPOCHS):
        changes: list[Change] = []
        if epoch % 3 == 0:  # every third epoch one source moves
            gone = rng.choice(sorted(present))
            new = rng.choice(sorted(set(range(nodes)) - present))
            present.discard(gone)
            present.add(new)
            changes = [(gone, -1), (new, 1)]
        epochs.append(changes)
    return epochs


def weight(src: int, dst: int) -> int:
    return 1 + (src * 7 + dst * 13) % 9


def weighted(edge: Edge) -> tuple[int, int, int]:
    return (edge[0], edge[1], weight(*edge))


@dataclass
class LinqRun(Run):
    """One process's handles, and what it has seen so far."""

    algorithm: str
    seed: int
    process_index: int
    processes: int
    edges: linq.CollectionInput
    sources: linq.CollectionInput | None
    output: linq.CollectionOutput
    snapshots: dict[int, dict[Any, int]] = field(default_factory=dict)
    epochs = EPOCHS

    def share(self, changes: list[Change]) -> list[Change]:
        return share(changes, self.process_index, self.processes)

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch``'s changes and advance past it."""
        self.edges.update(self.share(edge_epochs(self.algorithm, self.seed)[epoch]))
        self.edges.advance_to(epoch + 1)
        if self.sources is not None:
            self.sources.update(self.share(source_epochs(self.seed)[epoch]))
            self.sources.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def observe(self, epoch: int) -> None:
        self.snapshot(epoch)

    def snapshot(self, epoch: int) -> None:
        """Keep the output's contents; call once the output has passed ``epoch``."""
        assert self.output.passed(epoch)
        self.snapshots[epoch] = self.output.contents()

    def result(self, comp: Any = None) -> dict[str, Any]:
        """JSON-able: per epoch the changes and snapshots, and the final contents."""
        return {
            "changes": {str(e): [[d, r] for d, r in c] for e, c in sorted(self.output.changes.items())},
            "snapshots": {str(e): [[d, r] for d, r in s.items()] for e, s in sorted(self.snapshots.items())},
            "final": [[d, r] for d, r in self.output.contents().items()],
        }


def builder(algorithm: str, seed: int) -> Callable[[timely.Scope], LinqRun]:
    """The dataflow computing ``algorithm`` over the workload of ``seed`` (a program for `Mode.run`)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}")

    def build(scope: timely.Scope) -> LinqRun:
        edges = linq.new_input(scope, "edges")
        sources = None
        if algorithm == "connected_components":
            result = linq.connected_components(edges.collection)
        elif algorithm == "strongly_connected_components":
            result = linq.strongly_connected_components(edges.collection)
        else:
            sources = linq.new_input(scope, "sources")
            result = linq.shortest_paths(edges.collection.select(weighted, name="weights"), sources.collection)
        output = linq.CollectionOutput(result, name="result")
        return LinqRun(algorithm, seed, scope.process_index, scope.processes, edges, sources, output)

    return build


def canonical(result: dict[str, Any]) -> dict[str, Any]:
    """JSON round trip (tuples become lists), every list sorted: order across workers is free."""
    data = json.loads(json.dumps(result))
    return {
        "changes": {e: sorted(c, key=json.dumps) for e, c in data["changes"].items()},
        "snapshots": {e: sorted(s, key=json.dumps) for e, s in data["snapshots"].items()},
        "final": sorted(data["final"], key=json.dumps),
    }


def union(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The results of several processes as one: each process holds the records its workers
    own, so the lists are concatenated (a record held twice stays twice, and fails a test)."""
    merged: dict[str, Any] = {"changes": {}, "snapshots": {}, "final": []}
    for r in results:
        r = json.loads(json.dumps(r))
        for key in ("changes", "snapshots"):
            for e, items in r[key].items():
                merged[key].setdefault(e, []).extend(items)
        merged["final"].extend(r["final"])
    return canonical(merged)
