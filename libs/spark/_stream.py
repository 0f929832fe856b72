"""`run_stream`: a Spark Structured Streaming source feeds epochs into one long-running timely
computation, one micro-batch per epoch, and Spark writes each epoch's output.

The timely processes run in a barrier stage that lasts as long as the stream (a Spark job
started on a thread of the driver), so they hold ``processes`` task slots the whole time; each
micro-batch runs in the slots left (at least one more is needed). ``foreachBatch`` turns
micro-batch ``b`` into epoch ``b``: its feeder tasks hand their partitions' Arrow batches to
the processes and the driver commits the epoch once they all succeeded. The processes compute
it while the driver's *writer* thread waits for it, and then fetcher tasks read its output
back into a DataFrame for ``write``. Micro-batch ``b`` returns once the processes have passed
epoch ``b`` and epoch ``b - 1`` is written: Spark writes epoch ``b`` while it reads and feeds
micro-batch ``b + 1``, so writing is off the path from one epoch's computing to the next, and
the computing never shares the machine with Spark's feeding. With ``pipeline`` it returns
once epoch ``b - 1`` is written: then Spark also feeds micro-batch ``b + 1`` while the
processes compute epoch ``b``. See _stream_task.py for the protocol and why every row is taken
once even when Spark retries a task or a micro-batch.

Spark commits micro-batch ``b`` before epoch ``b`` is written, so with a checkpoint directory
the driver keeps a *written mark* (the last epoch ``write`` returned for) beside the output
log: started again, it first writes, from the log, every epoch Spark committed after the mark.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from ._driver import Build, claim, failure, output_struct, quoted, task_slots
from ._errors import SparkBridgeError
from ._progress import driver_host
from ._rendezvous import AddressBook
from ._session import quiet_pandas_warning
from ._stream_task import (
    STREAM_OUTPUT_DIR,
    StreamPlan,
    feed_partition,
    fetch_output,
    read_line,
    send_line,
    stream_process,
)
from ._task import TAG, _write_atomic, input_column

__all__ = ["EpochReport", "StreamRun", "run_stream"]

Write = Callable[[DataFrame, int], None]

STREAM_EPOCHS = -1
"""The epoch count a stream's checkpoint directory is labelled with (it has no end)."""
START_TIMEOUT = 300.0
"""Seconds for the processes to start and register (Spark may first have to start Python workers)."""
WRITTEN_MARK = "written"
"""Under the output log's directory: the last epoch whose ``write`` returned (the driver's)."""

_QUIET = threading.Lock()
"""Held while a Spark Arrow UDF is made: the warnings filter `quiet_pandas_warning` sets is
process-wide, and the micro-batch thread and the writer thread both make them."""


@dataclass(frozen=True)
class EpochReport:
    """One epoch (micro-batch) of a stream, as the driver saw it."""

    epoch: int
    rows_in: int
    """Rows of the micro-batch fed to the processes."""
    rows_out: int
    """Output rows of the epoch (what ``write`` received)."""
    seconds: float
    """From the micro-batch's start to the end of ``write``."""
    feeding: float
    """Of which: the feeder tasks (Spark reading the micro-batch and handing it over)."""
    computing: float
    """Of which: from the commit until every process had passed the epoch (with ``pipeline``,
    the processes may first finish the epoch before it)."""


