"""A Spark session set up the way the bridge, its tests and the job want it, and the warning
filter that keeps PySpark's pandas-version complaint out of the way."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping

from pyspark.sql import SparkSession

__all__ = ["LOCAL_JVM_OPTIONS", "local_session", "quiet_pandas_warning", "session"]

_PANDAS_WARNING = "PySpark does not yet fully support pandas"

# Spark's default profile logs every failed task with its whole stack trace, and announces
# itself; the bridge reports a failed computation as one exception with the timely error's text.
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = off
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = error
"""


LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The driver JVM's options in local mode, where the JVM only moves data between files, shuffles
and the timely processes (the analyses run in Python): the C1 compiler alone warms up in a
third of the time of C1 plus C2 and leaves the cores to the processes (a session and its first
queries took 12 s instead of 33 s on a loaded 2-core machine), and the serial collector needs
no GC threads on a small heap. Measured in docs/spark.md."""


@contextlib.contextmanager
def quiet_pandas_warning() -> Iterator[None]:
    """PySpark 4 warns on every Arrow UDF that it does not fully support pandas 3; the bridge uses
    no pandas, so the warning says nothing here (and pytest turns warnings into errors)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
        yield


def _log4j_file() -> str:
    path = os.path.join(
        tempfile.gettempdir(), f"timely-spark-log4j2-{os.getuid() if hasattr(os, 'getuid') else 0}.properties"
    )
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(suffix=".properties", dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


ARROW_BATCH_ROWS = 1 << 17
"""Rows per Arrow batch between Spark and Python (``spark.sql.execution.arrow.maxRecordsPerBatch``)."""


def session(
    master: str | None = None,
    cores: int = 2,
    app_name: str = "timely",
    conf: Mapping[str, str] | None = None,
    jvm_options: str = LOCAL_JVM_OPTIONS,
) -> SparkSession:
    """A SparkSession for the bridge (or the running one, if there is one).

    ``master`` is Spark's master URL; by default ``local[cores]``, or, in a program started by
    ``spark-submit``, the master spark-submit was given (its settings stand; the ones below
    fill in what it left unset). Sets what Spark needs on this kind of machine and what keeps
    it fast and quiet: ``SPARK_LOCAL_IP=127.0.0.1`` (local mode) and ``PYSPARK_PYTHON`` (this
    interpreter) unless already set; shuffle partitions and default parallelism = ``cores``
    (Spark's 200 shuffle partitions make a small job 8x slower on 2 cores); no UI, no progress
    bar; Arrow on, and local Arrow data over 1 MB kept as Arrow batches; log level ERROR, with Spark's per-task failure traces switched off (a failed
    computation reaches the caller as one exception); in local mode, ``jvm_options`` for the
    driver's JVM (`LOCAL_JVM_OPTIONS`; ``""`` keeps the JVM's defaults). ``conf`` adds or
    overrides settings.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    if master is None and not submitted:
        master = f"local[{cores}]"
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
    java = f"-Dlog4j2.configurationFile={_log4j_file()}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A DataFrame made from local Arrow data above this size travels as Arrow batches, not
        # as rows in the driver's heap: three DataFrames of 1M edges filled 900 MB of it
        # (the default threshold is 48 MB) and the job died of OutOfMemoryError.
        "spark.sql.execution.arrow.localRelationThreshold": str(1 << 20),
        # Rows per Arrow batch, both ways: a DataFrame made from local Arrow data has one
        # partition, so one Spark task, per batch (Spark's 10,000 made writing 1M generated
        # edges 100 tasks and 5-10 s on 2 cores), and mapInArrow hands a task its rows in
        # batches of this size (with columns=True, one record each).
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        "spark.driver.extraJavaOptions": f"{java} {jvm_options}".strip() if local else java,
    }
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    given = _submitted_settings() if submitted else set()
    for key, value in settings.items():
        if key not in given:
            builder = builder.config(key, value)
    with quiet_pandas_warning():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def local_session(
    cores: int = 2,
    app_name: str = "timely",
    conf: Mapping[str, str] | None = None,
    jvm_options: str = LOCAL_JVM_OPTIONS,
) -> SparkSession:
    """`session` on ``local[cores]``: Spark in this process's JVM, ``cores`` task slots."""
    return session(f"local[{cores}]", cores, app_name, conf, jvm_options)


def _submitted_settings() -> set[str]:
    """The settings spark-submit passed to its JVM (they win over the defaults of `session`)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, whose properties hold them
    return {key for key, _ in SparkConf().getAll()}
