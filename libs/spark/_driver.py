"""The driver side: pack the input DataFrames into one barrier stage, check the slots, run the
stage once and hand back its output as a DataFrame.

The plan of a run (``explain()`` shows it)::

    inputs --tag, pack as struct--> union --hash repartition(N) [--sort by epoch]-->
        mapInArrow(run_task, barrier=True) --hash repartition(N)--> persist

The shuffle *after* the barrier stage makes it a shuffle-map stage. Measured with PySpark 4.3
in local mode: when a task of a barrier shuffle-map stage fails, Spark kills the others and
reruns the whole stage, up to ``spark.stage.maxConsecutiveAttempts`` (4) attempts, reading the
same shuffled input again, so every retry is a clean rerun of the timely computation from its
inputs; a barrier *result* stage is not retried at all ("Could not recover from a failed
barrier ResultStage"). Spark cannot tell a vertex's bug from a lost machine, so a
deterministic failure costs all 4 attempts (about 2.5 s each for a small 2-process run) before
the job fails with the timely error's text. The result is persisted and counted inside `run`, so the computation
runs exactly once per call, not once per action on the returned DataFrame.

With ``checkpoint_dir`` (`run_epochs`), a retried stage resumes from the processes' last
complete checkpoint instead of rerunning from the inputs, and re-emits the output the failed
attempt had delivered from the tasks' output log (see _task.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark import AccumulatorParam, SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

import timely

from ._errors import SparkBridgeError
from ._progress import ConsoleProgress, ProgressCallback, driver_host, monitor
from ._rendezvous import BookAddress, address_book
from ._session import quiet_pandas_warning
from ._task import OUTPUT_DIR, TAG, TaskPlan, input_column, run_task

__all__ = [
    "Build",
    "claim",
    "epochs_from_directory",
    "failure",
    "output_struct",
    "quoted",
    "run",
    "run_epochs",
    "task_slots",
]

Build = Callable[[timely.Scope, dict[str, timely.Input]], timely.Stream]

SLOT_WAIT = 60.0
"""Seconds to wait for executors to register on a cluster before refusing for lack of slots (an
executor is a JVM to start: 10-30 s on a loaded machine)."""
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?")


def run(
    session: SparkSession,
    build: Build,
    inputs: Mapping[str, DataFrame],
    schema: str | StructType,
    processes: int | None = None,
    timeout: float | None = 600.0,
    progress: bool | ProgressCallback = True,
    timings: dict[str, float] | None = None,
    columns: bool = False,
    encrypt: bool | None = None,
) -> DataFrame:
    """Run ``build`` as a timely computation over ``inputs``, one Spark barrier task per process.

    ``build(scope, inputs)`` gets a `timely.Input` per name of ``inputs`` (each row of that
    DataFrame arrives as a tuple of its columns, on one of the processes) and returns the
    output stream, whose records are tuples matching ``schema``. ``processes`` defaults to the
    session's default parallelism; more than Spark's free task slots is refused at once with
    `SparkBridgeError`. ``timeout`` bounds the timely computation (seconds).

    The computation runs once, inside this call (a failure raises `SparkBridgeError` with the
    timely error's text); the returned DataFrame is persisted (``unpersist()`` it when done).

    ``progress``: once a second while it runs, a `Progress` snapshot from the processes (rows
    fed, records processed and their rates, rows out) and Spark's stages goes to this callback;
    True (the default) shows it on stderr (`ConsoleProgress`), False not at all.

    ``timings``, if given, receives where the call's time went, in seconds: ``total``, ``spark``
    (Spark's own share), ``joining``, ``computing`` and ``first_answer`` (see `TIMINGS`).

    ``columns``: each Arrow batch Spark hands a process arrives on its input as *one* record, a
    tuple of numpy arrays (one per column: numbers without nulls as numeric arrays, other values
    as object arrays), and the output stream carries tuples of numpy arrays, one per column of
    ``schema`` — no Python object per row (`timely_libs.linq.Collection.from_columns` and
    ``to_columns`` take and give such arrays). Default: a tuple of values per row, both ways.

    ``encrypt`` seals the connections between the processes (`timely.execute`'s ``encrypt``): by
    default they are sealed when any executor is off loopback (a real cluster), and left in clear
    in local mode; True seals them anyway, False never.
    """
    if not inputs:
        raise ValueError("run needs at least one input DataFrame")
    return _launch(
        session,
        build,
        [dict(inputs)],
        schema,
        processes,
        timeout,
        epochs_column=False,
        progress=progress,
        timings=timings,
        columns=columns,
        encrypt=encrypt,
    )


def run_epochs(
    session: SparkSession,
    build: Build,
    epochs: Sequence[Mapping[str, DataFrame]],
    schema: str | StructType,
    processes: int | None = None,
    timeout: float | None = 600.0,
    seconds: dict[int, float] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 10,
    progress: bool | ProgressCallback = True,
    timings: dict[str, float] | None = None,
    columns: bool = False,
    encrypt: bool | None = None,
) -> DataFrame:
    """Feed ``epochs[i]`` into one running computation as epoch ``i``, and return what the output
    stream produced at each epoch, with a leading ``epoch`` (int) column.

    Epochs go in one after the other, as a stream would bring them: each process feeds epoch
    ``i + 1`` once the output has passed epoch ``i`` everywhere. ``seconds``, if given, is
    filled with each epoch's latency: from its first row fed to its output complete (the
    slowest process's).

    Every name that appears in some epoch is one input of ``build`` for all epochs; a name
    missing from an epoch has no records at that epoch. A name's DataFrames must have the same
    columns in every epoch. Otherwise as `run`.

    ``checkpoint_dir`` (a path every executor and the driver see, such as a shared mount)
    makes the processes checkpoint every ``checkpoint_every`` epochs (`timely.Checkpoints`)
    and log their output there: when Spark retries the stage after a task died, the new
    attempt resumes from the last complete checkpoint, and the result still holds every
    epoch's rows exactly once. A later call on the same directory resumes that computation
    too (same build, processes and epochs expected); use a fresh directory for a new one.

    ``progress``, ``timings``, ``columns`` and ``encrypt`` as `run`'s; progress snapshots also count the
    epochs every process has passed.
    """
    if not epochs:
        raise ValueError("run_epochs needs at least one epoch")
    if not any(epochs):
        raise ValueError("run_epochs needs at least one input DataFrame in some epoch")
    if checkpoint_dir is not None and not isinstance(checkpoint_dir, (str, os.PathLike)):
        raise TypeError(f"checkpoint_dir must be a path, not {type(checkpoint_dir).__name__}")
    if type(checkpoint_every) is not int or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be an int >= 1, not {checkpoint_every!r}")
    return _launch(
        session,
        build,
        [dict(e) for e in epochs],
        schema,
        processes,
        timeout,
        epochs_column=True,
        seconds=seconds,
        checkpoint_dir=None if checkpoint_dir is None else os.fspath(checkpoint_dir),
        checkpoint_every=checkpoint_every,
        progress=progress,
        timings=timings,
        columns=columns,
        encrypt=encrypt,
    )


def epochs_from_directory(
    session: SparkSession,
    path: str,
    format: str = "parquet",
    name: str = "edges",
    schema: str | StructType | None = None,
    **options: Any,
) -> list[dict[str, DataFrame]]:
    """One epoch per entry of the directory ``path``, in order of name: ``[{name: DataFrame}, ...]``.

    An entry is a file or a directory (such as one Spark wrote); names starting with ``_`` or
    ``.`` (``_SUCCESS``, checksums) are skipped. ``path`` is anything Hadoop reads (a local path,
    ``hdfs://``, ``s3a://``). ``schema`` and ``options`` go to the reader (for CSV:
    ``header=True``...).
    """
    sc = session.sparkContext
    jvm = sc._jvm
    assert jvm is not None
    directory = jvm.org.apache.hadoop.fs.Path(path)
    fs = directory.getFileSystem(sc._jsc.hadoopConfiguration())
    if not fs.exists(directory):
        raise FileNotFoundError(f"no such directory: {path}")
    entries = sorted(
        (status.getPath().getName(), status.getPath().toString())
        for status in fs.listStatus(directory)
        if not status.getPath().getName().startswith(("_", "."))
    )
    reader = session.read.format(format).options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    return [{name: reader.load(location)} for _, location in entries]


def task_slots(sc: SparkContext) -> int:
    """How many tasks Spark can run at once, which bounds a barrier stage's width: executor
    cores / ``spark.task.cpus`` as Spark's own barrier check counts them (``local[N]``: N)."""
    try:
        jsc = sc._jsc.sc()  # type: ignore[union-attr]
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # an internal API: count as the documentation says instead
        task_cpus = int(sc.getConf().get("spark.task.cpus", "1") or 1)
        m = _LOCAL.fullmatch(sc.master or "")
        if m is not None:
            cores = (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1) or 1)
            return cores // task_cpus
        return sc.defaultParallelism // task_cpus


def _processes(sc: SparkContext, processes: int | None) -> int:
    slots = task_slots(sc)
    if processes is None:
        return max(1, min(sc.defaultParallelism, slots))
    if type(processes) is not int or processes < 1:
        raise ValueError(f"processes must be an int >= 1, not {processes!r}")
    if processes > slots and _LOCAL.fullmatch(sc.master or "") is None:
        deadline = time.monotonic() + SLOT_WAIT  # executors may still be registering
        while processes > slots and time.monotonic() < deadline:
            time.sleep(0.5)
            slots = task_slots(sc)
    if processes > slots:
        raise SparkBridgeError(
            f"{processes} timely processes need {processes} Spark task slots at once (a barrier stage), "
            f"but {sc.master} has {slots}; ask for at most {slots} processes or give Spark more cores"
        )
    return processes


def output_struct(schema: str | StructType) -> StructType:
    """The output schema, given as a DDL string or a StructType."""
    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a DDL string or a StructType, not {type(schema).__name__}")
    parsed = StructType.fromDDL(schema)
    if not isinstance(parsed, StructType):
        raise ValueError(f"schema {schema!r} is not a list of columns")
    return parsed


def _names_and_schemas(epochs: list[dict[str, DataFrame]]) -> list[str]:
    """Input names in order of first appearance; a name must keep its columns across epochs."""
    seen: dict[str, StructType] = {}
    for e, frames in enumerate(epochs):
        for name, df in frames.items():
            if not isinstance(name, str):
                raise TypeError(f"input names must be strings, not {name!r}")
            if not isinstance(df, DataFrame):
                raise TypeError(f"input {name!r} must be a DataFrame, not {type(df).__name__}")
            first = seen.setdefault(name, df.schema)
            if [(f.name, f.dataType) for f in df.schema] != [(f.name, f.dataType) for f in first]:
                raise ValueError(
                    f"input {name!r} has columns {df.schema.simpleString()} at epoch {e}, "
                    f"but {first.simpleString()} before"
                )
    return list(seen)


def quoted(name: str) -> Any:
    return F.col("`" + name.replace("`", "``") + "`")


def _pack(epochs: list[dict[str, DataFrame]], names: list[str], processes: int, sort: bool) -> DataFrame:
    """One DataFrame of N partitions holding every input row as ``(tag, struct per input)``."""
    index = {name: k for k, name in enumerate(names)}
    parts = [
        df.select(
            F.lit(e * len(names) + index[name]).cast("long").alias(TAG),
            F.struct(*[quoted(c) for c in df.columns]).alias(input_column(index[name])),
        )
        for e, frames in enumerate(epochs)
        for name, df in frames.items()
    ]
    packed = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    # Hash partitioning: unlike round-robin it needs no sort to be deterministic, so a retried
    # stage gets the same rows in the same partitions.
    packed = packed.repartition(processes, *[quoted(c) for c in packed.columns])
    return packed.sortWithinPartitions(TAG) if sort else packed


def _launch(
    session: SparkSession,
    build: Build,
    epochs: list[dict[str, DataFrame]],
    schema: str | StructType,
    processes: int | None,
    timeout: float | None,
    epochs_column: bool,
    seconds: dict[int, float] | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 10,
    progress: bool | ProgressCallback = True,
    timings: dict[str, float] | None = None,
    columns: bool = False,
    encrypt: bool | None = None,
) -> DataFrame:
    if not callable(build):
        raise TypeError("build must be a function (scope, inputs) -> stream")
    user = output_struct(schema)
    if epochs_column:
        if "epoch" in user.fieldNames():
            raise ValueError("the output schema of run_epochs may not have a column 'epoch': the bridge adds it")
        out = StructType([StructField("epoch", IntegerType(), False), *user.fields])
    else:
        out = user
    names = _names_and_schemas(epochs)
    n = _processes(session.sparkContext, processes)
    arrow = to_arrow_schema(out)
    if checkpoint_dir is not None:
        checkpoint_dir = claim(checkpoint_dir, n, len(epochs), names, arrow)
    figures = session.sparkContext.accumulator({}, _Slowest())
    callback = ConsoleProgress() if progress is True else (progress or None)
    began, began_at = time.perf_counter(), time.time()
    sc = session.sparkContext
    with address_book(driver_host(sc), n) as book, monitor(sc, _label(build), callback, n, len(epochs)) as listener:
        result = _run_stage(session, build, epochs, names, n, timeout, out, arrow, figures, listener,
                            epochs_column, checkpoint_dir, checkpoint_every, columns, encrypt, book)  # fmt: skip
    total = time.perf_counter() - began
    tasks: dict[str, Any] = figures.value
    if seconds is not None:
        seconds.update(tasks.get("epochs", {}))
    if timings is not None:
        timings.update(_timings(tasks, total, began_at))
    return result


TIMINGS = {
    "total": "the whole call",
    "spark": "Spark's own share: preparing and shuffling the inputs, starting the tasks (and Python "
    "workers), persisting the output; the call less the slowest task",
    "starting": "from the call until the last task started (the driver planning the query, the inputs' "
    "shuffle, scheduling the barrier stage)",
    "joining": "the slowest process, from its task's start until the computation ran (the rendezvous, "
    "connecting to the others, resuming from a checkpoint)",
    "reading": "the slowest process, from running until its first input batch (Spark reading the "
    "shuffled input, sorting it by epoch, converting it to Arrow)",
    "computing": "the slowest process, from running until its last output row left (feeding the "
    "input, the computation, converting the output)",
    "first_answer": "from the call until every process had the output of epoch 0 (only when this "
    "call computed epoch 0)",
}
"""What the ``timings`` dict of `run` and `run_epochs` receives, in seconds."""


def _timings(tasks: dict[str, Any], total: float, began_at: float) -> dict[str, float]:
    joining = float(tasks.get("joining", 0.0))
    computing = float(tasks.get("computing", 0.0))
    out = {"total": total, "spark": max(0.0, total - float(tasks.get("task", joining + computing)))}
    if "entered_at" in tasks:
        out["starting"] = max(0.0, float(tasks["entered_at"]) - began_at)
    out["joining"] = joining
    if "reading" in tasks:
        out["reading"] = float(tasks["reading"])
    out["computing"] = computing
    if "first_answer_at" in tasks:
        out["first_answer"] = max(0.0, float(tasks["first_answer_at"]) - began_at)
    return out


def _label(build: Build) -> str:
    """What progress lines call a run: the build function's name."""
    inner = getattr(build, "func", build)  # a functools.partial
    return str(getattr(inner, "__name__", "timely"))


def _run_stage(
    session: SparkSession,
    build: Build,
    epochs: list[dict[str, DataFrame]],
    names: list[str],
    n: int,
    timeout: float | None,
    out: StructType,
    arrow: Any,
    figures: Any,
    listener: tuple[str, int, str] | None,
    epochs_column: bool,
    checkpoint_dir: str | None,
    checkpoint_every: int,
    columns: bool,
    encrypt: bool | None = None,
    book: BookAddress | None = None,
) -> DataFrame:
    plan = TaskPlan(
        build=build,
        names=tuple(names),
        schema=arrow,
        epochs=epochs_column,
        processes=n,
        timeout=timeout,
        secret=secrets.token_bytes(32),
        timings=figures,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        progress=listener,
        columns=columns,
        encrypt=encrypt,
        book=book,
    )
    packed = _pack(epochs, names, n, sort=epochs_column)
    with quiet_pandas_warning():
        computed = packed.mapInArrow(functools.partial(run_task, plan), out, barrier=True)
    result = computed.repartition(n, *[quoted(c) for c in out.fieldNames()]).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        result.count()
    except Exception as e:
        result.unpersist()
        raise failure(e) from e
    return result


MANIFEST = "spark-run.json"
"""What computation a checkpoint directory belongs to: its processes, epochs, inputs, schema."""


def claim(directory: str, processes: int, epochs: int, names: list[str], schema: Any) -> str:
    """The absolute checkpoint directory, made and labelled with this computation's shape; a
    directory holding another shape's state is refused (the tasks would resume it wrongly:
    the output log and delivered marks are per process)."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", directory) and not directory.startswith("file://"):
        raise ValueError(
            f"checkpoint_dir must be a file system path the executors share (a local or mounted one), "
            f"not {directory!r}: timely writes checkpoints with ordinary file I/O"
        )
    root = os.path.abspath(directory.removeprefix("file://"))
    mine = {"processes": processes, "epochs": epochs, "inputs": names, "schema": str(schema)}
    path = os.path.join(root, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            theirs = json.load(f)
    except FileNotFoundError:
        theirs = None
    except (OSError, ValueError) as e:
        raise SparkBridgeError(f"checkpoint_dir {root} has an unreadable {MANIFEST}: {e}") from e
    if theirs is None:
        if os.path.isdir(root) and any(
            os.path.exists(os.path.join(root, d)) for d in ("checkpoints", "inputs", "delivered", OUTPUT_DIR)
        ):
            raise SparkBridgeError(
                f"checkpoint_dir {root} holds timely state that no run_epochs call labelled; use an empty directory"
            )
        os.makedirs(root, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(mine, f, sort_keys=True)
        os.replace(tmp, path)
    elif theirs != mine:
        differ = ", ".join(f"{k} {theirs.get(k)!r} then, {v!r} now" for k, v in mine.items() if theirs.get(k) != v)
        raise SparkBridgeError(
            f"checkpoint_dir {root} holds the state of another computation ({differ}); "
            "resume it with the same processes, epochs, inputs and schema, or use a fresh directory"
        )
    return root


class _Slowest(AccumulatorParam):  # type: ignore[type-arg]
    """Merges the tasks' figures (`_task.TaskPlan.timings`) by keeping the slowest process's,
    per epoch for ``epochs``; ``task`` is the longest ``joining + computing`` of one task."""

    def zero(self, value: dict[str, Any]) -> dict[str, Any]:
        return {}

    def addInPlace(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        for key, value in b.items():
            if isinstance(value, dict):
                mine = a.setdefault(key, {})
                for k, v in value.items():
                    mine[k] = max(mine.get(k, v), v)
            else:
                a[key] = max(a.get(key, value), value)
        if "joining" in b and "computing" in b:
            a["task"] = max(a.get("task", 0.0), b["joining"] + b["computing"])
        return a


_BRIDGE_ERROR = re.compile(r"SparkBridgeError: (.*?)(?=\n\s*SQLSTATE|\n\tat |\n\n|\Z)", re.S)


def failure(error: Exception) -> SparkBridgeError:
    """The timely error's text out of Spark's job failure (a Java stack trace around a Python one)."""
    text = str(error)
    found = _BRIDGE_ERROR.search(text)
    if found is not None:
        return SparkBridgeError(found.group(1).strip())
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
    return SparkBridgeError("the Spark job running the timely computation failed: " + "\n".join(lines[:20]))
