"""timely_libs.spark with ``columns=True``: each Arrow batch reaches a process as one record of numpy
arrays, and the output goes back as arrays — the same rows as the tuple-per-row path, on the
run's shared ``local[2]`` session, with two timely processes."""

from __future__ import annotations

import random
import sys
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import networkx as nx
import numpy as np
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

import timely
from timely_libs import linq
from timely_libs import spark as tspark

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 60.0
TYPES = "id long, small int, ratio double, name string, flag boolean, maybe long"


def identity(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """Each batch's arrays, checked to be arrays (not rows), passed on as they came."""

    def same(columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        assert isinstance(columns, tuple) and all(isinstance(c, np.ndarray) for c in columns), type(columns)
        return columns

    return inputs["rows"].map("same", same)


def components(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """``(node, label, diff)`` changes of connected components, arrays in and out."""
    edges = linq.Collection.from_columns(inputs["edges"].map("as_changes", lambda c: ((c[0], c[1]), c[2])))
    labels = linq.connected_components(edges).consolidate()
    return labels.to_columns().map("as_rows", lambda change: (*change[0], change[1]))


def wrong_width(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    return inputs["rows"].map("first_only", lambda columns: columns[:1])


def _bag(df: DataFrame) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in df.collect())


def test_typed_columns_make_the_round_trip(spark_session: SparkSession) -> None:
    rows = [
        (i, i % 100, i / 3, None if i % 5 == 0 else f"name-{i}-é", i % 2 == 0, None if i % 7 == 0 else i * 10)
        for i in range(3000)
    ]
    df = spark_session.createDataFrame(rows, TYPES)
    out = tspark.run(spark_session, identity, {"rows": df}, TYPES, processes=2, timeout=TIMEOUT, columns=True)
    assert _bag(out) == Counter(rows)
    out.unpersist()


def random_epochs(seed: int, epochs: int = 4, nodes: int = 50) -> list[list[tuple[int, int, int]]]:
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    out = []
    for size in (80, 15, 15, 15)[:epochs]:
        batch = [(*e, -1) for e in rng.sample(sorted(present), min(len(present), size // 3))]
        present -= {(a, b) for a, b, _ in batch}
        while len(batch) < size:
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            if edge not in present:
                present.add(edge)
                batch.append((*edge, 1))
        out.append(batch)
    return out


@pytest.mark.parametrize("checkpoints", [False, True], ids=["plain", "checkpointed"])
def test_components_over_columns_match_a_recomputation_each_epoch(
    spark_session: SparkSession, tmp_path: Any, checkpoints: bool
) -> None:
    batches = random_epochs(11)
    epochs = [{"edges": spark_session.createDataFrame(b, "src long, dst long, diff long")} for b in batches]
    out = tspark.run_epochs(
        spark_session,
        components,
        epochs,
        "node long, label long, diff long",
        processes=2,
        timeout=TIMEOUT,
        columns=True,
        checkpoint_dir=str(tmp_path / "ck") if checkpoints else None,
        checkpoint_every=2,
    )
    got = _bag(out)
    out.unpersist()
    present: set[tuple[int, int]] = set()
    before: dict[int, int] = {}
    expected: Counter[tuple[Any, ...]] = Counter()
    for epoch, batch in enumerate(batches):
        for a, b, d in batch:
            (present.add if d > 0 else present.discard)((a, b))
        graph = nx.Graph(sorted(present))
        after = {v: min(c) for c in nx.connected_components(graph) for v in c}
        expected.update((epoch, v, lab, -1) for v, lab in before.items() if after.get(v) != lab)
        expected.update((epoch, v, lab, 1) for v, lab in after.items() if before.get(v) != lab)
        before = after
    assert got == expected
    assert any(d < 0 for *_, d in expected), "no label moved: the test proves little"


def test_output_that_is_not_one_array_per_column_is_reported(spark_session: SparkSession) -> None:
    df = spark_session.createDataFrame([(1, 2)], "a long, b long")
    with pytest.raises(tspark.SparkBridgeError, match="tuples of 2 numpy arrays, one per column \\(a, b\\)"):
        tspark.run(
            spark_session, wrong_width, {"rows": df}, "a long, b long", processes=1, timeout=TIMEOUT, columns=True
        )
