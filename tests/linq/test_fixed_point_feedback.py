"""`fixed_point` consolidates its feedback (a ``cancel`` stage) exactly when the body needs it.

A body whose result is net (it ends in a reduce, perhaps followed by linear operators) sends
differences that follow from the loop variable's accumulation alone, so the feedback may go
round unconsolidated; a linear body would send ``+r`` and ``-r`` round for ever without it.
Each body runs over epochs of insertions and retractions on 1 and 2 workers, and reachability
on 2 real processes, against a recomputation from scratch after every epoch (a run that never
stopped iterating would fail on its timeout); the graph the computation builds has the
``cancel`` stage exactly for the bodies that need it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_fixed_point_program import EPOCHS, ROOTS, builder, edges, reach, reachable
from tests.support.linq_harness import check, together
from tests.support.linq_in_flight import accumulated_reports, replayed
from tests.support.modes import Mode
from timely_libs import linq

CAP = 6
"""Where the climbing bodies stop."""

Body = Callable[[linq.Collection], linq.Collection]
RefBody = Callable[[ref.Multiset], ref.Multiset]


def _climbed(r: tuple[int, int]) -> tuple[int, int]:
    return (r[0], min(r[1] + 1, CAP))


def climb(x: linq.Collection) -> linq.Collection:
    """Linear, ends in a select: each value climbs to `CAP` (a larger one drops to it), and
    every record keeps its count, so the last step sends ``+(k, CAP)`` and ``-(k, CAP)``."""
    return x.select(_climbed, name="climb")


def climb_ref(c: ref.Multiset) -> ref.Multiset:
    return ref.select(c, _climbed)


def climb_split(x: linq.Collection) -> linq.Collection:
    """Linear, ends in a concat: the values below `CAP` climb by one, the others stay."""
    low = x.where(lambda r: r[1] < CAP, name="low").select(lambda r: (r[0], r[1] + 1), name="up")
    return x.where(lambda r: r[1] >= CAP, name="high").concat(low, name="both")


def climb_split_ref(c: ref.Multiset) -> ref.Multiset:
    low = ref.select(ref.where(c, lambda r: r[1] < CAP), lambda r: (r[0], r[1] + 1))
    return ref.concat(ref.where(c, lambda r: r[1] >= CAP), low)


def halve_capped(x: linq.Collection) -> linq.Collection:
    """Net, though it ends in a select that sends two records to one: the set closed under
    halving, each value then capped at `CAP` (a value above it comes back as several copies of
    `CAP`, which the next iteration's distinct makes one)."""
    both = x.concat(x.select(lambda n: (n[0], n[1] // 2), name="half"), name="with_halves")
    return both.distinct(name="closed").select(lambda n: (n[0], min(n[1], CAP)), name="capped")


def halve_capped_ref(c: ref.Multiset) -> ref.Multiset:
    both = ref.concat(c, ref.select(c, lambda n: (n[0], n[1] // 2)))
    return ref.select(ref.distinct(both), lambda n: (n[0], min(n[1], CAP)))


BODIES: dict[str, tuple[Body, RefBody, bool]] = {
    # name: (body, its reference, whether the feedback needs its consolidation)
    "climb_select": (climb, climb_ref, True),
    "climb_concat": (climb_split, climb_split_ref, True),
    "halve_distinct_select": (halve_capped, halve_capped_ref, False),
}


def pairs(seed: int) -> list[list[ref.Change]]:
    rng = random.Random(seed)
    return ref.random_epochs(rng, lambda: (rng.randrange(4), rng.randrange(2 * CAP)), initial=10, epochs=7)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("body", sorted(BODIES))
def test_a_body_matches_its_recomputation(body: str, workers: int) -> None:
    fn, reference, _ = BODIES[body]
    check(
        lambda c: c.fixed_point(fn),
        lambda c: ref.fixed_point(c, reference),
        together(pairs(11)),
        workers,
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_reach_matches_breadth_first_search(workers: int) -> None:
    check(reach, reachable, together(ROOTS, edges(4)), workers)


def stage_names(query: Callable[..., linq.Collection], inputs: int) -> list[str]:
    """The names of the stages ``query`` builds, without their loop's prefix (``reach.cancel``
    is ``cancel``)."""

    def build(scope: timely.Scope) -> None:
        query(*(linq.new_input(scope, f"in{i}").collection for i in range(inputs)))

    with timely.execute(build, timeout=TIMEOUT) as (comp, _):
        return [s.name.rsplit(".", 1)[-1] for s in comp.graph.stages]


@pytest.mark.parametrize("body", sorted(BODIES))
def test_the_feedback_is_consolidated_exactly_when_the_body_is_linear(body: str) -> None:
    fn, _, needs = BODIES[body]
    names = stage_names(lambda c: c.fixed_point(fn), 1)
    assert ("cancel" in names) is needs, names
    assert names.count("step") == 1, "the loop's feedback step is built once"


def test_reach_sends_its_feedback_unconsolidated() -> None:
    names = stage_names(reach, 2)
    assert "reached" in names and "cancel" not in names, names


def test_a_max_iterations_loop_of_a_linear_body_keeps_the_consolidation() -> None:
    names = stage_names(lambda c: c.fixed_point(climb, max_iterations=3), 1)
    assert "cancel" in names, names


@pytest.mark.parametrize("lag", [0, None], ids=["lockstep", "all_at_once"])
def test_reach_on_two_processes_matches_breadth_first_search(lag: int | None) -> None:
    seed = 4
    results: list[dict[str, Any]] = Mode("tcp", processes=2).run(builder, seed, lag=lag, timeout=90.0)
    want = replayed(list(zip(ROOTS, edges(seed))), reachable)
    assert len({str(w) for w in want}) >= 4, "the reachable set should change over the epochs"
    assert accumulated_reports(results, EPOCHS) == want
    assert all(not any(s.endswith(".cancel") for s in r["stages"]) for r in results), results[0]["stages"]
    assert all("reach.reached" in r["stages"] for r in results)
    assert all(r["changes"] for r in results), "each process should hold part of the answer"
