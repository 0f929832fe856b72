"""The same analyses in plain PySpark, as users write them today: the baseline of ``spark.job``.

* components: iterative DataFrame label propagation (each node takes the least label among
  itself and its neighbours, edges undirected) until no label changes, cutting the lineage
  every round with ``localCheckpoint`` (without it the plan grows each round);
* PageRank: the RDD formulation of Spark's examples, with NetworkX's handling of nodes
  without out-edges (their rank is spread evenly), for a fixed number of iterations;
* edge changes: Spark has no incremental form, so each epoch's components are recomputed
  from scratch on the changed edge set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["label_propagation", "rdd_pagerank"]


def label_propagation(edges: Any, progress: Callable[[str], None] | None = None) -> tuple[Any, int]:
    """``(node, label)`` with the least node id of each component, and the rounds it took."""
    from pyspark.sql import functions as F

    both = edges.select("src", "dst").union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    both = both.localCheckpoint()
    labels = both.select(F.col("src").alias("node")).distinct().withColumn("label", F.col("node")).localCheckpoint()
    rounds = 0
    while True:
        rounds += 1
        proposals = both.join(labels, both.src == labels.node).select(F.col("dst").alias("node"), "label")
        best = labels.union(proposals).groupBy("node").agg(F.min("label").alias("label")).localCheckpoint()
        changed = best.join(labels.withColumnRenamed("label", "old"), "node").where("label < old").count()
        labels = best
        if progress is not None:
            progress(f"PySpark label propagation: round {rounds}, {changed:,} labels changed")
        if changed == 0:
            return labels, rounds


def rdd_pagerank(edges: Any, supersteps: int = 20, damping: float = 0.85) -> Any:
    """An RDD of ``(node, rank)`` after ``supersteps`` iterations (every node of ``edges``)."""
    pairs = edges.select("src", "dst").rdd.map(tuple)
    nodes = pairs.flatMap(lambda e: e).distinct().cache()
    n = nodes.count()
    links = pairs.groupByKey().mapValues(list).cache()
    ranks = nodes.map(lambda v: (v, 1.0 / n))
    for _ in range(supersteps):
        dangling = ranks.subtractByKey(links).values().sum()
        contribs = links.join(ranks).flatMap(lambda kv: [(d, kv[1][1] / len(kv[1][0])) for d in kv[1][0]])
        base = (1.0 - damping) / n + damping * dangling / n
        ranks = (
            nodes.map(lambda v: (v, 0.0))
            .union(contribs)
            .reduceByKey(lambda a, b: a + b)
            .mapValues(lambda s, base=base: base + damping * s)
        )
        ranks.localCheckpoint()  # marks the RDD (returns None): its lineage is cut at the next action
        ranks.count()
    return ranks
