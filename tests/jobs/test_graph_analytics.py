"""The main job end to end on a real local Spark session and real files: components and PageRank
against NetworkX and a NumPy power iteration, each epoch's label changes against a from-scratch
recomputation of the graph at that epoch; the user's data read as given (headers, repeated
edges, changes from files); and every bad input stopped before Spark starts, with one line that
names the file, line and text, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import GENERATED_JOB, ROOT
from tests.support.console import read_json, run_job_watching_consoles
from timely_jobs.graph_analytics import (
    COMPONENT_COLUMNS,
    SUMMARY_COUNTS,
    JobOptions,
    _frame,
    edge_changes,
    generate_edges,
    run_job,
)

pytestmark = pytest.mark.timeout(300)

NODES, EDGES, EPOCHS, CHANGES, SEED = (
    GENERATED_JOB[k] for k in ("nodes", "edges", "epochs", "changes_per_epoch", "seed")
)


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


def read_result(spark: Any, out: Path, name: str, fmt: str = "parquet") -> list[Any]:
    path = str(out / f"{name}.{fmt}")
    if fmt == "csv":
        return spark.read.option("header", True).option("inferSchema", True).csv(path).collect()  # type: ignore[no-any-return]
    return spark.read.parquet(path).collect()  # type: ignore[no-any-return]


def assert_results_match(spark: Any, out: Path, graphs: list[set[tuple[int, int]]], fmt: str = "parquet") -> None:
    """components and pagerank describe the last graph; changes[e] is exactly what changed."""
    final = labels(graphs[-1])
    rows = read_result(spark, out, "components", fmt)
    assert {r["node"]: r["cc"] for r in rows} == final["cc"]
    assert {r["node"]: r["scc"] for r in rows} == final["scc"]
    expected_ranks = power_iteration(graphs[-1])
    ranks = {r["node"]: r["rank"] for r in read_result(spark, out, "pagerank", fmt)}
    assert ranks.keys() == expected_ranks.keys()
    assert max(abs(ranks[v] - expected_ranks[v]) for v in ranks) < 1e-9
    if len(graphs) == 1:
        assert not (out / f"changes.{fmt}").exists()
        return
    changes = read_result(spark, out, "changes", fmt)
    for epoch in range(1, len(graphs)):
        before, after = labels(graphs[epoch - 1]), labels(graphs[epoch])
        for analysis in ("cc", "scc"):
            expected = {(v, lab, -1) for v, lab in before[analysis].items() if after[analysis].get(v) != lab}
            expected |= {(v, lab, 1) for v, lab in after[analysis].items() if before[analysis].get(v) != lab}
            got = {
                (r["node"], r["label"], r["diff"]) for r in changes if r["epoch"] == epoch and r["analysis"] == analysis
            }
            assert got == expected, f"epoch {epoch}, {analysis}"


# The generated graph -----------------------------------------------------------------------------
@pytest.fixture
def job(generated_job: tuple[Path, Any]) -> tuple[Path, Any]:
    return generated_job


def graph_by_epoch() -> list[set[tuple[int, int]]]:
    first = generate_edges(NODES, EDGES, SEED)
    current = {(int(a), int(b)) for a, b in first}
    graphs = [set(current)]
    for batch in edge_changes(first, NODES, EPOCHS, CHANGES, SEED):
        for a, b, diff in batch:
            (current.add if diff > 0 else current.discard)((a, b))
        graphs.append(set(current))
    return graphs


@pytest.mark.slow  # a Spark session
def test_a_large_input_frame_has_a_partition_per_process_and_every_row(spark_session: Any) -> None:
    """The job's input DataFrames (`_frame`): one large enough to travel as Arrow batches
    comes in a partition per process (Spark's first stage over it then uses every slot), a
    small one in one partition, each row once, in order."""
    values = np.arange(3 * 100_001, dtype=np.int64).reshape(-1, 3)  # above Spark's local-relation size
    for parts in (1, 2, 3):
        frame = _frame(spark_session, values, ("src", "dst", "diff"), parts)
        assert frame.rdd.getNumPartitions() == parts
        got = frame.toArrow()
        assert np.array_equal(np.column_stack([got.column(c).to_numpy() for c in ("src", "dst", "diff")]), values)
    small = values[:100]  # an epoch of changes: one partition, one task to hash it, on any number of processes
    for parts in (1, 2, 3):
        frame = _frame(spark_session, small, ("src", "dst", "diff"), parts)
        assert frame.rdd.getNumPartitions() == 1
        got = frame.toArrow()
        assert np.array_equal(np.column_stack([got.column(c).to_numpy() for c in ("src", "dst", "diff")]), small)


@pytest.mark.slow  # a Spark session
def test_generated_graph_results_equal_networkx_and_a_recomputation_per_epoch(
    job: tuple[Path, Any], spark_session: Any
) -> None:
    out, result = job
    graphs = graph_by_epoch()
    assert_results_match(spark_session, out, graphs)
    assert result.counts["cc_components"] == len(set(labels(graphs[-1])["cc"].values()))
    assert any(any(e["nodes_relabelled"].values()) for e in result.epochs), "no label changed: the test proves nothing"


@pytest.mark.slow  # a Spark session
def test_the_summary_names_what_it_counts(job: tuple[Path, Any]) -> None:
    out, result = job
    graphs = graph_by_epoch()
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    assert counts["input_rows"] == counts["edges"] == EDGES and counts["duplicate_edges"] == 0
    assert counts["nodes"] == len({v for e in graphs[0] for v in e})
    assert counts["change_epochs"] == EPOCHS and counts["changes_applied"] == EPOCHS * CHANGES
    assert counts["final_edges"] == len(graphs[-1])
    assert [(e["edges_added"], e["edges_removed"]) for e in summary["epochs"]] == [
        (CHANGES // 2, CHANGES // 2)
    ] * EPOCHS
    for e, epoch in enumerate(summary["epochs"], start=1):
        before, after = labels(graphs[e - 1]), labels(graphs[e])
        for analysis in ("cc", "scc"):
            moved = {
                v
                for v in before[analysis].keys() | after[analysis].keys()
                if before[analysis].get(v) != after[analysis].get(v)
            }
            assert epoch["nodes_relabelled"][analysis] == len(moved)
    assert list(counts) == list(SUMMARY_COUNTS)
    assert counts["input_bad_rows_skipped"] == counts["changes_bad_rows_skipped"] == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "changes.parquet",
        "components.parquet",
        "generated_changes.parquet",
        "generated_edges.parquet",
        "pagerank.parquet",
        "summary.json",
    ]


@pytest.mark.slow  # a Spark session
def test_what_the_job_generated_rebuilds_every_epochs_graph(job: tuple[Path, Any], spark_session: Any) -> None:
    """generated_edges then generated_changes, applied here, give the graph whose components
    the job wrote (checked with NetworkX), and each epoch's change count."""
    out, _ = job
    current = {(r["src"], r["dst"]) for r in read_result(spark_session, out, "generated_edges")}
    changes = sorted(
        (r["epoch"], r["src"], r["dst"], r["diff"]) for r in read_result(spark_session, out, "generated_changes")
    )
    assert len(current) == EDGES and len(changes) == EPOCHS * CHANGES
    for epoch, src, dst, diff in changes:
        assert 1 <= epoch <= EPOCHS and diff in (1, -1)
        assert ((src, dst) in current) == (diff == -1), "a change that does not apply"
        (current.add if diff > 0 else current.discard)((src, dst))
    final = labels(current)
    rows = read_result(spark_session, out, "components")
    assert {r["node"]: r["cc"] for r in rows} == final["cc"] and {r["node"]: r["scc"] for r in rows} == final["scc"]


@pytest.mark.slow  # a Spark session
def test_one_analysis_keeps_every_column_and_every_summary_field(spark_session: Any, tmp_path: Path) -> None:
    """Only scc asked for, on a tab-separated .csv: components still has node, cc, scc (cc null),
    and summary.json every field (null for what did not run)."""
    edges = random_graph(4)
    (tmp_path / "edges.csv").write_text("src\tdst\n" + "".join(f"{a}\t{b}\n" for a, b in edges))
    out = tmp_path / "out"
    run_job(JobOptions(input=tmp_path / "edges.csv", output=out, analyses=("scc",)), session=spark_session)
    table = pq.read_table(out / "components.parquet")
    assert table.column_names == list(COMPONENT_COLUMNS)
    assert table.column("cc").null_count == table.num_rows
    assert dict(zip(table.column("node").to_pylist(), table.column("scc").to_pylist())) == labels(set(edges))["scc"]
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert list(counts) == list(SUMMARY_COUNTS)
    assert counts["cc_components"] is None and counts["pagerank_top"] is None
    assert counts["scc_components"] == len(set(labels(set(edges))["scc"].values()))
    assert counts["input_bad_rows_skipped"] == 0 and counts["changes_applied"] == 0


# The user's data ---------------------------------------------------------------------------------
def random_graph(seed: int, nodes: int = 60, edges: int = 150) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, nodes, size=(edges, 2)).tolist()
    return [(a, b) for a, b in pairs if a != b]


