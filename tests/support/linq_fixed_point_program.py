"""Reachability as a user writes it (`fixed_point` of a `join` and a `distinct`), as a program
for `Mode.run` (tests/linq/test_fixed_point_feedback.py).

The edges change over `EPOCHS` epochs with insertions and retractions
(`linq_reference.random_epochs`); the roots are nodes 0 and 1 from the start, and node 1
leaves at epoch 3. Every process builds the same dataflow, feeds the changes ``i`` with
``i % processes == process_index``, and reports per epoch what its output reported and the
names of the graph's stages.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import timely
from tests.support import linq_reference as ref
from tests.support.linq_in_flight import reported, share
from tests.support.modes import Run
from timely_libs import linq

EPOCHS = 8
NODES = 12
ROOTS: list[list[ref.Change]] = [[(0, 1), (1, 1)], [], [], [(1, -1)], [], [], [], []]


def edges(seed: int) -> list[list[ref.Change]]:
    rng = random.Random(seed)
    return ref.random_epochs(rng, lambda: (rng.randrange(NODES), rng.randrange(NODES)), initial=14, epochs=EPOCHS - 1)


def reach(roots: linq.Collection, graph: linq.Collection) -> linq.Collection:
    """The nodes reachable from ``roots`` along ``graph``'s edges: ``roots + reach ⋈ edges``, distinct."""

    def step(x: linq.Collection) -> linq.Collection:
        proposals = x.join(graph.enter(x.scope), _self, itemgetter(0), _target, name="proposals")
        return roots.enter(x.scope).concat(proposals, name="with_roots").distinct(name="reached")

    return roots.fixed_point(step, name="reach")


def _self(n: Any) -> Any:
    return n


def _target(n: int, edge: tuple[int, int]) -> int:
    return edge[1]


def reachable(roots: ref.Multiset, graph: ref.Multiset) -> ref.Multiset:
    """Breadth-first search from scratch: each reachable node once."""
    seen = {n for n, c in roots.items() if c > 0}
    todo = list(seen)
    while todo:
        n = todo.pop()
        for (s, d), c in graph.items():
            if s == n and c > 0 and d not in seen:
                seen.add(d)
                todo.append(d)
    return {n: 1 for n in seen}


@dataclass
class ReachRun(Run):
    seed: int
    process_index: int
    processes: int
    roots: linq.CollectionInput
    graph: linq.CollectionInput
    output: linq.CollectionOutput
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        for inp, changes in ((self.roots, ROOTS[epoch]), (self.graph, edges(self.seed)[epoch])):
            inp.update(share(changes, self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def result(self, comp: Any = None) -> dict[str, Any]:
        return {"changes": reported(self.output), "stages": [s.name for s in comp.graph.stages]}


def builder(seed: int) -> Callable[[timely.Scope], ReachRun]:
    def build(scope: timely.Scope) -> ReachRun:
        roots, graph = linq.new_input(scope, "roots"), linq.new_input(scope, "graph")
        output = linq.CollectionOutput(reach(roots.collection, graph.collection), name="result")
        return ReachRun(seed, scope.process_index, scope.processes, roots, graph, output)

    return build
