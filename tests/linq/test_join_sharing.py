"""Joins inside a loop that take one collection by one key function share its arrangement.

kcore's peel joins ``alive`` twice by the same ``node`` key: each worker keeps one arrangement
of it, which both joins read (`_arrange.SharedSide`), as a differential dataflow user would
arrange it once by hand. Checked here against a plain-Python recomputation after every
epoch, with 1 and 2 workers, and with every epoch fed before the first is waited for (epochs
in flight: a reader's deltas of one epoch meet the shared rows as it has received them). The
sharing itself is asserted: the joins hold the same arrangement object and none of their own.
"""

from __future__ import annotations

import random
from collections import Counter
from operator import itemgetter
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_reference import Multiset
from timely_libs import linq
from timely_libs.linq._join import Join

first = itemgetter(0)
second = itemgetter(1)
node = linq.columns(lambda n: n)
edge = linq.columns(lambda s, d, n: (s, d))


def _peel(edges: linq.Collection) -> linq.Collection:
    """The bench's kcore: ``alive`` joined twice by one key function."""
    symmetric = edges.concat(edges.select(itemgetter(1, 0)))

    def peel(active: linq.Collection) -> linq.Collection:
        degree = active.count(first)
        alive = degree.where(linq.columns(lambda n, k: k >= 2)).select(first)
        from_alive = active.join(alive, first, node, edge, name="source_alive")
        return from_alive.join(alive, second, node, edge, name="both_alive")

    return symmetric.fixed_point(peel).count(first)


def _paths(edges: linq.Collection) -> linq.Collection:
    """Three joins: ``x`` by its second field on the left of two of them (one a self-join,
    whose right side takes ``x`` by its first field), all inside one loop."""

    def step(x: linq.Collection) -> linq.Collection:
        inner = edges.enter(x.scope)
        onward = x.join(inner, second, first, lambda p, e: (p[0], e[1]), name="onward")
        doubled = x.join(x, second, first, lambda p, q: (p[0], q[1]), name="doubled")
        return onward.concat(doubled, inner).distinct()

    return edges.fixed_point(step)


def _paths_reference(edges: Multiset) -> Multiset:
    pairs = {e for e, c in edges.items() if c > 0}
    reach = set(pairs)
    while True:
        more = (
            reach
            | {(a, d) for a, b in reach for c, d in pairs if b == c}
            | {(a, d) for a, b in reach for c, d in reach if b == c}
        )
        if more == reach:
            return {p: 1 for p in reach}
        reach = more


def _epochs(seed: int, nodes: int) -> list[list[tuple[Any, int]]]:
    """Per epoch, edge insertions and retractions of edges present (a multiset stays >= 0)."""
    rng = random.Random(seed)
    present: Counter[Any] = Counter()
    out = []
    for _ in range(5):
        changes = []
        for _ in range(rng.randrange(1, 9)):
            if present and rng.random() < 0.35:
                e = rng.choice(sorted(present))
                changes.append((e, -1))
                present[e] -= 1
                present = +present
            else:
                e = (rng.randrange(nodes), rng.randrange(nodes))
                changes.append((e, 1))
                present[e] += 1
        out.append(changes)
    return out


def _accumulated(epochs: list[list[tuple[Any, int]]], upto: int) -> Multiset:
    total: Counter[Any] = Counter()
    for changes in epochs[: upto + 1]:
        for e, d in changes:
            total[e] += d
    return dict(+total)


def _run(program: Any, reference: Any, seed: int, workers: int, in_flight: bool, shared: list[str]) -> None:
    epochs = _epochs(seed, 7)

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "edges")
        return inp, linq.CollectionOutput(program(inp.collection))

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, out)):
        if in_flight:
            for changes in epochs:
                inp.update(changes)
                inp.advance_to(inp.epoch + 1)
        accumulated: Counter[Any] = Counter()
        for epoch, changes in enumerate(epochs):
            if not in_flight:
                inp.update(changes)
                inp.advance_to(epoch + 1)
            comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
            for record, diff in out.changes.get(epoch, []):
                accumulated[record] += diff
            want = reference(_accumulated(epochs, epoch))
            assert dict(+accumulated) == want, f"seed {seed}, epoch {epoch}"
            assert not -accumulated, f"seed {seed}, epoch {epoch}: negative counts {dict(-accumulated)}"
        names = [s.name for s in comp.graph.stages]
        joins = [[v for v in comp.vertices(n) if isinstance(v, Join)] for n in names if n.split(".")[-1] in shared]
        assert len(joins) == 2, names
        for a, b in zip(*joins):  # per worker: one arrangement object, in both joins
            (ea,) = [i for i in (0, 1) if a.sides[i] is not None]
            (eb,) = [i for i in (0, 1) if b.sides[i] is not None]
            assert a.shared[ea] is b.shared[eb] is not None
            assert a.traces[ea] is None and b.traces[eb] is None
            assert not a.shared[ea].pending and not a.shared[ea].published, "a batch not settled"


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("in_flight", [False, True], ids=["epoch-by-epoch", "in-flight"])
@pytest.mark.parametrize("seed", range(4))
def test_two_joins_of_alive_share_it(seed: int, workers: int, in_flight: bool) -> None:
    _run(_peel, ref.two_core_degrees, seed, workers, in_flight, ["source_alive", "both_alive"])


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("in_flight", [False, True], ids=["epoch-by-epoch", "in-flight"])
@pytest.mark.parametrize("seed", range(3))
def test_a_collection_shared_as_left_input_and_beside_a_self_join(seed: int, workers: int, in_flight: bool) -> None:
    _run(_paths, _paths_reference, seed, workers, in_flight, ["onward", "doubled"])


def test_a_collection_joined_once_keeps_its_own_arrangement() -> None:
    """No sharing machinery for a join that alone reads its inputs."""

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "edges")
        result = inp.collection.fixed_point(
            lambda x: x.join(x, second, first, lambda p, q: (p[0], q[1]), name="square").concat(x).distinct()
        )
        return inp, linq.CollectionOutput(result)

    with timely.execute(build, workers=1, timeout=TIMEOUT) as (comp, (inp, out)):
        inp.update([((0, 1), 1), ((1, 2), 1)])
        inp.advance_to(1)
        comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
        assert out.contents() == {(0, 1): 1, (1, 2): 1, (0, 2): 1}
        (name,) = [s.name for s in comp.graph.stages if s.name.split(".")[-1] == "square"]
        (join,) = comp.vertices(name)
        assert isinstance(join, Join)
        assert join.sides == (None, None) and join.traces[0] is not None and join.traces[1] is not None
