"""The program ``faults.overhead`` runs in every process (private; not a benchmark).

Started by `bench.faults_overhead` as ``python -m timely.cli run -n N bench/_faults_worker.py
MODE ...``. Every process generates the same seeded graph and the same seeded edge changes
(`bench.faults_overhead.workload`), feeds its share of the initial graph at epoch 0 (edge ``i``
when ``i % processes == index``) and of every change epoch (change pair ``j`` of an epoch when
``j % processes == index``), and keeps at most ``INFLIGHT`` epochs ahead of the output probe of
`timely_libs.linq.connected_components`.

``throughput SETTING NODES EDGES EPOCHS BATCH INFLIGHT DIR``: SETTING is ``none`` (no
fault tolerance), ``checkpoint10`` (`timely.Checkpoints` every 10 epochs in DIR, inputs logged)
or ``logging`` (inputs logged in DIR, no checkpoints). Prints ``FAULTSBENCH {json}``: the
seconds of the initial epoch, per change epoch the seconds from its ``advance_to`` to the probe
passing it, the seconds of all change epochs, the runtime's checkpoint statistics and a digest
of this process's share of the final labels.

``recovery NODES EDGES EPOCHS BATCH INFLIGHT KILL_EPOCH STAMPS``: run under ``timely run
--restarts 1 --checkpoint-dir DIR --checkpoint-every K`` (the policy comes from the
environment). On the first attempt, process `VICTIM` waits until a checkpoint is complete on
disk and epoch ``KILL_EPOCH - 1`` has passed, feeds half its share of ``KILL_EPOCH``, lets the
computation run a moment, writes ``STAMPS/kill`` (JSON: ``time.time()``, its initial epoch's
seconds and its checkpoint statistics) and SIGKILLs itself. A
restarted process writes ``STAMPS/attempt1-pI.json``: wall-clock instants of its start, its
imports, its graph, the computation resumed (``execute`` entered: joined, restored, logged
epochs replayed) and the first epoch after the checkpoint passing the probe, plus the resume
statistics. Every process that finishes prints ``FAULTSBENCH {json}`` as above.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: the restarted process's first instant we can see

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import timely  # noqa: E402
from bench.faults_overhead import MARK, VICTIM, workload  # noqa: E402
from bench.linq_graphs import digest  # noqa: E402
from timely.checkpoint._store import complete_epochs  # noqa: E402
from timely_libs import linq  # noqa: E402

IMPORTED = time.time()

PROFILE_ENV = "FAULTSBENCH_PROFILE"
"""For diagnosis (figures measured under it are distorted): if set, a directory. Each process
of a throughput run, and of a recovery run's restarted attempt, is profiled with cProfile into
``throughput-SETTING-pI.prof`` or ``recovery-aK-pI.prof`` there."""


def _build(scope: timely.Scope) -> tuple[Any, ...]:
    edge_input = linq.new_input(scope, "edges")
    out = linq.CollectionOutput(linq.connected_components(edge_input.collection), name="labels")
    return edge_input, out, scope.process_index, scope.processes


class Feeder:
    """Feeds change epochs, at most ``inflight`` ahead of the probe, and times each epoch from
    its ``advance_to`` to the probe passing it."""

    def __init__(self, comp: timely.Computation, edge_input: Any, out: Any, inflight: int) -> None:
        self.comp, self.edge_input, self.out, self.inflight = comp, edge_input, out, inflight
        self.sealed: dict[int, float] = {}
        self.passed: dict[int, float] = {}

    def feed(self, epoch: int, mine: list[tuple[Any, Any]]) -> None:
        """Send this process's pairs (removed, added) of ``epoch``."""
        self.edge_input.update([c for removed, added in mine for c in ((removed, -1), (added, 1))])

    def seal(self, epoch: int) -> None:
        self.edge_input.advance_to(epoch + 1)
        self.sealed[epoch] = time.perf_counter()
        self._collect()
        oldest = epoch - self.inflight + 1
        if oldest in self.sealed and oldest not in self.passed:
            self.wait(oldest)

    def wait(self, epoch: int) -> None:
        self.comp.wait_passed(self.out.probe, epoch)
        self._collect()

    def _collect(self) -> None:
        now = time.perf_counter()
        for e in sorted(self.sealed):
            if e not in self.passed:
                if not self.out.probe.passed(e):
                    break
                self.passed[e] = now

    def latencies(self) -> list[float]:
        return [self.passed[e] - self.sealed[e] for e in sorted(self.sealed)]


