"""Graph analytics on Spark, with timely inside: components, changes and PageRank.

    python -m timely_jobs.graph_analytics [--input EDGES] [--changes CHANGES] [--output DIR] [--format parquet|csv]
                                   [--analyses cc,scc,pagerank] [--processes N] [--master URL]

The graph is the user's edge list (``--input``: ``src,dst`` integer rows, CSV or Parquet) or,
by default, one generated with a fixed seed. Timely runs inside Spark, one barrier task per
process (`timely_libs.spark`):

1. components: connected components (edges undirected) and strongly connected components with
   `timely_libs.linq` (differential dataflow), in one computation that then follows the epochs of
   edge changes — the user's (``--changes``), or, on the generated graph only, random ones —
   and reports per epoch only the labels that changed;
2. pagerank: PageRank (20 iterations) with `timely_libs.pregel`.

Everything is read and checked before Spark starts (see `timely_jobs._input`): a bad row stops the
job with its file, line and text, or with ``--skip-bad-rows`` is skipped and counted. The
results are written to a temporary directory next to ``--output`` and moved into place only
when the job succeeds, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timely_jobs import _dataflows
from timely_jobs._cli import run_main
from timely_jobs._input import (
    Changes,
    Edges,
    InputError,
    apply_changes,
    read_changes,
    read_edges,
    synthetic,
    unique_pairs,
)

__all__ = [
    "ANALYSES",
    "COMPONENT_COLUMNS",
    "SUMMARY_COUNTS",
    "JobError",
    "JobOptions",
    "JobResult",
    "edge_array",
    "edge_changes",
    "generate_edges",
    "main",
    "run_job",
]

ANALYSES = {
    "cc": "connected components (edges undirected) -> components.cc: the least node id in the node's component",
    "scc": "strongly connected components -> components.scc: the least node id in the node's SCC",
    "pagerank": "PageRank, 20 iterations, damping 0.85, as networkx.pagerank -> pagerank (node, rank)",
}
FORMATS = ("parquet", "csv")
RESULTS = ("components", "changes", "pagerank", "generated_edges", "generated_changes")
"""What the job writes under --output, each ``NAME.FORMAT``, and ``summary.json``."""
SUMMARY_COUNTS = (
    "input",
    "input_rows",
    "input_bad_rows_skipped",
    "duplicate_edges",
    "edges",
    "nodes",
    "changes",
    "change_epochs",
    "changes_applied",
    "changes_bad_rows_skipped",
    "final_edges",
    "final_nodes",
    "cc_components",
    "scc_components",
    "pagerank_top",
)
"""The keys of ``summary.json``'s ``counts``, every one in every run (null: an analysis not asked for)."""


class JobError(Exception):
    """The job cannot run as asked (bad options, input or output); one line that says why."""


@dataclass
class JobOptions:
    input: Path | None = None
    """The edge list; None: a generated graph (``nodes``, ``edges``, ``seed``)."""
    changes: Path | None = None
    """Edge changes to follow after the input (see `timely_jobs._input.read_changes`)."""
    output: Path = Path("graph-analytics-out")
    format: str = "parquet"
    header: bool | None = None
    """CSV files: True/False, or None to detect (a first line of integers is data)."""
    skip_bad_rows: bool = False
    processes: int = 2
    master: str | None = None
    """Spark master URL; default ``local[processes]`` (every process needs a slot), or the master
    spark-submit was given when it started the job."""
    analyses: Sequence[str] = tuple(ANALYSES)
    nodes: int = 10_000
    edges: int = 50_000
    seed: int = 42
    epochs: int = 5
    """Generated graph only: epochs of random edge changes."""
    changes_per_epoch: int = 100
    supersteps: int = 20
    timeout: float = 3600.0
    encrypt: bool | None = None
    """Seal the connections between the timely processes: None, when any is off loopback (a
    real cluster); True, always (``--encrypt``); False, never (``--no-encrypt``)."""


