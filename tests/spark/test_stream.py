"""timely_libs.spark.run_stream: files dropped into a watched directory are a Structured Streaming
source, each micro-batch one epoch of one long-running computation, each epoch's changes
written out by Spark — checked against a recomputation from scratch of the graph at every
epoch. On the run's shared ``local[2]`` session: one timely process (the stream's processes
hold their slots for as long as it runs, and each micro-batch needs one more)."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import networkx as nx  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

import timely  # noqa: E402
from timely_libs import linq  # noqa: E402
from timely_libs import spark as tspark  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EDGES = "src long, dst long, diff long"
LABELS = "node long, label long, diff long"
WAIT = 90.0
"""Seconds an epoch may take to come out (a micro-batch's first Spark jobs start Python workers)."""


def components(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """Each epoch's changes of connected-component labels (the least node id) over edge changes."""
    edges = linq.Collection(inputs["edges"].map("as_changes", lambda r: ((r[0], r[1]), r[2])))
    labels = linq.connected_components(edges).consolidate()
    return labels.stream.map("as_rows", lambda change: (*change[0], change[1]))


def failing(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    def check(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[0] == 13:
            raise ValueError("node 13 is cursed")
        return row

    return inputs["edges"].map("checker", check)


def change_batches(seed: int = 7, nodes: int = 60) -> list[list[tuple[int, int, int]]]:
    """A graph, then epochs of edge changes: additions that merge components, removals that split them."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    batches = []
    for size in (70, 12, 12, 12):
        batch = []
        removals = rng.sample(sorted(present), min(len(present), size // 2)) if present else []
        for edge in removals:
            present.discard(edge)
            batch.append((*edge, -1))
        while len(batch) < size:
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            if edge[0] != edge[1] and edge not in present:
                present.add(edge)
                batch.append((*edge, 1))
        batches.append(batch)
    return batches


def labels_of(edges: set[tuple[int, int]]) -> dict[int, int]:
    graph = nx.Graph(sorted(edges))
    return {v: min(c) for c in nx.connected_components(graph) for v in c}


def expected_changes(batches: list[list[tuple[int, int, int]]]) -> Iterator[set[tuple[int, int, int]]]:
    """Per epoch, the label changes recomputed from scratch: labels after it against before it."""
    present: set[tuple[int, int]] = set()
    before: dict[int, int] = {}
    for batch in batches:
        for src, dst, diff in batch:
            (present.add if diff > 0 else present.discard)((src, dst))
        after = labels_of(present)
        yield {(v, lab, -1) for v, lab in before.items() if after.get(v) != lab} | {
            (v, lab, 1) for v, lab in after.items() if before.get(v) != lab
        }
        before = after


def drop_file(directory: Path, name: str, rows: list[tuple[int, int, int]]) -> None:
    """A Parquet file appears whole in the watched directory (written aside, then renamed)."""
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(("src", "dst", "diff"))})
    pq.write_table(table, directory / f".{name}.tmp")
    os.rename(directory / f".{name}.tmp", directory / name)


def test_each_file_is_an_epoch_whose_changes_match_a_recomputation(spark_session: SparkSession, tmp_path: Path) -> None:
    incoming, out = tmp_path / "incoming", tmp_path / "changes"
    incoming.mkdir()
    source = spark_session.readStream.schema(EDGES).option("maxFilesPerTrigger", 1).parquet(str(incoming))
    epochs_written: list[int] = []

    def write(changes: DataFrame, epoch: int) -> None:
        changes.write.mode("append").parquet(str(out))
        epochs_written.append(epoch)

    batches = change_batches()
    with tspark.run_stream(
        spark_session,
        components,
        {"edges": source},
        LABELS,
        write,
        processes=1,
        trigger_seconds=0.1,
        checkpoint_location=str(tmp_path / "stream-checkpoint"),
        timeout=120.0,
    ) as run:
        for epoch, batch in enumerate(batches):
            drop_file(incoming, f"epoch-{epoch:03d}.parquet", batch)
            run.await_epochs(epoch + 1, timeout=WAIT)
    assert epochs_written == list(range(len(batches)))
    assert [r.epoch for r in run.epochs] == epochs_written
    assert [r.rows_in for r in run.epochs] == [len(b) for b in batches]
    rows = pq.read_table(out).to_pylist()
    assert {r["epoch"] for r in rows} <= set(range(len(batches)))
    for epoch, expected in enumerate(expected_changes(batches)):
        got = [(r["node"], r["label"], r["diff"]) for r in rows if r["epoch"] == epoch]
        assert len(got) == len(set(got)), f"epoch {epoch}: a change written twice"
        assert set(got) == expected, f"epoch {epoch}"
        assert run.epochs[epoch].rows_out == len(expected)
    assert any(diff < 0 for *_, diff in (c for e in expected_changes(batches) for c in e)), "no label ever moved"


def test_a_stream_needs_a_slot_beyond_its_processes(spark_session: SparkSession, tmp_path: Path) -> None:
    source = spark_session.readStream.schema(EDGES).parquet(str(tmp_path))
    with pytest.raises(tspark.SparkBridgeError, match="needs 3 Spark task slots"):
        tspark.run_stream(spark_session, components, {"edges": source}, LABELS, lambda df, e: None, processes=2)
    with pytest.raises(TypeError, match="streaming DataFrame"):
        static = spark_session.createDataFrame([(1, 2, 1)], EDGES)
        tspark.run_stream(spark_session, components, {"edges": static}, LABELS, lambda df, e: None, processes=1)


def test_a_failing_vertex_fails_the_stream_with_the_timely_error(spark_session: SparkSession, tmp_path: Path) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    source = spark_session.readStream.schema(EDGES).parquet(str(incoming))
    run = tspark.run_stream(
        spark_session, failing, {"edges": source}, EDGES, lambda df, e: None, processes=1, trigger_seconds=0.1
    )
    try:
        drop_file(incoming, "fine.parquet", [(1, 2, 1)])
        run.await_epochs(1, timeout=WAIT)
        drop_file(incoming, "cursed.parquet", [(13, 2, 1)])
        with pytest.raises(tspark.SparkBridgeError, match="node 13 is cursed"):
            run.await_epochs(2, timeout=WAIT)
    finally:
        with pytest.raises(tspark.SparkBridgeError, match="node 13 is cursed"):
            run.stop()
