"""The main job: a graph analytics pipeline on Spark with timely inside.

    python -m jobs.graph_analytics [--input edges.parquet|edges.csv] [--output DIR]
                                   [--processes N] [--master URL] [--analyses cc,scc,pagerank,changes]

Spark reads an edge list (``src``, ``dst`` columns; CSV with a header, or Parquet), or, by
default, a graph the job generates with a fixed seed and writes as Parquet first. Timely runs
inside Spark, one barrier task per process (`libs.spark`):

1. ``components``: connected components (edges undirected) and strongly connected components
   with `libs.linq` (differential dataflow), in one computation that then takes ``--epochs``
   epochs of ``--changes`` random edge changes (half removals of existing edges, half new
   edges) and reports, per epoch, only the labels that changed;
2. ``pagerank``: PageRank (20 iterations) with `libs.pregel`.

Spark writes ``components.parquet`` (node, cc, scc), ``pagerank.parquet`` (node, rank),
``changes.parquet`` (epoch, analysis, node, label, diff) and ``summary.json`` under
``--output``; the job prints a summary with per-stage timings and a progress line per step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jobs import _dataflows

__all__ = ["JobOptions", "JobResult", "edge_array", "edge_changes", "generate_edges", "main", "run_job"]

ANALYSES = ("cc", "scc", "pagerank", "changes")
CHANGES_WORD = "edge changes"


@dataclass
class JobOptions:
    input: Path | None = None
    output: Path = Path("graph-analytics-out")
    processes: int = 2
    master: str | None = None
    """Spark master URL; default ``local[processes]`` (every process needs a slot)."""
    analyses: Sequence[str] = ANALYSES
    nodes: int = 10_000
    edges: int = 50_000
    epochs: int = 5
    changes: int = 100
    seed: int = 42
    supersteps: int = 20
    timeout: float = 3600.0


@dataclass
class JobResult:
    stages: dict[str, float] = field(default_factory=dict)
    """Seconds per stage, in the order they ran."""
    counts: dict[str, Any] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    """Per epoch of edge changes: the seconds it took (its share of the run) and what changed."""


# The data ---------------------------------------------------------------------------------------
def generate_edges(nodes: int, edges: int, seed: int) -> np.ndarray:
    """``edges`` distinct directed edges ``(src, dst)`` between random nodes, no self-loops."""
    rng = np.random.default_rng(seed)
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < edges:
        more = rng.integers(0, nodes, size=(edges - len(pairs)) * 2 + 16, dtype=np.int64).reshape(-1, 2)
        more = more[more[:, 0] != more[:, 1]]
        pairs = np.unique(np.concatenate([pairs, more]), axis=0)
    return rng.permutation(pairs)[:edges]


def edge_changes(
    edges: np.ndarray, nodes: int, epochs: int, changes: int, seed: int
) -> list[list[tuple[int, int, int]]]:
    """Per epoch, ``changes`` rows ``(src, dst, diff)``: half removals of edges present at that
    point, half insertions of edges absent then (seeded, so every run sees the same stream)."""
    rng = np.random.default_rng(seed + 1)
    present = {(int(a), int(b)) for a, b in edges}
    order = sorted(present)
    out = []
    for _ in range(epochs):
        batch: list[tuple[int, int, int]] = []
        removed = set()
        while len(removed) < changes // 2:
            edge = order[int(rng.integers(len(order)))]
            if edge in present and edge not in removed:
                removed.add(edge)
                batch.append((*edge, -1))
        added = set()
        while len(added) < changes - changes // 2:
            a, b = (int(x) for x in rng.integers(0, nodes, size=2))
            if a != b and (a, b) not in present and (a, b) not in added:
                added.add((a, b))
                batch.append((a, b, 1))
        present -= removed
        present |= added
        order = [e for e in order if e not in removed] + sorted(added)
        out.append(batch)
    return out


# Progress -----------------------------------------------------------------------------------------
class _Progress:
    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.started = time.perf_counter()

    def say(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.1f}s] {message}", file=self.out, flush=True)

    @contextmanager
    def stage(self, name: str, result: JobResult) -> Iterator[None]:
        self.say(f"{name} ...")
        began = time.perf_counter()
        yield
        result.stages[name] = time.perf_counter() - began
        self.say(f"{name} done in {result.stages[name]:.2f} s")


# The job ------------------------------------------------------------------------------------------
def _read_edges(session: Any, options: JobOptions, progress: _Progress, result: JobResult) -> Any:
    """The edge DataFrame ``(src long, dst long)``, deduplicated, from the input or generated."""
    path = options.input
    if path is None:
        path = options.output / "_input" / "edges.parquet"
        with progress.stage("generate", result):
            pairs = generate_edges(options.nodes, options.edges, options.seed)
            frame = session.createDataFrame(pa.table({"src": pairs[:, 0], "dst": pairs[:, 1]}))
            frame.write.mode("overwrite").parquet(str(path))
            progress.say(f"generated {len(pairs):,} edges on {options.nodes:,} nodes (seed {options.seed}) -> {path}")
    with progress.stage("read", result):
        if str(path).endswith(".csv"):
            frame = session.read.option("header", True).csv(str(path), schema="src long, dst long")
        else:
            frame = session.read.parquet(str(path))
        frame = frame.selectExpr("cast(src as long) as src", "cast(dst as long) as dst").dropDuplicates().cache()
        result.counts["edges"] = frame.count()
        progress.say(f"read {result.counts['edges']:,} distinct edges")
    return frame


def edge_array(edges: Any) -> np.ndarray:
    """A DataFrame's ``(src, dst)`` columns as an ``(n, 2)`` int64 array (through Arrow, no pandas)."""
    table = edges.select("src", "dst").toArrow()
    return np.column_stack([table.column("src").to_numpy(), table.column("dst").to_numpy()]).astype(np.int64)


