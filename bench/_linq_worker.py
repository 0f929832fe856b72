"""The program the ``linq.*`` benchmarks run in every process (private; not a benchmark).

Started by `bench.linq_graphs` as ``python -m timely.cli run -n N bench/_linq_worker.py ALGO
NODES EDGES UPDATES``. Every process generates the same seeded graph (`bench.linq_graphs.graph`)
and feeds its share of the edges (edge ``i`` with ``i % processes == index``); process 0 then
applies ``UPDATES`` epochs of one edge deletion plus one insertion (the same seeded sequence in
every process). Each process prints one line ``LINQBENCH {json}``: the seconds to the first
answer (clock started once the cluster is connected), the per-update milliseconds, its peak
resident memory, and a digest of its share of the answers after the first epoch and at the
end, which the parent compares with NetworkX's.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `libs` importable
    sys.path.insert(0, str(ROOT))

import timely  # noqa: E402
from bench.linq_graphs import ALGORITHMS, MARK, digest, graph, updates  # noqa: E402
from libs import linq  # noqa: E402


def main(argv: list[str]) -> None:
    algo, nodes, edge_count, update_count = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    edges = graph(algo, nodes, edge_count)
    changes = updates(algo, edges, nodes, update_count)

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        edge_input = linq.new_input(scope, "edges")
        source_input = linq.new_input(scope, "sources")
        result = ALGORITHMS[algo](edge_input.collection, source_input.collection)
        return edge_input, source_input, linq.CollectionOutput(result), scope.process_index, scope.processes

    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, built):
        edge_input, source_input, out, index, processes = built
        started = time.perf_counter()
        edge_input.insert_all(e for i, e in enumerate(edges) if i % processes == index)
        if index == 0:
            source_input.insert(0)
        edge_input.advance_to(1)
        source_input.advance_to(1)
        comp.wait_passed(out.probe, 0)
        initial = time.perf_counter() - started
        first = digest(out.contents())
        latencies = []
        for epoch, (removed, added) in enumerate(changes, start=1):
            began = time.perf_counter()
            if index == 0:
                edge_input.remove(removed)
                edge_input.insert(added)
            edge_input.advance_to(epoch + 1)
            source_input.advance_to(epoch + 1)
            comp.wait_passed(out.probe, epoch)
            latencies.append((time.perf_counter() - began) * 1000)
        final = digest(out.contents())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "process": index,
        "initial_seconds": initial,
        "update_ms": latencies,
        "peak_mib": peak_mib,
        "first": first,
        "final": final,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
