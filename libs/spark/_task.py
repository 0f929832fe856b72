"""The barrier task: one Spark task is one timely process.

Each task reserves a port, learns every task's address from the driver's address book
(`_rendezvous.py`: Spark's ``allGather`` would cost a second more, as it polls once per
second; it remains the way when no book is given), joins the timely cluster over authenticated TCP, feeds its partition into the named inputs epoch by epoch, and
yields what the output stream delivers on this process as Arrow batches.

With a checkpoint directory (`run_epochs`'s ``checkpoint_dir``) the process checkpoints, and
keeps an *output log*: each epoch's output, as Arrow IPC, in
``spark-output/p<index>/epoch-<e>``, written (atomically, fsynced) by the subscription callback
before it returns, so before the runtime marks the epoch delivered. A retried task first
re-emits every logged epoch, then resumes the computation, skipping the input epochs the
runtime replayed from its log, and drops a re-delivered epoch it has already re-emitted.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

import timely

from ._convert import BATCH_ROWS, columns_of, output_rows, rows_of, to_batches
from ._errors import SparkBridgeError
from ._progress import TaskReporter
from ._rendezvous import BookAddress, gather

__all__ = [
    "ATTEMPTS_DIR",
    "OUTPUT_DIR",
    "OUTPUT_NAME",
    "TAG",
    "TaskPlan",
    "input_column",
    "rendezvous",
    "run_task",
    "task_host",
]

TAG = "__timely_tag"
"""The column that says which input and epoch a row belongs to: ``epoch * inputs + input``."""
OUTPUT_NAME = "spark_output"
"""The subscription the bridge attaches to the stream ``build`` returns."""
OUTPUT_DIR = "spark-output"
"""Under the checkpoint directory: ``p<index>/epoch-<e>``, each epoch's output rows (Arrow IPC)."""
ATTEMPTS_DIR = "spark-attempts"
"""Under the checkpoint directory: ``p<index>/task-<id>.json``, what each task attempt did."""


def input_column(k: int) -> str:
    """The struct column that carries the rows of input number ``k``."""
    return f"__timely_in{k}"


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, pickled once by the driver into the task closure."""

    build: Callable[[timely.Scope, dict[str, timely.Input]], timely.Stream]
    names: tuple[str, ...]
    schema: pa.Schema
    """The Arrow schema of the task's output, with the leading ``epoch`` column when `epochs`."""
    epochs: bool
    processes: int
    timeout: float | None
    secret: bytes = field(repr=False)
    timings: Any = None
    """A Spark accumulator taking each task's figures, merged by keeping the slowest process's:
    ``{"epochs": {epoch: seconds}, "entered_at": unix time, "joining": s, "reading": s,
    "computing": s, "first_answer_at": unix time}`` (see `_driver.TIMINGS`), or None."""
    checkpoint_dir: str | None = None
    """Where the processes checkpoint and log their output (an absolute path every task sees)."""
    checkpoint_every: int = 10
    progress: tuple[str, int, str] | None = None
    """The driver's progress listener ``(host, port, token)``, or None (see _progress.py)."""
    columns: bool = False
    """Inputs and output as numpy columns, a record per batch, instead of a tuple per row."""
    encrypt: bool | None = None
    """Seal the connections between the processes (None: when any of them is off loopback)."""
    book: BookAddress | None = None
    """The driver's address book for this run (`_rendezvous.AddressBook`), or None: Spark's
    ``allGather``."""


