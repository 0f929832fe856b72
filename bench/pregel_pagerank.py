"""``pregel.pagerank``: 20 supersteps of PageRank with libs/pregel, against PySpark and SciPy.

The graph is linq.cc's seeded random graph (`bench.linq_graphs.graph`) with its directed
edges deduplicated (self-loops kept): 100,000 nodes and 1,000,000 edges (``--quick``: 10,000
and 100,000). Every node is a vertex, isolated or not. All implementations compute the same
thing, NetworkX's PageRank (alpha 0.85, dangling mass spread uniformly) cut at 20 iterations::

    r0[v] = 1/N;   r'[v] = (1-d)/N + d * (sum over u->v of r[u]/outdeg(u) + D/N)

where D is the rank held by nodes without out-edges. Each answer must agree with SciPy's
within `TOLERANCE` on every vertex.

timely runs `bench/_pregel_worker.py` in fresh processes (``timely run -n N``), timed from
the first record fed to the end of the computation (so loading the graph is included):
``ArrayPageRank`` (numpy per worker) on 1 and 2 processes, and ``PageRank`` (Python per
vertex) on 1 process to show the price of per-vertex compute.

Baselines, measured in the same run:

* PySpark, DataFrame joins (not RDDs) on ``local[2]`` in this process:
  timed from the Python edge list to the ranks back in pandas, i.e. building the edge
  DataFrame (pandas through Arrow), the out-degrees, the 20 iterations (each one cutting the
  lineage with ``localCheckpoint``) and collecting the ranks. Not timed: the session start
  and, in full mode, a warm-up run (`WARMUP_SUPERSTEPS` iterations on the ``--quick`` graph),
  since a fresh JVM ran the same job 2-3x slower than a warm one here; ``--quick`` measures a
  cold JVM. Without pyspark (or Java) the baseline is reported as missing.
* SciPy, a CSR power iteration: the vectorised floor. ``pregel.pagerank.scipy`` sets the 20
  iterations against timely's supersteps, both without building the graph (timely's from the
  master's report that the graph is loaded to the last value out);
  ``pregel.pagerank.scipy.with_build`` sets timely's whole run against building the matrix
  from the edge list plus the iterations.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from bench._harness import Context, benchmark
from bench._net import launch, load
from bench._spark import stop_spark
from bench.linq_graphs import graph

MARK = "PREGELBENCH"
SUPERSTEPS = 20
DAMPING = 0.85
TOLERANCE = 1e-9
"""Largest difference from SciPy's rank allowed on any vertex."""
TARGET_SPARK_SPEEDUP = 5.0
TARGET_SCIPY_FACTOR = 20.0
SCIPY_RUNS = 5
WARMUP_SUPERSTEPS = 5
"""Iterations of PySpark's untimed warm-up run on the ``--quick`` graph (full mode only)."""
SPARK_PARTITIONS = 4
"""``spark.sql.shuffle.partitions``: the default 200 makes each small job about 8x slower."""


def sizes(quick: bool) -> tuple[int, int]:
    """(nodes, edges before deduplication)."""
    return (10_000, 100_000) if quick else (100_000, 1_000_000)


def edge_list(nodes: int, edges: int) -> list[tuple[int, int]]:
    """linq.cc's graph without repeated directed edges, in first-seen order (the same in every process)."""
    return list(dict.fromkeys((int(e[0]), int(e[1])) for e in graph("cc", nodes, edges)))


# SciPy: the oracle and the floor ------------------------------------------------------------------


def scipy_pagerank(nodes: int, edges: list[tuple[int, int]], runs: int = SCIPY_RUNS) -> tuple[Any, float, float]:
    """(ranks as a numpy array by node, seconds to build the matrix, best seconds for the iterations)."""
    import numpy as np
    import scipy.sparse as sp

    started = time.perf_counter()
    pairs = np.array(edges, dtype=np.int64).reshape(-1, 2)
    src, dst = pairs[:, 0], pairs[:, 1]
    outdeg = np.bincount(src, minlength=nodes).astype(np.float64)
    matrix = sp.csr_matrix((1.0 / outdeg[src], (dst, src)), shape=(nodes, nodes))
    dangling = np.flatnonzero(outdeg == 0)
    build = time.perf_counter() - started

    best = float("inf")
    for _ in range(runs):
        began = time.perf_counter()
        ranks = np.full(nodes, 1.0 / nodes)
        for _ in range(SUPERSTEPS):
            ranks = (1 - DAMPING) / nodes + DAMPING * (matrix @ ranks + ranks[dangling].sum() / nodes)
        best = min(best, time.perf_counter() - began)
    return ranks, build, best


