"""A graph workload of tests/graph_workloads.py in every process of a cluster.

    timely run -n 3 tests/linq_graph_program.py ALGORITHM GRAPH SEED NODES EDGES HUB EPOCHS LAG

Every process builds the same workload and dataflow, feeds its share of each epoch's changes
(`graph_workloads.share`), runs up to ``LAG`` epochs ahead of the output, closes each input
right after its last change, and prints one line ``RESULT <json>``: the changes its output
reported per epoch and its final contents. Its output holds the records its workers own, so
the union over processes is the answer.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import timely
from tests.graph_workloads import closing_early, dataflow, share, workload
from tests.linq_in_flight import drive


def main(argv: list[str]) -> None:
    algorithm, graph = argv[0], argv[1]
    seed, nodes, edges, hub, epochs, lag = map(int, argv[2:8])
    w = workload(algorithm, graph, seed, nodes, edges, epochs, hub)
    build = dataflow(algorithm)

    def located(scope: timely.Scope) -> tuple[Any, ...]:
        return (*build(scope), scope.process_index, scope.processes)

    with timely.execute(located, timeout=120) as (comp, (inputs, out, index, processes)):
        mine = [tuple(share(c, index, processes) for c in per_input) for per_input in w.epochs()]
        drive(
            comp, inputs, mine, out.probe, lambda e: None, lag=lag, close_after=closing_early(w.epochs()), timeout=100
        )
        comp.run(timeout=100)
    result = {
        "changes": {str(e): [[r, d] for r, d in c] for e, c in sorted(out.changes.items())},
        "final": [[r, c] for r, c in out.contents().items()],
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
