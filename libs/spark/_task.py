"""The barrier task: one Spark task is one timely process.

Each task reserves a port, learns every task's address with one ``allGather`` (the only
barrier call: each costs about a second, as Spark polls once per second), joins the timely
cluster over authenticated TCP, feeds its partition into the named inputs epoch by epoch, and
yields what the output stream delivers on this process as Arrow batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

import timely

from ._convert import BATCH_ROWS, rows_of, to_batches
from ._errors import SparkBridgeError

__all__ = ["OUTPUT_NAME", "TAG", "TaskPlan", "input_column", "run_task"]

TAG = "__timely_tag"
"""The column that says which input and epoch a row belongs to: ``epoch * inputs + input``."""
OUTPUT_NAME = "spark_output"
"""The subscription the bridge attaches to the stream ``build`` returns."""


def input_column(k: int) -> str:
    """The struct column that carries the rows of input number ``k``."""
    return f"__timely_in{k}"


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, pickled once by the driver into the task closure."""

    build: Callable[[timely.Scope, dict[str, timely.Input]], timely.Stream]
    names: tuple[str, ...]
    schema: pa.Schema
    """The Arrow schema of the task's output, with the leading ``epoch`` column when `epochs`."""
    epochs: bool
    processes: int
    timeout: float | None
    secret: bytes = field(repr=False)
    latency: Any = None
    """A Spark accumulator taking ``{epoch: seconds}`` (run_epochs), or None."""


def run_task(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of the barrier ``mapInArrow``: run this task's timely process."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    where = f"timely process {index} of {plan.processes} (Spark stage {ctx.stageId()}, partition {index})"
    try:
        cluster = _rendezvous(ctx, plan, index)
        yield from _compute(plan, cluster, batches)
    except SparkBridgeError as e:
        raise SparkBridgeError(f"{where}: {e}") from e
    except Exception as e:
        raise SparkBridgeError(f"{where} failed: {type(e).__name__}: {e}") from e


def _host(ctx: Any, index: int) -> str:
    """The address peers can reach this task at: Spark's own bind address when it is set
    (SPARK_LOCAL_IP), else the executor host Spark knows, resolved (so that 'localhost' does not
    become two addresses)."""
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if local_ip:
        return local_ip
    host = str(ctx.getTaskInfos()[index].address).rsplit(":", 1)[0].strip("[]")
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def _rendezvous(ctx: Any, plan: TaskPlan, index: int) -> timely.ClusterConfig:
    host = _host(ctx, index)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The port stays bound until every task has published its own: tasks on one machine cannot
    # pick the same one. It is released just before timely listens on it (as `timely run` does).
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as reserved:
        reserved.bind((host, 0))
        mine = json.dumps([host, reserved.getsockname()[1]])
        gathered = ctx.allGather(mine) if plan.processes > 1 else [mine]
    addresses = [(str(h), int(p)) for h, p in map(json.loads, gathered)]
    return timely.ClusterConfig(plan.processes, index, addresses, workers=1, secret=plan.secret)


class _Output:
    """What the output stream delivers on this process, per epoch, until it is yielded."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan
        self.parts: list[tuple[int, list[Any]]] = []
        self.pending = 0

    def receive(self, time: timely.Timestamp, records: list[Any]) -> None:
        self.parts.append((time[0], records))
        self.pending += len(records)

    def drain(self) -> Iterator[pa.RecordBatch]:
        parts, self.parts, self.pending = self.parts, [], 0
        for epoch, records in parts:
            yield from to_batches(records, self.plan.schema, epoch if self.plan.epochs else None)


def _compute(
    plan: TaskPlan, cluster: timely.ClusterConfig, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    out = _Output(plan)
    names = plan.names

    def build(scope: timely.Scope) -> list[timely.Input]:
        inputs = {name: scope.new_input(name) for name in names}
        stream = plan.build(scope, dict(inputs))
        if not isinstance(stream, timely.Stream):
            raise SparkBridgeError(f"build must return the output timely.Stream, not {type(stream).__name__}")
        probe = stream.subscribe(out.receive, name=OUTPUT_NAME)
        return [inputs[name] for name in names], probe

    latency: dict[int, float] = {}
    with timely.execute(build, cluster=cluster, timeout=plan.timeout) as (comp, (inputs, probe)):
        epoch = 0
        began = time.perf_counter()
        for batch in batches:
            for tag, rows in _split(batch, len(names)):
                e, k = divmod(tag, len(names))
                if e != epoch:
                    if e < epoch:
                        raise SparkBridgeError(
                            f"rows of epoch {e} arrived after epoch {epoch} (the input is not sorted)"
                        )
                    for handle in inputs:
                        handle.advance_to(e)
                    if plan.epochs:  # a stream brings epochs one after the other: finish this one
                        for done in range(epoch, e):
                            comp.wait_passed(probe, done)
                            latency[done] = time.perf_counter() - began
                            began = time.perf_counter()
                    epoch = e
                inputs[k].send(rows)
            if out.pending >= BATCH_ROWS:
                yield from out.drain()
        for handle in inputs:
            handle.close()
        comp.run()
        latency[epoch] = time.perf_counter() - began
    if plan.latency is not None and plan.epochs:
        plan.latency.add(latency)
    yield from out.drain()


def _split(batch: pa.RecordBatch, inputs: int) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """``(tag, rows)`` for each tag in the batch, in increasing tag order."""
    if batch.num_rows == 0:
        return
    tags = batch.column(TAG).to_numpy()
    first = int(tags[0])
    if (tags == first).all():  # the usual case: the batch holds one input's rows of one epoch
        yield first, rows_of(batch.column(input_column(first % inputs)))
        return
    for tag in np.unique(tags).tolist():
        mask = pa.array(tags == tag)
        yield tag, rows_of(batch.column(input_column(tag % inputs)).filter(mask))
