"""``faults.overhead``: what fault tolerance (Naiad §3.4) costs, and how fast a kill is recovered.

The job, as in Naiad §6.3: incremental connected components (`timely_libs.linq.connected_components`)
on 2 real processes (``timely run -n 2 -m bench._faults_worker``), fed a seeded random graph at
epoch 0, then `EPOCHS` epochs of `BATCH` edge changes each (half deletions of present edges,
half insertions), each process feeding its share, at most `INFLIGHT` epochs ahead of the
output probe. Per change epoch: the seconds from its ``advance_to`` to the probe passing it;
throughput: changes per second over all change epochs. Three settings, in the same run, each
in fresh processes with a fresh checkpoint directory under the system's temporary directory
(local disk here; fsync on, the default):

* ``none``: no `timely.Checkpoints` (the baseline of the two others);
* ``checkpoint10``: a checkpoint every 10 epochs (inputs logged);
* ``logging``: inputs logged only (``every_epochs=None``).

Recovery: a larger graph (1,000,000 edges; ``--quick`` 20,000) run under ``timely run -n 2
--restarts 1 --checkpoint-dir DIR --checkpoint-every 10``. On the first attempt, once the
checkpoint after epoch 9 is complete on disk and epoch ``KILL_EPOCH - 1`` has passed, process
`VICTIM` feeds half its share of epoch `KILL_EPOCH` and SIGKILLs itself (after writing the
instant to a file). The launcher restarts both processes; they resume from the checkpoint,
replay the logged epochs after it, and the program feeds on. Recovery time: from the kill to
the first epoch after the checkpoint passing the output probe in the new attempt, broken down
from instants the restarted processes write (see `bench/_faults_worker.py`). Every run's
final labels are checked against NetworkX's on the same graph after the same changes.

To see where the time goes, set ``FAULTSBENCH_PROFILE=DIR``: every throughput process, and
every restarted process of the recovery run, writes a cProfile file to DIR (the figures are
then distorted by the profiler).

Sizes (full / ``--quick``): throughput on 10,000 nodes and 100,000 edges, 50 epochs of 100
changes (1,000 nodes, 10,000 edges, 20 epochs); recovery on 100,000 nodes and 1,000,000
edges (2,000 and 20,000).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import BenchmarkError, Context, benchmark, percentile
from bench._net import ROOT, launch, load
from bench.linq_graphs import Reference, combine, digest, graph, updates

MARK = "FAULTSBENCH"
PROCESSES = 2
VICTIM = 1
"""The process that kills itself in the recovery run."""
CHECKPOINT_EVERY = 10
BATCH = 100
"""Edge changes per epoch (half deletions, half insertions)."""
INFLIGHT = 3
"""Epochs the feeder may be ahead of the output probe."""
KILL_EPOCH = 12
"""The epoch in whose middle the victim dies: after the checkpoint at epoch 9, with epochs 10
and 11 logged (replayed on recovery)."""
TARGET_OVERHEAD = 0.25
TARGET_RECOVERY_S = 30.0
WORKER = "bench._faults_worker"
SETTINGS = ("none", "checkpoint10", "logging")
RESTART_LINE = re.compile(r"timely: p\d+ .*; restarting .* after (?P<s>\d+\.\d+) s")


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"nodes": 1_000, "edges": 10_000, "epochs": 20, "rec_nodes": 2_000, "rec_edges": 20_000}
    return {"nodes": 10_000, "edges": 100_000, "epochs": 50, "rec_nodes": 100_000, "rec_edges": 1_000_000}


def workload(
    nodes: int, edge_count: int, epochs: int, batch: int = BATCH
) -> tuple[list[tuple[int, ...]], list[list[tuple[Any, Any]]]]:
    """The initial edges and, per change epoch 1..epochs, its ``batch // 2`` pairs (edge
    removed, edge added), each removal of an edge present at the time; the same in every process."""
    edges = graph("cc", nodes, edge_count)
    half = batch // 2
    pairs = updates("cc", edges, nodes, epochs * half)
    return edges, [pairs[i * half : (i + 1) * half] for i in range(epochs)]


def expected(nodes: int, edge_count: int, epochs: int) -> list[int]:
    """NetworkX's labels after every change epoch, as a digest."""
    edges, changes = workload(nodes, edge_count, epochs)
    ref = Reference("cc", edges)
    for pairs in changes:
        for removed, added in pairs:
            ref.change(removed, -1)
            ref.change(added, 1)
    return digest(ref.answer())


