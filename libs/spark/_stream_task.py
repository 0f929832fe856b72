"""The executor side of `run_stream`: the long-running timely processes, and the feeder and
fetcher tasks each micro-batch runs.

A stream's timely processes live in one barrier stage that lasts as long as the stream: each
task joins the others (through the driver's address book, `_rendezvous.py`), starts its
computation, opens a *data port* and registers it with the driver's coordinator over a
control connection. Then, per epoch:

1. the micro-batch's *feeder* tasks (any number, one per partition of the batch) send their
   Arrow batches to process ``partition % processes``'s data port, each as one delivery that
   the process acknowledges once it holds the whole of it (a delivery cut short is dropped; a
   partition delivered again, by a retried task, is kept once);
2. the driver, once every feeder task has succeeded, sends ``commit`` to every process: each
   feeds the deliveries of the epoch into its inputs, advances them, waits until its output
   has passed the epoch, keeps the output as Arrow batches and reports ``passed``;
3. the driver's *fetcher* tasks (one per process) read each process's output of the epoch from
   its data port, and Spark writes it.

``close`` ends the inputs; the computation runs to completion and the barrier stage ends.
Every message on the control connection and every request on a data port is one line of
JSON carrying the run's token; Arrow data travels as an IPC stream after its line.
"""

from __future__ import annotations

import contextlib
import gc
import json
import queue
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import pyarrow as pa
import pyarrow.compute as pc

import timely

from ._convert import columns_of, output_rows, rows_of, to_batches
from ._errors import SparkBridgeError
from ._rendezvous import BookAddress
from ._server import Server
from ._task import TAG, _write_atomic, input_column, rendezvous, task_host

__all__ = ["StreamPlan", "feed_partition", "fetch_output", "stream_process"]

CONNECT_TIMEOUT = 30.0
STREAM_OUTPUT_DIR = "stream-output"
"""Under the checkpoint directory: ``p<index>/epoch-<e>``, each epoch's output (Arrow IPC)."""


@dataclass(frozen=True)
class StreamPlan:
    """What the stream's tasks need, pickled by the driver into their closures."""

    build: Any
    names: tuple[str, ...]
    schema: pa.Schema
    """The output's Arrow schema, with the leading ``epoch`` column."""
    processes: int
    secret: bytes = field(repr=False)
    coordinator: tuple[str, int]
    token: str = field(repr=False)
    timeout: float | None = None
    columns: bool = False
    """Inputs and output as numpy columns (see `run`'s ``columns``)."""
    encrypt: bool | None = None
    """Seal the connections between the processes (see `run`'s ``encrypt``)."""
    checkpoint_dir: str | None = None
    """Where the processes checkpoint and log each epoch's output (an absolute path every task sees)."""
    checkpoint_every: int = 10
    book: BookAddress | None = None
    """The driver's address book the tasks meet through (`_rendezvous.py`), or None: ``allGather``."""


