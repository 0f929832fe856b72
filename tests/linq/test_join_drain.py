"""A join meets everything staged at a time in one notification (`_join.Join.on_notify`) and
holds output at later times until their own: checked against brute force where each time
brings it several messages from both inputs, in the order they happen to come, inside a loop
where its output spans iterations, with epochs of additions and retractions, on 1 and 2
workers; and its staged input and held output survive a checkpoint restored on another
number of workers."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from operator import itemgetter
from typing import Any, cast

import pytest

import timely
from tests.support import linq_reference as ref
from tests.support.linq_harness import check
from timely_libs import linq

first = itemgetter(0)
second = itemgetter(1)
WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])


def random_edge_epochs(seed: int, nodes: int, initial: int, epochs: int) -> list[tuple[list[Any]]]:
    """An initial set of edges, then epochs that each retract a few present edges and add a
    few new ones (a repeated edge is a multiplicity above one)."""
    rng = random.Random(seed)
    present: Counter[tuple[int, int]] = Counter()
    out: list[tuple[list[Any]]] = []
    for epoch in range(epochs):
        changes: list[Any] = []
        if epoch:
            for edge in rng.sample(sorted(present.elements()), min(3, sum(present.values()))):
                changes.append((edge, -1))
                present[edge] -= 1
        for _ in range(initial if not epoch else 3):
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            changes.append((edge, 1))
            present[edge] += 1
        out.append((changes,))
    return out


def residue(i: int) -> Callable[[Any], bool]:
    return lambda e: (e[0] + e[1]) % 3 == i


def split3(c: linq.Collection) -> linq.Collection:
    """``c`` again, as three messages per time: a join after it hears each part on its own."""
    parts = [c.where(residue(i), name=f"part{i}") for i in range(3)]
    return parts[0].concat(parts[1], name="two").concat(parts[2], name="three")


@WORKERS
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_join_of_inputs_in_several_messages(workers: int, seed: int) -> None:
    def query(edges: linq.Collection) -> linq.Collection:
        return split3(edges).join(split3(edges), second, first, lambda a, b: (a[0], a[1], b[1]))

    def reference(edges: ref.Multiset) -> ref.Multiset:
        return ref.join(edges, edges, second, first, lambda a, b: (a[0], a[1], b[1]))

    check(query, reference, random_edge_epochs(seed, 8, 14, 6), workers)


def peeled(edges: ref.Multiset) -> ref.Multiset:
    """The 2-core by brute force: the symmetric edges, peeled until both ends of every edge
    have degree at least two; then each node's degree."""
    active = ref.concat(edges, ref.select(edges, lambda e: (e[1], e[0])))
    while True:
        degree = Counter[Any]()
        for (a, _), n in active.items():
            degree[a] += n
        kept = {e: n for e, n in active.items() if degree[e[0]] >= 2 and degree[e[1]] >= 2}
        if kept == active:
            break
        active = kept
    out = Counter[Any]()
    for (a, _), n in active.items():
        out[a] += n
    return {(node, n): 1 for node, n in out.items() if n}


def core(edges: linq.Collection) -> linq.Collection:
    """The benchmark's 2-core peel: `count`, `where` and two joins inside `fixed_point`, the
    edges arriving in several messages per time."""
    symmetric = split3(edges).concat(edges.select(itemgetter(1, 0), name="reversed"), name="symmetric")

    def peel(active: linq.Collection) -> linq.Collection:
        alive = active.count(first, name="degree").where(lambda r: r[1] >= 2).select(first, name="alive")
        from_alive = active.join(alive, first, lambda n: n, lambda e, n: e, name="source_alive")
        return from_alive.join(alive, second, lambda n: n, lambda e, n: e, name="both_alive")

    return symmetric.fixed_point(peel, name="peel").count(first, name="core_degree")


@WORKERS
@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_peel_in_a_loop(workers: int, seed: int) -> None:
    check(core, peeled, random_edge_epochs(seed, 10, 22, 8), workers)


def chain_epochs(seed: int) -> list[tuple[list[Any]]]:
    """A cycle with long chains hanging off it (a chain peels one node per iteration, so the
    joins' history spans many iterations and a change meets it at several later ones), then
    epochs that cut and mend chain links."""
    rng = random.Random(seed)
    cycle = [((i, (i + 1) % 5), 1) for i in range(5)]
    chains = [((i, i + 1), 1) for i in range(10, 22)] + [((4, 10), 1)] + [((i, i + 1), 1) for i in range(30, 38)]
    out: list[tuple[list[Any]]] = [(cycle + chains + [((2, 30), 1)],)]
    links = [e for e, _ in chains]
    cut: list[tuple[int, int]] = []
    for _ in range(6):
        changes: list[Any] = []
        if cut and rng.random() < 0.5:
            edge = cut.pop(rng.randrange(len(cut)))
            changes.append((edge, 1))
        else:
            edge = links.pop(rng.randrange(len(links)))
            cut.append(edge)
            changes.append((edge, -1))
        changes.append(((rng.randrange(10, 38), rng.randrange(0, 5)), 1))  # a chain closes into the core
        out.append((changes,))
    return out


@WORKERS
@pytest.mark.parametrize("seed", [7, 8])
def test_a_peel_of_long_chains(workers: int, seed: int) -> None:
    check(core, peeled, chain_epochs(seed), workers)


def test_staged_input_and_held_output_survive_a_rescale() -> None:
    """What a join holds for a time not yet complete (input staged per input, output held for
    a later time) is saved and comes back: staged blocks to the instance that owns their key,
    held output once (any instance may send it)."""
    from tests.linq.test_checkpoint import CODEC, route_pieces
    from timely_libs.linq._columns import Block
    from timely_libs.linq._join import Join
    from timely_libs.linq._lattice import Lattice

    def make() -> Join:
        return Join("j", Lattice(1), first, first, lambda a, b: (a, b))

    old = [make(), make()]
    old[0].staged = {(5, 0): [(0, Block.of_pairs([((2, 7), 1), ((4, 1), -1)])), (1, Block.of_pairs([((4, 3), 2)]))]}
    old[1].staged = {(5, 1): [(1, Block.of_pairs([(("a", 1), 1)]))]}
    old[1].held = {(5, 2): [Block.of_pairs([((9, 9), -1)])]}
    states = [CODEC.decode(CODEC.encode(list(cast(timely.KeyedState, o.checkpoint()).pieces))) for o in old]
    new = [make() for _ in range(3)]
    for vertex, pieces in zip(new, route_pieces(states, 3)):
        vertex.restore(timely.KeyedState(pieces))
    staged = sorted(
        (t, edge, pair) for v in new for t, blocks in v.staged.items() for edge, b in blocks for pair in b.pairs()
    )
    assert staged == sorted(
        [((5, 0), 0, ((2, 7), 1)), ((5, 0), 0, ((4, 1), -1)), ((5, 0), 1, ((4, 3), 2)), ((5, 1), 1, (("a", 1), 1))]
    )
    for i, v in enumerate(new):
        for blocks in v.staged.values():
            for _, b in blocks:
                assert all(linq.stable_hash(r[0]) % 3 == i for r in b.records()), b
    held = [(t, sorted(b.pairs())) for v in new for t, blocks in v.held.items() for b in blocks]
    assert held == [((5, 2), [((9, 9), -1)])]
    assert sum(len(v.held) for v in new) == 1, "held output comes back once, on one instance"
