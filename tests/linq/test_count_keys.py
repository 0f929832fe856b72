"""A count arranges its input by key alone (`Reduce.keys_only`): its answers against a brute-force
count after every epoch (epochs waited for and in flight, 1 and 2 workers, at the top and inside
a loop), its input arrangement holding one row per key, no record, and its output arrangement
holding the count alone beside the key (the key is not stored twice)."""

from __future__ import annotations

import random
from collections import Counter
from operator import itemgetter
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import linq
from timely_libs.linq._reduce import Reduce

Edge = tuple[int, int]


def _epochs(seed: int, epochs: int = 8) -> list[list[tuple[Edge, int]]]:
    """Edges ``(node, other)`` inserted and deleted at random (repeats included: a multiset)."""
    rng = random.Random(seed)
    present: Counter[Edge] = Counter()
    out = []
    for _ in range(epochs):
        changes: list[tuple[Edge, int]] = []
        for _ in range(rng.randint(1, 40)):
            if present and rng.random() < 0.4:
                edge = rng.choice(sorted(present))
                changes.append((edge, -1))
                present[edge] -= 1
                if not present[edge]:
                    del present[edge]
            else:
                edge = (rng.randrange(12), rng.randrange(30))
                changes.append((edge, 1))
                present[edge] += 1
        out.append(changes)
    return out


def _counted(edges: Counter[Edge]) -> dict[tuple[int, int], int]:
    """``(node, number of its edges)`` once each: a brute-force count by the first field."""
    per: Counter[int] = Counter()
    for (node, _), n in edges.items():
        per[node] += n
    return {(node, n): 1 for node, n in per.items() if n}


def _in_a_loop(edges: Any) -> Any:
    """The count inside a loop whose body does not depend on its variable (one iteration)."""
    return edges.fixed_point(lambda x: edges.enter(x.scope).count(itemgetter(0), name="degree"), name="loop")


def count_after_every_epoch(
    epochs: list[list[tuple[Edge, int]]], workers: int, in_flight: bool, where: str
) -> tuple[Any, list[dict[tuple[int, int], int]]]:
    """Counts edges by their first field (``where``: at the top or inside a loop), asserting the
    brute-force count after every epoch (or, with every epoch in flight, after the last); the
    computation, left open for a look inside, and the wanted answers."""

    def build(scope: timely.Scope) -> Any:
        edges = linq.new_input(scope, "edges")
        c = edges.collection
        counted = c.count(itemgetter(0), name="degree") if where == "top" else _in_a_loop(c)
        return edges, linq.CollectionOutput(counted)

    present: Counter[Edge] = Counter()
    wanted = []
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (edges, out)):
        for epoch, changes in enumerate(epochs):
            for edge, diff in changes:
                present[edge] += diff
            wanted.append(_counted(+present))
            edges.update(changes)
            edges.advance_to(epoch + 1)
            if not in_flight or epoch == len(epochs) - 1:
                comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
                if not in_flight:
                    assert out.contents() == wanted[epoch], f"epoch {epoch}"
        assert out.contents() == wanted[-1]
        return comp, wanted


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("in_flight", [False, True], ids=["waited", "in_flight"])
@pytest.mark.parametrize("where", ["top", "loop"])
def test_a_count_by_key_equals_a_brute_force_count_after_every_epoch(workers: int, in_flight: bool, where: str) -> None:
    comp, wanted = count_after_every_epoch(_epochs(7 + workers + 2 * in_flight), workers, in_flight, where)
    stage = "degree" if where == "top" else "loop.degree"
    reduces = [v for v in comp.vertices(stage) if isinstance(v, Reduce)]
    assert reduces
    kept = 0
    answers: Counter[tuple[int, int]] = Counter()
    for reduce in reduces:
        assert reduce.keys_only
        spine = reduce.input_trace
        if spine is None:
            continue
        assert spine.nvals == 0, "a count's input arrangement keeps no record"
        spine.compact()
        rows = spine.rows()
        kept += len(rows.keys)
        out = reduce.output_trace
        assert out is not None and out.nvals == 1, "a count's output arrangement keeps the count alone"
        o = out.rows()
        for key, n, d in zip(o.keys.tolist(), o.vals[0].tolist(), o.diffs.tolist()):
            answers[(key, n)] += d  # int fields are their own codes
    # every epoch is complete and compacted: one row per key with edges, whatever its edges
    assert kept == len(wanted[-1]), (kept, wanted[-1])
    # the output arrangement, summed over its times, is the answer (key and count)
    assert {r: d for r, d in answers.items() if d} == wanted[-1]


def test_a_negative_count_names_the_key() -> None:
    def build(scope: timely.Scope) -> Any:
        edges = linq.new_input(scope, "edges")
        return edges, linq.CollectionOutput(edges.collection.count(itemgetter(0), name="degree"))

    with pytest.raises(Exception) as caught:
        with timely.execute(build, timeout=TIMEOUT) as (comp, (edges, out)):
            edges.update([((3, 1), 1), ((3, 2), -2)])
            edges.advance_to(1)
            comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
    assert "degree: key 3 has multiplicity -1" in str(caught.value), caught.value
