"""A local Spark session set up the way the bridge, its tests and the job want it, and the
warning filter that keeps PySpark's pandas-version complaint out of the way."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping

from pyspark.sql import SparkSession

__all__ = ["local_session", "quiet_pandas_warning"]

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


def local_session(cores: int = 2, app_name: str = "timely", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A ``local[cores]`` SparkSession for the bridge (or the running one, if there is one).

    Sets what Spark needs on this kind of machine and what keeps it fast and quiet:
    ``SPARK_LOCAL_IP=127.0.0.1`` and ``PYSPARK_PYTHON`` (this interpreter) unless already set;
    shuffle partitions and default parallelism = ``cores`` (Spark's 200 shuffle partitions make
    a small job 8x slower on 2 cores); no UI, no progress bar; Arrow on; log level ERROR, with
    Spark's per-task failure traces switched off (a failed computation reaches the caller as one
    exception). ``conf`` adds or overrides settings.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j_file()}",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with quiet_pandas_warning():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
