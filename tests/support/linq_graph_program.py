"""A graph workload of tests/support/graph_workloads.py, as a program for `Mode.run`.

Every process builds the same workload and dataflow, feeds its share of each epoch's changes
(`linq_in_flight.share`), closes each input right after its last change, and reports the
changes its output saw per epoch and its final contents. Its output holds the records its
workers own, so the union over processes is the answer. Run it with a ``lag`` to have several
epochs in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import timely
from tests.support.graph_workloads import closing_early, dataflow, workload
from tests.support.linq_in_flight import reported, share
from tests.support.modes import Run
from timely_libs import linq


class GraphRun(Run):
    def __init__(
        self,
        epochs: list[tuple[list[Any], ...]],
        inputs: list[linq.CollectionInput],
        output: linq.CollectionOutput,
        index: int,
        processes: int,
    ) -> None:
        self.mine = [tuple(share(c, index, processes) for c in per_input) for per_input in epochs]
        self.closing = closing_early(epochs)
        self.inputs = inputs
        self.output = output
        self.epochs = len(epochs)

    def feed(self, epoch: int) -> None:
        for i, (inp, changes) in enumerate(zip(self.inputs, self.mine[epoch], strict=True)):
            if inp.input.closed:
                continue
            if changes:
                inp.update(changes)
            if self.closing[i] == epoch:
                inp.close()
            else:
                inp.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def result(self, comp: Any) -> dict[str, Any]:
        return {
            "changes": reported(self.output),
            "final": [[r, c] for r, c in self.output.contents().items()],
        }


def program(
    algorithm: str, graph: str, seed: int, nodes: int, edges: int, hub: int, epochs: int
) -> Callable[[timely.Scope], GraphRun]:
    """``algorithm`` over the workload these arguments make (for `Mode.run`)."""
    w = workload(algorithm, graph, seed, nodes, edges, epochs, hub)
    build = dataflow(algorithm)

    def located(scope: timely.Scope) -> GraphRun:
        inputs, output = build(scope)
        return GraphRun(w.epochs(), inputs, output, scope.process_index, scope.processes)

    return located
