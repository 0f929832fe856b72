"""Shared fixtures: ``mode`` runs a test dataflow in every mode (one process with one and
several workers, simulated processes with several seeds, real processes over TCP; see
tests/support/modes.py), ``workers`` runs a one-process test with one and with several workers.
Each computation runs under a timeout."""

from __future__ import annotations

import pytest

from tests.support import TIMEOUT
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
