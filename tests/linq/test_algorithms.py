"""`timely_libs.linq`'s graph algorithms against NetworkX on seeded random graphs.

Each test loads a random graph in the first epoch, then applies many epochs of random edge
insertions and deletions (duplicates, self-loops and an edge added and removed in the same
epoch included). After every epoch the accumulated output must equal NetworkX's answer for
the graph as it then is, and the changes reported for the epoch must be exactly the
difference from the previous answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from tests.support.linq_harness import check
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths, random_epochs
from timely_libs import linq

EPOCHS = 25
"""Epochs of random changes after the first, which loads the graph."""

WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])

# Connected components ----------------------------------------------------------------------------------


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