# PySpark ----------------------------------------------------------------------------------------------


def _spark_session() -> Any:
    """The project's local session (`timely_libs.spark.local_session`) with this benchmark's partitions and memory."""
    from timely_libs import spark as tspark

    conf = {
        "spark.sql.shuffle.partitions": str(SPARK_PARTITIONS),
        "spark.default.parallelism": str(SPARK_PARTITIONS),
        "spark.driver.memory": "4g",
    }
    return tspark.local_session(cores=2, app_name="pregel.pagerank", conf=conf)


def spark_pagerank(
    ctx: Context | None, spark: Any, nodes: int, edges: list[tuple[int, int]], supersteps: int = SUPERSTEPS
) -> tuple[Any, dict[str, float]]:
    """PageRank with PySpark DataFrames: (ranks by node, seconds per phase).

    Phases: ``load`` (pandas -> Arrow -> edge DataFrame, out-degrees, weighted links and the
    dangling nodes, cached), ``iterate`` (the iterations, each one a single job that ends in
    ``localCheckpoint``), ``collect`` (the ranks back to pandas), and ``total``. The ranks are
    broadcast to the links (100,000 rows) and the dangling mass is a one-row cross join, so an
    iteration is one job; a separate job for the mass, or no broadcast hint, measured no
    faster here (on a busy machine: the differences were within the noise).
    """
    import numpy as np
    import pandas as pd
    from pyspark.sql import functions as F

    started = time.perf_counter()
    pdf = pd.DataFrame(np.array(edges, dtype=np.int64).reshape(-1, 2), columns=["src", "dst"])
    edge_df = spark.createDataFrame(pdf)
    degrees = edge_df.groupBy("src").agg(F.count("*").alias("deg"))
    links = edge_df.join(degrees, "src").select("src", "dst", (F.lit(1.0) / F.col("deg")).alias("w")).cache()
    vertices = spark.range(nodes).cache()
    dangling = vertices.join(degrees, vertices.id == degrees.src, "left_anti").cache()
    ranks = vertices.select("id", F.lit(1.0 / nodes).alias("rank")).localCheckpoint()
    links.count()
    dangling.count()
    loaded = time.perf_counter()

    base, damping, share = F.lit((1 - DAMPING) / nodes), F.lit(DAMPING), F.lit(1.0 / nodes)
    for step in range(supersteps):
        current = F.broadcast(ranks)
        contribs = (
            links.join(current, links.src == current.id)
            .groupBy("dst")
            .agg(F.sum(F.col("rank") * F.col("w")).alias("c"))
        )
        mass = ranks.join(F.broadcast(dangling), "id").agg(F.coalesce(F.sum("rank"), F.lit(0.0)).alias("mass"))
        ranks = (
            vertices.join(contribs, vertices.id == contribs.dst, "left")
            .crossJoin(F.broadcast(mass))
            .select("id", (base + damping * (F.coalesce(F.col("c"), F.lit(0.0)) + F.col("mass") * share)).alias("rank"))
            .localCheckpoint()
        )
        if ctx is not None:
            ctx.progress(f"PySpark: iteration {step + 1}/{supersteps}", force=False)
    iterated = time.perf_counter()

    out = ranks.toPandas()
    finished = time.perf_counter()
    for df in (links, vertices, dangling):
        df.unpersist()

    result = np.full(nodes, np.nan)
    result[out["id"].to_numpy()] = out["rank"].to_numpy()
    phases = {
        "load": loaded - started,
        "iterate": iterated - loaded,
        "collect": finished - iterated,
        "total": finished - started,
    }
    return result, phases


