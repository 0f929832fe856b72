"""The bloom workloads of tests/bloom/test_processes.py's real-process tests, and their driver.

The test imports this module for the workloads; every process of a cluster runs it as a
script and prints what it observed::

    timely run -n 2 -m tests.support.bloom_program SEED [lockstep|inflight] [WORKERS]

One dataflow runs three programs: `bloom.programs.reachability` asynchronous (loop ``reach``)
and coordinated (loop ``reach_sync``) on the same seeded random graph and sources, and
`bloom.programs.quorum` (loop ``quorum``) on seeded random votes. Each gets new records in
each of `EPOCHS` epochs. Every process feeds only its share of each epoch's records (those at
positions ``i`` with ``i % processes == process_index``), so that a request's votes, for
instance, come from several processes. With ``lockstep`` each process waits for every output
to pass an epoch before feeding the next; with ``inflight`` it feeds every epoch at once.

A process prints one line ``RESULT <json>``: per output and epoch, its share of the answer
(`Output.answer`), and per loop the notifications each of its stages requested
(`Vertex.statistics`, summed over this process's workers), and how many workers it ran.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from typing import Any

import timely
from libs import bloom

EPOCHS = 2
QUORUM = 3
LOOPS = ("reach", "reach_sync", "quorum")
NODES = 40


def edge_epochs(seed: int) -> list[list[tuple[int, int]]]:
    """Per epoch, new directed edges (some repeated, some self-loops possible)."""
    rng = random.Random(f"bloom-edges/{seed}")
    return [[(rng.randrange(NODES), rng.randrange(NODES)) for _ in range(45)] for _ in range(EPOCHS)]


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
class Run:
    seed: int
    process_index: int
    processes: int
    inputs: dict[str, timely.Input]
    outputs: dict[str, bloom.Output]

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch``'s records and advance past the epoch."""
        data: dict[str, list[Any]] = {
            "edges": edge_epochs(self.seed)[epoch],
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
                    by_epoch[str(epoch)] = {k: sorted(v.reveal()) for k, v in sorted(answer.items())}
                else:
                    by_epoch[str(epoch)] = sorted(json.loads(json.dumps(sorted(answer))))
        return out


def build(seed: int) -> Any:
    def build(scope: timely.Scope) -> Run:
        edges = scope.new_input("edges")
        sources = scope.new_input("sources")
        votes = scope.new_input("votes")
        committed, tally = bloom.programs.quorum(votes, QUORUM, name="quorum")
        outputs = {
            "reach": bloom.programs.reachability(edges, sources, name="reach"),
            "reach_sync": bloom.programs.reachability(edges, sources, name="reach_sync", coordinated=True),
            "committed": committed,
            "tally": tally,
        }
        inputs = {"edges": edges, "sources": sources, "votes": votes}
        return Run(seed, scope.process_index, scope.processes, inputs, outputs)

    return build


def notifications_requested(comp: Any, loop: str) -> dict[str, int]:
    """Per stage of the loop named ``loop``: the notifications this process's vertices requested."""
    return {
        spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
        for spec in comp.graph.stages
        if spec.name.startswith(loop + ".")
    }


WAIT = 20.0
"""Seconds a process may wait for one epoch to pass."""


def main(argv: list[str]) -> None:
    seed = int(argv[0])
    mode = argv[1] if len(argv) > 1 else "lockstep"
    workers = int(argv[2]) if len(argv) > 2 else None
    if mode not in ("lockstep", "inflight"):
        raise ValueError(f"unknown mode {mode!r}")
    with timely.execute(build(seed), workers=workers, timeout=60) as (comp, run):
        for epoch in range(EPOCHS):
            run.feed(epoch)
            if mode == "lockstep":
                for output in run.outputs.values():
                    comp.wait_passed(output.probe, epoch, timeout=WAIT)
        for output in run.outputs.values():
            comp.wait_passed(output.probe, EPOCHS - 1, timeout=WAIT)
        result = {
            "process": run.process_index,
            "workers": len(comp.vertices("reach.reach")),
            "answers": run.answers(),
            "notifications": {loop: notifications_requested(comp, loop) for loop in LOOPS},
        }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
