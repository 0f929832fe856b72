"""Live progress of work on Spark: what the timely processes report, and Spark's own stages.

A barrier task runs for as long as its timely computation does, and Spark tells the driver
nothing about it until it ends (accumulators arrive with the task's result). So each task
reports by itself: a thread in the task samples the computation once a second — the epoch it
is feeding, the epochs its output has passed, the input rows fed, the records its vertices
received (`timely.Computation.statistics`), the output rows — and sends it to a listener the
driver opened for the run (one line of JSON, over TCP, with a token only this run's tasks
know). The driver folds the processes' latest reports with Spark's status tracker (the stages
before the barrier stage: packing and shuffling the inputs) into a `Progress` snapshot, once a
second, and hands it to the caller's callback; `ConsoleProgress` shows it as a bar on a
terminal and as a line every few seconds elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from ._server import Server

__all__ = ["ConsoleProgress", "Progress", "ProgressCallback", "TaskReporter", "driver_host", "monitor", "watch"]

INTERVAL = 1.0
"""Seconds between samples, in the tasks and on the driver."""
NOTES = "timely.compile"
"""The logger whose records a task forwards to the driver as `Progress.notes`: announcements
of a pause the figures cannot explain (the libraries' first compile of their numba loops, on
an executor that has not cached them yet), which would otherwise reach only the executor's log."""


@dataclass(frozen=True)
class Progress:
    """What a run on Spark has done so far (the driver's view, refreshed once a second)."""

    label: str
    seconds: float
    """Since the run started."""
    processes: int
    reporting: int
    """Timely processes that have joined and report (0 while Spark prepares the inputs)."""
    epochs: int
    """Epochs the run feeds (`run`: 1)."""
    epochs_done: int
    """Epochs the output has passed on every process."""
    rows_in: int
    """Input rows fed into timely, over all processes."""
    records: int
    """Records the vertices received, over all processes: the computation's work so far."""
    rows_out: int
    """Output rows produced, over all processes."""
    rows_in_per_second: float
    records_per_second: float
    """Over the last interval."""
    spark: str = ""
    """Spark's own stages in flight, such as ``stage 12: 1/2 tasks``."""
    done: bool = False
    """The last snapshot of the run."""
    notes: tuple[str, ...] = ()
    """What the processes announced (`NOTES`: a first compile of numba loops, which pauses a
    process for seconds), each once, oldest first."""

    def describe(self) -> str:
        """One line: ``2/6 epochs done · 50,200 rows in · 12.1M records processed (30.0k/s) · ...``."""
        parts = []
        if self.reporting:
            if self.epochs > 1:
                parts.append(f"{self.epochs_done}/{self.epochs} epochs done")
            elif not self.done:
                parts.append("running")
            rate = f" ({_si(self.rows_in_per_second)}/s)" if self.rows_in_per_second else ""
            parts.append(f"{self.rows_in:,} rows in{rate}")
            parts.append(f"{_si(self.records)} records processed ({_si(self.records_per_second)}/s)")
            parts.append(f"{self.rows_out:,} rows out")
            if self.reporting < self.processes:
                parts.append(f"{self.reporting}/{self.processes} processes")
        elif self.spark:
            parts.append(f"Spark {self.spark}")
        elif self.done:
            parts.append("done")
        else:
            parts.append("Spark is preparing the inputs" if self.processes else "no Spark stage running")
        return f"{self.label}: " + " · ".join(parts) + f" · {self.seconds:.0f} s"


ProgressCallback = Callable[[Progress], None]


