"""What the Spark benchmarks share (private; not a benchmark)."""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["stop_spark"]


def stop_spark(spark: Any) -> None:
    """Stop the session and the JVM pyspark started, so it does not linger through later benchmarks."""
    from pyspark import SparkContext

    with contextlib.suppress(Exception):  # a JVM that died already cannot be stopped
        spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None