@pytest.mark.slow  # a Spark session
def test_user_csv_without_header_and_changes_from_a_directory(spark_session: Any, tmp_path: Path) -> None:
    """A headerless CSV keeps its first edge; repeated edges count once; one epoch per file of
    the changes directory (CSV with a header, then Parquet); CSV results; nothing invented."""
    edges = random_graph(1)
    edges.append(edges[3])  # a repeated edge
    (tmp_path / "edges.csv").write_text("".join(f"{a},{b}\n" for a, b in edges))
    graph = set(edges)
    present = sorted(graph)
    epoch1 = [(present[0], -1), (present[5], -1), ((100, 101), 1), ((101, 0), 1)]
    epoch2 = [((100, 101), -1), (present[7], -1), ((7, 100), 1)]
    changes = tmp_path / "changes"
    changes.mkdir()
    (changes / "1.csv").write_text("src,dst,diff\n" + "".join(f"{a},{b},{d}\n" for (a, b), d in epoch1))
    pq.write_table(
        pa.table(
            {"src": [a for (a, _), _ in epoch2], "dst": [b for (_, b), _ in epoch2], "diff": [d for _, d in epoch2]}
        ),
        changes / "2.parquet",
    )
    out = tmp_path / "out"
    options = JobOptions(input=tmp_path / "edges.csv", changes=changes, output=out, format="csv", processes=2)
    result = run_job(options, session=spark_session)

    graphs = [set(graph)]
    for batch in (epoch1, epoch2):
        current = set(graphs[-1])
        for edge, d in batch:
            (current.add if d > 0 else current.discard)(edge)
        graphs.append(current)
    assert_results_match(spark_session, out, graphs, fmt="csv")
    counts = result.counts
    assert counts["input_rows"] == len(edges) and counts["edges"] == len(graph)
    assert counts["duplicate_edges"] == len(edges) - len(graph) >= 1
    assert counts["change_epochs"] == 2 and counts["changes_applied"] == len(epoch1) + len(epoch2)
    assert not (out / "generated_edges.csv").exists()


