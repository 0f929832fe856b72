"""Shared fixtures: ``mode`` runs a test dataflow in every mode (one process with one and
several workers, simulated processes with several seeds, real processes over TCP; see
tests/support/modes.py), ``workers`` runs a one-process test with one and with several workers.
Each computation runs under a timeout. ``spark_session`` is one local Spark for every Spark
test, and ``generated_job`` the main job's run on `GENERATED_JOB`'s graph in it, which the job's
tests check against NetworkX and the cluster tests compare their runs with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import GENERATED_JOB, TIMEOUT
from tests.support.modes import EVERY_MODE, Mode

__all__ = ["TIMEOUT"]  # for test files written before tests.support held it


@pytest.fixture(params=EVERY_MODE, ids=str)
def mode(request: pytest.FixtureRequest) -> Mode:
    """Where the test's dataflow runs: one of `tests.support.modes.EVERY_MODE`."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=[1, 3], ids=["w1", "w3"])
def workers(request: pytest.FixtureRequest) -> int:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spark_session():  # type: ignore[no-untyped-def]
    """One local[2] Spark session for every Spark test (a JVM and Python workers start slowly)."""
    import os
    import shutil

    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.skip("Spark needs Java")
    from libs import spark as tspark

    session = tspark.local_session(cores=2, app_name="timely-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def generated_job(spark_session: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The main job's output directory and result after one run in ``local[2]`` with 2 timely
    processes on `GENERATED_JOB` (run once: a job on Spark takes seconds)."""
    from jobs.graph_analytics import JobOptions, run_job

    out = tmp_path_factory.mktemp("generated-job") / "out"
    return out, run_job(JobOptions(output=out, processes=2, **GENERATED_JOB), session=spark_session)
