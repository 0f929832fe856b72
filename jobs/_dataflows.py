"""The timely dataflows the graph job runs inside Spark (one barrier task per process).

Each is a ``build(scope, inputs) -> stream`` as `timely_libs.spark.run` expects: ``inputs`` maps an
input name to the timely `Input` that Spark's rows are fed into, and the stream returned
carries the output rows. Both take and give numpy columns (``columns=True``: no Python
object per row, in or out).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

import timely
from timely_libs import linq, pregel

__all__ = ["COMPONENTS_SCHEMA", "PAGERANK_SCHEMA", "components", "pagerank", "preload"]

COMPONENTS_SCHEMA = "analysis string, node long, label long, diff long"
"""Rows of `components`: ``analysis`` is ``cc`` or ``scc``; ``diff`` +1 for a label a node
takes at the epoch, -1 for one it leaves (run_epochs adds the epoch column)."""
PAGERANK_SCHEMA = "node long, rank double"


def preload() -> None:
    """Load linq's compiled loops (`timely_libs.linq.preload`) in a Spark Python worker before
    a run needs them (the job passes it to `timely_libs.spark.warm_workers`): otherwise each
    process loads them at its first large array, in the middle of the components' first epoch."""
    linq.preload()


def _edge_columns(columns: tuple[np.ndarray, ...]) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """A batch of ``(src, dst, diff)`` columns as linq's ``(columns, diffs)``: records ``(src, dst)``."""
    src, dst, diff = columns
    return (src, dst), diff


def _source(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An edge's source as ``(node, node)``: every node is its own SCC until an SCC edge joins it to others."""
    return src, src


def _target(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return dst, dst


def _labelled(analysis: str) -> Any:
    def rows(change: tuple[tuple[np.ndarray, np.ndarray], np.ndarray]) -> tuple[np.ndarray, ...]:
        (node, label), diff = change
        return (np.full(len(diff), analysis, dtype=object), node, label, diff)

    return rows


def components(scope: timely.Scope, inputs: dict[str, timely.Input], analyses: Sequence[str] = ("cc", "scc")) -> Any:
    """Connected components (edges undirected) and strongly connected components of the graph
    whose edges arrive as ``(src, dst, diff)`` columns on input ``edges``, epoch by epoch (run
    with ``columns=True``); the output is every change of a node's label, per epoch, as
    columns (differential dataflow: an epoch of a few edge changes costs work in proportion
    to what changed)."""
    edges = linq.Collection.from_columns(inputs["edges"].map("edge_columns", _edge_columns))
    outs = []
    if "cc" in analyses:
        cc = linq.connected_components(edges)
        outs.append(cc.consolidate(name="cc_changes").to_columns().map("cc_rows", _labelled("cc")))
    if "scc" in analyses:
        inside = linq.strongly_connected_components(edges)  # edges whose ends share an SCC
        joined = linq.connected_components(inside)  # least node id per SCC of two or more nodes
        ends = edges.select(linq.columns(_source), name="scc_sources").concat(
            edges.select(linq.columns(_target), name="scc_targets"), name="scc_nodes"
        )
        alone = ends.distinct(name="scc_all_nodes")
        labels = joined.concat(alone, name="scc_candidates").min(itemgetter(0), itemgetter(1), name="scc_least")
        outs.append(labels.consolidate(name="scc_changes").to_columns().map("scc_rows", _labelled("scc")))
    if not outs:
        raise ValueError("components: ask for 'cc' and/or 'scc'")
    return outs[0] if len(outs) == 1 else scope.concat("component_rows", outs)


def pagerank(scope: timely.Scope, inputs: dict[str, timely.Input], supersteps: int = 20) -> Any:
    """PageRank (NetworkX's definition, ``supersteps`` iterations) with libs/pregel's numpy
    program over input ``edges`` (``(src, dst)`` columns) and ``nodes`` (``(node,)`` columns,
    so that nodes without edges have a rank too); the output is ``(node, rank)`` columns,
    one pair of arrays per worker (run with ``columns=True``)."""
    program = pregel.programs.ArrayPageRank(supersteps=supersteps)
    return pregel.pregel(program, inputs["edges"], inputs["nodes"], name="pagerank", columns=True)