@pytest.mark.slow  # a Spark session
def test_skip_bad_rows_skips_and_counts_them_and_the_rest_is_analysed(spark_session: Any, tmp_path: Path) -> None:
    edges = random_graph(2)
    lines = ["src,dst", *(f"{a},{b}" for a, b in edges)]
    lines[4:4] = ["3,x", "4,5,6", ",7", "8"]  # a malformed cell, three columns, an empty cell, one column
    (tmp_path / "edges.csv").write_text("\n".join(lines) + "\n")
    graph = set(edges)
    absent = next((a, b) for a in range(60) for b in range(60) if a != b and (a, b) not in graph)
    present = sorted(graph)[0]
    changes = ["epoch,src,dst,diff", f"1,{present[0]},{present[1]},-1", f"1,{absent[0]},{absent[1]},-1", "2,1,2,5",
               f"2,{present[0]},{present[1]},1"]  # fmt: skip
    (tmp_path / "changes.csv").write_text("\n".join(changes) + "\n")
    out = tmp_path / "out"
    options = JobOptions(
        input=tmp_path / "edges.csv",
        changes=tmp_path / "changes.csv",
        output=out,
        skip_bad_rows=True,
        analyses=("cc", "scc", "pagerank"),
    )
    result = run_job(options, session=spark_session)
    assert result.counts["input_bad_rows_skipped"] == 4
    assert result.counts["changes_bad_rows_skipped"] == 2  # removing an absent edge; diff 5
    assert result.counts["input_rows"] == len(edges)
    graphs = [graph, graph - {present}, set(graph)]
    assert_results_match(spark_session, out, graphs)


