"""The main job end to end on a real local Spark session: components and PageRank against
NetworkX and a NumPy power iteration, and each epoch's label changes against a from-scratch
recomputation of the graph at that epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest

from jobs.graph_analytics import JobOptions, edge_changes, generate_edges, run_job

pytestmark = pytest.mark.timeout(300)

NODES, EDGES, EPOCHS, CHANGES, SEED = 300, 700, 3, 20, 5


def labels(edges: set[tuple[int, int]]) -> dict[str, dict[int, int]]:
    g = nx.DiGraph(sorted(edges))
    cc = {v: min(c) for c in nx.weakly_connected_components(g) for v in c}
    scc = {v: min(c) for c in nx.strongly_connected_components(g) for v in c}
    return {"cc": cc, "scc": scc}


def power_iteration(edges: set[tuple[int, int]], supersteps: int = 20, d: float = 0.85) -> dict[int, float]:
    nodes = sorted({v for e in edges for v in e})
    index = {v: i for i, v in enumerate(nodes)}
    n = len(nodes)
    out = np.zeros(n)
    for a, _ in edges:
        out[index[a]] += 1
    r = np.full(n, 1.0 / n)
    for _ in range(supersteps):
        nxt = np.zeros(n)
        for a, b in edges:
            nxt[index[b]] += r[index[a]] / out[index[a]]
        r = (1 - d) / n + d * (nxt + r[out == 0].sum() / n)
    return {v: float(r[index[v]]) for v in nodes}


@pytest.fixture(scope="module")
def job(spark_session: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("job")
    options = JobOptions(output=out, processes=2, nodes=NODES, edges=EDGES, epochs=EPOCHS, changes=CHANGES, seed=SEED)
    result = run_job(options, session=spark_session)
    return out, result


def graph_by_epoch() -> list[set[tuple[int, int]]]:
    first = generate_edges(NODES, EDGES, SEED)
    current = {(int(a), int(b)) for a, b in first}
    graphs = [set(current)]
    for batch in edge_changes(first, NODES, EPOCHS, CHANGES, SEED):
        for a, b, diff in batch:
            (current.add if diff > 0 else current.discard)((a, b))
        graphs.append(set(current))
    return graphs


def test_final_components_equal_networkx(job: tuple[Path, Any], spark_session: Any) -> None:
    out, result = job
    final = labels(graph_by_epoch()[-1])
    rows = spark_session.read.parquet(str(out / "components.parquet")).collect()
    assert {r["node"]: r["cc"] for r in rows} == final["cc"]
    assert {r["node"]: r["scc"] for r in rows} == final["scc"]
    assert result.counts["cc_components"] == len(set(final["cc"].values()))


def test_each_epoch_reports_exactly_the_labels_that_changed(job: tuple[Path, Any], spark_session: Any) -> None:
    out, _ = job
    graphs = graph_by_epoch()
    rows = spark_session.read.parquet(str(out / "changes.parquet")).collect()
    assert rows, "no epoch changed any label: the test would prove nothing"
    for epoch in range(1, EPOCHS + 1):
        before, after = labels(graphs[epoch - 1]), labels(graphs[epoch])
        for analysis in ("cc", "scc"):
            expected = {(v, lab, -1) for v, lab in before[analysis].items() if after[analysis].get(v) != lab}
            expected |= {(v, lab, 1) for v, lab in after[analysis].items() if before[analysis].get(v) != lab}
            got = {
                (r["node"], r["label"], r["diff"]) for r in rows if r["epoch"] == epoch and r["analysis"] == analysis
            }
            assert got == expected, f"epoch {epoch}, {analysis}"


def test_pagerank_equals_a_power_iteration(job: tuple[Path, Any], spark_session: Any) -> None:
    out, _ = job
    expected = power_iteration(graph_by_epoch()[0])
    got = {r["node"]: r["rank"] for r in spark_session.read.parquet(str(out / "pagerank.parquet")).collect()}
    assert got.keys() == expected.keys()
    assert max(abs(got[v] - expected[v]) for v in got) < 1e-9
