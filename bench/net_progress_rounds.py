"""``net.progress_rounds``: rounds of progress exchange per loop iteration across processes.

``timely_examples.connected_components.components`` (min-label propagation in a timely loop) on a
seeded random graph of `NODES` nodes and `EDGES` edges, in 2 and 4 OS processes
(`bench/_net_worker.py`, started by ``timely run -n N``), each feeding its share of the edges;
the labels are checked against a breadth-first search. From ``comp.statistics().network``:

- ``net.progress_rounds.pN``: the progress frames one process sends one peer per loop
  iteration (the most of any process). An iteration cannot be finished across processes with
  fewer than one (each must tell the others its part is done); every frame more is a round
  trip the loop may wait on. Target: at most 2.
- ``net.progress_rounds.p2.bytes``: progress bytes all processes sent per iteration, with the
  data bytes per iteration as the baseline.

Naiad §3.3 and §5.2 get their scaling from accumulating progress updates before broadcasting
them; this measures how far the runtime is from one round an iteration.
"""

from __future__ import annotations

from bench._harness import Context, benchmark
from bench._net import launch, load

NODES, EDGES, SEED = 20_000, 30_000, 42
TARGET_ROUNDS = 2.0


def _measure(ctx: Context, processes: int) -> tuple[float, float, float, int]:
    """(rounds per iteration, progress bytes per iteration, data bytes per iteration, iterations)."""
    before = load()
    results = launch(processes, "cc", "--nodes", NODES, "--edges", EDGES, "--seed", SEED)
    ctx.check(all(r["wrong_labels"] == 0 for r in results), "labels differ from the breadth-first search")
    iterations = max(r["iterations"] for r in results)
    ctx.check(iterations > 0, "the loop never iterated")
    net = [r["network"] for r in results]
    per_peer = max(x["progress_frames_sent"] for x in net) / (processes - 1)
    progress = sum(x["progress_bytes_sent"] for x in net)
    data = sum(x["data_bytes_sent"] for x in net)
    rounds = per_peer / iterations
    ctx.progress(
        f"{processes} processes: {iterations} iterations in {max(r['seconds'] for r in results):.2f} s; "
        f"{per_peer:,.0f} progress frames to each peer ({rounds:.1f} an iteration), {progress:,} progress "
        f"bytes, {data:,} data bytes (labels verified; {before})"
    )
    return rounds, progress / iterations, data / iterations, iterations


@benchmark(
    "net.progress_rounds", "progress frames per peer per loop iteration, connected components on 2 and 4 processes"
)
def progress_rounds(ctx: Context) -> None:
    rounds2, progress2, data2, _ = _measure(ctx, 2)
    ctx.record(
        "net.progress_rounds.p2",
        rounds2,
        "rounds",
        "one_round_per_iteration",
        1.0,
        target=f"<= {TARGET_ROUNDS:g}",
        met=rounds2 <= TARGET_ROUNDS,
    )
    ctx.record("net.progress_rounds.p2.bytes", progress2, "bytes", "data_bytes_per_iteration", data2)
    if not ctx.quick:
        rounds4, _, _, _ = _measure(ctx, 4)
        ctx.record(
            "net.progress_rounds.p4",
            rounds4,
            "rounds",
            "one_round_per_iteration",
            1.0,
            target=f"<= {TARGET_ROUNDS:g}",
            met=rounds4 <= TARGET_ROUNDS,
        )
