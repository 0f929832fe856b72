"""The program ``pregel.pagerank`` runs in every process (private; not a benchmark).

Started by `bench.pregel_pagerank` as ``python -m timely.cli run -n N bench/_pregel_worker.py
PROGRAM NODES EDGES OUTDIR`` with PROGRAM ``array`` (``pregel.programs.ArrayPageRank``) or
``per_vertex`` (``pregel.programs.PageRank``). Every process builds the same graph
(`bench.pregel_pagerank.edge_list`) and feeds its share at epoch 0: vertex ``v`` as
``(v, None)`` when ``v % processes == index`` (so isolated nodes exist too) and edge ``i``
when ``i % processes == index``. Each process prints one line ``PREGELBENCH {json}``: the
seconds from its first record fed to the end of the computation (clock started once the
cluster is connected and the dataflow built), the part of that spent feeding the input, the
part until the graph was loaded (from timely_libs/pregel's progress report; process 0 only), its
peak resident memory and the sum of its ranks. The ``(id, rank)`` records its subscription
received go to ``OUTDIR/ranks-INDEX.npz`` (arrays ``ids`` and ``ranks``), which the parent
assembles and compares with SciPy's. Not on stdout: the launcher passes a line of over 1 MiB
on in pieces, and with ``PYTHONUNBUFFERED`` set a short write to the pipe silently drops the
rest of a line (seen here on lines over 128 KiB).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import timely
from bench.pregel_pagerank import DAMPING, MARK, SUPERSTEPS, edge_list
from timely_libs import pregel


def program(name: str) -> Any:
    if name == "array":
        return pregel.programs.ArrayPageRank(supersteps=SUPERSTEPS, damping=DAMPING)
    if name == "per_vertex":
        return pregel.programs.PageRank(supersteps=SUPERSTEPS, damping=DAMPING)
    raise SystemExit(f"unknown program {name!r}; expected 'array' or 'per_vertex'")


def main(argv: list[str]) -> None:
    name, nodes, edge_count, outdir = argv[0], int(argv[1]), int(argv[2]), Path(argv[3])
    edges = edge_list(nodes, edge_count)
    prog = program(name)
    ids: list[int] = []
    ranks: list[float] = []
    loaded: list[float] = []  # when the master reported the graph loaded (only in worker 0's process)
    supersteps: list[int] = []

    def report(r: pregel.SuperstepReport) -> None:
        if r.superstep < 0:
            loaded.append(time.perf_counter())
        else:
            supersteps.append(r.superstep)

    def collect(at: timely.Timestamp, records: list[Any]) -> None:
        for v, rank in records:
            ids.append(int(v))
            ranks.append(float(rank))

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        vertex_input = scope.new_input("vertices")
        edge_input = scope.new_input("edges")
        out = pregel.pregel(prog, edge_input, vertex_input, name="pagerank", progress=report)
        out.subscribe(collect, name="ranks")
        return vertex_input, edge_input, scope.process_index, scope.processes

    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, built):
        vertex_input, edge_input, index, processes = built
        started = time.perf_counter()
        vertex_input.send([(v, None) for v in range(index, nodes, processes)])
        edge_input.send(edges[index::processes])
        vertex_input.close()
        edge_input.close()
        fed = time.perf_counter()
        comp.run()
        finished = time.perf_counter()
    result = {
        "process": index,
        "seconds": finished - started,
        "feed_seconds": fed - started,
        "load_seconds": loaded[0] - started if loaded else None,
        "supersteps": len(supersteps),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rank_sum": sum(ranks),
        "count": len(ids),
    }
    np.savez(outdir / f"ranks-{index}.npz", ids=np.asarray(ids, dtype=np.int64), ranks=np.asarray(ranks))
    print(f"{MARK} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
