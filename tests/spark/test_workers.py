"""timely_libs.spark.warm_workers: Python workers started ahead of a run, on the run's shared
``local[2]`` session; the barrier tasks after it run in those workers, with what the preload
functions left there."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark import cloudpickle
from pyspark.sql import SparkSession

import timely
from timely_libs import spark as tspark

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 60.0
MARK = "TIMELY_TEST_WARMED_BY"
"""Set in a worker by `mark` to the worker's own pid (a forked worker does not inherit it), and
whether the runtime had run there before: ``pid:True``."""
LOADED_AT_FIRST_RUN = "anyio._backends._asyncio"
"""A module the runtime loads when it first runs a computation, not when timely is imported."""


def mark() -> None:
    os.environ[MARK] = f"{os.getpid()}:{LOADED_AT_FIRST_RUN in sys.modules}"


def broken() -> None:
    raise RuntimeError("the model file is missing on this executor")


def whose(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """For each row, the pid of the process that got it and whether `mark` ran there."""

    def where(row: tuple[int]) -> tuple[int, int, bool]:
        pid = os.getpid()
        return row[0], pid, os.environ.get(MARK) == f"{pid}:True"

    return inputs["rows"].map("where", where)


def _run_whose(session: SparkSession) -> list[tuple[int, int, bool]]:
    rows = session.createDataFrame([(i,) for i in range(200)], "id long")
    out = tspark.run(session, whose, {"rows": rows}, "id long, pid long, marked boolean", 2, TIMEOUT, progress=False)
    try:
        return [(int(r["id"]), int(r["pid"]), bool(r["marked"])) for r in out.collect()]
    finally:
        out.unpersist()


def test_a_run_after_the_warm_up_runs_in_its_workers(spark_session: SparkSession) -> None:
    warm = tspark.warm_workers(spark_session, 2, preload=(mark,))
    assert warm.wait(120.0), "the warm-up job did not end"
    assert warm.error is None, warm.error
    assert warm.workers and warm.seconds is not None
    got = _run_whose(spark_session)
    assert sorted(i for i, _, _ in got) == list(range(200))  # every row once
    processes = {pid for _, pid, _ in got}
    assert len(processes) == 2, "the rows should reach both processes"
    assert processes <= set(warm.workers), f"the run's processes {processes} are not the warmed {warm.workers}"
    assert all(marked for _, _, marked in got), "a process of the run did not run the preload after a computation"


def test_a_failed_warm_up_is_kept_and_the_runs_still_work(spark_session: SparkSession) -> None:
    warm = tspark.warm_workers(spark_session, 2, preload=(broken,))
    assert warm.wait(120.0), "the warm-up job did not end"
    assert warm.error is not None and "the model file is missing" in str(warm.error)
    assert warm.workers == []
    got = _run_whose(spark_session)
    assert sorted(i for i, _, _ in got) == list(range(200))


def test_bad_arguments_are_refused_before_spark(spark_session: SparkSession) -> None:
    with pytest.raises(ValueError, match="processes"):
        tspark.warm_workers(spark_session, 0)
    with pytest.raises(TypeError, match="preload takes functions"):
        tspark.warm_workers(spark_session, 2, preload=("timely_libs.linq",))  # type: ignore[arg-type]
