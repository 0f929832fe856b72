"""Join, the reducers, distinct and a loop through the trace read interface, in each tier.

The tier a read takes depends on the number of keys alone (`_kernels.POLICY`); here each tier
(and the whole-spine compiled reads, "spine") is forced for every read of more than one key, and each operator's output after every epoch
is compared with the from-scratch reference (`tests.support.linq_reference`) on random
additions and retractions, with 1 and 2 workers. The loops (reachability by `fixed_point`, also
cut at 3 iterations, where each iteration's answer shows) read times of two coordinates.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_harness import check
from tests.support.linq_in_flight import assert_epoch, drive
from timely_libs import linq
from timely_libs.linq._columns import _kernels

TIERS = ["python", "numpy", "compiled", "spine"]
_first, _second = itemgetter(0), itemgetter(1)


def _forced(patch: pytest.MonkeyPatch, tier: str) -> None:
    """Force ``tier`` ("spine": every read of a whole spine in one compiled call)."""
    patch.setattr(_kernels, "FEW_KEYS", 1 << 40 if tier == "python" else 0)
    for name in ("COMPILED_KEYS", "LOADED_KEYS"):
        patch.setattr(_kernels, name, 1 if tier == "compiled" else 1 << 40)
    patch.setattr(_kernels, "SPINE_BELOW", 1 << 40 if tier == "spine" else 0)
    if tier == "spine":
        patch.setattr(_kernels, "SPINE_KEYS", 1)
        patch.setattr(_kernels.POLICY, "eager", True)


def _pairs(seed: int, epochs: int = 8) -> list[list[ref.Change]]:
    rng = random.Random(seed)
    return ref.random_epochs(rng, lambda: (rng.randrange(30), rng.randrange(30)), 80, epochs, per_epoch=25)


def _reach(edges: linq.Collection, hops: int | None = None) -> linq.Collection:
    roots = edges.where(linq.columns(lambda s, d: s < 3)).select(_first).distinct()

    def step(x: linq.Collection) -> linq.Collection:
        inner = edges.enter(x.scope)
        proposals = x.join(inner, linq.columns(lambda n: n), _first, linq.columns(lambda n, s, d: d))
        return roots.enter(x.scope).concat(proposals).distinct()

    return roots.fixed_point(step, max_iterations=hops)


def _reach_reference(edges: ref.Multiset, hops: int | None = None) -> ref.Multiset:
    roots = ref.distinct(ref.select(ref.where(edges, lambda e: e[0] < 3), _first))

    def step(x: ref.Multiset) -> ref.Multiset:
        return ref.distinct(ref.concat(roots, ref.join(x, edges, lambda n: n, _first, lambda n, e: e[1])))

    return ref.fixed_point(roots, step) if hops is None else ref.iterate(roots, step, hops)


def _kcore(edges: linq.Collection) -> linq.Collection:
    """The 2-core's degrees (DDIR's kcore as the benchmark writes it): a `count` inside a loop,
    whose rows change at times of two coordinates, and joins whose deltas cancel."""
    both = edges.concat(edges.select(itemgetter(1, 0)))

    def peel(active: linq.Collection) -> linq.Collection:
        alive = active.count(_first).where(lambda nk: nk[1] >= 2).select(_first)
        from_alive = active.join(alive, _first, lambda n: n, lambda e, n: e)
        return from_alive.join(alive, _second, lambda n: n, lambda e, n: e)

    return both.fixed_point(peel).count(_first)


def _kcore_reference(edges: ref.Multiset) -> ref.Multiset:
    both = ref.concat(edges, ref.select(edges, itemgetter(1, 0)))

    def peel(active: ref.Multiset) -> ref.Multiset:
        alive = ref.select(ref.where(ref.count(active, _first), lambda nk: nk[1] >= 2), _first)
        from_alive = ref.join(active, alive, _first, lambda n: n, lambda e, n: e)
        return ref.join(from_alive, alive, _second, lambda n: n, lambda e, n: e)

    return ref.count(ref.fixed_point(both, peel), _first)


def _join(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    return a.join(b, _second, _first, linq.columns(lambda s, m, m2, d: (s, d)))


OPERATORS: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], int]] = {
    "join": (_join, lambda a, b: ref.join(a, b, _second, _first, lambda x, y: (x[0], y[1])), 2),
    "distinct": (lambda c: c.distinct(), ref.distinct, 1),
    "count": (lambda c: c.count(_first), lambda c: ref.count(c, _first), 1),
    "sum": (lambda c: c.sum(_first, _second), lambda c: ref.sum_(c, _first, _second), 1),
    "min": (lambda c: c.min(_first, _second), lambda c: ref.min_(c, _first, _second), 1),
    "max": (lambda c: c.max(_first, _second), lambda c: ref.max_(c, _first, _second), 1),
    "group_by": (
        lambda c: c.group_by(_first, lambda k, rs: [(k, len(rs))]),
        lambda c: ref.group_by(c, _first, lambda k, rs: [(k, len(rs))]),
        1,
    ),
    "reach": (_reach, _reach_reference, 1),
    "kcore": (_kcore, _kcore_reference, 1),
    # at most 3 hops: every iteration's answer counts, so a read that mixed iterations shows
    "reach_3_hops": (lambda c: _reach(c, 3), lambda c: _reach_reference(c, 3), 1),
}


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_matches_recomputation_in_every_tier(name: str, tier: str, workers: int) -> None:
    query, reference, inputs = OPERATORS[name]
    streams = [_pairs(seed) for seed in range(inputs)]
    epochs: list[tuple[Any, ...]] = [tuple(s[i] for s in streams) for i in range(len(streams[0]))]
    with pytest.MonkeyPatch.context() as patch:
        _forced(patch, tier)
        check(query, reference, epochs, workers)


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", ["join", "count", "distinct", "kcore", "reach"])
def test_operator_with_every_epoch_in_flight_matches_recomputation(name: str, tier: str, workers: int) -> None:
    """The same with every epoch fed before any is waited for: reads then meet rows of later
    epochs (and, in loops, of later iterations) not yet compacted, and each epoch's reported
    change must still be exactly the recomputation's."""
    query, reference, inputs = OPERATORS[name]
    streams = [_pairs(seed) for seed in range(inputs)]
    epochs = [tuple(s[i] for s in streams) for i in range(len(streams[0]))]
    states: list[list[ref.Multiset]] = []
    for changes in epochs:
        before = states[-1] if states else [{} for _ in changes]
        states.append([ref.apply(st, c) for st, c in zip(before, changes)])

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        ins = [linq.new_input(scope, f"in{i}") for i in range(inputs)]
        return ins, linq.CollectionOutput(query(*(i.collection for i in ins)))

    with pytest.MonkeyPatch.context() as patch:
        _forced(patch, tier)
        with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (ins, out)):

            def passed(w: int) -> None:
                assert_epoch(out, w, reference(*states[w]), reference(*states[w - 1]) if w else {})

            drive(comp, ins, epochs, out.probe, passed, lag=len(epochs))
