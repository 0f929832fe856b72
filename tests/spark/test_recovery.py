"""timely_libs.spark with checkpoints: a retried barrier stage resumes from the timely processes' last
complete checkpoint, and the result still holds every epoch's rows exactly once.

The workload is a core vertex keeping running sums by key (its `checkpoint` returns a
`timely.KeyedState`), fed 12 epochs by `run_epochs` with a checkpoint every 4 epochs (after
epochs 3 and 7). In the first attempt process 0 SIGKILLs itself; Spark reruns the stage.
Each task writes what it did to ``spark-attempts/p<i>/task-<id>.json`` under the checkpoint
directory: the tests read whether the retry resumed, from which checkpoint, what it re-emitted
from the output log, and how long each attempt ran.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

import timely  # noqa: E402
from timely_libs import spark as tspark  # noqa: E402
from timely_libs.spark import _task  # noqa: E402

pytestmark = pytest.mark.slow

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 60.0
EPOCHS = 12
EVERY = 4
"""Checkpoints after epochs 3 and 7 (not 11: the computation is complete then)."""
KEYS = 40
SCHEMA = "key long, total long"
WORK = 0.15
"""Seconds each process's vertex spends per epoch, so that resuming saves visible time."""


def epoch_rows(epoch: int) -> list[tuple[int, int]]:
    rng = random.Random(epoch)
    return [(rng.randrange(KEYS), rng.randrange(1000)) for _ in range(300)]


def expected_rows() -> Counter[tuple[int, int, int]]:
    """``(epoch, key, running total)`` for each key that changed at the epoch."""
    sums: dict[int, int] = defaultdict(int)
    out: Counter[tuple[int, int, int]] = Counter()
    for epoch in range(EPOCHS):
        keys = set()
        for k, v in epoch_rows(epoch):
            sums[k] += v
            keys.add(k)
        out.update((epoch, k, sums[k]) for k in keys)
    return out


def _die(marker: str) -> None:
    Path(marker).touch()
    os.kill(os.getpid(), signal.SIGKILL)


class Sums(timely.Vertex):
    """Running sums by key, applied at each epoch's notification; state saved as a KeyedState.
    With ``kill = (marker, epoch)``, process 0 SIGKILLs itself on receiving that epoch's
    records, unless ``marker`` exists (so: in the first attempt only)."""

    def __init__(self, kill: tuple[str, int] | None = None, work: float = 0.0) -> None:
        self.sums: dict[int, int] = defaultdict(int)
        self.waiting: dict[timely.Timestamp, list[tuple[int, int]]] = {}
        self.kill = kill
        self.work = work

    def on_recv(self, edge: int, records: list[tuple[int, int]], t: timely.Timestamp) -> None:
        kill = self.kill
        if kill is not None and t.epoch == kill[1] and self.worker_index == 0 and not os.path.exists(kill[0]):
            _die(kill[0])  # in the middle of the epoch: rows are still being fed
        self.waiting.setdefault(t, []).extend(records)
        self.notify_at(t)

    def on_notify(self, t: timely.Timestamp) -> None:
        if self.work:
            time.sleep(self.work)
        keys = set()
        for k, v in self.waiting.pop(t, []):
            self.sums[k] += v
            keys.add(k)
        self.send_by(self.outputs[0], [(k, self.sums[k]) for k in sorted(keys)], t)

    def checkpoint(self) -> Any:
        return timely.KeyedState([(k, (k, v)) for k, v in self.sums.items()])

    def restore(self, state: Any) -> None:
        for _, (k, v) in state.pieces:
            self.sums[k] = v