def run_job(options: JobOptions, session: Any = None, out: Any = None) -> JobResult:
    """Run the pipeline; ``session`` (default: a local one, or one for ``options.master``)."""
    from libs import spark as tspark

    unknown = set(options.analyses) - set(ANALYSES)
    if unknown:
        raise ValueError(f"unknown analyses {sorted(unknown)}; choose from {', '.join(ANALYSES)}")
    progress = _Progress(out)
    result = JobResult()
    own_session = session is None
    if own_session:
        with progress.stage("spark", result):
            conf = {"spark.master": options.master} if options.master else None
            session = tspark.local_session(cores=options.processes, app_name="graph_analytics", conf=conf)
    try:
        options.output.mkdir(parents=True, exist_ok=True)
        edges = _read_edges(session, options, progress, result)
        components = [a for a in ("cc", "scc") if a in options.analyses]
        if components:
            _components(session, tspark, edges, components, options, progress, result)
        if "pagerank" in options.analyses:
            _pagerank(session, tspark, edges, options, progress, result)
    finally:
        if own_session:
            session.stop()
    (options.output / "summary.json").write_text(json.dumps(_jsonable(result), indent=2) + "\n")
    _print_summary(result, options, progress.out)
    return result


def _components(
    session: Any,
    tspark: Any,
    edges: Any,
    analyses: list[str],
    options: JobOptions,
    progress: _Progress,
    result: JobResult,
) -> None:
    epochs = [{"edges": edges.selectExpr("src", "dst", "cast(1 as long) as diff")}]
    if "changes" in options.analyses and options.epochs > 0:
        local = edge_array(edges)
        for batch in edge_changes(local, options.nodes, options.epochs, options.changes, options.seed):
            epochs.append({"edges": session.createDataFrame(batch, "src long, dst long, diff long")})
    name = "components" if len(epochs) == 1 else f"components (+{len(epochs) - 1} epochs of changes)"
    seconds: dict[int, float] = {}
    with progress.stage(name, result):
        changes = tspark.run_epochs(
            session,
            partial(_dataflows.components, analyses=analyses),
            epochs=epochs,
            schema=_dataflows.COMPONENTS_SCHEMA,
            processes=options.processes,
            timeout=options.timeout,
            seconds=seconds,
        )
        rows = changes.count()
    if 0 in seconds:
        progress.say(f"epoch 0 (the whole graph): {seconds[0]:.2f} s")
    result.counts["change_rows"] = rows
    with progress.stage("write components", result):
        final = changes.groupBy("analysis", "node", "label").sum("diff").where("`sum(diff)` > 0")
        wide = final.groupBy("node").pivot("analysis", analyses).min("label")
        wide.write.mode("overwrite").parquet(str(options.output / "components.parquet"))
        changes.where("epoch > 0").write.mode("overwrite").parquet(str(options.output / "changes.parquet"))
        for a in analyses:
            result.counts[f"{a}_components"] = final.where(f"analysis = '{a}'").select("label").distinct().count()
        per_epoch = changes.groupBy("epoch", "analysis").count().collect()
    by_epoch: dict[int, dict[str, int]] = {}
    for row in per_epoch:
        by_epoch.setdefault(int(row["epoch"]), {})[row["analysis"]] = int(row["count"])
    result.stages["components: epoch 0"] = seconds.get(0, float("nan"))
    for e in range(1, len(epochs)):
        result.epochs.append({"epoch": e, "label_changes": by_epoch.get(e, {}), "seconds": seconds.get(e)})


