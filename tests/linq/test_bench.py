"""The linq benchmarks' own code: workloads, the NetworkX oracle, and a --quick run of each new one.

The benchmarks compare timely's answers with their NetworkX `Reference` and fail on a
difference, so the oracle is checked here against the tests' own NetworkX answers; the
workloads must do what the benchmarks claim (every deletion removes a present edge, a
quarter of ``linq.cc.hub``'s changes at the hub, some of them splitting a node off). The
``slow`` test runs ``python -m bench linq.cc.hub linq.cc.batch linq.table2 --quick`` and
checks that every record is there, exit status 0 meaning the answers matched NetworkX.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys
from collections import Counter

import pytest

from bench._harness import BenchmarkError, Context
from bench.linq_graphs import TABLE2, Reference, ScipyReference, Spec, check_answers, digest, workload
from tests.support import ROOT
from tests.support import linq_reference as ref
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths

SPECS = {
    "pairs": Spec("cc", 300, 600, "pairs", 30),
    "singles": Spec("scc", 300, 400, "singles", 30),
    "hub": Spec("cc", 400, 900, "hub", 40, hub_degree=300),
    "batches": Spec("sssp", 300, 600, "batches", batches=(50, 10)),
}


def _oracle(algo: str, edges: ref.Multiset) -> ref.Multiset:
    if algo == "cc":
        return nx_components(edges)
    if algo == "scc":
        return nx_scc_edges(edges)
    answer = nx_shortest_paths(edges, {0: 1})
    return answer or {(0, 0): 1}  # the benchmark's source is node 0, there with or without edges


@pytest.mark.parametrize("oracle", [Reference, ScipyReference])
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_workloads_delete_present_edges_and_the_oracle_follows_them(kind: str, oracle: type) -> None:
    spec = SPECS[kind]
    edges, epochs = workload(spec)
    assert len(edges) == spec.edges
    assert len(epochs) == (len(spec.batches) if kind == "batches" else spec.count)
    present = Counter(edges)
    reference = oracle(spec.algo, edges)
    assert reference.answer() == _oracle(spec.algo, dict(present))
    for changes in epochs:
        for edge, diff in changes:
            present[edge] += diff
            assert present[edge] >= 0, f"{edge} deleted but not present"
            reference.change(edge, diff)
        assert reference.answer() == _oracle(spec.algo, {e: c for e, c in present.items() if c})


@pytest.mark.parametrize("algo", ["cc", "scc", "sssp"])
def test_the_scipy_oracle_follows_every_algorithm_through_deletions_of_all_copies(algo: str) -> None:
    """Every algorithm on a small dense graph with duplicate edges, each deleted and re-added."""
    spec = Spec(algo, 40, 160, "singles", 0)
    edges, _ = workload(spec)
    edges += edges[:20]  # duplicates
    present = Counter(edges)
    reference = ScipyReference(algo, edges)
    for edge in [*edges[:30], *edges[:5]]:
        diff = -1 if present[edge] > 0 else 1
        present[edge] += diff
        reference.change(edge, diff)
        assert reference.answer() == _oracle(algo, {e: c for e, c in present.items() if c})


def test_the_hub_workload_changes_the_hub() -> None:
    spec = SPECS["hub"]
    edges, epochs = workload(spec)
    hub = Counter(n for e in edges for n in e).most_common(1)[0][0]
    at_hub = [changes for changes in epochs if all(hub in e for e, _ in changes)]
    assert len(at_hub) >= spec.count // 4  # a random change elsewhere may hit the hub too
    assert all(len(changes) == 1 for changes in epochs)
    deletions = [e for changes in at_hub for e, d in changes if d < 0]
    assert deletions and len(deletions) < len(at_hub)
    reference = Reference("cc", edges)
    split = 0
    for changes in epochs:
        before = reference.answer()
        for edge, diff in changes:
            reference.change(edge, diff)
        after = reference.answer()
        split += diff < 0 and hub in edge and len(after) < len(before)
    assert split, "no deletion at the hub split a node off"


def test_a_wrong_answer_fails_the_benchmark() -> None:
    ctx = Context("linq.test")
    right = digest({(1, 1): 1, (2, 1): 1})
    check_answers(ctx, "cc", {"first": right, "final": right}, right, right)
    for wrong in (digest({(1, 1): 1}), digest({(1, 1): 1, (2, 2): 1}), digest({(1, 1): 1, (2, 1): 2})):
        with pytest.raises(BenchmarkError, match="differs from the reference"):
            check_answers(ctx, "cc", {"first": right, "final": wrong}, right, right)


NEW = ("linq.cc.hub", "linq.cc.batch", "linq.table2")
RECORDS = {
    *(f"linq.cc.hub.{r}" for r in ("initial", "memory", "update.median", "update.p99", "update.tenfold")),
    *(f"linq.cc.batch{r}" for r in (".initial", ".memory", "", ".1000", ".cpu")),
    *(f"linq.table2.{row}.{r}" for row in TABLE2 for r in ("initial", "memory", "update.median")),
}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_runs_produce_every_record(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "records.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", *NEW, "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    records = {r["name"]: r for r in json.loads(out.read_text())}
    assert set(records) == RECORDS
    for r in records.values():
        assert math.isfinite(r["value"]) and r["value"] >= 0, r
        assert set(r) == {"name", "value", "unit", "baseline", "baseline_value"}
    assert 0 <= records["linq.cc.hub.update.tenfold"]["value"] <= 100
    for row, figures in TABLE2.items():
        naiad = (figures.seconds, figures.megabytes, figures.update_ms)
        measured = [records[f"linq.table2.{row}.{r}"] for r in ("initial", "memory", "update.median")]
        assert [m["baseline_value"] for m in measured] == list(naiad)
        assert all(m["value"] > 0 for m in measured)
    for name in ("linq.cc.hub.update.median", "linq.cc.batch"):
        assert records[name]["baseline_value"] > 0, "NetworkX's time, measured in the same run"