@dataclass
class JobResult:
    stages: dict[str, float] = field(default_factory=dict)
    """Seconds per stage, in the order they ran."""
    spark: dict[str, float] = field(default_factory=dict)
    """Seconds Spark itself took, per stage (start-up, writes, and its share of each timely run:
    preparing the inputs, starting tasks, persisting the output; see `timely_libs.spark.run`'s
    ``timings``), and ``total``."""
    counts: dict[str, Any] = field(default_factory=dict)
    """What the job read and found, each named for what it counts (see `_print_summary`)."""
    epochs: list[dict[str, Any]] = field(default_factory=list)
    """Per epoch of edge changes: edges added and removed, nodes whose label changed, seconds."""


# The generated graph ------------------------------------------------------------------------------
def generate_edges(nodes: int, edges: int, seed: int) -> np.ndarray:
    """``edges`` distinct directed edges ``(src, dst)`` between random nodes, no self-loops."""
    rng = np.random.default_rng(seed)
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < edges:
        more = rng.integers(0, nodes, size=(edges - len(pairs)) * 2 + 16, dtype=np.int64).reshape(-1, 2)
        more = more[more[:, 0] != more[:, 1]]
        pairs = unique_pairs(np.concatenate([pairs, more]))
    return rng.permutation(pairs)[:edges]


