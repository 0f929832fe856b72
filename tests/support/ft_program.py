"""A fault-tolerance workload for real processes, and what it delivered, on disk.

    timely run -n 2 --restarts 3 --checkpoint-dir CK -m tests.support.ft_program WORKLOAD OUT [KILL]

Every process builds the same dataflow and feeds its share of each epoch from ``Input.epoch``
on (after a restart the runtime has replayed the logged epochs, so the program goes on from
there). Each epoch's output is appended to ``OUT/p<index>.jsonl`` as
``{"attempt", "epoch", "records"}``; the test merges the files of a disturbed run and compares
them with `reference`, the workload's output computed in plain Python. `workload` is the same
dataflow as a program for `Mode.run`, to check an undisturbed run in every mode against it.

``KILL`` says where processes SIGKILL themselves, on the first attempt only unless the point
is ``recovery`` (``PROCESS:POINT:EPOCH``, several separated by commas):
    ``epoch``       in the middle of feeding EPOCH (half its records sent)
    ``checkpoint``  inside the checkpoint taken after EPOCH (while its part is being saved)
    ``recovery``    on the second attempt, while the vertices are being restored
    ``random``      after a random delay of up to EPOCH milliseconds (seeded by the run)
    ``delivered``   once this process has delivered EPOCH epochs' outputs
    ``closed``      just after the program closed its input (EPOCH is ignored)

The environment shapes the run: ``FT_EPOCHS`` (default 12) epochs, at most ``FT_AHEAD``
epochs in flight (default 2; 0: feed every epoch and close the input at once, however far the
consumer is behind), and ``FT_SLOW`` seconds the consumer spends on each batch (default 0); ``FT_LAUNCH`` numbers a
launch that resumes another by hand (its attempts count from 100 times it in the output).
Each process writes its pid to ``OUT/pid-p<index>-a<attempt>``, for a harness that sends
signals from outside.

Workloads: ``cc`` (timely_libs.linq connected components over epochs of edge changes) and ``sum``
(a core vertex keeping running sums by key).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from time import sleep
from typing import Any

import networkx as nx

import timely
from tests.support.modes import Run

EPOCHS = int(os.environ.get("FT_EPOCHS", "12"))
AHEAD = int(os.environ.get("FT_AHEAD", "2"))
SLOW = float(os.environ.get("FT_SLOW", "0"))
LAUNCH = 100 * int(os.environ.get("FT_LAUNCH", "0"))
"""Added to the attempt in the output: a run resumed by hand is a later attempt than the first."""
NODES = 1500
SPREAD = 7919
"""Node ids are multiples of this prime, far past any small count of route buckets: a state
saved in pieces by ``route % buckets`` would land on the wrong worker on most counts."""


def edge_epochs(seed: int = 7, epochs: int = EPOCHS) -> list[list[tuple[tuple[int, int], int]]]:
    """Per epoch, ``((u, v), diff)`` changes of an undirected graph's edge set."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    per_epoch = []
    for epoch in range(epochs):
        changes: list[tuple[tuple[int, int], int]] = []
        if epoch:
            for edge in rng.sample(sorted(present), 15):
                present.discard(edge)
                changes.append((edge, -1))
        target = NODES if epoch == 0 else 25
        added = 0
        while added < target:
            u, v = rng.randrange(NODES) * SPREAD, rng.randrange(NODES) * SPREAD
            edge = (min(u, v), max(u, v))
            if u != v and edge not in present and (edge, -1) not in changes:
                present.add(edge)
                changes.append((edge, 1))
                added += 1
        per_epoch.append(changes)
    return per_epoch


def sum_epochs(epochs: int = EPOCHS) -> list[list[tuple[int, int]]]:
    rng = random.Random(11)
    return [[(rng.randrange(50), rng.randrange(100)) for _ in range(400)] for _ in range(epochs)]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillSwitch:
    """The kill points of ``PROCESS:POINT:ARG[,PROCESS:POINT:ARG...]`` that concern this process."""

    def __init__(self, spec: str, process: int) -> None:
        self.points: list[tuple[str, int]] = []
        for item in filter(None, spec.split(",")):
            p, point, arg = item.split(":")
            if int(p) == process:
                self.points.append((point, int(arg)))
        self.attempt = int(os.environ.get("TIMELY_RESTART", "0"))

    def armed(self, point: str, arg: int | None = None) -> bool:
        attempt = 1 if point == "recovery" else 0
        return self.attempt == attempt and any(p == point and arg in (None, a) for p, a in self.points)

    def arg(self, point: str) -> int:
        return next(a for p, a in self.points if p == point)


