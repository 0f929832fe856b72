"""``net.frame_cost``: what the runtime pays per frame when a loop exchanges records between processes.

A loop of one vertex per worker (`bench/_net_worker.py`, mode ``ring``): at each iteration's
notification every worker passes the batch of `RECORDS` ints it holds on to the next worker,
exchanged by value, so on 2 processes each iteration costs every process one frame of records
and the progress that describes them, and nothing more is needed. The same program runs on one
process with two workers (no frames at all) in the same run. From the processes' statistics:

- ``net.frame_cost.p2.cpu``: CPU microseconds per iteration, both processes added up, against
  the one process with two workers (the same vertices, the same records).
- ``net.frame_cost.p2.per_frame``: the difference, per frame sent (by either process): what a
  frame costs its sender and its receiver together (encoding, the write, the wakeup, the
  read, decoding, the step it causes), against the CPU of one message of a plain uvloop
  all-to-all round (``raw``: one write and one read per process, no timely).
- ``net.frame_cost.p2.per_frame_kernel``: the part of ``per_frame`` spent in the kernel (system
  time: the write, the loopback's delivery, the read, the waits), against a plain message's;
  the rest is Python's.
- ``net.frame_cost.p2.frames``: frames one process sends its peer per iteration (the most of
  either), against one: records and progress in one frame.
- ``net.frame_cost.p2.steps`` and ``.wakeups``: scheduler steps, and wake-ups from idle, per
  iteration (the most of either process), against one.
- ``net.frame_cost.p2.switches``: context switches per iteration (the most of either process),
  against a plain all-to-all round's: each is a sleep for a frame or a preemption, after
  which the process runs on cold caches.

Each loop is timed after `WARMUP` iterations of its own; on a loaded machine the CPU figures,
not the wall ones, are the ones to compare, and the progress lines print the load.
"""

from __future__ import annotations

from typing import Any

from bench._harness import Context, benchmark
from bench._net import launch, load

RECORDS = 100
WARMUP = 500
ITERATIONS_FULL, RUNS_FULL = 10_000, 2
ITERATIONS_QUICK, RUNS_QUICK = 2_000, 1


def _ring(processes: int, workers: int, iterations: int) -> list[dict[str, Any]]:
    options = [] if workers == 1 else ["--workers", str(workers)]
    args = ("--records", RECORDS, "--iterations", iterations, "--warmup", WARMUP)
    return launch(processes, "ring", *args, options=options)


def _switches(result: dict[str, Any]) -> int:
    """A process's context switches: it slept waiting for a frame, or was preempted."""
    return int(result["voluntary_switches"] + result["involuntary_switches"])


def _frames(network: dict[str, int]) -> int:
    """Frames sent: DATA frames (with or without progress) and progress frames of their own."""
    return network["data_frames_sent"] + network["progress_frames_sent"] - network["progress_piggybacked"]


@benchmark("net.frame_cost", "CPU per frame of a loop passing records between 2 processes, against 1 process")
def frame_cost(ctx: Context) -> None:
    iterations, runs = (ITERATIONS_QUICK, RUNS_QUICK) if ctx.quick else (ITERATIONS_FULL, RUNS_FULL)
    total = iterations + WARMUP
    best: dict[str, float] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(value, best.get(name, value))

    for run in range(1, runs + 1):
        before = load()
        one = _ring(1, 2, iterations)[0]
        keep("p1.cpu", one["cpu_seconds"] / total * 1e6)
        keep("p1.system", one["system_seconds"] / total * 1e6)
        two = _ring(2, 1, iterations)
        cpu2 = sum(r["cpu_seconds"] for r in two) / total * 1e6
        frames = sum(_frames(r["network"]) for r in two) / total
        keep("p2.cpu", cpu2)
        keep("p2.frames_total", frames)
        keep("p2.frames", max(_frames(r["network"]) for r in two) / total)
        keep("p2.steps", max(r["steps"] for r in two) / total)
        keep("p2.wakeups", max(r["wakeups"] for r in two) / total)
        keep("p2.median", max(r["latency_us"]["median"] for r in two))
        keep("p2.system", sum(r["system_seconds"] for r in two) / total * 1e6)
        keep("p2.switches", max(_switches(r) for r in two) / total)
        raw = launch(2, "raw", "--iterations", iterations, "--warmup", WARMUP)
        keep("raw.cpu", max(r["cpu_seconds"] for r in raw) / total * 1e6)
        keep("raw.median", max(r["latency_us"]["median"] for r in raw))
        keep("raw.system", max(r["system_seconds"] for r in raw) / total * 1e6)
        keep("raw.switches", max(_switches(r) for r in raw) / total)
        ctx.progress(
            f"run {run}: 1 process, 2 workers: {one['cpu_seconds'] / total * 1e6:.1f} us CPU an iteration; "
            f"2 processes: {cpu2:.1f} us CPU (both), {frames:.2f} frames, "
            f"{max(r['steps'] for r in two) / total:.2f} steps, median {best['p2.median']:.0f} us an iteration; "
            f"raw round {best['raw.median']:.0f} us, {best['raw.cpu']:.1f} us CPU ({before}, then {load()}); "
            f"kernel {sum(r['system_seconds'] for r in two) / total * 1e6:.1f} us of the 2 processes' CPU, "
            f"{max(_switches(r) for r in two) / total:.2f} context switches an iteration"
        )
    per_frame = (best["p2.cpu"] - best["p1.cpu"]) / best["p2.frames_total"]
    kernel_per_frame = (best["p2.system"] - best["p1.system"]) / best["p2.frames_total"]
    ctx.record("net.frame_cost.p2.cpu", best["p2.cpu"], "us", "p1w2.cpu (1 process, 2 workers)", best["p1.cpu"])
    ctx.record("net.frame_cost.p2.per_frame", per_frame, "us", "raw.cpu (one uvloop message)", best["raw.cpu"])
    ctx.record(
        "net.frame_cost.p2.per_frame_kernel",
        kernel_per_frame,
        "us",
        "raw.system (one uvloop message)",
        best["raw.system"],
    )
    ctx.record("net.frame_cost.p2.frames", best["p2.frames"], "frames", "one_frame_per_iteration", 1.0)
    ctx.record("net.frame_cost.p2.steps", best["p2.steps"], "steps", "one_step_per_iteration", 1.0)
    ctx.record("net.frame_cost.p2.wakeups", best["p2.wakeups"], "wakeups", "one_wakeup_per_iteration", 1.0)
    ctx.record("net.frame_cost.p2.switches", best["p2.switches"], "switches", "raw.switches", best["raw.switches"])
    ctx.record("net.frame_cost.p2.median", best["p2.median"], "us", "raw_all_to_all", best["raw.median"])
