"""The bloom workloads of tests/bloom/test_processes.py, as a program for `Mode.run`.

One dataflow runs four programs: `bloom.programs.reachability` asynchronous (loop ``reach``)
and coordinated (loop ``reach_sync``) on the same seeded random graph and sources,
`bloom.programs.shortest_paths` (loop ``sssp``) on that graph with a weight per edge, and
`bloom.programs.quorum` (loop ``quorum``) on seeded random votes. Each gets new records in
each of `EPOCHS` epochs. Every process feeds only its share of each epoch's records (those at
positions ``i`` with ``i % processes == process_index``), so that a request's votes, for
instance, come from several processes.

A process's result: per output and epoch, its share of the answer (`Output.answer`), and per
loop the notifications each of its stages requested (`Vertex.statistics`, summed over this
process's workers), and how many workers it ran.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import timely
from tests.support.modes import Run
from timely_libs import bloom

EPOCHS = 2
QUORUM = 3
LOOPS = ("reach", "reach_sync", "sssp", "quorum")
NODES = 40


def edge_epochs(seed: int) -> list[list[tuple[int, int]]]:
    """Per epoch, new directed edges (some repeated, some self-loops possible)."""
    rng = random.Random(f"bloom-edges/{seed}")
    return [[(rng.randrange(NODES), rng.randrange(NODES)) for _ in range(45)] for _ in range(EPOCHS)]


def weight(u: int, v: int) -> int:
    return (u * 7 + v * 3) % 10


def weighted_epochs(seed: int) -> list[list[tuple[int, int, int]]]:
    """The edges of `edge_epochs`, each with its weight."""
    return [[(u, v, weight(u, v)) for u, v in batch] for batch in edge_epochs(seed)]


def source_epochs(seed: int) -> list[list[int]]:
    rng = random.Random(f"bloom-sources/{seed}")
    return [rng.sample(range(NODES), 2) for _ in range(EPOCHS)]


def vote_epochs(seed: int) -> list[list[tuple[str, int]]]:
    """Per epoch, ``(request, voter)`` votes; a voter may vote twice for the same request."""
    rng = random.Random(f"bloom-votes/{seed}")
    return [[(f"req{rng.randrange(10)}", rng.randrange(6)) for _ in range(24)] for _ in range(EPOCHS)]


def share(records: list[Any], process_index: int, processes: int) -> list[Any]:
    return [r for i, r in enumerate(records) if i % processes == process_index]


@dataclass
class BloomRun(Run):
    seed: int
    process_index: int
    processes: int
    inputs: dict[str, timely.Input]
    outputs: dict[str, bloom.Output]
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch``'s records and advance past the epoch."""
        data: dict[str, list[Any]] = {
            "edges": edge_epochs(self.seed)[epoch],
            "weighted": weighted_epochs(self.seed)[epoch],
            "sources": source_epochs(self.seed)[epoch],
            "votes": vote_epochs(self.seed)[epoch],
        }
        for name, inp in self.inputs.items():
            inp.send(share(data[name], self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def answers(self) -> dict[str, dict[str, Any]]:
        """JSON-able: output -> epoch -> this process's share of the answer, sorted."""
        out: dict[str, dict[str, Any]] = {}
        for name, output in self.outputs.items():
            by_epoch = out[name] = {}
            for epoch in range(EPOCHS):
                answer = output.answer(epoch)
                if output.lattice:
                    by_epoch[str(epoch)] = {k: _revealed(v) for k, v in sorted(answer.items())}
                else:
                    by_epoch[str(epoch)] = sorted(json.loads(json.dumps(sorted(answer))))
        return out

    def probes(self) -> list[timely.Probe]:
        return [output.probe for output in self.outputs.values()]

    def result(self, comp: Any) -> dict[str, Any]:
        return {
            "process": self.process_index,
            "workers": len(comp.vertices("reach.reach")),
            "answers": self.answers(),
            "notifications": {loop: notifications_requested(comp, loop) for loop in LOOPS},
        }


def _revealed(value: Any) -> Any:
    """A lattice value as JSON: a set sorted, anything else as it is."""
    inner = value.reveal()
    return sorted(inner) if isinstance(inner, (set, frozenset)) else inner


def build(seed: int) -> Any:
    """The program of the workloads of ``seed`` (for `Mode.run`)."""

    def build(scope: timely.Scope) -> BloomRun:
        edges = scope.new_input("edges")
        weighted = scope.new_input("weighted")
        sources = scope.new_input("sources")
        votes = scope.new_input("votes")
        committed, tally = bloom.programs.quorum(votes, QUORUM, name="quorum")
        outputs = {
            "reach": bloom.programs.reachability(edges, sources, name="reach"),
            "reach_sync": bloom.programs.reachability(edges, sources, name="reach_sync", coordinated=True),
            "dist": bloom.programs.shortest_paths(weighted, sources, name="sssp"),
            "committed": committed,
            "tally": tally,
        }
        inputs = {"edges": edges, "weighted": weighted, "sources": sources, "votes": votes}
        return BloomRun(seed, scope.process_index, scope.processes, inputs, outputs)

    return build


def notifications_requested(comp: Any, loop: str) -> dict[str, int]:
    """Per stage of the loop named ``loop``: the notifications this process's vertices requested."""
    return {
        spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
        for spec in comp.graph.stages
        if spec.name.startswith(loop + ".")
    }
