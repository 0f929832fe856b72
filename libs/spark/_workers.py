"""Python workers started ahead of the run that needs them.

A barrier stage's tasks each run in one of Spark's Python workers. The first stage of a session
that uses Python forks them (PySpark's daemon), and each then imports numpy, pyarrow, timely and
the build's modules, and loads numba's cached loops at the first large array: seconds of CPU
per worker, inside the run, and on a machine with as many cores as processes the workers of
one run do it at once and slow each other (docs/spark.md, "Two processes against one").

Spark keeps a worker for its next task (``spark.python.worker.reuse``, on by default), with
everything it imported. `warm_workers` runs one small Spark job of ``processes`` tasks in a
background thread, each importing the bridge and calling the ``preload`` functions it is given,
and running one tiny computation (which loads what the runtime loads at its first run), so
the runs after it find workers that are ready. It is one job at the session's start, a few
seconds of CPU that the first run would otherwise spend on its own path; Spark queues the
session's next jobs behind it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from ._session import quiet_pandas_warning

__all__ = ["WarmWorkers", "warm_workers"]

_SCHEMA = "pid long, seconds double"


class WarmWorkers:
    """The background job of `warm_workers`: `wait` for it (optional: the session's next jobs
    queue behind it anyway)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.seconds: float | None = None
        """How long the job took, once done."""
        self.workers: list[int] = []
        """The process ids of the workers it started (distinct: each task had a worker of its own)."""
        self.error: BaseException | None = None
        """Why the job failed, if it did: the runs then start their workers themselves."""

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the job has ended (within ``timeout`` seconds)."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()


def warm_workers(
    session: SparkSession,
    processes: int | None = None,
    preload: Sequence[Callable[[], Any]] = (),
) -> WarmWorkers:
    """Start ``processes`` Python workers now (default: the session's default parallelism) and
    have each import timely and the bridge and call every function of ``preload`` (for a linq
    build, `timely_libs.linq.preload`, which loads its compiled loops); the runs after this
    reuse them. Returns at once: the job runs in a daemon thread. A failure is kept in
    ``error``, not raised: the runs then start their workers as they would have anyway."""
    sc = session.sparkContext
    n = sc.defaultParallelism if processes is None else processes
    if type(n) is not int or n < 1:
        raise ValueError(f"processes must be an int >= 1, not {processes!r}")
    for function in preload:
        if not callable(function):
            raise TypeError(f"preload takes functions, not {type(function).__name__}")
    handle = WarmWorkers()
    body = _Warm(tuple(preload))

    def job() -> None:
        began = time.perf_counter()
        try:
            with quiet_pandas_warning():
                rows = session.range(n, numPartitions=n).mapInArrow(body, _SCHEMA).collect()
            handle.workers = sorted({int(r["pid"]) for r in rows})
        except Exception as e:  # kept for the caller: the runs start their own workers
            handle.error = e
        finally:
            handle.seconds = time.perf_counter() - began
            handle._done.set()

    threading.Thread(target=job, name="timely-spark-warm-workers", daemon=True).start()
    return handle


class _Warm:
    """The body of each warming task (a class, so that it pickles by reference to this module)."""

    def __init__(self, preload: tuple[Callable[[], Any], ...]) -> None:
        self.preload = preload

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        began = time.perf_counter()
        from . import _task  # noqa: F401  # timely, numpy, pyarrow and the bridge's task side

        _run_once()
        for function in self.preload:
            function()
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "seconds": [time.perf_counter() - began]})


def _run_once() -> None:
    """One tiny computation on one process: what the runtime loads at its first run (its event
    loop, anyio's asyncio backend: 0.15-0.23 s per process at load 17, inside the first run's
    start) is loaded here instead, and the run proves the worker can compute."""
    import timely

    def build(scope: timely.Scope) -> tuple[timely.Input, list[Any]]:
        rows = scope.new_input("rows")
        got: list[Any] = []
        rows.subscribe(lambda time, batch: got.extend(batch))
        return rows, got

    # Not the environment's console or checkpoints (TIMELY_CONSOLE reaches Spark's workers):
    # those belong to the runs after this.
    with timely.execute(build, timeout=60.0, console=False, checkpoints=False) as (comp, (rows, got)):
        rows.send([1])
        rows.close()
        comp.run()
    if got != [1]:
        raise RuntimeError(f"a one-row computation gave {got!r}")
