"""The program the ``linq.*`` benchmarks run in every process (private; not a benchmark).

Started by `bench.linq_graphs` as ``python -m timely.cli run -n N bench/_linq_worker.py SPEC``,
``SPEC`` a `bench.linq_graphs.Spec` as JSON. Every process generates the same workload
(`bench.linq_graphs.workload`) and feeds its share of the initial edges (edge ``i`` with
``i % processes == index``); process 0 then feeds each later epoch's changes. Each process loads
linq's compiled loops first (`timely_libs.linq.preload`, timed on its own), as a program in several
processes should, and prints one line ``LINQBENCH {json}``: the seconds to load them, the
seconds to the first answer (clock started once the cluster is connected; wall, and this
process's CPU), the milliseconds of each later epoch (wall, and this process's CPU), its resident memory before the dataflow ran
(the workload's Python lists) and its peak at the first answer, and a digest of its share of
the answers after the first epoch and at the end, which the parent compares with NetworkX's.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import timely
from bench.linq_graphs import ALGORITHMS, MARK, Spec, digest, workload
from timely_libs import linq


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main(argv: list[str]) -> None:
    spec = Spec.from_json(argv[0])
    load_seconds = linq.preload()
    edges, epochs = workload(spec)
    workload_mib = _resident_mib()

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        edge_input = linq.new_input(scope, "edges")
        source_input = linq.new_input(scope, "sources")
        result = ALGORITHMS[spec.algo](edge_input.collection, source_input.collection)
        return edge_input, source_input, linq.CollectionOutput(result), scope.process_index, scope.processes

    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, built):
        edge_input, source_input, out, index, processes = built
        started, started_cpu = time.perf_counter(), time.process_time()
        edge_input.insert_all(edges[index::processes])
        del edges
        if index == 0:
            source_input.insert(0)
        edge_input.advance_to(1)
        source_input.advance_to(1)
        comp.wait_passed(out.probe, 0)
        initial = time.perf_counter() - started
        initial_cpu = time.process_time() - started_cpu
        peak_mib = _peak_mib()
        first = digest(out.contents())
        latencies = []
        cpu = []
        for epoch, changes in enumerate(epochs, start=1):
            began, began_cpu = time.perf_counter(), time.process_time()
            if index == 0:
                edge_input.update(changes)
            edge_input.advance_to(epoch + 1)
            source_input.advance_to(epoch + 1)
            comp.wait_passed(out.probe, epoch)
            latencies.append((time.perf_counter() - began) * 1000)
            cpu.append((time.process_time() - began_cpu) * 1000)
        final = digest(out.contents())
    result = {
        "process": index,
        "load_seconds": load_seconds,
        "initial_seconds": initial,
        "initial_cpu_seconds": initial_cpu,
        "update_ms": latencies,
        "update_cpu_ms": cpu,
        "peak_mib": peak_mib,
        "peak_mib_end": _peak_mib(),
        "workload_mib": workload_mib,
        "first": first,
        "final": final,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