def throughput(argv: list[str]) -> None:
    setting, nodes, edge_count, epochs, batch, inflight, directory = (
        argv[0],
        int(argv[1]),
        int(argv[2]),
        int(argv[3]),
        int(argv[4]),
        int(argv[5]),
        argv[6],
    )
    policy = {
        "none": None,
        "checkpoint10": timely.Checkpoints(directory, every_epochs=10, log_inputs=True),
        "logging": timely.Checkpoints(directory, every_epochs=None, log_inputs=True),
    }[setting]
    edges, changes = workload(nodes, edge_count, epochs, batch)
    with timely.execute(_build, timeout=3600, stall_log_after=None, checkpoints=policy) as (comp, built):
        edge_input, out, index, processes = built
        started = time.perf_counter()
        edge_input.insert_all(e for i, e in enumerate(edges) if i % processes == index)
        edge_input.advance_to(1)
        comp.wait_passed(out.probe, 0)
        initial = time.perf_counter() - started
        feeder = Feeder(comp, edge_input, out, inflight)
        began = time.perf_counter()
        for epoch in range(1, epochs + 1):
            feeder.feed(epoch, changes[epoch - 1][index::processes])
            feeder.seal(epoch)
        feeder.wait(epochs)
        elapsed = time.perf_counter() - began
        final = digest(out.contents())
        stats = comp.statistics().checkpoints
    result = {
        "process": index,
        "initial_seconds": initial,
        "seconds": elapsed,
        "latencies": feeder.latencies(),
        "checkpoints": stats,
        "final": final,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


def recovery(argv: list[str]) -> None:
    nodes, edge_count, epochs, batch, inflight, kill_epoch = map(int, argv[:6])
    stamps = Path(argv[6])
    attempt = int(os.environ.get("TIMELY_RESTART", "0"))
    directory = Path(os.environ["TIMELY_CHECKPOINT_DIR"])
    edges, changes = workload(nodes, edge_count, epochs, batch)
    generated = time.time()
    with timely.execute(_build, timeout=3600, stall_log_after=None) as (comp, built):
        entered = time.time()
        edge_input, out, index, processes = built
        feeder = Feeder(comp, edge_input, out, inflight)
        start = resumed_at = edge_input.epoch  # 0, or the first epoch not logged by every process
        initial = None
        if start == 0:
            t0 = time.perf_counter()
            edge_input.insert_all(e for i, e in enumerate(edges) if i % processes == index)
            edge_input.advance_to(1)
            comp.wait_passed(out.probe, 0)
            initial = time.perf_counter() - t0
            start = 1
        else:  # resumed: time the first epoch after the checkpoint (replayed, or fed now)
            resumed = comp.statistics().checkpoints.get("resumed", {})
            first = resumed.get("epoch", -1) + 1  # no usable checkpoint: replayed from epoch 0
            if first == start:
                feeder.feed(start, changes[start - 1][index::processes])
                feeder.seal(start)
                start += 1
            comp.wait_passed(out.probe, first)
            stamp = {
                "attempt": attempt,
                "process": index,
                "started": STARTED,
                "imported": IMPORTED,
                "generated": generated,
                "entered": entered,
                "progress": time.time(),
                "first_epoch": first,
                "resumed_at": resumed_at,
                "resumed": resumed,
            }
            _write(stamps / f"attempt{attempt}-p{index}.json", json.dumps(stamp))
        for epoch in range(start, epochs + 1):
            mine = changes[epoch - 1][index::processes]
            if attempt == 0 and index == VICTIM and epoch == kill_epoch:
                _die(comp, feeder, out, epoch, mine, directory, stamps, initial)
            feeder.feed(epoch, mine)
            feeder.seal(epoch)
        feeder.wait(epochs)
        final = digest(out.contents())
        stats = comp.statistics().checkpoints
    result = {
        "process": index,
        "attempt": attempt,
        "initial_seconds": initial,
        "latencies": feeder.latencies(),
        "checkpoints": stats,
        "final": final,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


def _die(
    comp: timely.Computation,
    feeder: Feeder,
    out: Any,
    epoch: int,
    mine: list[Any],
    directory: Path,
    stamps: Path,
    initial: float | None,
) -> None:
    """Make sure a checkpoint is complete on disk, feed half of ``epoch``, let it run, die."""
    feeder.wait(epoch - 1)
    deadline = time.monotonic() + 600
    while not complete_epochs(directory):  # parts are renamed into place whole: present = written
        if time.monotonic() > deadline:
            raise SystemExit("no complete checkpoint on disk to recover from")
        time.sleep(0.05)
    feeder.feed(epoch, mine[: len(mine) // 2])
    try:  # run the computation a moment with the half epoch in it (the probe cannot pass it)
        comp.wait_passed(out.probe, epoch, timeout=0.2)
    except timely.StalledError:
        pass
    stats = comp.statistics().checkpoints
    _write(
        stamps / "kill",
        json.dumps({"time": time.time(), "epoch": epoch, "initial_seconds": initial, "checkpoints": stats}),
    )
    os.kill(os.getpid(), signal.SIGKILL)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> None:
    modes = {"throughput": throughput, "recovery": recovery}
    if not argv or argv[0] not in modes:
        raise SystemExit(f"usage: _faults_worker.py ({' | '.join(modes)}) ARGS...")
    profile = os.environ.get(PROFILE_ENV)
    if not profile or (argv[0] == "recovery" and os.environ.get("TIMELY_RESTART", "0") == "0"):
        modes[argv[0]](argv[1:])
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        modes[argv[0]](argv[1:])
    finally:
        profiler.disable()
        index, attempt = os.environ.get("TIMELY_PROCESS_INDEX", "0"), os.environ.get("TIMELY_RESTART", "0")
        what = argv[1] if argv[0] == "throughput" else f"a{attempt}"
        profiler.dump_stats(Path(profile) / f"{argv[0]}-{what}-p{index}.prof")


if __name__ == "__main__":
    main(sys.argv[1:])