def _pagerank(
    session: Any, tspark: Any, edges: Any, options: JobOptions, progress: _Progress, result: JobResult
) -> None:
    nodes = edges.selectExpr("src as node").union(edges.selectExpr("dst as node")).distinct()
    with progress.stage("pagerank", result):
        ranks = tspark.run(
            session,
            partial(_dataflows.pagerank, supersteps=options.supersteps),
            inputs={"edges": edges, "nodes": nodes},
            schema=_dataflows.PAGERANK_SCHEMA,
            processes=options.processes,
            timeout=options.timeout,
        )
        ranks.write.mode("overwrite").parquet(str(options.output / "pagerank.parquet"))
    top = session.read.parquet(str(options.output / "pagerank.parquet")).orderBy("rank", ascending=False).limit(5)
    result.counts["pagerank_top"] = [(int(r["node"]), float(r["rank"])) for r in top.collect()]


def _jsonable(result: JobResult) -> dict[str, Any]:
    return {"stages": result.stages, "counts": result.counts, "epochs": result.epochs}


def _print_summary(result: JobResult, options: JobOptions, out: Any) -> None:
    p = partial(print, file=out)
    p("\n== graph analytics: summary ==")
    for k, v in result.counts.items():
        p(f"  {k}: {v}")
    for e in result.epochs:
        took = "" if e["seconds"] is None else f" in {e['seconds']:.3f} s"
        p(f"  epoch {e['epoch']}: {CHANGES_WORD} reflected{took}; label changes {e['label_changes']}")
    p("  stage timings:")
    for name, s in result.stages.items():
        p(f"    {name:<40} {s:8.2f} s")
    p(f"  results in {options.output}/")


def _parse(argv: Sequence[str] | None) -> JobOptions:
    d = JobOptions()
    ap = argparse.ArgumentParser(prog="python -m jobs.graph_analytics", description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", type=Path, help="edge list: Parquet, or CSV with a header (src,dst); default: generated")
    ap.add_argument("--output", type=Path, default=d.output, help=f"results directory (default {d.output})")
    ap.add_argument("--processes", type=int, default=d.processes, help="timely processes = Spark barrier tasks")
    ap.add_argument("--master", help="Spark master URL (default local[PROCESSES])")
    ap.add_argument("--analyses", default=",".join(ANALYSES), help=f"comma-separated subset of {','.join(ANALYSES)}")
    ap.add_argument("--nodes", type=int, default=d.nodes, help="generated graph: nodes")
    ap.add_argument("--edges", type=int, default=d.edges, help="generated graph: edges")
    ap.add_argument("--epochs", type=int, default=d.epochs, help="epochs of edge changes")
    ap.add_argument("--changes", type=int, default=d.changes, help="edge changes per epoch")
    ap.add_argument("--seed", type=int, default=d.seed)
    a = ap.parse_args(argv)
    return JobOptions(
        input=a.input,
        output=a.output,
        processes=a.processes,
        master=a.master,
        analyses=tuple(x.strip() for x in a.analyses.split(",") if x.strip()),
        nodes=a.nodes,
        edges=a.edges,
        epochs=a.epochs,
        changes=a.changes,
        seed=a.seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = _parse(argv)
    run_job(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