@pytest.mark.slow  # a Spark session
def test_a_failure_inside_spark_leaves_no_output(spark_session: Any, tmp_path: Path) -> None:
    from timely_libs.spark import SparkBridgeError

    out = tmp_path / "out"
    with pytest.raises(SparkBridgeError, match="task slots"):
        run_job(JobOptions(output=out, nodes=50, edges=100, processes=3), session=spark_session)
    assert list(tmp_path.iterdir()) == []


# Bad input, before Spark starts --------------------------------------------------------------------
def job_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "timely_jobs.graph_analytics", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


BAD = {
    "missing": ({}, ["--input", "nowhere.csv"], "--input nowhere.csv: no such file or directory"),
    "malformed cell": (
        {"e.csv": "src,dst\n1,2\n3,x\n"},
        ["--input", "e.csv"],
        "e.csv, line 3: '3,x': dst 'x' is not an integer",
    ),
    "three columns": ({"e.csv": "1,2\n3,4,5\n"}, ["--input", "e.csv"], "e.csv, line 2: '3,4,5': 3 values, expected 2"),
    "empty cell": ({"e.csv": "1,2\n,4\n"}, ["--input", "e.csv"], "e.csv, line 2: ',4': src '' is not an integer"),
    "header given, none there": (
        {"e.csv": "1,2\n"},
        ["--input", "e.csv", "--header"],
        "e.csv, line 1 (the header): columns 1,2",
    ),
    "header, told none": ({"e.csv": "src,dst\n1,2\n"}, ["--input", "e.csv", "--no-header"], "e.csv, line 1: 'src,dst'"),
    "wrong header": ({"e.csv": "from,to\n1,2\n"}, ["--input", "e.csv"], "columns from,to; expected src,dst"),
    "not csv or parquet": ({"e.txt": "1,2\n"}, ["--input", "e.txt"], "e.txt: not a .csv or .parquet file"),
    "no edges": ({"e.csv": ""}, ["--input", "e.csv"], "--input e.csv: no edges"),
    "bad diff": (
        {"e.csv": "1,2\n", "c.csv": "src,dst,diff\n2,3,2\n"},
        ["--input", "e.csv", "--changes", "c.csv"],
        "c.csv, line 2: '2,3,2': diff must be 1 (add the edge) or -1 (remove it)",
    ),
    "removes an absent edge": (
        {"e.csv": "1,2\n", "c.csv": "2,3,-1\n"},
        ["--input", "e.csv", "--changes", "c.csv"],
        "c.csv, line 1: '2,3,-1': removes edge (2, 3), which the graph does not have at epoch 1",
    ),
    "adds a present edge": (
        {"e.csv": "1,2\n", "c.csv": "epoch,src,dst,diff\n2,1,2,1\n"},
        ["--input", "e.csv", "--changes", "c.csv"],
        "c.csv, line 2: '1,2,1': adds edge (1, 2), which the graph has at epoch 2",
    ),
    "output holds other files": ({"out/notes.txt": "mine"}, ["--output", "out"], "--output"),
}