def spark_baseline(
    ctx: Context, nodes: int, edges: list[tuple[int, int]], warmup: bool
) -> tuple[Any, dict[str, float]] | str:
    """`spark_pagerank`'s answer (after a warm-up run if ``warmup``), or why there is none:
    pyspark, pandas or pyarrow not installed, no Java, or Spark failed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pyspark 4 on pandas 3 warns on every conversion
        return _spark_baseline(ctx, nodes, edges, warmup)


def _spark_baseline(
    ctx: Context, nodes: int, edges: list[tuple[int, int]], warmup: bool
) -> tuple[Any, dict[str, float]] | str:
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"not installed ({exc.name})"
    try:
        spark = _spark_session()
    except Exception as exc:
        return f"no session: {type(exc).__name__}: {_first_line(exc)}"
    try:
        if warmup:
            # Class loading, code generation and the JIT: the first run in a fresh JVM took
            # 2-3x as long as later ones on this machine.
            ctx.progress(f"PySpark: session started; warming up ({WARMUP_SUPERSTEPS} iterations, --quick graph)")
            small_nodes, small_edges = sizes(quick=True)
            spark_pagerank(None, spark, small_nodes, edge_list(small_nodes, small_edges), WARMUP_SUPERSTEPS)
        ctx.progress("PySpark: timing")
        return spark_pagerank(ctx, spark, nodes, edges)
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {_first_line(exc)}"
    finally:
        stop_spark(spark)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


# timely ------------------------------------------------------------------------------------------------


def timely_pagerank(ctx: Context, program: str, processes: int, nodes: int, edges: int) -> tuple[Any, dict[str, Any]]:
    """Run the worker: (ranks by node, gathered from every process; timings: the slowest process's)."""
    import numpy as np

    ctx.progress(f"timely {program} on {processes} process(es), {nodes:,} nodes ({load()})")
    what = f"timely {program} on {processes} process(es)"
    ranks = np.full(nodes, np.nan)
    seen = 0
    with tempfile.TemporaryDirectory(prefix="pregel-bench-") as outdir:
        results = launch(
            processes,
            program,
            nodes,
            edges,
            outdir,
            timeout=3600,
            worker="bench._pregel_worker",
            mark=MARK,
        )
        for r in results:
            with np.load(Path(outdir) / f"ranks-{r['process']}.npz") as answer:
                ids, values = answer["ids"], answer["ranks"]
            ctx.check(len(ids) == len(values) == r["count"], f"{what}: process {r['process']} lost records")
            ctx.check(bool(((ids >= 0) & (ids < nodes)).all()), f"{what}: a rank for a vertex that does not exist")
            ctx.check(bool(np.isnan(ranks[ids]).all()), f"{what}: a vertex has two ranks")
            ranks[ids] = values
            seen += len(ids)
    ctx.check(seen == nodes, f"{what}: ranks for {seen:,} vertices, expected {nodes:,}")
    timing = {
        "seconds": max(r["seconds"] for r in results),
        "feed_seconds": max(r["feed_seconds"] for r in results),
        "peak_mib": max(r["peak_mib"] for r in results),
        "load_seconds": results[0]["load_seconds"],
        "supersteps": results[0]["supersteps"],
    }
    return ranks, timing


def _seconds(s: float | None) -> str:
    return "?" if s is None else f"{s:.3f} s"


def _max_diff(ctx: Context, what: str, ranks: Any, reference: Any) -> float:
    """Largest per-vertex difference from the SciPy answer; a `BenchmarkError` beyond `TOLERANCE`."""
    import numpy as np

    ctx.check(not bool(np.isnan(ranks).any()), f"{what}: some vertices have no rank")
    diff = float(np.abs(ranks - reference).max())
    ctx.check(diff <= TOLERANCE, f"{what}: ranks differ from SciPy's by up to {diff:.3g} (allowed {TOLERANCE:g})")
    return diff


@benchmark("pregel.pagerank", "20 PageRank supersteps with libs/pregel on 1M edges, vs PySpark DataFrames and SciPy")
def pagerank(ctx: Context) -> None:
    nodes, raw_edges = sizes(ctx.quick)
    edges = edge_list(nodes, raw_edges)
    ctx.progress(f"graph: {nodes:,} nodes, {len(edges):,} distinct edges (of {raw_edges:,})")

    reference, scipy_build, scipy_iterate = scipy_pagerank(nodes, edges)
    ctx.progress(
        f"SciPy: {SUPERSTEPS} iterations in {scipy_iterate * 1000:.1f} ms (best of {SCIPY_RUNS}); "
        f"building the CSR matrix took {scipy_build * 1000:.1f} ms more; sum of ranks {reference.sum():.12f}"
    )

    diffs: dict[str, float] = {}
    runs: dict[str, dict[str, Any]] = {}
    for label, program, processes in (("p1", "array", 1), ("p2", "array", 2), ("per_vertex", "per_vertex", 1)):
        ranks, timing = timely_pagerank(ctx, program, processes, nodes, raw_edges)
        diffs[label] = _max_diff(ctx, f"timely {program} on {processes} process(es)", ranks, reference)
        runs[label] = timing
        ctx.progress(
            f"timely {program} on {processes} process(es): {timing['seconds']:.3f} s "
            f"(feeding the input {timing['feed_seconds']:.3f} s, graph loaded at {_seconds(timing['load_seconds'])}), "
            f"{timing['supersteps']} supersteps reported, peak {timing['peak_mib']:.0f} MiB, "
            f"max diff from SciPy {diffs[label]:.3g}"
        )

    spark = spark_baseline(ctx, nodes, edges, warmup=not ctx.quick)
    if isinstance(spark, str):
        spark_name, spark_s, spark_diff = f"pyspark_dataframe_local2_s (missing: {spark})", None, None
        ctx.progress(f"PySpark baseline missing: {spark}")
    else:
        spark_ranks, phases = spark
        spark_diff = _max_diff(ctx, "PySpark", spark_ranks, reference)
        spark_name, spark_s = "pyspark_dataframe_local2_s", phases["total"]
        ctx.progress(
            f"PySpark: {phases['total']:.2f} s = load {phases['load']:.2f} + {SUPERSTEPS} iterations "
            f"{phases['iterate']:.2f} + collect {phases['collect']:.2f}; max diff from SciPy {spark_diff:.3g}"
        )

    best = min(runs["p1"]["seconds"], runs["p2"]["seconds"])
    spark_target = f">= {TARGET_SPARK_SPEEDUP:.0f}x faster than PySpark"
    spark_met = None if spark_s is None else spark_s / best >= TARGET_SPARK_SPEEDUP
    ctx.record("pregel.pagerank", best, "s", spark_name, spark_s, target=spark_target, met=spark_met)
    ctx.record("pregel.pagerank.p1", runs["p1"]["seconds"], "s", spark_name, spark_s)
    ctx.record("pregel.pagerank.p2", runs["p2"]["seconds"], "s", spark_name, spark_s)
    ctx.record("pregel.pagerank.per_vertex", runs["per_vertex"]["seconds"], "s", spark_name, spark_s)
    # Like with like: SciPy's floor excludes building its matrix, so this record excludes
    # loading the graph (from the master's "loaded" report to the last value out).
    iterating = min(r["seconds"] - r["load_seconds"] for r in (runs["p1"], runs["p2"]))
    ctx.record(
        "pregel.pagerank.scipy",
        iterating,
        "s",
        "scipy_csr_20_iterations_s",
        scipy_iterate,
        target=f"within {TARGET_SCIPY_FACTOR:.0f}x of SciPy (graph loading excluded on both sides)",
        met=iterating <= TARGET_SCIPY_FACTOR * scipy_iterate,
    )
    ctx.record(
        "pregel.pagerank.scipy.with_build",
        best,
        "s",
        "scipy_csr_build_and_20_iterations_s",
        scipy_build + scipy_iterate,
    )
    ctx.record(
        "pregel.pagerank.max_abs_diff",
        max(diffs.values()),
        "rank",
        "pyspark_max_abs_diff",
        spark_diff,
        target=f"<= {TOLERANCE:g} per vertex vs SciPy",
        met=max(diffs.values()) <= TOLERANCE,
    )
    ctx.record("pregel.pagerank.memory", runs["p1"]["peak_mib"], "MiB")
