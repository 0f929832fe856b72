"""The TR's graph algorithms as library functions (Figures 3, 8, 10 and 19).

Edges are ``(src, dst)`` records (``(src, dst, weight)`` for shortest paths); node ids are
any hashable, orderable values (ints take the column-wise path; non-negative ints for the
default priority of `prioritized_connected_components`). Every function returns a
collection, so each one updates incrementally as edges are added and removed.

`connected_components`, `propagate_min_labels` (and so `strongly_connected_components`) and
`shortest_paths` run on `propagate.propagate`: the min-reduce and the join of one iteration
fused into one vertex, labels let in by size. `connected_components_figure3` is TR Figure 3
as written (a `fixed_point` of a join and a min over every label at once), kept as the
reference the fused form is tested against, and as an example of the general operators.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from ._columns._functions import columns, twice
from .collection import Collection
from .propagate import by_size, propagate

__all__ = [
    "connected_components",
    "connected_components_figure3",
    "prioritized_connected_components",
    "propagate_min_labels",
    "shortest_paths",
    "strongly_connected_components",
]

_first = itemgetter(0)
_second = itemgetter(1)
_reverse = itemgetter(1, 0)


def _own_labels(edges: Collection) -> Collection:
    """``(node, node)`` once for every node at either end of an edge (nodes counted once)."""
    ends = edges.select(_first, name="sources").concat(edges.select(_second, name="targets"), name="ends")
    return ends.distinct(name="nodes").select(twice, name="own_labels")


def _symmetric(edges: Collection) -> Collection:
    return edges.concat(edges.select(_reverse, name="reversed"), name="both_directions")


def propagate_min_labels(edges: Collection) -> Collection:
    """``(node, label)``: the least node id among each node and the nodes that reach it along
    directed edges (TR Figure 3's ConnectedComponents, which follows edges in their direction).

    Every node starts with its own label, destinations too: the TR starts only the sources,
    which lets SCC keep an edge ``a -> b`` between two components when ``b`` has no edge out.
    """
    return propagate(edges, _own_labels(edges), at=by_size, name="label_propagation")


def connected_components(edges: Collection) -> Collection:
    """``(node, label)`` for every node of the undirected graph ``edges``; the label is the least
    node id of the node's component."""
    return propagate(_symmetric(edges), _own_labels(edges), at=by_size, name="label_propagation")


# TR Figure 3 as written, on the general operators ------------------------------------------------


def _local_min(labels: Collection, edges: Collection) -> Collection:
    """TR Figure 3's LocalMin: each node takes the least label among its own and its in-neighbours'."""
    proposals = labels.join(edges, _first, _first, columns(lambda n, label, s, d: (d, label)), name="propose")
    return proposals.concat(labels, name="with_own").min(_first, _second, name="least_label")


def connected_components_figure3(edges: Collection) -> Collection:
    """`connected_components` as TR Figure 3 has it: every label propagates at once, as a
    `fixed_point` of a join and a min (every label changes several times on the way)."""
    both = _symmetric(edges)
    nodes = _own_labels(edges)
    return nodes.fixed_point(lambda x: _local_min(x, both.enter(x.scope)), name="label_propagation")


def _default_priority(label: int) -> int:
    """About log2(1 + label): coarse enough to keep parallelism (TR §2.6 uses log(1 + label))."""
    return (label + 1).bit_length()


PRIORITY_STRIDE = 256
"""Loop iterations between two priorities in `prioritized_connected_components`: each
priority's labels get this many iterations to flood before the next ones enter (as
``by_size``); entering earlier would cost work, never correctness."""


def prioritized_connected_components(
    edges: Collection, priority: Callable[[Any], int] = _default_priority
) -> Collection:
    """`connected_components_figure3` with small labels flooded first (TR Figure 10): a node's
    own label enters the loop at iteration ``PRIORITY_STRIDE * priority(label)`` (`enter_at`),
    so each priority starts where the previous ones settled and a node's label changes a few
    times rather than once per smaller label that reaches it on the way.

    (TR Figure 10 writes this with `Collection.prioritize`, whose result is exactly its body's
    for any body; the lexicographic order that makes each priority start from the previous
    one's fixed point is, for a `fixed_point` body, this schedule of one loop.)"""
    both = _symmetric(edges)
    nodes = _own_labels(edges)

    def body(x: Collection) -> Collection:
        late = nodes.enter_at(x.scope, lambda node: PRIORITY_STRIDE * priority(node[1]), name="by_label")
        return _local_min(x.concat(late, name="with_entered"), both.enter(x.scope))

    return nodes.where(_nothing, name="start_empty").fixed_point(body, name="label_propagation")


def _nothing(record: Any) -> bool:
    return False


# Strongly connected components (TR Figure 8) --------------------------------------------------------


def _trim_by_reachability(edges: Collection, nodes: Collection) -> Collection:
    """Edges whose two ends are reached from the same least node (TR Figure 8); ``nodes``
    start with their own labels (a superset of the edges' ends changes no edge's labels)."""
    labels = propagate(edges, nodes, at=by_size, name="label_propagation").arrange(_first, name="labels")
    with_src = edges.join(labels, _first, None, columns(lambda s, d, n, label: (s, d, label)), name="label_src")
    with_both = with_src.join(labels, _second, None, columns(lambda s, d, a, n, b: (s, d, a, b)), name="label_dst")
    same = with_both.where(columns(lambda s, d, a, b: a == b), name="same_label")
    return same.select(itemgetter(0, 1), name="edge")


def _trim_twice(edges: Collection, nodes: Collection) -> Collection:
    inner = nodes.enter(edges.scope, name="nodes")
    forward = _trim_by_reachability(edges, inner).select(_reverse, name="transpose")
    return _trim_by_reachability(forward, inner).select(_reverse, name="transpose_back")


def strongly_connected_components(edges: Collection) -> Collection:
    """The edges ``(src, dst)`` whose ends lie in the same strongly connected component
    (TR Figure 8: a fixed point around two nested label propagations).

    The nodes' own labels are those of every end of an input edge, made once outside the
    loop, not of the ends of each iteration's trimmed edges: a node left with no edge keeps
    its own label and meets nothing, so the trims keep the same edges, while the loop holds
    no distinct of its own (on 2M edges, two arrangements of millions of rows per iteration
    and the largest transient copies of the first answer)."""
    nodes = _own_labels(edges)
    return edges.fixed_point(lambda x: _trim_twice(x, nodes), name="scc")


# Shortest paths (TR Figure 19) ----------------------------------------------------------------------


def shortest_paths(edges: Collection, sources: Collection) -> Collection:
    """``(node, distance)`` from the nearest of ``sources`` (node ids) along ``(src, dst, weight)``
    edges with non-negative weights: Bellman-Ford as a fixed point (TR Figure 19), fused."""
    start = sources.select(columns(lambda s: (s, np.zeros(len(s), dtype=np.int64))), name="at_source")
    return propagate(edges, start, weighted=True, name="sssp")
