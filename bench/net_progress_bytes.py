"""``net.progress_bytes``: progress traffic per data byte of a connected-components loop.

``timely_examples.connected_components.components`` (min-label propagation in a timely loop) on a
seeded random graph of `NODES` nodes and `EDGES` edges, in `PROCESSES` OS processes
(`bench/_net_worker.py`, started by ``timely run -n N``), each feeding its share of the
edges. The labels are checked against a breadth-first search. From
``comp.statistics().network`` summed over the processes:

``net.progress_bytes`` = progress bytes sent / data bytes sent (payload bytes of the frames,
without the 4-byte length prefix). Baseline ``one_frame_per_iteration``: the same ratio if
each process had sent each peer exactly one minimal progress frame per loop iteration (one
capability moving from iteration ``i`` to ``i + 1``: two changes, msgpack-encoded as the
runtime encodes them). No distributed loop can tell its peers that an iteration is done with
less, so ``ratio`` = how many times that floor the runtime actually sent (data-message counts
must travel too, so the floor is not reachable; a small multiple of it is good).

``net.progress_bytes.progress`` is the absolute progress bytes, with baseline the data bytes
(``data_bytes_sent``): its ratio is the progress/data ratio again, with both sizes shown.
The ratio depends on when the scheduler flushes, so the full run takes the median of `RUNS_FULL`.
"""

from __future__ import annotations

import msgpack

from bench._harness import Context, benchmark
from bench._net import launch, load

PROCESSES = 2
NODES, EDGES, SEED = 20_000, 30_000, 42
RUNS_FULL, RUNS_QUICK = 3, 1
PROGRESS = 2  # the runtime's frame kind for a progress batch (timely._runtime.cluster.PROGRESS)


def floor_bytes(iterations: int, processes: int) -> int:
    """Progress bytes if every process sent every peer one minimal frame per iteration."""
    per_round = sum(len(msgpack.packb([PROGRESS, [[(0, i + 1), 1, 1], [(0, i), 1, -1]]])) for i in range(iterations))
    return per_round * processes * (processes - 1)


@benchmark("net.progress_bytes", "progress bytes per data byte, connected components in 2 processes over TCP")
def progress_bytes(ctx: Context) -> None:
    runs = RUNS_QUICK if ctx.quick else RUNS_FULL
    outcomes = []
    for run in range(1, runs + 1):
        before = load()
        # every process checks its labels against a breadth-first search of the whole graph
        results = launch(PROCESSES, "cc", "--nodes", NODES, "--edges", EDGES, "--seed", SEED)
        first = results[0]
        ctx.check(all(r["wrong_labels"] == 0 for r in results), "labels differ from the breadth-first search")
        ctx.check(all(r["nodes_elsewhere"] == 0 for r in results), "a process holds labels of another's nodes")
        nodes = sum(r["nodes_here"] for r in results)
        node_sum = sum(r["node_sum_here"] for r in results)
        ctx.check(
            (nodes, node_sum) == (first["nodes_expected"], first["node_sum_expected"]),
            f"the processes labelled {nodes:,} nodes; the graph has {first['nodes_expected']:,}",
        )
        net = [r["network"] for r in results]
        data = sum(x["data_bytes_sent"] for x in net)
        progress = sum(x["progress_bytes_sent"] for x in net)
        frames = sum(x["progress_frames_sent"] for x in net)
        data_frames = sum(x["data_frames_sent"] for x in net)
        iterations = max(r["iterations"] for r in results)
        floor = floor_bytes(iterations, PROCESSES)
        outcomes.append((progress / data, progress, data, floor))
        ctx.progress(
            f"run {run}/{runs}: {iterations} iterations in {max(r['seconds'] for r in results):.2f} s; "
            f"data {data:,} B in {data_frames} frames, progress {progress:,} B in {frames} frames "
            f"(floor {floor:,} B); ratio {progress / data:.2e} (labels verified; {before})"
        )
    outcomes.sort()
    ratio, progress, data, floor = outcomes[len(outcomes) // 2]  # the median run
    ctx.record("net.progress_bytes", ratio, "ratio", "one_frame_per_iteration", floor / data)
    ctx.record("net.progress_bytes.progress", progress, "bytes", "data_bytes_sent", data)
