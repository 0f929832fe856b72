"""``spark.job``: the main job (`jobs.graph_analytics`) end to end, against the same analyses in plain PySpark.

The graph is generated with a fixed seed: 100,000 nodes and 1,000,000 edges (``--quick``:
10,000 and 100,000); the job writes it as Parquet and PySpark reads it from there. Both sides run on one
``local[2]`` session, one after the other:

* timely (the job with ``--analyses cc,pagerank``): connected components with
  libs/linq inside Spark, then 5 epochs of 100 edge changes fed into the same running
  computation, then PageRank (20 iterations) with libs/pregel; results written as Parquet.
* PySpark (`jobs._pyspark_baseline`): DataFrame label propagation for the components, RDD
  PageRank, and the components recomputed from scratch for every epoch of changes (PySpark
  has no incremental form); results written as Parquet.

Strongly connected components are left out on both sides: plain PySpark has no SCC to
compare with (the job computes them by default on its smaller default graph).
Records: ``spark.job.total`` (timely's whole job; baseline PySpark's), one
``spark.job.stage.*`` per stage, and ``spark.job.epoch.median`` (seconds from an epoch's
changes fed to its component changes out; baseline: one PySpark recomputation).
Both sides' component labels are checked to agree.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench._harness import Context, benchmark
from bench._spark import stop_spark

PROCESSES = 2
EPOCHS = 5
CHANGES = 100
TARGET_EPOCH_SECONDS = 1.0


def sizes(quick: bool) -> tuple[int, int]:
    return (10_000, 100_000) if quick else (100_000, 1_000_000)


@benchmark("spark.job", "the main job on Spark (CC + 5 epochs of changes + PageRank), vs plain PySpark")
def spark_job(ctx: Context) -> None:
    from jobs import _pyspark_baseline as baseline
    from jobs.graph_analytics import JobOptions, edge_array, edge_changes, run_job
    from libs import spark as tspark

    nodes, edges = sizes(ctx.quick)
    session = tspark.local_session(cores=PROCESSES, app_name="spark.job")
    try:
        with tempfile.TemporaryDirectory(prefix="spark-job-") as tmp:
            out = Path(tmp) / "timely"
            options = JobOptions(
                output=out,
                processes=PROCESSES,
                analyses=("cc", "pagerank"),
                nodes=nodes,
                edges=edges,
                epochs=EPOCHS,
                changes_per_epoch=CHANGES,
            )
            ctx.progress(f"timely: the job on {nodes:,} nodes, {edges:,} edges")
            began = time.perf_counter()
            result = run_job(options, session=session, out=_ProgressOut(ctx))
            timely_total = time.perf_counter() - began - result.stages.get("generate", 0.0)

            ctx.progress("PySpark: the same analyses")
            began = time.perf_counter()
            edge_df = session.read.parquet(str(out / "generated_edges.parquet")).cache()
            edge_df.count()
            stages: dict[str, float] = {}
            t = time.perf_counter()
            labels, rounds = baseline.label_propagation(edge_df, progress=lambda m: ctx.progress(m, force=False))
            labels.write.mode("overwrite").parquet(str(Path(tmp) / "pyspark" / "cc.parquet"))
            stages["components"] = time.perf_counter() - t
            recompute: list[float] = []
            local = edge_array(edge_df)
            current = {(int(a), int(b)) for a, b in local}
            for i, batch in enumerate(edge_changes(local, nodes, EPOCHS, CHANGES, options.seed)):
                for a, b, d in batch:
                    (current.add if d > 0 else current.discard)((a, b))
                t = time.perf_counter()
                changed = session.createDataFrame(sorted(current), "src long, dst long")
                again, _ = baseline.label_propagation(changed)
                again.write.mode("overwrite").parquet(str(Path(tmp) / "pyspark" / f"cc-{i + 1}.parquet"))
                recompute.append(time.perf_counter() - t)
                ctx.progress(f"PySpark: epoch {i + 1} recomputed in {recompute[-1]:.1f} s")
            stages["changes"] = sum(recompute)
            t = time.perf_counter()
            ranks = baseline.rdd_pagerank(edge_df)
            session.createDataFrame(ranks, "node long, rank double").write.mode("overwrite").parquet(
                str(Path(tmp) / "pyspark" / "pagerank.parquet")
            )
            stages["pagerank"] = time.perf_counter() - t
            spark_total = time.perf_counter() - began
            _check_components(ctx, session, out, Path(tmp) / "pyspark")
    finally:
        stop_spark(session)

    ctx.record(
        "spark.job.total",
        timely_total,
        "s",
        "plain PySpark",
        spark_total,
        target="faster than PySpark",
        met=timely_total < spark_total,
    )
    for name, seconds in result.stages.items():
        if name not in ("generate", "spark", "components: epoch 0"):
            ctx.record(f"spark.job.stage.{name.split(' ')[0]}", seconds, "s")
    for name, seconds in stages.items():
        ctx.record(f"spark.job.pyspark.{name}", seconds, "s")
    ctx.record("spark.job.pyspark.rounds", rounds, "rounds")
    epoch_seconds = [e["seconds"] for e in result.epochs if e.get("seconds") is not None]
    if epoch_seconds:
        median = statistics.median(epoch_seconds)
        ctx.record(
            "spark.job.epoch.median",
            median,
            "s",
            "PySpark recompute (median)",
            statistics.median(recompute),
            target=f"under {TARGET_EPOCH_SECONDS:g} s",
            met=median < TARGET_EPOCH_SECONDS,
        )


def _check_components(ctx: Context, session: object, timely_out: Path, pyspark_out: Path) -> None:
    """The final components of both sides (after the last epoch) agree."""
    ours = session.read.parquet(str(timely_out / "components.parquet")).select("node", "cc")  # type: ignore[attr-defined]
    theirs = session.read.parquet(str(pyspark_out / f"cc-{EPOCHS}.parquet"))  # type: ignore[attr-defined]
    a = {(int(r["node"]), int(r["cc"])) for r in ours.collect()}
    b = {(int(r["node"]), int(r["label"])) for r in theirs.collect()}
    ctx.check(a == b, f"components differ: {len(a ^ b)} (node, label) pairs in one answer only")


class _ProgressOut:
    """A file-like object that turns the job's progress lines into the benchmark's."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.ctx.progress(line.strip())
        return len(text)

    def flush(self) -> None:
        pass