def _per_checkpoint(results: list[dict[str, Any]]) -> tuple[float, float, int]:
    """(seconds per checkpoint, slowest process; bytes of one checkpoint, all parts; count)."""
    stats = [r["checkpoints"] for r in results]
    count = min(s["checkpoints"] for s in stats)
    seconds = max(s["checkpoint_seconds"] / s["checkpoints"] for s in stats) if count else 0.0
    size = sum(s["last_checkpoint"].get("bytes", 0) for s in stats)
    return seconds, size, count


# Throughput -------------------------------------------------------------------------------------


def run_setting(ctx: Context, setting: str, size: dict[str, int], answer: list[int]) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix=f"timely-faults-{setting}-")
    try:
        ctx.progress(f"{setting}: {PROCESSES} processes, {size['edges']:,} edges, {size['epochs']} epochs ({load()})")
        results = launch(
            PROCESSES,
            "throughput",
            setting,
            size["nodes"],
            size["edges"],
            size["epochs"],
            BATCH,
            INFLIGHT,
            directory,
            timeout=3600,
            worker=WORKER,
            mark=MARK + " ",
        )
        on_disk = sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ctx.check(combine([r["final"] for r in results]) == answer, f"{setting}: final labels differ from NetworkX's")
    seconds = max(r["seconds"] for r in results)
    latencies = sorted(max(ls) for ls in zip(*(r["latencies"] for r in results), strict=True))
    m = {
        "rate": size["epochs"] * BATCH / seconds,
        "seconds": seconds,
        "initial": max(r["initial_seconds"] for r in results),
        "median_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "max_ms": latencies[-1] * 1000,
        "on_disk": on_disk,
        "results": results,
    }
    ctx.progress(
        f"{setting}: {m['rate']:,.0f} updates/s, epoch latency median {m['median_ms']:.0f} ms, "
        f"p99 {m['p99_ms']:.0f} ms (initial epoch {m['initial']:.1f} s; labels verified)"
    )
    return m


