"""The program ``bloom.reachability`` runs in every process (private; not a benchmark).

Started by `bench.bloom_reachability` as ``python -m timely.cli run -n N
bench/_bloom_worker.py MODE NODES EDGES SOURCES`` with MODE ``async`` or ``coordinated``
(`timely_libs.bloom.programs.reachability`'s ``coordinated=``). Every process builds the same graph
and sources (`bench.bloom_reachability.instance`) and feeds its share at epoch 0: edge ``i``
and source ``i`` when ``i % processes == index``. Each process prints one line
``BLOOMBENCH {json}``: the seconds from its first record fed to the end of the computation
(clock started once the cluster is connected and the dataflow built), how many reach facts
its subscription received per source, and the notifications the loop's stages requested in
this process (`Vertex.statistics`), which the asynchronous form must keep at zero.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import timely
from bench.bloom_reachability import MARK, instance
from timely_libs import bloom


def main(argv: list[str]) -> None:
    mode, nodes, edge_count, source_count = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    if mode not in ("async", "coordinated"):
        raise SystemExit(f"unknown mode {mode!r}; expected 'async' or 'coordinated'")
    edges, sources = instance(nodes, edge_count, source_count)
    per_source: dict[int, int] = {}

    def collect(at: timely.Timestamp, records: list[Any]) -> None:
        for s, _ in records:
            per_source[s] = per_source.get(s, 0) + 1

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        edge_input = scope.new_input("edges")
        source_input = scope.new_input("sources")
        out = bloom.programs.reachability(edge_input, source_input, coordinated=mode == "coordinated")
        out.stream.subscribe(collect, name="reached")
        return edge_input, source_input, scope.process_index, scope.processes

    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, built):
        edge_input, source_input, index, processes = built
        started = time.perf_counter()
        edge_input.send(edges[index::processes])
        source_input.send(sources[index::processes])
        edge_input.close()
        source_input.close()
        comp.run()
        finished = time.perf_counter()
        notifications = {
            spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
            for spec in comp.graph.stages
            if spec.name.startswith("reach.")
        }
    result = {
        "process": index,
        "seconds": finished - started,
        "per_source": per_source,
        "notifications": notifications,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
