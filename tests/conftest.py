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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow", action="store_true", help="run the tests marked slow too (the default run leaves them out)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run (``pytest`` with no paths) leaves out the tests marked slow: the runs
    of the main job, of Spark (three of them on a cluster, about 45 s each) and of many
    processes, seven minutes in all, which took the default run past 15 minutes. ``-m slow``
    runs just those (CI runs them after the default run), ``--slow`` runs everything, and
    tests asked for by path or name always run."""
    if config.getoption("--slow") or config.option.markexpr or config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
        config.stash[_SLOW_LEFT_OUT] = len(slow)
        if hasattr(config, "workeroutput"):  # a pytest-xdist worker: its controller prints the summary
            config.workeroutput["slow_left_out"] = len(slow)


_SLOW_LEFT_OUT = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Under pytest-xdist the workers collect (and leave the slow tests out): the controller
    learns how many from the first worker that reports it."""
    left_out = getattr(node, "workeroutput", {}).get("slow_left_out")
    if left_out:
        node.config.stash[_SLOW_LEFT_OUT] = left_out


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left_out = config.stash.get(_SLOW_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"{left_out} slow tests were left out: run them with `python -m pytest -m slow` (CI does)"
        )


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
    from timely_libs import spark as tspark

    session = tspark.local_session(cores=2, app_name="timely-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def generated_job(spark_session: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The main job's output directory and result after one run in ``local[2]`` with 2 timely
    processes on `GENERATED_JOB` (run once: a job on Spark takes seconds)."""
    from timely_jobs.graph_analytics import JobOptions, run_job

    out = tmp_path_factory.mktemp("generated-job") / "out"
    return out, run_job(JobOptions(output=out, processes=2, **GENERATED_JOB), session=spark_session)
