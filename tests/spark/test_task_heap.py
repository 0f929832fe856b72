"""The barrier task keeps what its Python worker already holds out of the collector's reach
while the computation runs, and hands it back afterwards (`_task._compute`): run here as
`run_task` runs it, in this process, on one timely process."""

from __future__ import annotations

import gc
import weakref
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import timely  # noqa: E402
from timely_libs.spark import _task  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class _Cycle:
    """Garbage only a full collection finds: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


class _Held:
    """What the worker held before the run: dropped by the run, as a worker's next task may drop it."""

    value: _Cycle | None = None


class _Observe(timely.Vertex):
    """Passes each row on as ``(value, frozen)``: how many objects were frozen when it came."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        _Held.value = None
        gc.collect()  # a full collection in the middle of the run
        frozen = gc.get_freeze_count()
        self.send_by(self.outputs[0], [(r[0], frozen) for r in records], time)


def _build(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    return inputs["values"].stage("observe", _Observe)


def _batch(values: list[int]) -> Any:
    struct = pa.StructArray.from_arrays([pa.array(values, pa.int64())], names=["value"])
    tags = pa.array([0] * len(values), pa.int64())
    return pa.RecordBatch.from_arrays([tags, struct], names=[_task.TAG, _task.input_column(0)])


def test_the_workers_heap_is_frozen_during_the_run_and_collectable_after() -> None:
    plan = _task.TaskPlan(
        build=_build,
        names=("values",),
        schema=pa.schema([("epoch", pa.int32()), ("value", pa.int64()), ("frozen", pa.int64())]),
        epochs=True,
        processes=1,
        timeout=30.0,
        secret=b"s" * 32,
    )
    cluster = timely.ClusterConfig(1, 0, [("127.0.0.1", 1)], workers=1, secret=plan.secret)
    held = _Cycle()
    alive = weakref.ref(held)
    _Held.value = held
    del held
    assert gc.get_freeze_count() == 0
    before = len(gc.get_objects())

    out = list(_task._compute(plan, cluster, iter([_batch([1, 2, 3])])))

    table = pa.Table.from_batches(out, schema=plan.schema)
    assert Counter(table.column("value").to_pylist()) == Counter([1, 2, 3])
    frozen = set(table.column("frozen").to_pylist())
    assert len(frozen) == 1 and frozen.pop() >= before // 2, "the heap before the run was not frozen"
    # Dropped during the run, the cycle outlived the run's full collections: it was frozen.
    assert alive() is not None, "an object the worker held before the run was collected during it"
    assert gc.get_freeze_count() == 0, "the task left the worker's heap frozen"
    gc.collect()
    assert alive() is None, "what the worker held before the run is not collectable after it"