@pytest.mark.parametrize(("files", "args", "message"), BAD.values(), ids=list(BAD))
def test_bad_input_stops_before_spark_with_one_line_and_writes_nothing(
    tmp_path: Path, files: dict[str, str], args: list[str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = job_command(tmp_path, *args)
    assert done.returncode == 2
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], done.stderr
    assert "spark" not in done.stdout.lower()  # it never started
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_console_without_its_extra_stops_the_job_before_spark(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "aiohttp"  # an environment where the extra is not installed
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'aiohttp'\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "timely_jobs.graph_analytics", "--console", "0", "--output", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --console needs the console extra (No module named 'aiohttp'): pip install 'timely-dataflow[console]'"
    ]
    assert "spark" not in done.stdout.lower() and not (tmp_path / "out").exists()


def test_usage_errors_are_argparse_errors(tmp_path: Path) -> None:
    for args, message in (
        (["--analyses", "cc,foo"], "argument --analyses: 'foo': choose from cc, scc, pagerank"),
        (["--format", "json"], "argument --format: invalid choice: 'json'"),
        (["--input", "e.csv", "--epochs", "3"], "--epochs: only for the generated graph"),
        (["--changes", "c.csv", "--changes-per-epoch", "3"], "--changes replaces the random changes"),
    ):
        done = job_command(tmp_path, *args)
        assert done.returncode == 2
        assert done.stderr.splitlines()[-1].endswith(message) or message in done.stderr.splitlines()[-1], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_gives_defaults_and_what_each_analysis_and_result_means(tmp_path: Path) -> None:
    done = job_command(tmp_path, "--help")
    assert done.returncode == 0
    text = done.stdout
    for needle in (
        "(default: graph-analytics-out)",
        "(default: parquet)",
        "(default: cc,scc,pagerank)",
        "(default: 2)",
        "(default: 10000)",
        "(default: 50000)",
        "(default: 5)",
        "(default: 100)",
        "--skip-bad-rows",
        "--header",
        "--no-header",
        "{parquet,csv}",
    ):
        assert needle in text, needle
    for analysis in ("cc", "scc", "pagerank"):
        assert f"\n  {analysis} " in text
    assert "the least node id" in text  # what a label means
    for result in ("components", "changes", "pagerank", "summary.json"):
        assert f"\n  {result} " in text


def test_the_default_output_directory_is_ignored_by_git() -> None:
    done = subprocess.run(
        ["git", "check-ignore", "-q", "graph-analytics-out/components.parquet"], cwd=ROOT, capture_output=True
    )
    assert done.returncode == 0


@pytest.mark.slow  # a Spark session, in its own process
def test_the_job_serves_the_console_while_its_computations_run(tmp_path: Path) -> None:
    """``--console`` reaches the timely processes inside the Spark tasks: each computation (the
    components with their epochs of changes, then PageRank) serves the live console, whose graph
    is that computation's and whose final state (kept a few seconds by TIMELY_CONSOLE_LINGER,
    which reaches the tasks as TIMELY_CONSOLE does) holds both processes, complete."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "timely_jobs.graph_analytics", "--console", "127.0.0.1:0", "--output", str(out)]
    argv += ["--nodes", "3000", "--edges", "12000", "--epochs", "2"]
    env = {**os.environ, "TIMELY_CONSOLE_LINGER": "3"}
    graphs: dict[str, set[str]] = {}
    last: dict[str, dict] = {}  # the latest state read from each console

    def visit(url: str) -> None:
        if url not in graphs:
            graphs[url] = {stage["name"] for stage in read_json(url + "api/graph")["stages"]}
        last[url] = read_json(url + "api/state")

    run = run_job_watching_consoles(argv, visit, env=env)
    urls = run.urls
    assert run.returncode == 0, "".join(run.errors[-40:])
    assert len(urls) == 2, urls  # one console per computation
    assert len(graphs) == 2, (urls, graphs)
    components, pagerank = (graphs[url] for url in urls)
    assert components != pagerank and {"edges"} <= components, graphs
    for url in urls:  # each console's final state: both timely processes, done
        assert (last[url]["processes"], last[url]["reporting"], last[url]["complete"]) == (2, 2, True), url
