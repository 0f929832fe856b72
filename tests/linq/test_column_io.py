"""linq.Collection.from_columns / to_columns: differences in and out as numpy columns.

The same changes fed as ``(columns, diffs)`` arrays and as ``(record, diff)`` pairs must make
the same collection: each epoch's changes of a query equal a recomputation from scratch of
the accumulated input, with one and several workers, and the records that come out (as
columns) are the records that went in, of the same types."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import networkx as nx
import numpy as np
import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import linq


def random_epochs(seed: int, epochs: int = 4, nodes: int = 40) -> list[list[tuple[tuple[int, int], int]]]:
    """Edge changes per epoch: additions, and removals of edges present then."""
    rng = random.Random(seed)
    present: Counter[tuple[int, int]] = Counter()
    out = []
    for _ in range(epochs):
        batch = []
        for edge in rng.sample(sorted(present), min(len(present), 5)):
            batch.append((edge, -1))
            present[edge] -= 1
        for _ in range(25):
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            batch.append((edge, 1))
            present[edge] += 1
        present = +present
        out.append(batch)
    return out


def as_columns(batch: list[tuple[tuple[int, int], int]]) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    src = np.array([e[0] for e, _ in batch], dtype=np.int64)
    dst = np.array([e[1] for e, _ in batch], dtype=np.int64)
    return (src, dst), np.array([d for _, d in batch], dtype=np.int64)


def changes_per_epoch(query: Any, batches: list[Any], workers: int, columnar: bool) -> dict[int, Counter[Any]]:
    """Run ``query`` over ``batches`` (one epoch each), fed and read as columns or as pairs."""
    seen: dict[int, Counter[Any]] = {}

    def collect_columns(time: timely.Timestamp, records: list[Any]) -> None:
        for columns, diffs in records:
            rows = zip(*(c.tolist() for c in columns)) if isinstance(columns, tuple) else columns.tolist()
            epoch = seen.setdefault(time[0], Counter())
            for row, d in zip(rows, diffs.tolist()):
                epoch[row] += d

    def collect_pairs(time: timely.Timestamp, records: list[Any]) -> None:
        for row, d in records:
            seen.setdefault(time[0], Counter())[row] += d

    def build(scope: timely.Scope) -> timely.Input:
        raw = scope.new_input("changes")
        edges = linq.Collection.from_columns(raw) if columnar else linq.Collection(raw)
        result = query(edges).consolidate()
        if columnar:
            result.to_columns().subscribe(collect_columns)
        else:
            result.stream.subscribe(collect_pairs)
        return raw

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, raw):
        for epoch, batch in enumerate(batches):
            raw.send([as_columns(batch)] if columnar else batch)
            raw.advance_to(epoch + 1)
    return {e: Counter({r: d for r, d in c.items() if d}) for e, c in seen.items()}


def labels(edges: Counter[tuple[int, int]]) -> set[tuple[int, int]]:
    graph = nx.Graph([e for e, c in edges.items() if c > 0])
    return {(v, min(c)) for c in nx.connected_components(graph) for v in c}


def test_components_from_columns_match_a_recomputation_each_epoch(workers: int) -> None:
    batches = random_epochs(3)
    got = changes_per_epoch(linq.connected_components, batches, workers, columnar=True)
    edges: Counter[tuple[int, int]] = Counter()
    before: set[tuple[int, int]] = set()
    for epoch, batch in enumerate(batches):
        for edge, d in batch:
            edges[edge] += d
        after = labels(edges)
        expected = Counter({r: 1 for r in after - before})
        expected.update({r: -1 for r in before - after})
        assert got.get(epoch, Counter()) == expected, f"epoch {epoch}"
        before = after
    assert got == changes_per_epoch(linq.connected_components, batches, workers, columnar=False)


def test_records_come_out_as_they_went_in() -> None:
    """Strings and floats (object and float columns), scalar records, diffs other than 1."""
    out: list[Any] = []

    def build(scope: timely.Scope) -> timely.Input:
        raw = scope.new_input("words")
        words = linq.Collection.from_columns(raw)
        words.count().consolidate().to_columns().subscribe(lambda t, rs: out.extend(rs))
        words.consolidate().to_columns().subscribe(lambda t, rs: out.extend(("plain", r) for r in rs))
        return raw

    with timely.execute(build, workers=3, timeout=TIMEOUT) as (comp, raw):
        raw.send([(np.array(["a", "b", "a", "é"], dtype=object), np.array([1, 2, 1, 5]))])
        raw.send([(np.array(["b"], dtype=object), None)])
    counts: Counter[Any] = Counter()
    plain: Counter[Any] = Counter()
    for record in out:
        if record[0] == "plain":
            columns, diffs = record[1]
            assert isinstance(columns, np.ndarray)  # scalar records: one array
            plain.update(dict(zip(columns.tolist(), diffs.tolist())))
        else:
            (keys, n), diffs = record
            counts.update({(k, c): d for k, c, d in zip(keys.tolist(), n.tolist(), diffs.tolist())})
    assert plain == Counter({"a": 2, "b": 3, "é": 5})
    assert +counts == Counter({("a", 2): 1, ("b", 3): 1, ("é", 5): 1})
    assert all(type(k) is str for k, _ in counts)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([1, 2, 3], "expected \\(columns, diffs\\) records, got list"),
        ((np.array([1, 2]), np.array([1])), "2 records but diffs of shape \\(1,\\)"),
        (((np.array([1, 2]), np.array([1])), None), "expected 2 values, one per record"),
        (((), None), "at least one column"),
    ],
)
def test_a_bad_record_is_refused_with_the_stage_named(record: Any, message: str) -> None:
    def build(scope: timely.Scope) -> timely.Input:
        raw = scope.new_input("raw")
        linq.Collection.from_columns(raw, name="edges").consolidate().to_columns().subscribe(lambda t, rs: None)
        return raw

    with pytest.raises(timely.TimelyError, match=message) as failure:
        with timely.execute(build, timeout=TIMEOUT) as (comp, raw):
            raw.send([record])
    assert "edges" in str(failure.value)