KILL = KillSwitch("", 0)


class Witness(timely.Vertex):
    """Passes records on; dies inside a checkpoint or a restore when the kill switch says so."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if SLOW:
            sleep(SLOW)  # a consumer slower than the input
        self.send_by(self.outputs[0], records, time)

    def checkpoint(self) -> Any:
        if _RUNTIME is not None and KILL.armed("checkpoint", _RUNTIME.fence.epoch):
            _die()
        return timely.KeyedState([])  # keyed (if empty): resumable on any number of processes

    def restore(self, state: Any) -> None:
        if KILL.armed("recovery"):
            _die()


_RUNTIME: Any = None


class Sums(timely.Vertex):
    def __init__(self) -> None:
        self.sums: dict[int, int] = defaultdict(int)
        self.waiting: dict[timely.Timestamp, list[tuple[int, int]]] = {}

    def on_recv(self, edge: int, records: list[tuple[int, int]], time: timely.Timestamp) -> None:
        self.waiting.setdefault(time, []).extend(records)
        self.notify_at(time)

    def on_notify(self, time: timely.Timestamp) -> None:
        keys = set()
        for k, v in self.waiting.pop(time, []):
            self.sums[k] += v
            keys.add(k)
        self.send_by(self.outputs[0], [(k, self.sums[k]) for k in sorted(keys)], time)

    def checkpoint(self) -> Any:
        return timely.KeyedState([(k, (k, v)) for k, v in self.sums.items()])

    def restore(self, state: Any) -> None:
        for _, (k, v) in state.pieces:
            self.sums[k] = v


Deliver = Callable[[int, list[Any]], None]


def dataflow(workload: str, scope: timely.Scope, deliver: Deliver) -> tuple[timely.Input, timely.Probe]:
    """Build ``workload``; ``deliver(epoch, records)`` gets each epoch's output. Its input, and
    a probe of its output."""
    if workload == "cc":
        from timely_libs import linq

        edges = linq.new_input(scope, "edges")
        marked = edges.collection.stream.stage("witness", Witness)
        labels = linq.connected_components(linq.Collection(marked))
        output = linq.CollectionOutput(labels, on_change=deliver, name="labels")
        return edges.input, output.probe
    if workload == "sum":
        inp = scope.new_input("values")
        sums = inp.stage("witness", Witness).stage("sums", Sums, exchange=lambda r: r[0])
        sums.subscribe(lambda t, recs: deliver(t.epoch, recs), name="sums.out")
        return inp, sums.probe()
    raise SystemExit(f"unknown workload {workload!r}")


def epochs_of(workload: str) -> list[list[Any]]:
    return edge_epochs() if workload == "cc" else sum_epochs()  # type: ignore[return-value]


def reference(workload: str, epochs: int = EPOCHS) -> dict[int, list[str]]:
    """Per epoch, what the workload delivers, computed in plain Python: the running sums of the
    keys an epoch touched, or the changes of every node's component label (the least node of its
    component, from NetworkX). Records as sorted JSON texts, the form the tests merge into."""
    out: dict[int, list[str]] = {}
    if workload == "sum":
        sums: dict[int, int] = defaultdict(int)
        for epoch, batch in enumerate(sum_epochs(epochs)):
            for k, v in batch:
                sums[k] += v
            out[epoch] = sorted(json.dumps([k, sums[k]]) for k in {k for k, _ in batch})
        return out
    present: set[tuple[int, int]] = set()
    before: set[tuple[int, int]] = set()
    for epoch, changes in enumerate(edge_epochs(epochs=epochs)):
        for edge, diff in changes:
            (present.add if diff > 0 else present.discard)(edge)
        labels = {(n, min(c)) for c in nx.connected_components(nx.Graph(list(present))) for n in c}
        diff_ = [[list(r), 1] for r in labels - before] + [[list(r), -1] for r in before - labels]
        if diff_:
            out[epoch] = sorted(json.dumps(d) for d in diff_)
        before = labels
    return out


class FtRun(Run):
    """An undisturbed run of a workload (for `Mode.run`): feeds this process's share of each
    epoch, keeps what it delivered."""

    epochs = EPOCHS

    def __init__(self, workload: str, scope: timely.Scope, delivered: dict[int, list[Any]], handles: Any) -> None:
        self.data = epochs_of(workload)
        self.index, self.processes = scope.process_index, scope.processes
        self.delivered = delivered
        self.input, self.probe = handles

    def feed(self, epoch: int) -> None:
        self.input.send([c for i, c in enumerate(self.data[epoch]) if i % self.processes == self.index])
        self.input.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.probe]

    def result(self, comp: Any) -> dict[str, list[Any]]:
        return {str(e): records for e, records in sorted(self.delivered.items())}


def workload(name: str) -> Callable[[timely.Scope], FtRun]:
    """The workload called ``name``, undisturbed, as a program for `Mode.run`."""

    def build(scope: timely.Scope) -> FtRun:
        delivered: dict[int, list[Any]] = defaultdict(list)
        handles = dataflow(name, scope, lambda epoch, records: delivered[epoch].extend(records))
        return FtRun(name, scope, delivered, handles)

    return build


def main(argv: list[str]) -> None:
    global KILL, _RUNTIME
    workload, out = argv[0], pathlib.Path(argv[1])
    spec = argv[2] if len(argv) > 2 else ""
    out.mkdir(parents=True, exist_ok=True)
    index = int(os.environ.get("TIMELY_PROCESS_INDEX", "0"))
    processes = int(os.environ.get("TIMELY_PROCESSES", "1"))
    KILL = KillSwitch(spec, index)
    sink = open(out / f"p{index}.jsonl", "a")  # noqa: SIM115 - open for the run

    (out / f"pid-p{index}-a{KILL.attempt}").write_text(str(os.getpid()))
    count = 0

    def deliver(epoch: int, records: list[Any]) -> None:
        nonlocal count
        line = {"attempt": LAUNCH + KILL.attempt, "epoch": epoch, "records": sorted(json.loads(json.dumps(records)))}
        sink.write(json.dumps(line) + "\n")
        sink.flush()
        count += 1
        if KILL.armed("delivered", count):
            _die()

    epochs = epochs_of(workload)

    def build(scope: timely.Scope) -> Any:
        return dataflow(workload, scope, deliver)

    if KILL.armed("random"):
        delay = random.Random(f"{spec}/{index}").uniform(0.05, KILL.arg("random") / 1000)
        threading.Timer(delay, _die).start()

    policy = None
    PAUSE = float(os.environ.get("FT_EPOCH_PAUSE", "0"))
    if os.environ.get("FT_EVERY_SECONDS"):
        policy = timely.Checkpoints(
            os.environ["TIMELY_CHECKPOINT_DIR"], every_seconds=float(os.environ["FT_EVERY_SECONDS"])
        )
    with timely.execute(build, timeout=120, checkpoints=policy) as (comp, handles):
        _RUNTIME = comp.runtime
        inp = handles[0]
        first = inp.epoch
        for epoch in range(first, EPOCHS):
            mine = [c for i, c in enumerate(epochs[epoch]) if i % processes == index]
            half = len(mine) // 2
            inp.send(mine[:half])
            if KILL.armed("epoch", epoch):
                comp.runtime.step()
                _die()
            inp.send(mine[half:])
            inp.advance_to(epoch + 1)
            if PAUSE:
                # a wall-clock checkpoint policy must see time pass between epochs, however fast they run
                comp.wait_passed(handles[1], epoch)
                time.sleep(PAUSE)
            if AHEAD and epoch >= AHEAD - 1:  # at most AHEAD epochs in flight: the kill points fall mid-run
                comp.wait_passed(handles[1], epoch - AHEAD + 1)
        inp.close()
        if KILL.armed("closed", 0):
            comp.runtime.step()
            _die()
    stats = comp.statistics().checkpoints
    result = {
        "first_epoch": first,
        "attempt": KILL.attempt,
        "checkpoints": stats.get("checkpoints", 0),
        "resumed_from": (stats.get("resumed") or {}).get("epoch"),
    }
    print(f"RESULT {json.dumps(result)}", flush=True)
    sink.close()


if __name__ == "__main__":
    main(sys.argv[1:])