def run_stream(
    session: SparkSession,
    build: Build,
    inputs: Mapping[str, DataFrame],
    schema: str | StructType,
    write: Write,
    processes: int | None = None,
    trigger_seconds: float = 0.5,
    checkpoint_location: str | None = None,
    timeout: float | None = None,
    columns: bool = False,
    encrypt: bool | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 10,
    pipeline: bool = False,
) -> StreamRun:
    """Start a stream: each micro-batch of the streaming DataFrames ``inputs`` is one epoch of one
    long-running computation, and ``write(output, epoch)`` receives the epoch's output rows (a
    DataFrame of ``epoch int`` and ``schema``, persisted for the call) to write with Spark.

    ``build`` is as for `run`. ``processes`` defaults to the free task slots less one (each
    micro-batch needs a slot of its own while the processes hold theirs). Micro-batches start
    every ``trigger_seconds`` when there is new data; ``checkpoint_location`` is Spark's (the
    stream's progress through its sources), not timely's. ``timeout`` bounds the computation;
    ``columns`` and ``encrypt`` as `run`'s.

    ``checkpoint_dir`` (a path the driver and every executor see) makes the stream resumable:
    Spark's checkpoint goes in ``<dir>/spark`` (unless ``checkpoint_location`` names another)
    and timely's in ``<dir>/timely``, where the processes checkpoint every ``checkpoint_every``
    epochs, log their inputs and log each epoch's output. Started again on the same directory
    after the driver or a process died, the computation resumes where its input log ends and
    Spark resumes at its first uncommitted micro-batch; a micro-batch the computation had
    already taken in is not fed again, and its output comes from the log, so ``write`` sees
    every epoch's rows, the same ones, exactly once per completed micro-batch (it may see
    again the epoch whose micro-batch or ``write`` a crash cut short: write idempotently per
    epoch, e.g. overwrite a directory per epoch).

    ``write`` runs on a thread of the driver, for one epoch after another, in order, while
    Spark reads and feeds the next micro-batch: a micro-batch ends once its epoch is computed
    and the epoch before it written. With ``pipeline`` it ends once the epoch before it is
    written, so Spark also feeds the next micro-batch while the processes compute this one:
    more throughput where cores are spare, but the computing then shares the machine with
    Spark's feeding (on a busy 2-core machine it made each epoch's computing slower; see
    docs/streaming.md).

    Returns a running `StreamRun`: ``stop()`` it (or use it as a context manager) to end the
    stream and the computation.
    """
    if not inputs:
        raise ValueError("run_stream needs at least one streaming DataFrame")
    for name, df in inputs.items():
        if not isinstance(df, DataFrame) or not df.isStreaming:
            raise TypeError(f"input {name!r} must be a streaming DataFrame (session.readStream...)")
    if not callable(write):
        raise TypeError("write must be a function (DataFrame, epoch) -> None")
    sc = session.sparkContext
    slots = task_slots(sc)
    n = max(1, slots - 1) if processes is None else processes
    if type(n) is not int or n < 1:
        raise ValueError(f"processes must be an int >= 1, not {processes!r}")
    if n + 1 > slots:
        raise SparkBridgeError(
            f"a stream of {n} timely processes needs {n + 1} Spark task slots: {n} that the processes hold "
            f"while the stream runs and one for each micro-batch, but {sc.master} has {slots}"
        )
    user = output_struct(schema)
    if "epoch" in user.fieldNames():
        raise ValueError("the output schema of run_stream may not have a column 'epoch': the bridge adds it")
    out = StructType([StructField("epoch", IntegerType(), False), *user.fields])
    root = None
    if checkpoint_dir is not None:
        if not isinstance(checkpoint_dir, (str, os.PathLike)):
            raise TypeError(f"checkpoint_dir must be a path, not {type(checkpoint_dir).__name__}")
        if type(checkpoint_every) is not int or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be an int >= 1, not {checkpoint_every!r}")
        base = os.fspath(checkpoint_dir)
        root = claim(os.path.join(base, "timely"), n, STREAM_EPOCHS, list(inputs), to_arrow_schema(out))
        if checkpoint_location is None:
            checkpoint_location = os.path.join(os.path.abspath(base.removeprefix("file://")), "spark")
    run = StreamRun(
        session, build, list(inputs), out, n, write, timeout, columns, encrypt, root, checkpoint_every, pipeline
    )
    run.start(_packed(inputs), trigger_seconds, checkpoint_location)
    return run


def _packed(inputs: Mapping[str, DataFrame]) -> DataFrame:
    """One streaming DataFrame of every input's rows as ``(tag, struct per input)``."""
    parts = [
        df.select(F.lit(k).cast("long").alias(TAG), F.struct(*[quoted(c) for c in df.columns]).alias(input_column(k)))
        for k, df in enumerate(inputs.values())
    ]
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)


@dataclass
class _Process:
    data: tuple[str, int] | None = None
    passed: int = -1
    sealed: int = -1
    """The last epoch whose rows the process has fed and logged."""
    rows: dict[int, tuple[int, int]] = field(default_factory=dict)
    """epoch -> rows fed in and rows output (until the epoch is written)."""
    passed_at: dict[int, float] = field(default_factory=dict)
    """epoch -> when the driver heard it passed (perf_counter; until the epoch is written)."""
    error: str | None = None


