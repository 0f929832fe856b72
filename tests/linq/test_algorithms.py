"""`libs.linq`'s graph algorithms against NetworkX on seeded random graphs.

Each test loads a random graph in the first epoch, then applies many epochs of random edge
insertions and deletions (duplicates, self-loops and an edge added and removed in the same
epoch included). After every epoch the accumulated output must equal NetworkX's answer for
the graph as it then is, and the changes reported for the epoch must be exactly the
difference from the previous answer.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest

from libs import linq
from tests import linq_reference as ref
from tests.linq_harness import check

EPOCHS = 25
"""Epochs of random changes after the first, which loads the graph."""

WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])

Changes = list[tuple[Any, int]]


def random_epochs(
    rng: random.Random,
    new: Callable[[], Any],
    initial: int,
    epochs: int = EPOCHS,
    per_epoch: int = 4,
    delete: float = 0.5,
) -> list[Changes]:
    """A first epoch of ``initial`` records from ``new()``, then ``epochs`` epochs of up to
    ``per_epoch`` changes: deletions of present records (with probability ``delete``),
    insertions of new ones or of copies of present ones, and now and then a record inserted
    and deleted again within the epoch."""
    first = [new() for _ in range(initial)]
    present = Counter(first)
    out: list[Changes] = [[(r, 1) for r in first]]
    for _ in range(epochs):
        changes: Changes = []
        for _ in range(rng.randint(1, per_epoch)):
            roll = rng.random()
            if present and roll < delete:
                record = rng.choice(sorted(present.elements()))
                present[record] -= 1
                present = +present
                changes.append((record, -1))
            elif present and roll < delete + 0.1:
                record = rng.choice(sorted(present))
                present[record] += 1
                changes.append((record, 1))
            elif roll < delete + 0.15:
                record = new()
                changes.extend([(record, 1), (record, -1)])
            else:
                record = new()
                present[record] += 1
                changes.append((record, 1))
        out.append(changes)
    return out


# Connected components ----------------------------------------------------------------------------------


def nx_components(edges: ref.Multiset) -> ref.Multiset:
    g = nx.Graph()
    g.add_edges_from(e for e, n in edges.items() if n > 0)
    out: ref.Multiset = {}
    for comp in nx.connected_components(g):
        least = min(comp)
        out.update(((node, least), 1) for node in comp)
    return out


def _edge_maker(rng: random.Random, nodes: int) -> Callable[[], tuple[int, int]]:
    return lambda: (rng.randrange(nodes), rng.randrange(nodes))


CC_GRAPHS = [  # seed, nodes, initial edges, deletion probability
    (1, 40, 30, 0.5),  # many small components that merge and split
    (2, 30, 45, 0.6),  # a giant component that loses edges
]


@WORKERS
@pytest.mark.parametrize(("seed", "nodes", "initial", "delete"), CC_GRAPHS)
def test_connected_components(workers: int, seed: int, nodes: int, initial: int, delete: float) -> None:
    rng = random.Random(seed)
    epochs = random_epochs(rng, _edge_maker(rng, nodes), initial, delete=delete)
    check(linq.connected_components, nx_components, [(e,) for e in epochs], workers)


@WORKERS
@pytest.mark.parametrize(("seed", "nodes", "initial", "delete"), CC_GRAPHS)
def test_connected_components_figure3(workers: int, seed: int, nodes: int, initial: int, delete: float) -> None:
    """TR Figure 3 as written (every label at once, general join and min), the reference form
    of the fused, size-ordered `connected_components`."""
    rng = random.Random(seed)
    epochs = random_epochs(rng, _edge_maker(rng, nodes), initial, delete=delete)
    check(linq.connected_components_figure3, nx_components, [(e,) for e in epochs], workers)


PRIORITIES: dict[str, Callable[[int], int] | None] = {
    "default": None,
    "label_mod_4": lambda label: label % 4,
    "largest_first": lambda label: (40 - label) // 8,  # the worst order, in few rounds
}


@WORKERS
@pytest.mark.parametrize("priority", sorted(PRIORITIES))
def test_prioritized_connected_components(workers: int, priority: str) -> None:
    rng = random.Random(3)
    epochs = random_epochs(rng, _edge_maker(rng, 40), 35)
    fn = PRIORITIES[priority]

    def query(edges: linq.Collection) -> linq.Collection:
        if fn is None:
            return linq.prioritized_connected_components(edges)
        return linq.prioritized_connected_components(edges, fn)

    check(query, nx_components, [(e,) for e in epochs], workers)


def test_connected_components_of_string_nodes() -> None:
    """Node ids are any orderable, hashable values."""
    rng = random.Random(4)
    names = [f"n{i:02}" for i in range(25)]
    epochs = random_epochs(rng, lambda: (rng.choice(names), rng.choice(names)), 20, epochs=10)
    check(linq.connected_components, nx_components, [(e,) for e in epochs], 3)


# Strongly connected components ---------------------------------------------------------------------------


def nx_scc_edges(edges: ref.Multiset) -> ref.Multiset:
    g = nx.DiGraph()
    g.add_edges_from(e for e, n in edges.items() if n > 0)
    component = {node: i for i, comp in enumerate(nx.strongly_connected_components(g)) for node in comp}
    return {e: n for e, n in edges.items() if n > 0 and component[e[0]] == component[e[1]]}


SCC_GRAPHS = [  # seed, nodes, initial edges, deletion probability
    (5, 20, 30, 0.5),
    (6, 25, 25, 0.4),  # sparse: cycles appear as edges arrive
]


@WORKERS
@pytest.mark.parametrize(("seed", "nodes", "initial", "delete"), SCC_GRAPHS)
def test_strongly_connected_components(workers: int, seed: int, nodes: int, initial: int, delete: float) -> None:
    rng = random.Random(seed)
    epochs = random_epochs(rng, _edge_maker(rng, nodes), initial, delete=delete)
    check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], workers)


# Shortest paths --------------------------------------------------------------------------------------------


def nx_shortest_paths(wedges: ref.Multiset, sources: ref.Multiset) -> ref.Multiset:
    g = nx.DiGraph()
    for (u, v, w), n in wedges.items():
        if n > 0 and (not g.has_edge(u, v) or g[u][v]["weight"] > w):
            g.add_edge(u, v, weight=w)
    starts = {s for s, n in sources.items() if n > 0}
    if not starts:
        return {}
    g.add_nodes_from(starts)
    return {(node, d): 1 for node, d in nx.multi_source_dijkstra_path_length(g, starts).items()}


SP_GRAPHS = [  # seed, nodes, initial edges, largest weight
    (7, 30, 50, 9),
    (8, 25, 40, 1),  # weights 0 and 1: zero-weight cycles, many ties
]


@WORKERS
@pytest.mark.parametrize(("seed", "nodes", "initial", "weight"), SP_GRAPHS)
def test_shortest_paths(workers: int, seed: int, nodes: int, initial: int, weight: int) -> None:
    rng = random.Random(seed)
    wedges = random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes), rng.randint(0, weight)), initial, per_epoch=5
    )
    sources = random_epochs(rng, lambda: rng.randrange(nodes), 2, per_epoch=1, delete=0.4)
    check(linq.shortest_paths, nx_shortest_paths, list(zip(wedges, sources)), workers)