def throughput(ctx: Context, size: dict[str, int]) -> None:
    ctx.progress(f"NetworkX: the answer after {size['epochs']} epochs, on {size['edges']:,} edges")
    answer = expected(size["nodes"], size["edges"], size["epochs"])
    m = {s: run_setting(ctx, s, size, answer) for s in SETTINGS}
    base = m["none"]
    for setting in ("checkpoint10", "logging"):
        rate = m[setting]["rate"]
        target = met = None
        if setting == "checkpoint10":
            target = f">= {1 - TARGET_OVERHEAD:.0%} of no checkpoints (<= {TARGET_OVERHEAD:.0%} overhead)"
            met = rate >= (1 - TARGET_OVERHEAD) * base["rate"]
        ctx.record(
            f"faults.overhead.{setting}", rate, "updates/s", "none (same run)", base["rate"], target=target, met=met
        )
    for setting in ("checkpoint10", "logging"):
        for stat in ("median", "p99"):
            ctx.record(
                f"faults.overhead.{setting}.latency.{stat}",
                m[setting][f"{stat}_ms"],
                "ms",
                f"none {stat} (same run)",
                base[f"{stat}_ms"],
            )
    seconds, size_bytes, count = _per_checkpoint(m["checkpoint10"]["results"])
    ctx.check(count >= size["epochs"] // CHECKPOINT_EVERY, f"checkpoint10: only {count} checkpoint(s) taken")
    ctx.record("faults.overhead.checkpoint10.checkpoint_seconds", seconds, "s/checkpoint")
    ctx.record("faults.overhead.checkpoint10.checkpoint_size", size_bytes / 1e6, "MB")
    ctx.progress(
        f"checkpoint10: {count} checkpoints per process, {seconds:.3f} s each (slowest process), "
        f"{size_bytes / 1e6:.1f} MB each (both parts); directory at the end {m['checkpoint10']['on_disk'] / 1e6:.1f} MB; "
        f"input log only: {m['logging']['on_disk'] / 1e6:.1f} MB"
    )


# Recovery ---------------------------------------------------------------------------------------


def recovery(ctx: Context, size: dict[str, int]) -> None:
    nodes, edge_count, epochs = size["rec_nodes"], size["rec_edges"], KILL_EPOCH + 1
    ctx.progress(f"NetworkX: the answer after {epochs} epochs, on {edge_count:,} edges")
    answer = expected(nodes, edge_count, epochs)
    work = Path(tempfile.mkdtemp(prefix="timely-faults-recovery-"))
    directory, stamps = work / "checkpoints", work / "stamps"
    stamps.mkdir()
    try:
        ctx.progress(
            f"recovery: {PROCESSES} processes, {edge_count:,} edges, checkpoint every {CHECKPOINT_EVERY}; "
            f"p{VICTIM} dies in epoch {KILL_EPOCH} ({load()})"
        )
        cmd = [
            sys.executable,
            "-m",
            "timely.cli",
            "run",
            "-n",
            str(PROCESSES),
            "--restarts",
            "1",
            "--checkpoint-dir",
            str(directory),
            "--checkpoint-every",
            str(CHECKPOINT_EVERY),
            "-m",
            WORKER,
            "recovery",
            *map(str, (nodes, edge_count, epochs, BATCH, INFLIGHT, KILL_EPOCH, stamps)),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIMELY_")}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT, env=env)
        except subprocess.TimeoutExpired as exc:
            raise BenchmarkError("recovery: the run did not finish within an hour") from exc
        results = {}
        for line in done.stdout.splitlines():
            _, sep, payload = line.partition(MARK + " ")
            if sep:
                r = json.loads(payload)
                results[r["process"]] = r
        restart = [m for line in done.stderr.splitlines() if (m := RESTART_LINE.search(line))]
        tail = "\n".join(done.stderr.strip().splitlines()[-25:])
        if done.returncode != 0 or len(results) != PROCESSES or len(restart) != 1:
            raise BenchmarkError(
                f"recovery: exit status {done.returncode}, {len(results)}/{PROCESSES} results, "
                f"{len(restart)} restart(s); stderr ends with:\n{tail}"
            )
        kill = json.loads((stamps / "kill").read_text())
        killed = kill["time"]
        attempt = [json.loads((stamps / f"attempt1-p{i}.json").read_text()) for i in range(PROCESSES)]
        load_seconds, log_seconds, info = read_apart(directory)
        ctx.check(info is not None, "recovery: no complete checkpoint left in the directory")
        assert info is not None
        part_bytes = sum(
            p.stat().st_size for p in (directory / "checkpoints" / f"epoch-{info.epoch:012d}").glob("part-*")
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = [results[i] for i in range(PROCESSES)]
    ctx.check(all(r["attempt"] == 1 for r in runs), "recovery: the results are not the restarted attempt's")
    ctx.check(combine([r["final"] for r in runs]) == answer, "recovery: final labels differ from NetworkX's")
    for a in attempt:
        ctx.check(
            "epoch" in a["resumed"],
            f"recovery: p{a['process']} resumed without a checkpoint (replayed every logged epoch): {a['resumed']}",
        )
    progress = max(a["progress"] for a in attempt)
    total = progress - killed
    ctx.record(
        "faults.overhead.recovery",
        total,
        "s",
        "from scratch: epoch 0 (attempt 0)",
        kill["initial_seconds"],
        target=f"< {TARGET_RECOVERY_S:.0f} s ({edge_count:,} edges)",
        met=total < TARGET_RECOVERY_S,
    )
    # The breakdown, along the process that resumed last (progress itself is global).
    a = max(attempt, key=lambda x: x["entered"])
    launcher = float(restart[0]["s"])
    resumed = a["resumed"]
    steps = [
        ("launcher", launcher, "failure noticed -> processes respawned (stop the survivor, fresh ports)"),
        ("start", a["started"] - killed - launcher, "interpreter start (includes kill -> noticed)"),
        ("imports", a["imported"] - a["started"], "timely, timely_libs.linq"),
        ("graph", a["generated"] - a["imported"], "seeded graph and changes generated"),
        ("resume", a["entered"] - a["generated"], "execute(): read checkpoint + input logs, join, restore, replay"),
        ("first_epoch", progress - a["entered"], f"epoch {a['first_epoch']} (replayed) passes the probe"),
    ]
    for name, seconds, what in steps:
        ctx.record(f"faults.overhead.recovery.{name}", seconds, "s")
        ctx.progress(f"recovery breakdown: {name:<12} {seconds:7.2f} s  {what}")
    ctx.progress(
        f"  within resume: restore() {resumed.get('restore_seconds', 0):.2f} s "
        f"({resumed.get('vertices', 0)} vertex states from the checkpoint at epoch {resumed.get('epoch')}), "
        f"{resumed.get('replayed_epochs', 0)} epoch(s) replayed ({resumed.get('replayed_records', 0)} records); "
        f"before joining, finding and verifying the checkpoint (latest_checkpoint) takes {load_seconds:.2f} s, "
        f"reading every input log {log_seconds:.2f} s (each measured apart, in this process, after the run)"
    )
    ctx.record("faults.overhead.recovery.checkpoint_load", load_seconds, "s")
    ctx.record("faults.overhead.recovery.input_log_read", log_seconds, "s")
    ctx.record("faults.overhead.recovery.checkpoint_size", part_bytes / 1e6, "MB")
    # checkpoint times of this size: the victim's before it died, the restarted processes' after
    times = [
        s["checkpoint_seconds"] / s["checkpoints"]
        for s in [kill["checkpoints"]] + [r["checkpoints"] for r in runs]
        if s.get("checkpoints")
    ]
    if times:
        ctx.record("faults.overhead.recovery.checkpoint_seconds", max(times), "s/checkpoint")
    ctx.progress(
        f"recovery: {total:.2f} s from the kill to progress; checkpoint of {edge_count:,} edges: "
        f"{part_bytes / 1e6:.1f} MB (both parts), {max(times, default=0):.2f} s to take (slowest process); "
        f"labels after recovery verified"
    )


def read_apart(directory: Path) -> tuple[float, float, Any]:
    """What every resumed process reads before it joins the others, timed here on its own: the
    newest complete checkpoint (`latest_checkpoint`: every part read and verified) and every
    process's log of the edge input (every frame decoded). Returns the two times and the
    checkpoint."""
    import timely_libs.linq  # noqa: F401  (registers linq's blocks with the codec, as a resumed process has)
    from timely.checkpoint import latest_checkpoint
    from timely.checkpoint._store import log_processes, read_log

    started = time.perf_counter()
    info = latest_checkpoint(directory)
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for j in log_processes(directory, "edges"):
        read_log(directory, j, "edges")
    return load_seconds, time.perf_counter() - started, info


@benchmark(
    "faults.overhead",
    "incremental CC on 2 processes: throughput with checkpoints every 10 epochs / input logging, and recovery time",
)
def overhead(ctx: Context) -> None:
    size = sizes(ctx.quick)
    throughput(ctx, size)
    recovery(ctx, size)
