"""A driver for tests/spark/test_stream_recovery.py: `run_stream` with a checkpoint directory
over a watched directory of edge-change files, each epoch's label changes written to a
directory of its own (overwritten: idempotent, as Spark's foreachBatch needs). With ``--kill
E`` the driver SIGKILLs its own process group (itself, Spark's JVM, the timely process) once
epoch E's changes are written and before ``write`` returns: the computation has sealed epoch
E; Spark may have committed its micro-batch (it does once epoch E is computed). With ``--kill-process E`` the timely process (the
Python worker running the stream's Spark task) SIGKILLs itself when epoch E's edges reach it,
once (a marker file under the checkpoint directory remembers).

    python -m tests.support.stream_resume_program INCOMING OUT CHECKPOINT_DIR EPOCHS [--kill E] [--kill-process E]
        [--pipeline]
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys

from pyspark import cloudpickle
from pyspark.sql import DataFrame

import timely
from timely_libs import linq
from timely_libs import spark as tspark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LABELS = "node long, label long, diff long"


def components(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """Each epoch's changes of connected-component labels (the least node id) over edge changes."""
    edges = linq.Collection(inputs["edges"].map("as_changes", lambda r: ((r[0], r[1]), r[2])))
    labels = linq.connected_components(edges).consolidate()
    return labels.stream.map("as_rows", lambda change: (*change[0], change[1]))


def killed_at(marker: str, epoch: int, scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """`components`, in a process that SIGKILLs itself once, when epoch ``epoch`` arrives."""

    def kill(time: timely.Timestamp, records: list[object]) -> None:
        if time[0] == epoch and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    inputs["edges"].inspect_batch("killer", kill)
    return components(scope, inputs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("incoming")
    ap.add_argument("out")
    ap.add_argument("checkpoint_dir")
    ap.add_argument("epochs", type=int)
    ap.add_argument("--kill", type=int)
    ap.add_argument("--kill-process", type=int)
    ap.add_argument("--pipeline", action="store_true")
    a = ap.parse_args()
    spark = tspark.session(cores=2, app_name="stream-resume")
    source = spark.readStream.schema("src long, dst long, diff long").option("maxFilesPerTrigger", 1)
    edges = source.parquet(a.incoming)

    def write(changes: DataFrame, epoch: int) -> None:
        changes.drop("epoch").write.mode("overwrite").parquet(os.path.join(a.out, f"epoch={epoch}"))
        print(f"wrote {epoch}", flush=True)
        if epoch == a.kill:
            os.killpg(0, signal.SIGKILL)

    build = components
    if a.kill_process is not None:
        marker = os.path.join(os.path.abspath(a.checkpoint_dir), "killed")
        build = functools.partial(killed_at, marker, a.kill_process)
    run = tspark.run_stream(
        spark, build, {"edges": edges}, LABELS, write, processes=1, trigger_seconds=0.1,
        timeout=120.0, checkpoint_dir=a.checkpoint_dir, checkpoint_every=2, pipeline=a.pipeline,
    )  # fmt: skip
    print(f"resumed at {run.resumed_at}", flush=True)
    with run:
        run.await_epochs(a.epochs - run.resumed_at + (1 if run.resumed_at else 0), timeout=180.0)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