def edge_changes(
    edges: np.ndarray, nodes: int, epochs: int, changes: int, seed: int
) -> list[list[tuple[int, int, int]]]:
    """Per epoch, ``changes`` rows ``(src, dst, diff)``: half removals of edges present at that
    point, half insertions of edges absent then (seeded, and independent of the order of
    ``edges``, so every run sees the same stream). Node ids must lie in ``[0, nodes)``."""
    rng = np.random.default_rng(seed + 1)
    present = np.sort(edges[:, 0] * nodes + edges[:, 1])  # an edge as one int64 key, sorted (edges are distinct)
    out = []
    for _ in range(epochs):
        removed = present[rng.choice(len(present), size=min(changes // 2, len(present)), replace=False)]
        wanted = changes - len(removed)
        added = np.empty(0, dtype=np.int64)
        while len(added) < wanted:
            a, b = rng.integers(0, nodes, size=(2, 2 * wanted + 16), dtype=np.int64)
            keys = (a * nodes + b)[a != b]
            keys = keys[~_holds(present, keys)]
            keys = np.concatenate([added, keys])
            _, first = np.unique(keys, return_index=True)
            added = keys[np.sort(first)][:wanted]  # distinct, in the order drawn
        batch = [(int(k // nodes), int(k % nodes), -1) for k in removed]
        batch += [(int(k // nodes), int(k % nodes), 1) for k in added]
        present = np.sort(np.concatenate([present[~_holds(np.sort(removed), present)], added]))
        out.append(batch)
    return out


def _holds(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each of ``keys``, whether the sorted array holds it."""
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys if len(sorted_keys) else np.zeros(len(keys), dtype=bool)


def edge_array(edges: Any) -> np.ndarray:
    """A DataFrame's ``(src, dst)`` columns as an ``(n, 2)`` int64 array (through Arrow, no pandas)."""
    table = edges.select("src", "dst").toArrow()
    return np.column_stack([table.column("src").to_numpy(), table.column("dst").to_numpy()]).astype(np.int64)


# Progress -----------------------------------------------------------------------------------------
class _Progress:
    """The job's lines, ``[  12.3s] ...``: a line as each stage starts and ends, live figures
    from the computation while it runs (`timely_libs.spark.ConsoleProgress` on the job's stream), and
    for a stage with nothing to observe (the JVM starting) a line every few seconds saying what
    it waits for, so that no step is silent for long."""

    QUIET = 4.0
    """Seconds without a line after which a stage says what it is still doing (live figures,
    when there are any, come every `EVERY` seconds)."""
    EVERY = 3.0

    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.last_line = self.started
        self._lock = threading.Lock()
        self._console: Any = None

    def say(self, message: str) -> None:
        with self._lock:
            self.last_line = time.monotonic()
            print(f"[{self.last_line - self.started:7.1f}s] {message}", file=self.out, flush=True)

    @property
    def console(self) -> Any:
        """The live progress of Spark runs, shown through `say` (a bar on a terminal)."""
        if self._console is None:
            from timely_libs.spark import ConsoleProgress

            self._console = ConsoleProgress(self.out, every=self.EVERY, say=self.say)
        return self._console

    @contextmanager
    def stage(self, name: str, result: JobResult, waiting: str = "working") -> Iterator[None]:
        self.say(f"{name} ...")
        began = time.perf_counter()
        done = threading.Event()

        def fallback() -> None:
            while not done.wait(0.5):
                shown = max(self.last_line, self._console.last_shown if self._console is not None else 0.0)
                if time.monotonic() - shown >= self.QUIET:
                    self.say(f"{name}: {waiting}, {time.perf_counter() - began:.0f} s")

        watcher = threading.Thread(target=fallback, name="job-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()
        result.stages[name] = time.perf_counter() - began
        self.say(f"{name} done in {result.stages[name]:.2f} s")


# Checks before Spark ------------------------------------------------------------------------------
def _check_output(path: Path) -> None:
    """The output directory may be new, empty, or an earlier run's results (replaced whole)."""
    if path.exists() and not path.is_dir():
        raise JobError(f"--output {path}: exists and is not a directory")
    if path.is_dir():
        ours = {"summary.json"} | {f"{r}.{fmt}" for r in RESULTS for fmt in FORMATS}
        theirs = sorted(p.name for p in path.iterdir() if p.name not in ours)
        if theirs:
            raise JobError(
                f"--output {path}: holds {', '.join(theirs[:3])}, which this job did not write; "
                "give a new or empty directory (an earlier run's results are replaced whole)"
            )


def _read(options: JobOptions, progress: _Progress, result: JobResult) -> tuple[Edges, Changes, np.ndarray]:
    """The graph, the epochs of changes that apply to it and the graph after them, checked."""
    counts = result.counts
    with progress.stage("read", result):
        if options.input is None:
            pairs = generate_edges(options.nodes, options.edges, options.seed)
            edges = Edges(unique_pairs(pairs), rows=len(pairs))
            counts["input"] = f"generated: {options.nodes:,} nodes, {options.edges:,} edges, seed {options.seed}"
        else:
            edges = read_edges(options.input, options.header, options.skip_bad_rows)
            counts["input"] = str(options.input)
        counts["input_rows"] = edges.rows
        counts["input_bad_rows_skipped"] = edges.skipped.count  # 0 without --skip-bad-rows: a bad row stops the job
        counts["duplicate_edges"] = edges.duplicates
        counts["edges"] = len(edges.pairs)
        counts["nodes"] = edges.nodes
        progress.say(
            f"{counts['input']}: {edges.rows:,} rows -> {len(edges.pairs):,} distinct edges on {edges.nodes:,} nodes"
            + (f"; {edges.duplicates:,} repeated edges counted once" if edges.duplicates else "")
            + (
                f"; skipped {edges.skipped.count:,} bad rows (first: {edges.skipped.first})"
                if edges.skipped.count
                else ""
            )
        )
        if options.changes is not None:
            epochs, skipped = read_changes(options.changes, options.header, options.skip_bad_rows)
            source = str(options.changes)
        elif options.input is None and options.epochs > 0:
            epochs = synthetic(
                edge_changes(pairs, options.nodes, options.epochs, options.changes_per_epoch, options.seed)
            )
            skipped, source = None, f"generated: {options.epochs} epochs of {options.changes_per_epoch} random changes"
        else:
            epochs, skipped, source = [], None, "none"
        changes, final = apply_changes(edges, epochs, options.skip_bad_rows, skipped)
        changes.source = source
        counts["changes"] = source
        counts["change_epochs"] = len(changes.epochs)
        counts["changes_applied"] = changes.rows
        counts["changes_bad_rows_skipped"] = changes.skipped.count
        if changes.epochs:
            progress.say(
                f"changes: {source}: {changes.rows:,} changes in {len(changes.epochs)} epochs"
                + (
                    f"; skipped {changes.skipped.count:,} bad rows (first: {changes.skipped.first})"
                    if changes.skipped.count
                    else ""
                )
            )
        counts["final_edges"] = len(final)
        counts["final_nodes"] = int(np.unique(final).size)
        for name in SUMMARY_COUNTS[SUMMARY_COUNTS.index("cc_components") :]:
            counts[name] = None  # until its analysis runs
    return edges, changes, final


# The job ------------------------------------------------------------------------------------------
def run_job(options: JobOptions, session: Any = None, out: Any = None) -> JobResult:
    """Run the pipeline; ``session`` (default: a local one, or one for ``options.master``).

    Raises `JobError` (or `timely_jobs._input.InputError`) before Spark starts for bad options and
    inputs; the output directory is then untouched."""
    unknown = set(options.analyses) - set(ANALYSES)
    if unknown or not options.analyses:
        raise JobError(f"unknown analyses {sorted(unknown)}; choose from {', '.join(ANALYSES)}")
    if options.format not in FORMATS:
        raise JobError(f"unknown format {options.format!r}; choose from {', '.join(FORMATS)}")
    output = Path(os.path.abspath(options.output))
    _check_output(output)
    progress = _Progress(out)
    result = JobResult()
    edges, changes, final = _read(options, progress, result)

    from timely_libs import spark as tspark

    own_session = session is None
    staging = output.parent / f".{output.name}.partial-{os.getpid()}"
    try:
        if own_session:
            with progress.stage("spark", result, waiting="starting the JVM and the SparkContext"):
                session = tspark.session(options.master, cores=options.processes, app_name="graph_analytics")
            result.spark["start"] = result.stages["spark"]
        components = [a for a in ("cc", "scc") if a in options.analyses]
        # The analyses' Python workers start now, while the generated data is written: one
        # small Spark job, so the first analysis does not wait for them (docs/spark.md).
        warm = tspark.warm_workers(session, options.processes, preload=(_dataflows.preload,) if components else ())
        staging.mkdir(parents=True)
        writer = _Writer(session, staging, options.format, progress, result)
        if options.input is None:
            writer.write("generated_edges", pa.table({"src": edges.pairs[:, 0], "dst": edges.pairs[:, 1]}))
            if options.changes is None and changes.epochs:
                writer.write("generated_changes", _numbered(changes.epochs))
        _workers_ready(warm, progress, result)
        if components:
            _components(session, tspark, edges, changes, components, options, writer, progress, result)
        if "pagerank" in options.analyses:
            _pagerank(session, tspark, final, options, writer, progress, result)
        result.spark["total"] = sum(result.spark.values())
        (staging / "summary.json").write_text(json.dumps(_jsonable(result), indent=2) + "\n")
        _publish(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_session and session is not None:
            session.stop()
    _print_summary(result, output, progress.out)
    return result


def _publish(staging: Path, output: Path) -> None:
    """Move the finished results into place; an earlier run's results there are replaced."""
    if output.exists():
        old = output.parent / f".{output.name}.old-{os.getpid()}"
        output.rename(old)
        staging.rename(output)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(output)


def _numbered(epochs: list[np.ndarray]) -> pa.Table:
    """Epochs of ``(src, dst, diff)`` rows as one table ``epoch, src, dst, diff`` (from 1), in order."""
    rows = np.concatenate([np.column_stack([np.full(len(b), e), b]) for e, b in enumerate(epochs, start=1)])
    return pa.table({n: pa.array(rows[:, k], type=pa.int64()) for k, n in enumerate(("epoch", "src", "dst", "diff"))})


SMALL_FRAME = 10_000
"""Rows up to which an input DataFrame is one partition (an epoch of changes): Spark would
otherwise scan a small local table in a partition per core, a task each to hash a few rows
to the timely processes."""


def _frame(session: Any, values: np.ndarray, names: Sequence[str] = ("src", "dst"), parts: int = 1) -> Any:
    """A DataFrame of int64 columns from an ``(n, k)`` array (through Arrow): in ``parts``
    partitions when it is large (one Arrow batch each), so that Spark's first stage over it,
    which hashes its rows to the timely processes, runs on every task slot instead of one
    (docs/spark.md, "Two processes against one"); in one when it is small (`SMALL_FRAME`)."""
    table = pa.table({n: pa.array(values[:, k], type=pa.int64()) for k, n in enumerate(names)})
    if len(table) <= SMALL_FRAME:
        return session.createDataFrame(table).coalesce(1)
    if parts > 1:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=-(-len(table) // parts)))
    return session.createDataFrame(table)


class _Writer:
    """Writes each result with Spark, one Spark job per result, from an Arrow table on the
    driver: the results are the size of the node set, as the input was, and computing them
    there (pyarrow) instead of as Spark queries saves a dozen Spark jobs, each of which costs
    more than the work (see docs/spark.md)."""

    def __init__(self, session: Any, root: Path, fmt: str, progress: _Progress, result: JobResult) -> None:
        self.session = session
        self.root = root
        self.format = fmt
        self.progress = progress
        self.result = result

    def write(self, name: str, table: pa.Table) -> None:
        from timely_libs import spark as tspark

        step = f"write {name.replace('_', ' ')}"
        with self.progress.stage(step, self.result), tspark.watch(self.session, step, self.progress.console):
            frame = self.session.createDataFrame(table)
            path = str(self.root / f"{name}.{self.format}")
            if self.format == "csv":
                frame.write.option("header", True).csv(path)
            else:
                frame.write.parquet(path)
        self.result.spark[step] = self.result.stages[step]


WORKERS_WAIT = 120.0
"""Seconds the job waits for the Python workers it started ahead (`_workers_ready`)."""


def _workers_ready(warm: Any, progress: _Progress, result: JobResult) -> None:
    """Wait for the rest of `timely_libs.spark.warm_workers`' job, so that each analysis's time
    is its own; the wait is Spark's share (starting Python workers)."""
    step = "python workers"
    with progress.stage(step, result, waiting="starting Spark's Python workers and loading the analyses' code"):
        ready = warm.wait(WORKERS_WAIT)
    result.spark[step] = result.stages[step]
    if not ready:  # a cluster without executors yet: the analyses' own check of the slots reports it
        progress.say(f"{step}: not ready after {WORKERS_WAIT:g} s; the analyses go on (Spark queues them behind)")
    elif warm.error is not None:
        progress.say(f"{step}: not started ahead ({type(warm.error).__name__}); the analyses start their own")
    else:
        progress.say(f"{step}: {len(warm.workers)} ready; their job took {warm.seconds:.2f} s")


def _spark_share(result: JobResult, stage: str, timings: dict[str, float], progress: _Progress) -> None:
    """Spark's share of a timely run: its own work, and the rendezvous of the barrier tasks."""
    result.spark[stage] = timings.get("spark", 0.0) + timings.get("joining", 0.0)
    if timings:
        parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in timings.items() if isinstance(v, float))
        progress.say(f"{stage}: {parts}")


def _components(
    session: Any,
    tspark: Any,
    edges: Edges,
    changes: Changes,
    analyses: list[str],
    options: JobOptions,
    writer: _Writer,
    progress: _Progress,
    result: JobResult,
) -> None:
    ones = np.column_stack([edges.pairs, np.ones(len(edges.pairs), dtype=np.int64)])
    names = ("src", "dst", "diff")
    parts = options.processes
    epochs = [{"edges": _frame(session, ones, names, parts)}]
    epochs += [{"edges": _frame(session, batch, names, parts)} for batch in changes.epochs]
    name = "components" if len(epochs) == 1 else f"components (+{len(epochs) - 1} epochs of changes)"
    seconds: dict[int, float] = {}
    timings: dict[str, float] = {}
    with progress.stage(name, result):
        labels = tspark.run_epochs(
            session,
            partial(_dataflows.components, analyses=analyses),
            epochs=epochs,
            schema=_dataflows.COMPONENTS_SCHEMA,
            processes=options.processes,
            timeout=options.timeout,
            seconds=seconds,
            progress=progress.console,
            timings=timings,
            columns=True,
            encrypt=options.encrypt,
        )
        rows = labels.toArrow()  # the persisted rows: no recomputation
        labels.unpersist()
    _spark_share(result, name, timings, progress)
    if "first_answer" in timings:
        result.stages["components: first answer"] = timings["first_answer"]
    if 0 in seconds:
        progress.say(f"epoch 0 (the whole graph): {seconds[0]:.2f} s")
    result.stages["components: epoch 0"] = seconds.get(0, float("nan"))
    final, changed = _labels(rows, analyses)
    writer.write("components", final)
    if changes.epochs:
        writer.write("changes", changed)
    for analysis in analyses:
        labels_of = final.column(analysis).drop_null()
        result.counts[f"{analysis}_components"] = len(pc.unique(labels_of))
    relabelled = changed.group_by(["epoch", "analysis"]).aggregate([("node", "count_distinct")]).to_pylist()
    by_epoch: dict[int, dict[str, int]] = {}
    for row in relabelled:
        by_epoch.setdefault(int(row["epoch"]), {})[row["analysis"]] = int(row["node_count_distinct"])
    for e, batch in enumerate(changes.epochs, start=1):
        result.epochs.append(
            {
                "epoch": e,
                "edges_added": int((batch[:, 2] > 0).sum()),
                "edges_removed": int((batch[:, 2] < 0).sum()),
                "nodes_relabelled": {a: by_epoch.get(e, {}).get(a, 0) for a in analyses},
                "seconds": seconds.get(e),
            }
        )


COMPONENT_COLUMNS = ("node", "cc", "scc")
"""The columns of ``components``, whichever analyses ran (one not asked for is null)."""


def _labels(rows: pa.Table, analyses: list[str]) -> tuple[pa.Table, pa.Table]:
    """From every epoch's label changes ``(epoch, analysis, node, label, diff)``: each node's
    labels after the last epoch (`COMPONENT_COLUMNS` by node: an analysis not asked for is a
    column of nulls, so the file has the same columns however the job was run), and the
    changes of the epochs after the first (by epoch, analysis, node, diff)."""
    totals = rows.group_by(["analysis", "node", "label"]).aggregate([("diff", "sum")])
    held = totals.filter(pc.greater(totals.column("diff_sum"), 0))
    final: pa.Table | None = None
    for analysis in analyses:
        mine = held.filter(pc.equal(held.column("analysis"), analysis)).select(["node", "label"])
        mine = mine.rename_columns(["node", analysis])
        final = mine if final is None else final.join(mine, "node", join_type="full outer")
    assert final is not None
    for analysis in COMPONENT_COLUMNS[1:]:
        if analysis not in analyses:
            final = final.append_column(analysis, pa.nulls(final.num_rows, pa.int64()))
    final = final.sort_by("node").select(list(COMPONENT_COLUMNS))
    later = rows.filter(pc.greater(rows.column("epoch"), 0))
    changed = later.sort_by(
        [("epoch", "ascending"), ("analysis", "ascending"), ("node", "ascending"), ("diff", "ascending")]
    )
    return final, changed


def _pagerank(
    session: Any,
    tspark: Any,
    final: np.ndarray,
    options: JobOptions,
    writer: _Writer,
    progress: _Progress,
    result: JobResult,
) -> None:
    nodes = np.unique(final).reshape(-1, 1)
    timings: dict[str, float] = {}
    with progress.stage("pagerank", result):
        ranks = tspark.run(
            session,
            partial(_dataflows.pagerank, supersteps=options.supersteps),
            inputs={
                "edges": _frame(session, final, parts=options.processes),
                "nodes": _frame(session, nodes, ("node",), options.processes),
            },
            schema=_dataflows.PAGERANK_SCHEMA,
            processes=options.processes,
            timeout=options.timeout,
            progress=progress.console,
            timings=timings,
            columns=True,
            encrypt=options.encrypt,
        )
        table = ranks.toArrow().sort_by("node")
        ranks.unpersist()
    _spark_share(result, "pagerank", timings, progress)
    writer.write("pagerank", table)
    top = table.take(pc.sort_indices(table, [("rank", "descending"), ("node", "ascending")])[:5])
    result.counts["pagerank_top"] = list(zip(top.column("node").to_pylist(), top.column("rank").to_pylist()))


def _jsonable(result: JobResult) -> dict[str, Any]:
    return {"stages": result.stages, "spark": result.spark, "counts": result.counts, "epochs": result.epochs}


def _print_summary(result: JobResult, output: Path, out: Any) -> None:
    p = partial(print, file=out)
    p("\n== graph analytics: summary ==")
    for k, v in result.counts.items():
        if v is not None:  # an analysis not asked for
            p(f"  {k}: {v}")
    for e in result.epochs:
        took = "" if e["seconds"] is None else f" in {e['seconds']:.3f} s"
        relabelled = ", ".join(f"{a} {n}" for a, n in e["nodes_relabelled"].items())
        p(
            f"  epoch {e['epoch']}: +{e['edges_added']} -{e['edges_removed']} edges{took}; nodes relabelled: {relabelled}"
        )
    p("  stage timings:")
    for name, s in result.stages.items():
        p(f"    {name:<40} {s:8.2f} s")
    if result.spark:
        total = result.spark["total"]
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in result.spark.items() if name != "total")
        p(f"  Spark itself: {total:.1f} s ({parts})")
    p(f"  results in {output}/")


# The command line ------------------------------------------------------------------------------------
_EPILOG = """\
analyses (--analyses, comma-separated; default all):
{analyses}

results (under --output, as FORMAT files or directories of them, as Spark writes):
  components  node, cc, scc: each node's labels in the graph after the last epoch of changes
              (a column of an analysis not asked for is null)
  changes     epoch, analysis, node, label, diff: per epoch of changes, each label a node
              took (diff 1) or left (diff -1); written when there are epochs of changes
  pagerank    node, rank: PageRank of the graph after the last epoch of changes
  generated_edges    src, dst: the generated graph, before any changes (without --input)
  generated_changes  epoch, src, dst, diff: the random changes applied to it, epoch 1 first
                     (without --input or --changes); with generated_edges, every epoch's graph
  summary.json     what was read, skipped and found (every field in every run: null for an
                   analysis not asked for), per-epoch figures and stage timings

input (--input) and changes (--changes): local .csv or .parquet files, or directories of them.
  Edges: integer columns src, dst. A CSV header naming them is detected (a first line of
  integers is data) unless --header/--no-header says. Repeated edges are counted once.
  Changes: src, dst, diff (1 adds the edge, -1 removes it) and, with a header, an optional
  epoch column (1, 2, ...); without one, a file is one epoch, and a directory is one epoch
  per entry in order of name. A change must apply: no removal of an absent edge, no second
  copy of a present one. Without --input the job generates a graph and, unless --changes is
  given, --epochs epochs of --changes-per-epoch random changes; with --input there are no
  changes but the user's.
  A bad row stops the job before Spark starts, naming its file, line and text; with
  --skip-bad-rows it is skipped and counted in the summary.
"""


def _analyses(text: str) -> tuple[str, ...]:
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [a for a in chosen if a not in ANALYSES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, unknown)) or 'nothing'}: choose from {', '.join(ANALYSES)}"
        )
    return chosen


def _parser() -> argparse.ArgumentParser:
    d = JobOptions()
    ap = argparse.ArgumentParser(
        prog="python -m timely_jobs.graph_analytics",
        description=__doc__.split("\n\n")[0],
        epilog=_EPILOG.format(analyses="\n".join(f"  {k:<9} {v}" for k, v in ANALYSES.items())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = ap.add_argument_group("data")
    data.add_argument("--input", type=Path, metavar="EDGES", help="the edge list (default: a generated graph)")
    data.add_argument("--changes", type=Path, metavar="CHANGES", help="edge changes to follow after the input")
    header = data.add_mutually_exclusive_group()
    header.add_argument("--header", dest="header", action="store_const", const=True, help="CSV files have a header")
    header.add_argument("--no-header", dest="header", action="store_const", const=False, help="CSV files have none")
    data.add_argument(
        "--skip-bad-rows", action="store_true", help="skip and count bad rows (default: stop at the first)"
    )
    results = ap.add_argument_group("results")
    results.add_argument("--output", type=Path, default=d.output, help="results directory (default: %(default)s)")
    results.add_argument("--format", choices=FORMATS, default=d.format, help="results format (default: %(default)s)")
    results.add_argument(
        "--analyses", type=_analyses, default=d.analyses, help=f"comma-separated (default: {','.join(ANALYSES)})"
    )
    run = ap.add_argument_group("running")
    run.add_argument(
        "--processes", type=int, default=d.processes, help="timely processes = Spark tasks (default: %(default)s)"
    )
    run.add_argument(
        "--master", help="Spark master URL (default: local[PROCESSES], or spark-submit's --master under spark-submit)"
    )
    run.add_argument(
        "--encrypt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="seal the connections between the timely processes (default: when any is off loopback, as on a "
        "real cluster); --no-encrypt leaves them in clear",
    )
    run.add_argument(
        "--console",
        metavar="[HOST:]PORT",
        help="serve timely's live console from the first timely process while the analyses run (docs/console.md)",
    )
    generated = ap.add_argument_group("the generated graph (without --input)")
    generated.add_argument("--nodes", type=int, metavar="N", help=f"nodes (default: {d.nodes})")
    generated.add_argument("--edges", type=int, metavar="M", help=f"edges (default: {d.edges})")
    generated.add_argument("--seed", type=int, metavar="S", help=f"random seed (default: {d.seed})")
    generated.add_argument(
        "--epochs", type=int, metavar="E", help=f"epochs of random edge changes (default: {d.epochs})"
    )
    generated.add_argument(
        "--changes-per-epoch", type=int, metavar="K", help=f"changes per epoch (default: {d.changes_per_epoch})"
    )
    return ap


def _parse(argv: Sequence[str] | None) -> JobOptions:
    ap = _parser()
    a = ap.parse_args(argv)
    d = JobOptions()
    generated = {k: getattr(a, k) for k in ("nodes", "edges", "seed", "epochs", "changes_per_epoch")}
    given = [f"--{k.replace('_', '-')}" for k, v in generated.items() if v is not None]
    if a.input is not None and given:
        ap.error(f"{', '.join(given)}: only for the generated graph (without --input); give --changes for edge changes")
    if a.changes is not None and any(generated[k] is not None for k in ("epochs", "changes_per_epoch")):
        ap.error("--changes replaces the random changes: drop --epochs/--changes-per-epoch")
    if a.processes < 1:
        ap.error("--processes must be at least 1")
    for k, v in generated.items():
        if v is not None and v < (1 if k in ("nodes", "edges") else 0):
            ap.error(f"--{k.replace('_', '-')} must be at least {1 if k in ('nodes', 'edges') else 0}")
    return JobOptions(
        input=a.input,
        changes=a.changes,
        output=a.output,
        format=a.format,
        header=a.header,
        skip_bad_rows=a.skip_bad_rows,
        processes=a.processes,
        master=a.master,
        analyses=a.analyses,
        encrypt=a.encrypt,
        **{k: (getattr(d, k) if v is None else v) for k, v in generated.items()},
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = _parse(argv)
    return run_main(partial(run_job, options), _parser().parse_known_args(argv)[0].console, (JobError, InputError))


if __name__ == "__main__":
    sys.exit(main())
