"""Run a timely computation inside Spark: one barrier task per timely process.

Spark reads and writes the data; `run` feeds DataFrames into a timely dataflow running as a
Spark barrier stage (the tasks find each other through the driver and connect over
authenticated TCP) and returns the output stream's records as a DataFrame. `run_epochs` feeds
a sequence of epochs into one running computation and returns each epoch's output.
See docs/spark.md.
"""

from ._driver import epochs_from_directory, run, run_epochs, task_slots
from ._errors import SparkBridgeError
from ._progress import ConsoleProgress, Progress, ProgressCallback, watch
from ._session import local_session, session
from ._stream import EpochReport, StreamRun, run_stream
from ._workers import WarmWorkers, warm_workers

__all__ = [
    "ConsoleProgress",
    "EpochReport",
    "Progress",
    "ProgressCallback",
    "SparkBridgeError",
    "StreamRun",
    "WarmWorkers",
    "epochs_from_directory",
    "local_session",
    "run",
    "run_epochs",
    "run_stream",
    "session",
    "task_slots",
    "warm_workers",
    "watch",
]
