"""Shared fixtures. Every test dataflow runs with one worker and with several workers in the
process (the ``workers`` fixture); each computation runs under a timeout."""

from __future__ import annotations

import pytest

from tests.support import TIMEOUT

__all__ = ["TIMEOUT"]


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