def send_line(out: BinaryIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def read_line(stream: BinaryIO) -> dict[str, Any] | None:
    """The next message, or None when the other side closed."""
    line = stream.readline()
    if not line:
        return None
    message = json.loads(line)
    if not isinstance(message, dict):
        raise SparkBridgeError(f"not a message of the stream's protocol: {line[:80]!r}")
    return message


# The long-running process ---------------------------------------------------------------------
class _Epochs:
    """What the data port has received and what the process produced, shared by the data port's
    threads and the process's main thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: dict[int, dict[int, list[pa.RecordBatch]]] = {}
        """epoch -> partition -> its batches (complete deliveries only)."""
        self.fed: set[int] = set()
        self.outputs: dict[int, list[pa.RecordBatch]] = {}

    def deliver(self, epoch: int, partition: int, batches: list[pa.RecordBatch]) -> None:
        with self.lock:
            if epoch not in self.fed:
                self.deliveries.setdefault(epoch, {}).setdefault(partition, batches)

    def take(self, epoch: int) -> list[pa.RecordBatch]:
        with self.lock:
            self.fed.add(epoch)
            parts = self.deliveries.pop(epoch, {})
        return [b for _, batches in sorted(parts.items()) for b in batches]

    def output(self, epoch: int) -> list[pa.RecordBatch] | None:
        with self.lock:
            return self.outputs.get(epoch)

    def keep_output(self, epoch: int, batches: list[pa.RecordBatch]) -> None:
        """Keep ``epoch``'s output for the fetchers; forget the epochs before the one before it
        (the driver commits an epoch only once every epoch two before it is written, so it may
        still fetch the one before, or fetch it again if its write is retried)."""
        with self.lock:
            self.outputs = {e: b for e, b in self.outputs.items() if e >= epoch - 1}
            self.outputs[epoch] = batches


class _DataPort:
    """The process's listening socket for feeders and fetchers (a thread per connection)."""

    def __init__(self, host: str, plan: StreamPlan, epochs: _Epochs) -> None:
        self.plan = plan
        self.epochs = epochs
        self.server = Server(host, self._serve, "timely-stream-conn")
        self.address = (host, self.server.port)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader, conn.makefile("wb") as writer:
            try:
                request = read_line(reader)
                if request is None or request.get("token") != self.plan.token:
                    return  # not one of this stream's tasks
                epoch = int(request["epoch"])
                if request["op"] == "feed":
                    batches = list(pa.ipc.open_stream(reader))
                    self.epochs.deliver(epoch, int(request["partition"]), batches)
                    send_line(writer, {"ok": True})
                elif request["op"] == "fetch":
                    output = self.epochs.output(epoch)
                    if output is None:
                        send_line(writer, {"error": f"no output of epoch {epoch} here (not passed, or forgotten)"})
                        return
                    send_line(writer, {"ok": True})
                    with pa.ipc.new_stream(writer, self.plan.schema) as out:
                        for batch in output:
                            out.write_batch(batch)
            except (OSError, ValueError, KeyError, pa.ArrowException):
                return  # a task that died mid-request: it is retried, its partial delivery dropped

    def close(self) -> None:
        self.server.close()


def stream_process(plan: StreamPlan, partition: Iterator[Any]) -> Iterator[int]:
    """The body of the stream's barrier task: run timely process ``partition id`` until the
    driver says ``close``; yields the epochs it computed."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    where = f"timely process {index} of {plan.processes} (Spark stage {ctx.stageId()}, partition {index})"
    try:
        cluster = rendezvous(ctx, plan.processes, plan.secret, index, plan.book, plan.timeout)
        yield _serve(plan, index, cluster, task_host(ctx, index))
    except SparkBridgeError as e:
        raise SparkBridgeError(f"{where}: {e}") from e
    except Exception as e:
        raise SparkBridgeError(f"{where} failed: {type(e).__name__}: {e}") from e


class _OutputLog:
    """Each epoch's output, kept under the checkpoint directory by the subscription callback
    before it returns (so before the runtime marks the epoch delivered): an epoch the runtime
    will not deliver again after a restart is in the log, for a micro-batch Spark runs again."""

    def __init__(self, root: str, index: int, schema: pa.Schema) -> None:
        self.dir = Path(root) / STREAM_OUTPUT_DIR / f"p{index}"
        self.schema = schema

    def path(self, epoch: int) -> Path:
        return self.dir / f"epoch-{epoch:012d}"

    def write(self, epoch: int, batches: list[pa.RecordBatch]) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        _write_atomic(self.path(epoch), sink.getvalue())

    def read(self, epoch: int) -> list[pa.RecordBatch]:
        """The logged output of ``epoch``; none logged: the epoch had no output here."""
        path = self.path(epoch)
        if not path.exists():
            return []
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            if not reader.schema.equals(self.schema, check_metadata=False):
                raise SparkBridgeError(
                    f"{path} holds rows of schema {reader.schema}, not {self.schema}: "
                    "the checkpoint directory belongs to another computation"
                )
            return list(reader)

    def forget_before(self, epoch: int) -> None:
        """Drop the epochs Spark has committed (it never runs their micro-batches again)."""
        if not self.dir.is_dir():
            return
        for path in self.dir.iterdir():
            number = path.name.removeprefix("epoch-")
            if number.isdigit() and int(number) < epoch:
                with contextlib.suppress(OSError):
                    path.unlink()


def _serve(plan: StreamPlan, index: int, cluster: timely.ClusterConfig, host: str) -> int:
    """Run the process until ``close``; the number of epochs it computed."""
    epochs = _Epochs()
    port = _DataPort(host, plan, epochs)
    log = None if plan.checkpoint_dir is None else _OutputLog(plan.checkpoint_dir, index, plan.schema)
    produced: dict[int, tuple[list[pa.RecordBatch], int]] = {}

    def receive(time: timely.Timestamp, records: list[Any]) -> None:
        batches = list(to_batches(records, plan.schema, time[0], columns=plan.columns))
        if log is not None:
            log.write(time[0], batches)
        produced[time[0]] = (batches, output_rows(records, plan.columns))

    def build(scope: timely.Scope) -> tuple[list[timely.Input], timely.Subscription]:
        inputs = {name: scope.new_input(name) for name in plan.names}
        stream = plan.build(scope, dict(inputs))
        if not isinstance(stream, timely.Stream):
            raise SparkBridgeError(f"build must return the output timely.Stream, not {type(stream).__name__}")
        return [inputs[name] for name in plan.names], stream.subscribe(receive, name="spark_stream_output")

    policy: timely.Checkpoints | Literal[False] = False
    if plan.checkpoint_dir is not None:
        policy = timely.Checkpoints(plan.checkpoint_dir, every_epochs=plan.checkpoint_every)
    control = socket.create_connection(plan.coordinator, timeout=CONNECT_TIMEOUT)
    control.settimeout(None)
    commands: queue.Queue[dict[str, Any] | None] = queue.Queue()
    with control, control.makefile("rb") as from_driver, control.makefile("wb") as to_driver:

        def listen() -> None:
            try:
                while (message := read_line(from_driver)) is not None:
                    commands.put(message)
            except (OSError, ValueError):
                pass
            commands.put(None)  # the driver is gone

        hello = False
        try:
            with timely.execute(
                build, cluster=cluster, timeout=plan.timeout, checkpoints=policy, encrypt=plan.encrypt
            ) as (
                comp,
                (inputs, probe),
            ):
                # Resumed from a checkpoint, the inputs stand at the first epoch not sealed before.
                resume = min(handle.epoch for handle in inputs)
                send_line(
                    to_driver, {"token": plan.token, "process": index, "data": list(port.address), "resume": resume}
                )
                hello = True
                threading.Thread(target=listen, name="timely-stream-control", daemon=True).start()
                _freeze_setup()
                width = len(plan.names)
                computed = 0
                while True:
                    command = commands.get()
                    if command is None:
                        raise SparkBridgeError("lost the control connection to the driver")
                    if command.get("close"):
                        break
                    epoch = int(command["commit"])
                    sealed = min(handle.epoch for handle in inputs)
                    if epoch in epochs.fed:  # a micro-batch Spark runs again: its epoch is done already
                        send_line(to_driver, {"passed": epoch, "again": True})
                        continue
                    if log is not None and epoch > sealed:
                        raise SparkBridgeError(
                            f"Spark committed epoch {epoch} but the checkpoint's inputs stand at epoch {sealed}: "
                            "its input log lost epochs (were the directories copied apart?)"
                        )
                    rows = 0
                    if epoch >= sealed:
                        rows = _feed(epochs.take(epoch), inputs, epoch, width, plan.columns)
                    else:  # sealed before a restart: replayed from the input log, its rows fed already
                        epochs.take(epoch)
                    send_line(to_driver, {"sealed": epoch})  # fed and logged: Spark may commit it
                    comp.wait_passed(probe, epoch)
                    batches, rows_out = produced.pop(epoch, ([], 0))
                    for earlier in [e for e in produced if e < epoch]:
                        del produced[earlier]  # replayed epochs before the first micro-batch run again
                    if epoch < sealed and log is not None and not batches:
                        batches = log.read(epoch)  # delivered before the restart
                        rows_out = sum(b.num_rows for b in batches)
                    epochs.keep_output(epoch, batches)
                    if log is not None:  # the driver wrote every epoch up to "written"
                        log.forget_before(min(epoch, int(command.get("written", epoch - 1)) + 1))
                    send_line(to_driver, {"passed": epoch, "rows_in": rows, "rows_out": rows_out})
                    computed += 1
                for handle in inputs:
                    handle.close()
                comp.run()
                return computed
        except BaseException as e:
            with contextlib.suppress(OSError):
                if not hello:
                    send_line(to_driver, {"token": plan.token, "process": index, "data": list(port.address)})
                send_line(to_driver, {"error": f"{type(e).__name__}: {e}"})
            raise
        finally:
            gc.unfreeze()  # the Spark worker may run other tasks: what was set up is collectable again
            port.close()
            # Unblocks the listening thread (closing its file would wait for its read).
            with contextlib.suppress(OSError):
                control.shutdown(socket.SHUT_RDWR)


def _freeze_setup() -> None:
    """Move everything alive once the computation is built (modules, compiled loops, Spark's
    worker, the dataflow) out of the collector's reach: a stream runs for hours, and every
    full collection would walk all of it again, a pause in the middle of whichever epoch it
    falls in (the streaming job's dataflow alone made one per 10 s of posts: 120-340 ms of wall
    time at load 17-21, none once frozen)."""
    gc.collect()
    gc.freeze()


def _feed(batches: list[pa.RecordBatch], inputs: list[timely.Input], epoch: int, width: int, columns: bool) -> int:
    """Send the epoch's rows to the inputs (a batch's ``tag`` column names its input), then
    advance every input past the epoch. Returns the rows fed."""
    for handle in inputs:
        if handle.epoch < epoch:
            handle.advance_to(epoch)
    fed = 0
    convert = columns_of if columns else rows_of
    for batch in batches:
        if batch.num_rows == 0:
            continue
        tags = batch.column(TAG)
        for k in range(width):
            mine = (
                batch.column(input_column(k)) if width == 1 else batch.column(input_column(k)).filter(pc.equal(tags, k))
            )
            if len(mine):
                if columns:  # one block of len(mine) rows: the console counts rows
                    inputs[k].send([convert(mine)], count=len(mine))
                else:
                    inputs[k].send(convert(mine))
                fed += len(mine)
    for handle in inputs:
        handle.advance_to(epoch + 1)
    return fed


# The micro-batch's tasks ----------------------------------------------------------------------------
def _connect(address: tuple[str, int]) -> socket.socket:
    conn = socket.create_connection(address, timeout=CONNECT_TIMEOUT)
    conn.settimeout(None)
    return conn


def feed_partition(
    plan: StreamPlan, epoch: int, addresses: list[tuple[str, int]], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A feeder task: deliver this partition of the micro-batch to process ``partition % N``."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    first = next(batches, None)
    rows = 0
    if first is not None:
        with _connect(addresses[partition % plan.processes]) as conn, conn.makefile("rb") as reader:
            with conn.makefile("wb") as writer:
                send_line(writer, {"token": plan.token, "op": "feed", "epoch": epoch, "partition": partition})
                with pa.ipc.new_stream(writer, first.schema) as out:
                    for batch in (first, *batches):
                        out.write_batch(batch)
                        rows += batch.num_rows
                writer.flush()
            reply = read_line(reader)
        if not reply or not reply.get("ok"):
            raise SparkBridgeError(
                f"timely process {partition % plan.processes} did not take the rows of epoch {epoch}"
            )
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def fetch_output(
    plan: StreamPlan, epoch: int, addresses: list[tuple[str, int]], ids: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A fetcher task: its input row names a process; yield that process's output of ``epoch``."""
    for batch in ids:
        for process in batch.column(0).to_pylist():
            with _connect(addresses[process]) as conn, conn.makefile("rb") as reader, conn.makefile("wb") as writer:
                send_line(writer, {"token": plan.token, "op": "fetch", "epoch": epoch})
                reply = read_line(reader)
                if not reply or not reply.get("ok"):
                    raise SparkBridgeError(
                        f"timely process {process}: {reply.get('error') if reply else 'closed the connection'}"
                    )
                yield from pa.ipc.open_stream(reader)
