"""A Spark application for the standalone-cluster tests: running sums by key with timely_libs.linq,
fed epoch by epoch by `timely_libs.spark.run_epochs` with checkpoints, on the master it is given.

    python -m tests.support.spark_cluster_program MASTER CHECKPOINT_DIR OUT_JSON KILL_DIR

At epoch `KILL_AT`, timely process 0 of the first attempt writes ``KILL_DIR/pid`` (its Python
worker's pid) and waits to be killed; the test SIGKILLs it from outside, as a machine or an
operator would, after writing ``KILL_DIR/killed`` so that the retry goes on. The result (every
row of every epoch) goes to OUT_JSON.
"""

from __future__ import annotations

import json
import operator
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

import timely
from timely_libs import linq
from timely_libs import spark as tspark

__all__ = ["EPOCHS", "EVERY", "KILL_AT", "SCHEMA", "epoch_rows", "expected_changes"]

EPOCHS = 10
EVERY = 3
"""Checkpoints after epochs 2 and 5; the kill falls in epoch 7, so a retry resumes from 5."""
KILL_AT = 7
KEYS = 30
SCHEMA = "key long, total long, diff long"
WAIT = 120.0
"""Seconds the doomed process waits for its kill before it gives up (and the test fails)."""


def epoch_rows(epoch: int) -> list[tuple[int, int]]:
    rng = random.Random(1000 + epoch)
    return [(rng.randrange(KEYS), rng.randrange(100)) for _ in range(200)]


def expected_changes() -> dict[int, set[tuple[int, int, int]]]:
    """Per epoch, the changes of ``(key, total)`` recomputed from scratch: the totals after the
    epoch against those before it."""
    out: dict[int, set[tuple[int, int, int]]] = {}
    before: dict[int, int] = {}
    totals: dict[int, int] = defaultdict(int)
    for epoch in range(EPOCHS):
        for key, value in epoch_rows(epoch):
            totals[key] += value
        after = dict(totals)
        changes = {(k, v, -1) for k, v in before.items() if after.get(k) != v}
        changes |= {(k, v, 1) for k, v in after.items() if before.get(k) != v}
        out[epoch] = changes
        before = after
    return out


class KillPoint(timely.Vertex):
    """Passes records on; on process 0, in the first attempt, stops in epoch `KILL_AT` to be killed."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def on_recv(self, edge: int, records: list[Any], time_: timely.Timestamp) -> None:
        if time_.epoch == KILL_AT and self.worker_index == 0 and not (self.directory / "killed").exists():
            (self.directory / "pid.tmp").write_text(str(os.getpid()))
            (self.directory / "pid.tmp").rename(self.directory / "pid")
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                time.sleep(0.1)
        self.send_by(self.outputs[0], records, time_)


def build(kill_dir: str) -> Any:
    def sums(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        rows = inputs["values"].stage("kill_point", lambda: KillPoint(kill_dir))
        values = linq.Collection(rows.map("as_changes", lambda r: ((r[0], r[1]), 1)))
        totals = values.sum(operator.itemgetter(0), operator.itemgetter(1), name="totals")
        return totals.consolidate(name="changes").stream.map("rows", lambda c: (*c[0], c[1]))

    return sums


def main(master: str, checkpoint_dir: str, out: str, kill_dir: str) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the executors cannot import tests
    session = tspark.session(master, cores=2, app_name="cluster-retry")
    try:
        epochs = [{"values": session.createDataFrame(epoch_rows(e), "key long, value long")} for e in range(EPOCHS)]
        result = tspark.run_epochs(
            session,
            build(kill_dir),
            epochs,
            SCHEMA,
            processes=2,
            timeout=300.0,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=EVERY,
            progress=False,
        )
        rows = [list(r) for r in result.collect()]
    finally:
        session.stop()
    Path(out).write_text(json.dumps(rows))


if __name__ == "__main__":
    main(*sys.argv[1:5])