def run_task(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of the barrier ``mapInArrow``: run this task's timely process."""
    from pyspark import BarrierTaskContext

    entered, entered_at = time.perf_counter(), time.time()
    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    where = f"timely process {index} of {plan.processes} (Spark stage {ctx.stageId()}, partition {index})"
    try:
        log = None
        if plan.checkpoint_dir is not None:
            log = _OutputLog(plan, index, f"task-{ctx.taskAttemptId()}", ctx.stageId())
            yield from log.reemit()  # before anything can be delivered again
        cluster = rendezvous(ctx, plan.processes, plan.secret, index, plan.book, plan.timeout)
        yield from _compute(plan, cluster, batches, log, entered, entered_at)
    except SparkBridgeError as e:
        raise SparkBridgeError(f"{where}: {e}") from e
    except Exception as e:
        raise SparkBridgeError(f"{where} failed: {type(e).__name__}: {e}") from e


def task_host(ctx: Any, index: int) -> str:
    """The address peers can reach this task at: Spark's own bind address when it is set
    (SPARK_LOCAL_IP), else the executor host Spark knows, resolved (so that 'localhost' does not
    become two addresses)."""
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if local_ip:
        return local_ip
    host = str(ctx.getTaskInfos()[index].address).rsplit(":", 1)[0].strip("[]")
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def rendezvous(
    ctx: Any,
    processes: int,
    secret: bytes,
    index: int,
    book: BookAddress | None = None,
    timeout: float | None = None,
) -> timely.ClusterConfig:
    """Every task's address, learnt from the driver's ``book`` (waiting at most ``timeout``
    seconds for the others), or without one with an ``allGather``: the cluster of timely
    processes."""
    host = task_host(ctx, index)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The port stays bound until every task has published its own: tasks on one machine cannot
    # pick the same one. It is released just before timely listens on it (as `timely run` does).
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as reserved:
        reserved.bind((host, 0))
        mine = json.dumps([host, reserved.getsockname()[1]])
        if processes == 1:
            gathered = [mine]
        elif book is not None:
            gathered = gather(book, ctx.stageId(), ctx.taskAttemptId(), index, processes, mine, timeout)
        else:
            gathered = ctx.allGather(mine)
    addresses = [(str(h), int(p)) for h, p in map(json.loads, gathered)]
    return timely.ClusterConfig(processes, index, addresses, workers=1, secret=secret)


class _OutputLog:
    """This process's output log under the checkpoint directory, and the record of its attempt.

    Exactly once per row across a retried stage: Spark keeps no output of a failed attempt,
    and the runtime does not deliver an epoch again once its delivered mark is written, which
    happens right after the subscription callback returns. The callback writes the epoch's
    file (atomically) before it returns, so every epoch is logged, or not yet marked delivered
    and delivered again after a restart, or both (killed in between). A new attempt emits
    every logged epoch first, then drops a delivery of an epoch it has emitted from the log;
    an epoch not in the log at its start it emits when the runtime delivers it.
    """

    def __init__(self, plan: TaskPlan, index: int, attempt: str, stage: int) -> None:
        assert plan.checkpoint_dir is not None
        self.root = Path(plan.checkpoint_dir)
        self.schema = plan.schema
        self.dir = self.root / OUTPUT_DIR / f"p{index}"
        self.reemitted: set[int] = set()
        self.redelivered: list[int] = []
        self.record_path = self.root / ATTEMPTS_DIR / f"p{index}" / f"{attempt}.json"
        self.record: dict[str, Any] = {"process": index, "stage": stage, "started": time.time()}
        self._began = time.perf_counter()

    def _logged(self) -> list[tuple[int, Path]]:
        if not self.dir.is_dir():
            return []
        found = []
        for path in self.dir.iterdir():
            name = path.name
            if name.startswith("epoch-") and name[len("epoch-") :].isdigit():
                found.append((int(name[len("epoch-") :]), path))
        return sorted(found)

    def reemit(self) -> Iterator[pa.RecordBatch]:
        """The batches of every epoch an earlier attempt logged, in epoch order."""
        logged = self._logged()
        self.reemitted = {epoch for epoch, _ in logged}
        rows = 0
        for _, path in logged:
            with pa.OSFile(str(path), "rb") as f:
                reader = pa.ipc.open_stream(f)
                if not reader.schema.equals(self.schema, check_metadata=False):
                    raise SparkBridgeError(
                        f"{path} holds rows of schema {reader.schema}, not {self.schema}: "
                        "the checkpoint directory belongs to another computation"
                    )
                for batch in reader:
                    rows += batch.num_rows
                    yield batch
        self.record.update(reemitted_epochs=sorted(self.reemitted), reemitted_rows=rows, reemit_seconds=self.seconds)

    def write(self, epoch: int, batches: list[pa.RecordBatch]) -> None:
        """Log one epoch's output: its file exists whole, or not at all."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        _write_atomic(self.dir / f"epoch-{epoch:012d}", sink.getvalue())

    def save_record(self, **what: Any) -> None:
        """Write down what this attempt did (ended: its seconds; killed: no ``seconds``)."""
        self.record.update(what, redelivered_epochs=list(self.redelivered))
        data = json.dumps(self.record, sort_keys=True).encode()
        _write_atomic(self.record_path, data, fsync=False)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._began


def _write_atomic(path: Path, data: Any, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary name and a rename (fsynced: as durable
    as the runtime's own delivered marks, which must never outlive the log)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _Output:
    """What the output stream delivers on this process, per epoch, until it is yielded. With
    an output log, each epoch is converted and logged inside the subscription callback."""

    def __init__(self, plan: TaskPlan, log: _OutputLog | None) -> None:
        self.plan = plan
        self.log = log
        self.parts: list[tuple[int, list[Any]]] = []
        self.logged: list[pa.RecordBatch] = []
        self.pending = 0
        self.total = 0
        """Rows produced so far (progress)."""

    def receive(self, time: timely.Timestamp, records: list[Any]) -> None:
        log = self.log
        rows = output_rows(records, self.plan.columns)
        self.total += rows
        if log is None:
            self.parts.append((time[0], records))
            self.pending += rows
            return
        epoch = time[0]
        if epoch in log.reemitted:  # logged by an earlier attempt and emitted from the log
            log.redelivered.append(epoch)
            return
        batches = list(self._batches(epoch, records))
        log.write(epoch, batches)
        self.logged.extend(batches)
        self.pending += rows

    def drain(self) -> Iterator[pa.RecordBatch]:
        parts, self.parts, self.pending = self.parts, [], 0
        logged, self.logged = self.logged, []
        yield from logged
        for epoch, records in parts:
            yield from self._batches(epoch, records)

    def _batches(self, epoch: int, records: list[Any]) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        return to_batches(records, plan.schema, epoch if plan.epochs else None, columns=plan.columns)


def _compute(
    plan: TaskPlan,
    cluster: timely.ClusterConfig,
    batches: Iterator[pa.RecordBatch],
    log: _OutputLog | None = None,
    entered: float | None = None,
    entered_at: float | None = None,
) -> Iterator[pa.RecordBatch]:
    """Run the computation over ``batches`` and yield its output; ``entered`` and ``entered_at``
    are when the task began (`time.perf_counter`, `time.time`), for the figures the task
    reports to `plan.timings`."""
    entered = time.perf_counter() if entered is None else entered
    figures: dict[str, Any] = {"entered_at": time.time() if entered_at is None else entered_at}
    # What the worker holds before the run (Spark's worker, numpy, pyarrow, timely, the build's
    # libraries and their compiled loops) stays out of the collector's reach while it runs: a
    # full collection, the run's own or the one below, then walks only what the run made
    # (the one below took 0.2-0.6 s of wall time per process at load 17 with it all in reach).
    gc.freeze()
    try:
        yield from _computation(plan, cluster, batches, log, figures)
        # Spark reuses this Python worker: the computation's garbage (its state holds reference
        # cycles) would otherwise be collected during the worker's next task, seconds into it.
        gc.collect()
    finally:
        gc.unfreeze()  # the worker's next task may drop what it held: collectable again
    if plan.timings is not None:
        figures["joining"] = figures.pop("ready") - entered
        figures["computing"] = time.perf_counter() - entered - figures["joining"]
        plan.timings.add(figures)


def _computation(
    plan: TaskPlan,
    cluster: timely.ClusterConfig,
    batches: Iterator[pa.RecordBatch],
    log: _OutputLog | None,
    figures: dict[str, Any],
) -> Iterator[pa.RecordBatch]:
    """`_compute`'s body; fills ``figures`` with ``ready`` (`time.perf_counter` when the
    computation ran), ``reading`` (from then until the first input batch), ``epochs`` and
    ``first_answer_at`` (see `TaskPlan.timings`)."""
    out = _Output(plan, log)
    names = plan.names

    def build(scope: timely.Scope) -> tuple[list[timely.Input], timely.Subscription]:
        inputs = {name: scope.new_input(name) for name in names}
        stream = plan.build(scope, dict(inputs))
        if not isinstance(stream, timely.Stream):
            raise SparkBridgeError(f"build must return the output timely.Stream, not {type(stream).__name__}")
        probe = stream.subscribe(out.receive, name=OUTPUT_NAME)
        return [inputs[name] for name in names], probe

    # The bridge decides, not the environment: a policy without the output log would lose
    # the rows of epochs delivered before a retry.
    policy: timely.Checkpoints | Literal[False] = False
    if log is not None:
        policy = timely.Checkpoints(log.root, every_epochs=plan.checkpoint_every)
    latency: dict[int, float] = {}
    first_answer_at: float | None = None
    with timely.execute(build, cluster=cluster, timeout=plan.timeout, checkpoints=policy, encrypt=plan.encrypt) as (
        comp,
        (inputs, probe),
    ):
        # After a restart the runtime has replayed the logged epochs: each input goes on from
        # its own epoch (equal unless the crash fell between two inputs' advances), or is closed.
        starts = [None if handle.closed else handle.epoch for handle in inputs]
        open_starts = [e for e in starts if e is not None]
        epoch = min(open_starts, default=0)
        width = len(names)
        figures["ready"] = time.perf_counter()
        if log is not None:
            resumed = comp.statistics().checkpoints.get("resumed", {})
            log.save_record(resumed=resumed, first_epoch=epoch if open_starts else None, ready_seconds=log.seconds)

        def resumed_past(tag: int) -> bool:
            e, k = divmod(tag, width)
            first = starts[k]
            return first is not None and e >= first

        wanted = None if log is None else resumed_past
        fed = 0
        passed = 0

        def sample() -> dict[str, Any]:
            return {
                "epochs_done": passed,
                "rows_in": fed,
                "records": comp.statistics().records_delivered,
                "rows_out": out.total,
            }

        reporter = TaskReporter(plan.progress, cluster.process_index, sample)
        try:
            began = time.perf_counter()
            for batch in batches:
                if "reading" not in figures:  # Spark's shuffle read, sort and conversion to Arrow
                    began = time.perf_counter()
                    figures["reading"] = began - figures["ready"]
                for tag, n, part in _split(batch, width, wanted, plan.columns):
                    e, k = divmod(tag, width)
                    if e != epoch:
                        if e < epoch:
                            raise SparkBridgeError(
                                f"rows of epoch {e} arrived after epoch {epoch} (the input is not sorted)"
                            )
                        for handle in inputs:
                            if not handle.closed and handle.epoch < e:
                                handle.advance_to(e)
                        if plan.epochs:  # a stream brings epochs one after the other: finish this one
                            for done in range(epoch, e):
                                comp.wait_passed(probe, done)
                                latency[done] = time.perf_counter() - began
                                began = time.perf_counter()
                                passed = done + 1
                                if first_answer_at is None:
                                    first_answer_at = time.time()
                        epoch = e
                    if plan.columns:  # a block of n rows: the console counts rows
                        inputs[k].send([part], count=n)
                    else:
                        inputs[k].send(part)
                    fed += n
                if out.pending >= BATCH_ROWS:
                    yield from out.drain()
            for handle in inputs:
                handle.close()
            comp.run()
            passed = epoch + 1
            if first_answer_at is None:
                first_answer_at = time.time()
        finally:
            reporter.close()  # also on failure: Spark reuses its Python workers
        if open_starts:
            latency[epoch] = time.perf_counter() - began
        if log is not None:
            stats = comp.statistics().checkpoints
            log.save_record(seconds=log.seconds, checkpoints=stats.get("checkpoints", 0), finished=time.time())
    yield from out.drain()
    figures["epochs"] = latency if plan.epochs else {}
    if first_answer_at is not None and open_starts and min(open_starts) == 0:
        figures["first_answer_at"] = first_answer_at


def _split(
    batch: pa.RecordBatch, inputs: int, wanted: Callable[[int], bool] | None = None, columns: bool = False
) -> Iterator[tuple[int, int, Any]]:
    """``(tag, rows, part)`` for each tag in the batch that is ``wanted`` (default: all), in
    increasing tag order: ``part`` is the tag's rows as tuples, or with ``columns`` as one
    tuple of numpy arrays; the rows of other tags are not converted."""
    if batch.num_rows == 0:
        return
    convert = columns_of if columns else rows_of
    tags = batch.column(TAG).to_numpy()
    first = int(tags[0])
    if (tags == first).all():  # the usual case: the batch holds one input's rows of one epoch
        if wanted is None or wanted(first):
            yield first, batch.num_rows, convert(batch.column(input_column(first % inputs)))
        return
    for tag in np.unique(tags).tolist():
        if wanted is not None and not wanted(tag):
            continue
        mask = tags == tag
        yield tag, int(mask.sum()), convert(batch.column(input_column(tag % inputs)).filter(pa.array(mask)))