class StreamRun:
    """A running stream (made by `run_stream`): ``query`` is Spark's `StreamingQuery`;
    ``epochs`` the `EpochReport` of each epoch done; ``stop()`` ends it."""

    def __init__(
        self,
        session: SparkSession,
        build: Build,
        names: list[str],
        schema: StructType,
        processes: int,
        write: Write,
        timeout: float | None,
        columns: bool = False,
        encrypt: bool | None = None,
        checkpoint_dir: str | None = None,
        checkpoint_every: int = 10,
        pipeline: bool = False,
    ) -> None:
        self.session = session
        self.processes = processes
        self.schema = schema
        self.write = write
        self.epochs: list[EpochReport] = []
        self.query: Any = None
        self._state = [_Process() for _ in range(processes)]
        self._changed = threading.Condition()
        self._failure: BaseException | None = None
        host = driver_host(session.sparkContext)
        self._server = socket.create_server((host, 0))
        self._connections: list[tuple[socket.socket, Any]] = []
        token = secrets.token_hex(16)
        self._book = AddressBook(host) if processes > 1 else None
        self.plan = StreamPlan(
            build=build,
            names=tuple(names),
            schema=to_arrow_schema(schema),
            processes=processes,
            secret=secrets.token_bytes(32),
            coordinator=self._server.getsockname()[:2],
            token=token,
            timeout=timeout,
            columns=columns,
            encrypt=encrypt,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every,
            book=self._book.address if self._book is not None else None,
        )
        self.resumed_at = 0
        """The epoch the computation resumed at (0: a fresh start)."""
        self._first_epoch: int | None = None
        self._stage: threading.Thread | None = None
        self.pipeline = pipeline
        self._writes: queue.Queue[tuple[int, float, float, float] | None] = queue.Queue()
        """Epochs committed, for the writer: ``(epoch, began, fed, committed)`` (perf_counter)."""
        self._writer: threading.Thread | None = None
        self._committed = -1
        """The last epoch committed to the processes (or before a restart, by Spark)."""
        self._written = -1
        """The last epoch written (``write`` returned for it and every epoch before)."""

    # Starting ---------------------------------------------------------------------------------------
    def start(self, packed: DataFrame, trigger_seconds: float, checkpoint_location: str | None) -> None:
        threading.Thread(target=self._accept, name="timely-stream-coordinator", daemon=True).start()
        self._stage = threading.Thread(target=self._run_stage, name="timely-stream-stage", daemon=True)
        self._stage.start()
        with self._changed:
            ready = self._changed.wait_for(
                lambda: self._failure is not None or all(p.data for p in self._state), START_TIMEOUT
            )
        if self._failure is not None or not ready:
            self._close_processes()
            raise self._failure_error("the timely processes did not start")
        self._written = self._committed = self._read_mark()
        self._writer = threading.Thread(target=self._write_epochs, name="timely-stream-writer", daemon=True)
        self._writer.start()
        writer = packed.writeStream.foreachBatch(self._epoch).trigger(processingTime=f"{trigger_seconds} seconds")
        if checkpoint_location is not None:
            writer = writer.option("checkpointLocation", checkpoint_location)
        self.query = writer.start()

    def _run_stage(self) -> None:
        sc = self.session.sparkContext
        try:
            with quiet_pandas_warning():
                sc.parallelize(range(self.processes), self.processes).barrier().mapPartitions(
                    functools.partial(stream_process, self.plan)
                ).collect()
        except BaseException as e:
            self._fail(e)

    def _fail(self, error: BaseException) -> None:
        with self._changed:
            if self._failure is None:
                self._failure = error
            self._changed.notify_all()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._listen, args=(conn,), name="timely-stream-process", daemon=True).start()

    def _listen(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            hello = read_line(reader)
            if not hello or hello.get("token") != self.plan.token:
                return
            index = int(hello["process"])
            with self._changed:
                self._connections.append((conn, conn.makefile("wb")))
                self._state[index].data = (str(hello["data"][0]), int(hello["data"][1]))
                self.resumed_at = max(self.resumed_at, int(hello.get("resume", 0)))
                self._changed.notify_all()
            while (message := read_line(reader)) is not None:
                with self._changed:
                    process = self._state[index]
                    if "error" in message:
                        process.error = str(message["error"])
                    elif "sealed" in message:
                        process.sealed = max(process.sealed, int(message["sealed"]))
                    elif "passed" in message:
                        epoch = int(message["passed"])
                        process.passed = max(process.passed, epoch)
                        if not message.get("again"):
                            process.rows[epoch] = (int(message["rows_in"]), int(message["rows_out"]))
                            process.passed_at[epoch] = time.perf_counter()
                    self._changed.notify_all()

    # Each micro-batch -----------------------------------------------------------------------------------
    def _epoch(self, batch: DataFrame, batch_id: int) -> None:
        """Feed micro-batch ``batch_id`` as its epoch (with ``pipeline``, while the processes may
        still compute the epoch before), commit it, hand it to the writer, and return once the
        processes have passed it (with ``pipeline``: sealed it) and the epoch before it is written."""
        epoch = int(batch_id)
        began = time.perf_counter()
        addresses = [p.data for p in self._state if p.data is not None]
        self._check()
        if self.plan.checkpoint_dir is not None and self._first_epoch is None:
            self._first_epoch = epoch
            if not self.resumed_at - 1 <= epoch <= self.resumed_at:
                raise SparkBridgeError(
                    f"Spark's checkpoint resumes at micro-batch {epoch} but timely's at epoch {self.resumed_at}: "
                    "the two checkpoints are not of the same run (give the same checkpoint_dir, or a fresh one)"
                )
            # Spark committed every micro-batch before this one; write those not written yet.
            for earlier in range(self._written + 1, epoch):
                self._commit(earlier, began, began)
            self._await_written(epoch - 1)
        if epoch >= self.resumed_at:  # else the computation took it in before a restart
            with _QUIET, quiet_pandas_warning():
                feeding = batch.mapInArrow(functools.partial(feed_partition, self.plan, epoch, addresses), "rows long")
            feeding.collect()
        self._commit(epoch, began, time.perf_counter())
        # Spark commits the micro-batch when this returns: the processes must hold it by then.
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    self._failure is not None
                    or any(p.error for p in self._state)
                    or all(max(p.sealed, p.passed) >= epoch for p in self._state)
                )
            )
        if not self.pipeline:  # the processes compute it alone; Spark writes it during the next micro-batch
            self._await_passed(epoch)
        self._await_written(epoch - 1)

    def _await_passed(self, epoch: int) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    self._failure is not None
                    or any(p.error for p in self._state)
                    or all(p.passed >= epoch for p in self._state)
                )
            )
        self._check()

    def _commit(self, epoch: int, began: float, fed: float) -> None:
        """Tell the processes to compute ``epoch`` (after the epochs before it), and the writer
        to write it once they have."""
        self._check()
        self._broadcast({"commit": epoch, "written": self._written})
        self._committed = max(self._committed, epoch)
        self._writes.put((epoch, began, fed, time.perf_counter()))

    def _await_written(self, epoch: int) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: self._failure is not None or any(p.error for p in self._state) or self._written >= epoch
            )
        self._check()

    def _write_epochs(self) -> None:
        """The writer thread: each committed epoch, in order, once every process passed it."""
        while (item := self._writes.get()) is not None:
            try:
                self._write_epoch(*item)
            except SparkBridgeError as e:
                self._fail(e)
                return
            except BaseException as e:
                error = SparkBridgeError(f"writing epoch {item[0]} failed: {type(e).__name__}: {e}")
                error.__cause__ = e
                self._fail(error)
                return

    def _write_epoch(self, epoch: int, began: float, fed: float, committed: float) -> None:
        addresses = [p.data for p in self._state if p.data is not None]
        with self._changed:
            done = self._changed.wait_for(
                lambda: (
                    self._failure is not None
                    or any(p.error for p in self._state)
                    or all(p.passed >= epoch for p in self._state)
                ),
                self.plan.timeout,
            )
            # When the last process passed it (an epoch replayed after a restart: now).
            computed = max([p.passed_at.pop(epoch, 0.0) for p in self._state]) or time.perf_counter()
        self._check()
        if not done:
            raise SparkBridgeError(f"epoch {epoch} did not complete within {self.plan.timeout} s")
        ids = self.session.range(0, self.processes, 1, self.processes).select(F.col("id").cast("int"))
        with _QUIET, quiet_pandas_warning():
            output = ids.mapInArrow(functools.partial(fetch_output, self.plan, epoch, addresses), self.schema)
        # Persisted for write's own jobs (a collect and a write or more read it twice or more);
        # the processes already counted its rows, so no count() job of its own.
        output = output.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            self.write(output, epoch)
        finally:
            output.unpersist()
        if self.plan.checkpoint_dir is not None:
            _write_atomic(Path(self._mark_path()), str(epoch).encode(), fsync=False)
        with self._changed:
            counts = [p.rows.pop(epoch, (0, 0)) for p in self._state]
            self._written = max(self._written, epoch)
            self._changed.notify_all()
        rows_in, rows_out = sum(c[0] for c in counts), sum(c[1] for c in counts)
        self.epochs.append(
            EpochReport(epoch, rows_in, rows_out, time.perf_counter() - began, fed - began, computed - committed)
        )

    def _mark_path(self) -> str:
        assert self.plan.checkpoint_dir is not None
        return os.path.join(self.plan.checkpoint_dir, STREAM_OUTPUT_DIR, WRITTEN_MARK)

    def _read_mark(self) -> int:
        """The last epoch written before a restart (-1: none). Without a mark (a fresh start, or
        a directory from before marks were kept, when each epoch was written before Spark
        committed it), the epoch before the one the computation resumed at."""
        if self.plan.checkpoint_dir is None:
            return -1
        try:
            with open(self._mark_path(), encoding="ascii") as f:
                return int(f.read())
        except FileNotFoundError:
            return self.resumed_at - 1
        except ValueError as e:
            raise SparkBridgeError(f"{self._mark_path()}: not an epoch number ({e})") from e

    @property
    def failed(self) -> bool:
        """Whether the stream has failed: a process, the writer or Spark's query (``stop()``
        raises the error)."""
        with self._changed:
            if self._failure is not None or any(p.error for p in self._state):
                return True
        return self.query is not None and self.query.exception() is not None

    def _check(self) -> None:
        with self._changed:
            failed = self._failure is not None or any(p.error for p in self._state)
        if failed:
            raise self._failure_error("the stream's computation failed")

    def _failure_error(self, what: str) -> SparkBridgeError:
        errors = [f"timely process {i}: {p.error}" for i, p in enumerate(self._state) if p.error]
        if errors:
            return SparkBridgeError(f"{what}: " + "; ".join(errors))
        if isinstance(self._failure, SparkBridgeError):
            return self._failure
        if self._failure is not None:
            return failure(self._failure) if isinstance(self._failure, Exception) else SparkBridgeError(what)
        return SparkBridgeError(f"{what} within {START_TIMEOUT:.0f} s")

    def _broadcast(self, message: dict[str, Any]) -> None:
        with self._changed:
            connections = list(self._connections)
        for _, out in connections:
            with contextlib.suppress(OSError, ValueError):
                send_line(out, message)

    # Ending ----------------------------------------------------------------------------------------------
    def await_epochs(self, count: int, timeout: float) -> None:
        """Wait until ``count`` epochs are done (for tests and demos)."""
        deadline = time.monotonic() + timeout
        while len(self.epochs) < count:
            self._check()  # a process or the writer failed (after its micro-batch returned)
            if self.query is not None and self.query.exception() is not None:
                raise SparkBridgeError(f"the stream failed: {self.query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.epochs)} of {count} epochs done after {timeout} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the query (after its current micro-batch), close the computation's inputs and
        wait for it to end. Raises `SparkBridgeError` if the stream failed."""
        query_error = None
        if self.query is not None:
            self.query.stop()
            query_error = self.query.exception()
        with self._changed:  # the epochs committed are written first
            self._changed.wait_for(
                lambda: (
                    self._failure is not None
                    or any(p.error for p in self._state)
                    or self._written >= self._committed
                    or self._writer is None
                    or not self._writer.is_alive()
                )
            )
        self._writes.put(None)
        if self._writer is not None:
            self._writer.join()
        self._close_processes()
        if self._failure is not None or any(p.error for p in self._state):
            raise self._failure_error("the stream's computation failed")
        if query_error is not None:
            raise SparkBridgeError(f"the stream failed: {query_error}")

    def _close_processes(self) -> None:
        self._broadcast({"close": True})
        if self._stage is not None:
            self._stage.join(timeout=60.0)
        with contextlib.suppress(OSError):
            self._server.close()
        if self._book is not None:
            self._book.close()
        with self._changed:
            for conn, out in self._connections:
                with contextlib.suppress(OSError, ValueError):
                    out.close()
                    conn.shutdown(socket.SHUT_RDWR)  # ends the listening thread's read

    def __enter__(self) -> StreamRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<StreamRun of {self.processes} processes, {len(self.epochs)} epochs done>"