def _si(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


class ConsoleProgress:
    """Shows `Progress` snapshots: a tqdm bar on a terminal, else a line (through ``say``)
    every ``every`` seconds and whenever an epoch completes."""

    def __init__(
        self, stream: TextIO | None = None, every: float = 3.0, say: Callable[[str], None] | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.say = say or (lambda line: print(line, file=self.stream, flush=True))
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self._bar: Any = None
        self._last = 0.0
        self._epochs_done = -1
        self._printed = False
        self._notes_said: set[str] = set()
        self.last_shown = 0.0
        """When it last showed something (`time.monotonic`): lets a caller tell silence from a bar."""

    def __call__(self, p: Progress) -> None:
        for note in p.notes:  # each at once, whatever the figures' schedule
            if note not in self._notes_said:
                self._notes_said.add(note)
                self.last_shown = time.monotonic()
                if self._bar is not None:
                    self._bar.write(f"{p.label}: {note}", file=self.stream)
                else:
                    self.say(f"{p.label}: {note}")
        if p.done:
            self._notes_said.clear()
        if self.terminal:
            self.last_shown = time.monotonic()
            self._draw(p)
            return
        now = time.monotonic()
        if p.done:  # the final figures, if the run was long enough to show any
            if self._printed:
                self.say(p.describe())
            self._printed, self._last, self._epochs_done = False, 0.0, -1
        elif (p.epochs_done != self._epochs_done and p.epochs_done) or now - self._last >= self.every:
            if self._last == 0.0 and p.seconds < self.every - INTERVAL / 2:
                return  # a step shorter than `every` needs no line
            self._last, self._epochs_done, self._printed = now, p.epochs_done, True
            self.last_shown = now
            self.say(p.describe())

    def _draw(self, p: Progress) -> None:
        from tqdm import tqdm

        if self._bar is None:
            size = shutil.get_terminal_size()  # (80, 24) where a pseudo-terminal says 0 x 0, as tqdm would hide the bar
            bar = "|{bar:20}| {desc}"
            self._bar = tqdm(
                total=p.epochs,
                desc=p.describe(),
                file=self.stream,
                bar_format=bar,
                ncols=size.columns,
                nrows=size.lines,
            )
        self._bar.n = p.epochs_done
        self._bar.set_description_str(p.describe(), refresh=False)
        self._bar.refresh()
        if p.done:
            self._bar.close()
            self._bar = None


# The task's side -----------------------------------------------------------------------------------
class TaskReporter:
    """In a barrier task: sends ``sample()`` to the driver's listener every `INTERVAL` seconds
    from a thread, and once more at `close`. Without a listener, or if it cannot be reached,
    it does nothing (progress is a courtesy; the computation must not depend on it)."""

    def __init__(
        self, address: tuple[str, int, str] | None, process: int, sample: Callable[[], dict[str, Any]]
    ) -> None:
        self.sample = sample
        self.process = process
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._notes: _Notes | None = None
        if address is None:
            return
        self._notes = _Notes()
        host, port, self._token = address
        try:
            self._sock = socket.create_connection((host, port), timeout=2.0)
        except OSError:
            return
        self._thread = threading.Thread(target=self._loop, name="timely-spark-progress", daemon=True)
        self._thread.start()

    def _send(self) -> None:
        if self._sock is None:
            return
        try:
            report = {"token": self._token, "process": self.process, **self.sample()}
            if self._notes is not None and self._notes.said:
                report["notes"] = list(self._notes.said)
            self._sock.sendall(json.dumps(report).encode() + b"\n")
        except Exception:  # a sample racing the computation, or the driver gone: skip it
            pass

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._send()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._send()
        if self._notes is not None:
            self._notes.close()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()


class _Notes(logging.Handler):
    """Keeps what the `NOTES` logger says in this process (while a `TaskReporter` runs). It
    still reaches the task's stderr as it would have without this handler."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said: list[str] = []
        self.logger = logging.getLogger(NOTES)
        self._unheard = not self.logger.hasHandlers()  # else Python's last resort printed it
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.said) < 10:
            self.said.append(record.getMessage())
        if self._unheard and logging.lastResort is not None and record.levelno >= logging.lastResort.level:
            logging.lastResort.handle(record)

    def close(self) -> None:
        self.logger.removeHandler(self)
        super().close()


# The driver's side ---------------------------------------------------------------------------------
class _Listener:
    """Accepts the tasks' connections and keeps each process's latest report."""

    def __init__(self, host: str) -> None:
        self.token = secrets.token_hex(16)
        self.latest: dict[int, dict[str, Any]] = {}
        self.server = Server(host, self._read, "timely-spark-progress-read")
        self.address = (host, self.server.port, self.token)

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                try:
                    report = json.loads(line)
                except ValueError:
                    return
                if not isinstance(report, dict) or report.pop("token", None) != self.token:
                    return  # not one of this run's tasks
                self.latest[int(report.pop("process"))] = report

    def close(self) -> None:
        """Stop accepting; give the readers a moment for the tasks' last reports (sent as they end)."""
        self.server.close()
        deadline = time.monotonic() + 1.0
        for reader in list(self.server.threads):
            reader.join(max(0.0, deadline - time.monotonic()))


def _spark_stages(sc: Any) -> str:
    """Spark's active stages as ``stage 12: 1/2 tasks``, from the status tracker."""
    tracker = sc.statusTracker()
    shown = []
    for stage in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage)
        if info is not None:
            shown.append(f"stage {stage}: {info.numCompletedTasks}/{info.numTasks} tasks")
    return ", ".join(shown)


def driver_host(sc: Any) -> str:
    """The address the tasks reach the driver at (127.0.0.1 in local mode)."""
    host = sc.getConf().get("spark.driver.host") or "127.0.0.1"
    if (sc.master or "").startswith("local"):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


@contextlib.contextmanager
def monitor(
    sc: Any, label: str, callback: ProgressCallback | None, processes: int = 0, epochs: int = 1
) -> Iterator[tuple[str, int, str] | None]:
    """While the block runs, call ``callback`` with a `Progress` once a second (and once at the
    end). With ``processes``, open a listener for the tasks' reports and yield its address for
    the `TaskReporter`s; else yield None (Spark's stages only)."""
    if callback is None:
        yield None
        return
    listener = _Listener(driver_host(sc)) if processes else None
    began = time.monotonic()
    stop = threading.Event()
    previous = (began, 0, 0)

    def snapshot(done: bool = False) -> Progress:
        nonlocal previous
        reports = list(listener.latest.values()) if listener is not None else []
        now = time.monotonic()
        rows_in = sum(int(r.get("rows_in", 0)) for r in reports)
        records = sum(int(r.get("records", 0)) for r in reports)
        last_at, last_in, last_records = previous
        span = max(now - last_at, 1e-9)
        previous = (now, rows_in, records)
        try:
            stages = "" if done else _spark_stages(sc)
        except Exception:
            stages = ""
        return Progress(
            label=label,
            seconds=now - began,
            processes=processes,
            reporting=len(reports),
            epochs=epochs,
            epochs_done=min((int(r.get("epochs_done", 0)) for r in reports), default=0)
            if len(reports) == processes
            else 0,
            rows_in=rows_in,
            records=records,
            rows_out=sum(int(r.get("rows_out", 0)) for r in reports),
            rows_in_per_second=max(0.0, (rows_in - last_in) / span),
            records_per_second=max(0.0, (records - last_records) / span),
            spark=stages,
            done=done,
            notes=tuple(dict.fromkeys(n for r in reports for n in r.get("notes", ()))),  # each once
        )

    def tick() -> None:
        while not stop.wait(INTERVAL):
            try:
                callback(snapshot())
            except Exception:  # a broken callback must not break the run
                pass

    ticker = threading.Thread(target=tick, name="timely-spark-progress-tick", daemon=True)
    ticker.start()
    try:
        yield None if listener is None else listener.address
    finally:
        stop.set()
        ticker.join()
        if listener is not None:
            listener.close()
        with contextlib.suppress(Exception):
            callback(snapshot(done=True))


@contextlib.contextmanager
def watch(session: Any, label: str, progress: bool | ProgressCallback = True) -> Iterator[None]:
    """Report Spark's own progress (its active stages and their tasks) once a second while the
    block runs: for the Spark work around a timely run, such as writing the results."""
    callback = ConsoleProgress() if progress is True else (progress or None)
    with monitor(session.sparkContext, label, callback):
        yield
