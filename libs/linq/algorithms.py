"""The TR's graph algorithms as library functions (Figures 3, 8, 10 and 19).

Edges are ``(src, dst)`` records (``(src, dst, weight)`` for shortest paths); node ids
are any hashable, orderable values (non-negative ints for the default priority of
`prioritized_connected_components`). Every function returns a collection, so each one
updates incrementally as edges are added and removed.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from .collection import Collection

__all__ = [
    "connected_components",
    "prioritized_connected_components",
    "propagate_min_labels",
    "shortest_paths",
    "strongly_connected_components",
]

_first = itemgetter(0)
_second = itemgetter(1)


def _reverse(edge: tuple[Any, Any]) -> tuple[Any, Any]:
    return (edge[1], edge[0])


def _own_label(edge: tuple[Any, Any]) -> tuple[Any, Any]:
    return (edge[0], edge[0])


def _propose(node: tuple[Any, Any], edge: tuple[Any, Any]) -> tuple[Any, Any]:
    return (edge[1], node[1])


def _local_min(labels: Collection, edges: Collection) -> Collection:
    """TR Figure 3's LocalMin: each node takes the least label among its own and its in-neighbours'."""
    proposals = labels.join(edges, _first, _first, _propose, name="propose")
    return proposals.concat(labels, name="with_own").min(_first, _second, name="least_label")


def _propagate(nodes: Collection, edges: Collection) -> Collection:
    return nodes.fixed_point(lambda x: _local_min(x, edges.enter(x.scope)), name="label_propagation")


def _both_ends(edge: tuple[Any, Any]) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    return ((edge[0], edge[0]), (edge[1], edge[1]))


def propagate_min_labels(edges: Collection) -> Collection:
    """``(node, label)``: the least node id among each node and the nodes that reach it along
    directed edges (TR Figure 3's ConnectedComponents, which follows edges in their direction).

    Every node starts with its own label, destinations too: the TR starts only the sources,
    which lets SCC keep an edge ``a -> b`` between two components when ``b`` has no edge out.
    """
    return _propagate(edges.select_many(_both_ends, name="own_labels").consolidate(name="nodes"), edges)


def _symmetric(edges: Collection) -> Collection:
    return edges.concat(edges.select(_reverse, name="reversed"), name="both_directions")


def _nodes(edges: Collection) -> Collection:
    """``(node, node)`` once per source, with its out-degree as count: consolidated, so that a
    node's label travels its edges once, not once per edge."""
    return edges.select(_own_label, name="own_labels").consolidate(name="nodes")


def connected_components(edges: Collection) -> Collection:
    """``(node, label)`` for every node of the undirected graph ``edges``; the label is the least
    node id of the node's component."""
    both = _symmetric(edges)
    return _propagate(_nodes(both), both)


def _default_priority(label: int) -> int:
    """About log2(1 + label): coarse enough to keep parallelism (TR §2.6 uses log(1 + label))."""
    return (label + 1).bit_length()


def prioritized_connected_components(
    edges: Collection, priority: Callable[[Any], int] = _default_priority
) -> Collection:
    """`connected_components` with small labels flooded first (TR Figure 10): labels enter in
    order of ``priority(label)``, and each priority starts from the fixed point of the previous."""
    both = _symmetric(edges)
    nodes = _nodes(both)

    def body(prioritized: Collection) -> Collection:
        inner = both.enter(prioritized.scope)
        return prioritized.fixed_point(lambda x: _local_min(x, inner.enter(x.scope)), name="label_propagation")

    return nodes.prioritize(lambda node: priority(node[1]), body, name="by_label")


def _trim_by_reachability(edges: Collection) -> Collection:
    """Edges whose two ends are reached from the same least node (TR Figure 8)."""
    labels = propagate_min_labels(edges)
    with_src = edges.join(labels, _first, _first, lambda e, n: (e, n[1]), name="label_src")
    with_both = with_src.join(labels, lambda el: el[0][1], _first, lambda el, n: (el[0], el[1], n[1]), name="label_dst")
    return with_both.where(lambda x: x[1] == x[2], name="same_label").select(_first, name="edge")


def _trim_twice(edges: Collection) -> Collection:
    forward = _trim_by_reachability(edges).select(_reverse, name="transpose")
    return _trim_by_reachability(forward).select(_reverse, name="transpose_back")


def strongly_connected_components(edges: Collection) -> Collection:
    """The edges ``(src, dst)`` whose ends lie in the same strongly connected component
    (TR Figure 8: a fixed point around two nested label propagations)."""
    return edges.fixed_point(_trim_twice, name="scc")


def shortest_paths(edges: Collection, sources: Collection) -> Collection:
    """``(node, distance)`` from the nearest of ``sources`` (node ids) along ``(src, dst, weight)``
    edges with non-negative weights: Bellman-Ford as a fixed point (TR Figure 19)."""
    start = sources.select(lambda s: (s, 0), name="at_source")

    def step(x: Collection) -> Collection:
        inner = edges.enter(x.scope)
        reached = x.join(inner, _first, _first, lambda n, e: (e[1], n[1] + e[2]), name="relax")
        return reached.concat(x, name="with_current").min(_first, _second, name="nearest")

    return start.fixed_point(step, name="sssp")