def sums_build(kill: tuple[str, int] | None = None, work: float = WORK) -> Any:
    def build(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        return inputs["values"].stage("sums", lambda: Sums(kill, work), exchange=lambda r: r[0])

    return build


def dying_after_logging(marker: str, epoch: int) -> Any:
    """A build whose process 0, in the first attempt, dies right after the bridge has logged
    ``epoch``'s output, before the runtime writes the epoch's delivered mark."""

    def build(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        if scope.process_index == 0 and not os.path.exists(marker):
            original = _task._OutputLog.write

            def write(self: Any, e: int, batches: list[Any]) -> None:
                original(self, e, batches)
                if e == epoch and not os.path.exists(marker):
                    _die(marker)

            _task._OutputLog.write = write  # type: ignore[method-assign,assignment]  # dies with the process
        return sums_build()(scope, inputs)

    return build


@pytest.fixture
def session(spark_session: SparkSession) -> SparkSession:
    return spark_session


def _epochs(session: SparkSession) -> list[dict[str, DataFrame]]:
    return [{"values": session.createDataFrame(epoch_rows(e), "key long, value long")} for e in range(EPOCHS)]


def _bag(df: DataFrame) -> Counter[tuple[int, int, int]]:
    return Counter((r.epoch, r.key, r.total) for r in df.collect())


def _attempts(directory: Path, process: int) -> list[dict[str, Any]]:
    """The attempt records of one process, oldest first."""
    records = [json.loads(p.read_text()) for p in (directory / "spark-attempts" / f"p{process}").glob("task-*.json")]
    return sorted(records, key=lambda r: r["started"])


# With Spark -------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_a_retried_stage_resumes_from_the_checkpoint_and_keeps_every_row_once(
    session: SparkSession, tmp_path: Path
) -> None:
    expected = expected_rows()
    calm = tmp_path / "calm"
    started = time.monotonic()
    out = tspark.run_epochs(
        session,
        sums_build(),
        _epochs(session),
        SCHEMA,
        processes=2,
        timeout=TIMEOUT,
        checkpoint_dir=str(calm),
        checkpoint_every=EVERY,
    )
    calm_call = time.monotonic() - started
    assert _bag(out) == expected
    out.unpersist()
    [calm_record] = _attempts(calm, 0)
    assert calm_record["resumed"] == {} and calm_record["reemitted_epochs"] == []
    # after epochs 3 and 7: none after 11, the last, as the computation is complete then
    assert calm_record["checkpoints"] == 2 and calm_record["first_epoch"] == 0

    directory = tmp_path / "ck"
    marker = str(tmp_path / "killed")
    kill_epoch = 9
    seconds: dict[int, float] = {}
    started = time.monotonic()
    out = tspark.run_epochs(
        session,
        sums_build(kill=(marker, kill_epoch)),
        _epochs(session),
        SCHEMA,
        processes=2,
        timeout=TIMEOUT,
        seconds=seconds,
        checkpoint_dir=str(directory),
        checkpoint_every=EVERY,
    )
    disturbed_call = time.monotonic() - started
    assert os.path.exists(marker)
    got = _bag(out)
    assert got == expected  # every row, once: none lost with attempt 0, none re-emitted twice
    assert sum(got.values()) == out.count()
    out.unpersist()

    for process in (0, 1):
        first, retry = _attempts(directory, process)
        assert "seconds" not in first  # killed, or cancelled by Spark when its peer died
        assert retry["resumed"]["epoch"] == 7  # the last checkpoint complete before the kill
        # the runtime replayed the epochs after 7 that every process had sealed in its input
        # log (9 too when the kill came after the task had fed all of 9 and advanced)
        assert 8 <= retry["first_epoch"] <= kill_epoch + 1
        assert retry["checkpoints"] == 0  # the next would follow epoch 11, the last
        assert set(range(8)) <= set(retry["reemitted_epochs"])  # delivered before the kill
        assert max(retry["reemitted_epochs"]) < kill_epoch
    assert min(seconds) >= 8 and max(seconds) == EPOCHS - 1  # the epochs the retry fed

    killed_after = os.path.getmtime(marker) - _attempts(directory, 0)[0]["started"]
    retry = _attempts(directory, 0)[1]
    print(
        f"\nundisturbed call {calm_call:.1f} s (attempt {calm_record['seconds']:.2f} s); "
        f"disturbed call {disturbed_call:.1f} s: attempt 0 killed after {killed_after:.2f} s, "
        f"the retry ran {retry['seconds']:.2f} s (resumed at epoch {retry['resumed']['epoch']}, "
        f"{len(retry['reemitted_epochs'])} epochs re-emitted from the output log)"
    )


@pytest.mark.timeout(240)
def test_a_kill_between_logging_an_epoch_and_its_delivered_mark(session: SparkSession, tmp_path: Path) -> None:
    directory = tmp_path / "ck"
    marker = str(tmp_path / "killed")
    out = tspark.run_epochs(
        session,
        dying_after_logging(marker, 6),
        _epochs(session),
        SCHEMA,
        processes=2,
        timeout=TIMEOUT,
        checkpoint_dir=str(directory),
        checkpoint_every=EVERY,
    )
    assert os.path.exists(marker)
    assert _bag(out) == expected_rows()
    out.unpersist()
    first, retry = _attempts(directory, 0)
    assert retry["resumed"]["epoch"] == 3
    assert 6 in retry["reemitted_epochs"]  # logged by the killed attempt...
    assert retry["redelivered_epochs"] == [6]  # ...not marked delivered, so delivered again: dropped


@pytest.mark.timeout(240)
def test_without_checkpoint_dir_a_retry_reruns_from_the_inputs(session: SparkSession, tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    out = tspark.run_epochs(
        session, sums_build(kill=(marker, 9), work=0.0), _epochs(session), SCHEMA, processes=2, timeout=TIMEOUT
    )
    assert os.path.exists(marker)
    assert _bag(out) == expected_rows()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed"]
    out.unpersist()


@pytest.mark.timeout(240)
def test_a_later_call_on_the_directory_resumes_it_and_another_shape_is_refused(
    session: SparkSession, tmp_path: Path
) -> None:
    directory = str(tmp_path / "ck")
    epochs = _epochs(session)
    first = tspark.run_epochs(
        session,
        sums_build(work=0.0),
        epochs,
        SCHEMA,
        processes=2,
        timeout=TIMEOUT,
        checkpoint_dir=directory,
        checkpoint_every=EVERY,
    )
    assert _bag(first) == expected_rows()
    again = tspark.run_epochs(
        session,
        sums_build(work=0.0),
        epochs,
        SCHEMA,
        processes=2,
        timeout=TIMEOUT,
        checkpoint_dir=directory,
        checkpoint_every=EVERY,
    )
    assert _bag(again) == expected_rows()  # all from the output log: the inputs were closed
    latest = _attempts(Path(directory), 0)[-1]
    assert latest["first_epoch"] is None and latest["resumed"]["epoch"] == 7
    assert latest["reemitted_epochs"] == list(range(EPOCHS))
    first.unpersist()
    again.unpersist()
    with pytest.raises(tspark.SparkBridgeError, match=r"another computation \(processes 2 then, 1 now\)"):
        tspark.run_epochs(session, sums_build(), epochs, SCHEMA, processes=1, checkpoint_dir=directory)
    with pytest.raises(tspark.SparkBridgeError, match=r"another computation \(epochs 12 then, 11 now\)"):
        tspark.run_epochs(session, sums_build(), epochs[:-1], SCHEMA, processes=2, checkpoint_dir=directory)


@pytest.mark.timeout(120)
def test_checkpoint_arguments_are_checked_before_spark_runs(session: SparkSession, tmp_path: Path) -> None:
    epochs = [{"values": session.createDataFrame([(1, 2)], "key long, value long")}]
    with pytest.raises(ValueError, match="checkpoint_every"):
        tspark.run_epochs(session, sums_build(), epochs, SCHEMA, checkpoint_dir=str(tmp_path), checkpoint_every=0)
    with pytest.raises(ValueError, match="file system path"):
        tspark.run_epochs(session, sums_build(), epochs, SCHEMA, checkpoint_dir="hdfs://namenode/ck")
    with pytest.raises(TypeError, match="checkpoint_dir"):
        tspark.run_epochs(session, sums_build(), epochs, SCHEMA, checkpoint_dir=7)  # type: ignore[arg-type]
    (tmp_path / "used" / "checkpoints").mkdir(parents=True)
    with pytest.raises(tspark.SparkBridgeError, match="no run_epochs call labelled"):
        tspark.run_epochs(session, sums_build(), epochs, SCHEMA, checkpoint_dir=str(tmp_path / "used"))


# The task alone, in this process (one timely process, no Spark) ---------------------------------


def _plan(build: Any, directory: Path | None) -> _task.TaskPlan:
    schema = pa.schema([pa.field("epoch", pa.int32(), False), ("key", pa.int64()), ("total", pa.int64())])
    return _task.TaskPlan(
        build=build,
        names=("values",),
        schema=schema,
        epochs=True,
        processes=1,
        timeout=TIMEOUT,
        secret=b"s" * 32,
        checkpoint_dir=None if directory is None else str(directory),
        checkpoint_every=EVERY,
    )


def _batches() -> list[Any]:
    """The partition a task reads: one batch per epoch, tagged, the rows packed in a struct."""
    batches = []
    for e in range(EPOCHS):
        rows = epoch_rows(e)
        struct = pa.StructArray.from_arrays(
            [pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.int64())],
            names=["key", "value"],
        )
        tags = pa.array([e] * len(rows), pa.int64())
        batches.append(pa.RecordBatch.from_arrays([tags, struct], names=[_task.TAG, _task.input_column(0)]))
    return batches


def _task_run(plan: _task.TaskPlan, attempt: int) -> Counter[tuple[int, int, int]]:
    """What one task attempt yields, as `run_task` runs it."""
    cluster = timely.ClusterConfig(1, 0, [("127.0.0.1", 1)], workers=1, secret=plan.secret)
    out: list[Any] = []
    log = None
    if plan.checkpoint_dir is not None:
        log = _task._OutputLog(plan, 0, f"task-{attempt}", 0)
        out.extend(log.reemit())
    out.extend(_task._compute(plan, cluster, iter(_batches()), log))
    table = pa.Table.from_batches(out, schema=plan.schema)
    return Counter(zip(*(table.column(c).to_pylist() for c in ("epoch", "key", "total"))))


class Failing(Exception):
    pass


def crash_build(epoch: int | None) -> Any:
    """The sums, then a vertex that fails the computation on the first records of ``epoch``
    (None: never): the same dataflow either way, so the second run may resume the first."""

    def build(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        return sums_build(work=0.0)(scope, inputs).stage("crash", lambda: _CrashAt(epoch))

    return build


class _CrashAt(timely.Vertex):
    """Passes records on; raises on the first records of ``epoch`` (the computation fails, its
    files stay, as if the process had died there)."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch

    def on_recv(self, edge: int, records: list[Any], t: timely.Timestamp) -> None:
        if t.epoch == self.epoch:
            raise Failing(f"crash at epoch {t.epoch}")
        self.send_by(self.outputs[0], records, t)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("crash", [2, 6], ids=["before-any-checkpoint", "after-the-first"])
def test_a_task_resumes_in_process_and_yields_each_epoch_once(tmp_path: Path, crash: int) -> None:
    directory = tmp_path / "ck"
    with pytest.raises(timely.TimelyError, match=f"crash at epoch {crash}"):
        _task_run(_plan(crash_build(crash), directory), 0)
    got = _task_run(_plan(crash_build(None), directory), 1)
    assert got == expected_rows()
    first, retry = _attempts(directory, 0)
    assert "seconds" not in first
    assert retry["reemitted_epochs"] == list(range(crash))
    assert retry["first_epoch"] in (crash, crash + 1)
    if crash < EVERY:  # no checkpoint yet: the runtime replayed the input log from epoch 0
        assert "epoch" not in retry["resumed"] and retry["resumed"]["replayed_epochs"] >= crash
    else:
        assert retry["resumed"]["epoch"] == EVERY - 1


@pytest.mark.timeout(60)
def test_the_task_ignores_a_checkpoint_policy_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIMELY_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("TIMELY_CHECKPOINT_EVERY", "1")
    assert _task_run(_plan(sums_build(work=0.0), None), 0) == expected_rows()
    assert not (tmp_path / "from-env").exists()
    assert os.environ["TIMELY_CHECKPOINT_DIR"] == str(tmp_path / "from-env")  # put back
