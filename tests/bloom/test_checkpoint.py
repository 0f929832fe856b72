"""Checkpoint and restore of libs/bloom's operators (Naiad §3.4), taken by hand with the harness
of tests/pregel/test_checkpoint.py: run epochs 0..F, checkpoint every vertex through the codec,
restore a fresh computation (the same or another number of workers) and feed epochs F+1..N.

A Bloom program's tables, lattices and fired thresholds persist across epochs, so the resumed
run must remember them: its answers (joined with the first run's output up to F, as a consumer
that kept its output would) must equal an undisturbed run's and an independent oracle's
(NetworkX, or plain Python).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import timely
from tests.bloom.test_programs import closure_nx, cumulative, reach_nx, sssp_nx
from tests.pregel.test_checkpoint import Build, resume, undisturbed
from timely_libs import bloom
from timely_libs.bloom import LMax, LMin, LSet
from timely_libs.bloom._operators import _Aggregate, _Distinct, _History, _NotIn

EPOCHS = 4


def answers(first: list[bloom.Output], second: list[bloom.Output], after: int) -> list[list[Any]]:
    """Per output, its answer at every epoch: the resumed run's output completed with what the
    first run sent up to the checkpoint (the resumed run sends only for later epochs)."""
    out = []
    for old, new in zip(first, second, strict=True):
        assert all(e <= after for e in old.batches)
        assert all(e > after for e in new.batches), sorted(new.batches)
        new.batches.update(old.batches)
        out.append([new.answer(e) for e in range(EPOCHS)])
    return out


def plain_answers(outputs: list[bloom.Output]) -> list[list[Any]]:
    return [[o.answer(e) for e in range(EPOCHS)] for o in outputs]


def program_make(program: Callable[..., Any], inputs: list[str]) -> Callable[[], tuple[Build, list[bloom.Output]]]:
    """A dataflow feeding root-scope inputs to ``program``; collects its `Output`s."""

    def make() -> tuple[Build, list[bloom.Output]]:
        outputs: list[bloom.Output] = []

        def build(scope: timely.Scope) -> tuple[list[timely.Input], list[timely.Probe]]:
            streams = [scope.new_input(name) for name in inputs]
            result = program(*streams)
            outputs.extend(result if isinstance(result, tuple) else [result])
            return streams, [o.probe for o in outputs]

        return build, outputs

    return make


def epochs_of(seed: int, make: Callable[[random.Random], Any], per_epoch: int) -> list[list[Any]]:
    rng = random.Random(seed)
    return [[make(rng) for _ in range(per_epoch)] for _ in range(EPOCHS)]


def edge(nodes: int) -> Callable[[random.Random], tuple[int, int]]:
    return lambda rng: (rng.randrange(nodes), rng.randrange(nodes))


def stage_states(states: dict[str, list[Any]], prefix: str) -> dict[str, list[Any]]:
    return {name: s for name, s in states.items() if name.startswith(prefix) and any(x is not None for x in s)}


# Tables: transitive closure and reachability ---------------------------------------------------------
def test_transitive_closure_resumes_with_its_tables(workers: int) -> None:
    edges = epochs_of(1, edge(14), 6)
    make = program_make(bloom.programs.transitive_closure, ["edges"])
    first, second, states = resume(make, [edges], after=1, workers=workers, resume_workers=workers)
    kept = stage_states(states, "tc.")
    assert set(kept) == {"tc.link", "tc.path", "tc.join1"}, sorted(kept)
    assert all(isinstance(s, timely.KeyedState) for ss in kept.values() for s in ss if s is not None)
    got = answers(first, second, 1)
    assert got == plain_answers(undisturbed(make, [edges], workers))
    for epoch, g in enumerate(cumulative(edges)):
        assert got[0][epoch] == closure_nx(g), f"epoch {epoch}"


@pytest.mark.parametrize("coordinated", [False, True], ids=["async", "coordinated"])
@pytest.mark.parametrize(("workers", "resume_workers"), [(2, 2), (2, 3), (3, 1)])
def test_reachability_resumes_after_epoch_0_on_any_number_of_workers(
    coordinated: bool, workers: int, resume_workers: int
) -> None:
    edges = epochs_of(2, edge(25), 15)
    sources = epochs_of(3, lambda rng: rng.randrange(25), 2)

    def program(e: timely.Stream, s: timely.Stream) -> bloom.Output:
        return bloom.programs.reachability(e, s, coordinated=coordinated)

    make = program_make(program, ["edges", "sources"])
    first, second, _ = resume(make, [edges, sources], after=0, workers=workers, resume_workers=resume_workers)
    got = answers(first, second, 0)
    assert got == plain_answers(undisturbed(make, [edges, sources], workers))
    for epoch, (g, s) in enumerate(zip(cumulative(edges), cumulative(sources), strict=True)):
        assert got[0][epoch] == reach_nx(g, s), f"epoch {epoch}"


# Lattices: shortest paths, quorum, shopping cart -----------------------------------------------------
@pytest.mark.parametrize(("workers", "resume_workers"), [(1, 1), (2, 3)])
def test_shortest_paths_resume_with_their_distances(workers: int, resume_workers: int) -> None:
    edges = epochs_of(4, lambda rng: (rng.randrange(20), rng.randrange(20), rng.randint(0, 9)), 12)
    sources = epochs_of(5, lambda rng: rng.randrange(20), 1)
    make = program_make(bloom.programs.shortest_paths, ["edges", "sources"])
    first, second, states = resume(make, [edges, sources], after=1, workers=workers, resume_workers=resume_workers)
    assert any(s is not None for s in states["sssp.dist"])
    got = answers(first, second, 1)
    assert got == plain_answers(undisturbed(make, [edges, sources], workers))
    for epoch, (g, s) in enumerate(zip(cumulative(edges), cumulative(sources), strict=True)):
        assert {k: v.reveal() for k, v in got[0][epoch].items()} == sssp_nx(g, s), f"epoch {epoch}"
        assert all(type(v) is LMin for v in got[0][epoch].values())


@pytest.mark.parametrize(("workers", "resume_workers"), [(3, 3), (2, 3)])
@pytest.mark.parametrize("after", [0, 1])
def test_quorum_resumes_with_its_tallies_and_commits(workers: int, resume_workers: int, after: int) -> None:
    votes = epochs_of(6 + after, lambda rng: (f"req{rng.randrange(6)}", rng.randrange(5)), 6)
    make = program_make(lambda v: bloom.programs.quorum(v, 3), ["votes"])
    first, second, states = resume(make, [votes], after=after, workers=workers, resume_workers=resume_workers)
    assert any(s is not None for s in states["quorum.tally"])
    assert all(s is None for s in states["quorum.vote"])  # a channel is scratch: nothing outlives its epoch
    committed, tallies = answers(first, second, after)
    plain = plain_answers(undisturbed(make, [votes], workers))
    assert [committed, tallies] == plain
    for epoch, cast in enumerate(cumulative(votes)):
        voters: dict[str, set[int]] = {}
        for req, voter in cast:
            voters.setdefault(req, set()).add(voter)
        assert {r: v.reveal() for r, v in tallies[epoch].items()} == voters, f"epoch {epoch}"
        assert committed[epoch] == {r for r, v in voters.items() if len(v) >= 3}, f"epoch {epoch}"


@pytest.mark.parametrize(("workers", "resume_workers"), [(1, 1), (2, 3)])
def test_shopping_cart_checkouts_after_a_resume_count_the_earlier_actions(workers: int, resume_workers: int) -> None:
    rng = random.Random(9)
    actions = [
        [(f"s{rng.randrange(3)}", (epoch, i), rng.choice("abc"), rng.choice([1, 1, 2, -1])) for i in range(6)]
        for epoch in range(EPOCHS)
    ]

    def make() -> tuple[Build, dict[int, list[Any]]]:
        seen: dict[int, list[Any]] = {}

        def build(scope: timely.Scope) -> tuple[list[timely.Input], list[timely.Probe]]:
            inp = scope.new_input("actions")
            out = bloom.programs.shopping_cart(inp)
            return [inp], [out.subscribe(lambda t, records: seen.setdefault(t.epoch, []).extend(records))]

        return build, seen

    first, second, states = resume(make, [actions], after=1, workers=workers, resume_workers=resume_workers)
    assert any(isinstance(s, timely.KeyedState) for s in states["cart.cart"])
    got = {e: sorted(r) for e, r in {**first, **second}.items()}
    assert got == {e: sorted(r) for e, r in undisturbed(make, [actions], workers).items()}
    for epoch, cumulative_actions in enumerate(cumulative(actions)):
        totals: dict[str, dict[str, int]] = {}
        for session, _, item, delta in cumulative_actions:
            totals.setdefault(session, {}).setdefault(item, 0)
            totals[session][item] += delta
        changed = {a[0] for a in actions[epoch]}
        want = {(s, tuple(sorted((i, q) for i, q in totals[s].items() if q))) for s in changed}
        assert got[epoch] == sorted(want), f"epoch {epoch}"  # once per changed session, with every action


# Scratch facts, a scratch join and negation ------------------------------------------------------------
def _mixed(links: timely.Stream, pings: timely.Stream, blocked: timely.Stream) -> tuple[bloom.Output, bloom.Output]:
    """``hits``: each epoch's pings (scratch) joined with every link so far (persistent);
    ``open``: the links whose target is not blocked (up to each epoch)."""
    with bloom.Program(links.scope, "mix") as p:
        link = p.table("link", links)
        ping = p.scratch("ping", pings)
        hits = p.scratch("hits")
        hits |= ping.join(link, lambda n: n, lambda e: e[0], lambda n, e: (n, e[1]))
        open_links = p.scratch("open")
        open_links |= link.not_in(blocked, key=lambda e: e[1])
    return p.output(hits), p.output(open_links)


@pytest.mark.parametrize(("workers", "resume_workers"), [(1, 1), (3, 3), (2, 3)])
def test_scratch_facts_and_negation_resume_correctly(workers: int, resume_workers: int) -> None:
    links = epochs_of(10, edge(8), 5)
    pings = epochs_of(11, lambda rng: rng.randrange(8), 3)  # repeated in later epochs: scratch dedup is per epoch
    blocked = epochs_of(12, lambda rng: rng.randrange(8), 1)
    feeds = [links, pings, blocked]
    make = program_make(_mixed, ["links", "pings", "blocked"])
    first, second, states = resume(make, feeds, after=1, workers=workers, resume_workers=resume_workers)
    assert all(s is None for s in states["mix.ping"])
    got = answers(first, second, 1)
    assert got == plain_answers(undisturbed(make, feeds, workers))
    for epoch, (ls, bs) in enumerate(zip(cumulative(links), cumulative(blocked), strict=True)):
        assert got[0][epoch] == {(n, b) for n in pings[epoch] for a, b in ls if a == n}, f"epoch {epoch}"
        assert got[1][epoch] == {e for e in ls if e[1] not in bs}, f"epoch {epoch}"


# Stream-level operators ---------------------------------------------------------------------------------
def test_a_distinct_that_does_not_exchange_keeps_plain_state_and_resumes_on_as_many_workers() -> None:
    def make() -> tuple[Build, dict[int, list[Any]]]:
        seen: dict[int, list[Any]] = {}

        def build(scope: timely.Scope) -> tuple[list[timely.Input], list[timely.Probe]]:
            inp = scope.new_input("facts")
            out = bloom.distinct(inp, "d", exchange=None)
            return [inp], [out.subscribe(lambda t, r: seen.setdefault(t.epoch, []).extend(r))]

        return build, seen

    feeds = [[[1, 2, 2], [2, 3], [1, 4], [4, 5]]]
    first, second, states = resume(make, feeds, after=1, workers=1, resume_workers=1)
    assert states["d"] == [{1: 0, 2: 0, 3: 1}]  # not keyed: the runtime will refuse to rescale it
    assert {**first, **second} == {0: [1, 2], 1: [3], 2: [4], 3: [5]}


@pytest.mark.parametrize(("workers", "resume_workers"), [(1, 1), (2, 3)])
def test_a_threshold_fires_once_per_key_across_a_resume(workers: int, resume_workers: int) -> None:
    def make() -> tuple[Build, dict[int, list[Any]]]:
        fired: dict[int, list[Any]] = {}

        def build(scope: timely.Scope) -> tuple[list[timely.Input], list[timely.Probe]]:
            votes = scope.new_input("votes")
            tally = bloom.aggregate(votes, "tally", lattice=LSet)
            out = bloom.when(tally, bloom.programs.at_least(2), "enough")
            return [votes], [out.subscribe(lambda t, r: fired.setdefault(t.epoch, []).extend(r))]

        return build, fired

    feeds = [
        [
            [("a", LSet({1})), ("a", LSet({2})), ("b", LSet({1}))],
            [("a", LSet({3})), ("b", LSet({2}))],  # a grows again: it must not fire again
            [("a", LSet({4})), ("b", LSet({3})), ("c", LSet({1, 2}))],
            [("c", LSet({3}))],
        ]
    ]
    first, second, states = resume(make, feeds, after=0, workers=workers, resume_workers=resume_workers)
    assert any(isinstance(s, timely.KeyedState) for s in states["enough"])
    assert {**first, **second} == {0: ["a"], 1: ["b"], 2: ["c"]}


def test_restore_merges_pieces_from_several_old_instances() -> None:
    """What a rescale hands one new instance: the pieces of two old ones, in any order."""
    a, b = _Distinct("d", True, False), _Distinct("d", True, False)
    a.first, b.first = {"x": 2, "y": 0}, {"x": 1, "z": 3}
    merged = _Distinct("d", True, False)
    pieces = [*b.checkpoint().pieces, *a.checkpoint().pieces]
    random.Random(0).shuffle(pieces)
    merged.restore(timely.KeyedState(pieces))
    assert merged.first == {"x": 1, "y": 0, "z": 3}

    agg = _Aggregate("a", LSet, coordinated=False)
    agg.history = {"k": _History(0, LSet({1}))}
    agg.history["k"].absorb(2, LSet({2}))
    state = agg.checkpoint()
    assert [item for _, piece in state.pieces for item in piece] == [("k", 2, LSet({1, 2}))]  # the latest value only
    again = _Aggregate("a", LSet, coordinated=False)
    again.restore(state)
    again.restore(timely.KeyedState([(state.pieces[0][0], [("k", 1, LSet({3}))])]))
    assert again.value("k", 5) == LSet({1, 2, 3})


def test_a_checkpoint_with_records_waiting_for_a_notification_is_refused() -> None:
    agg = _Aggregate("sums", LMax, coordinated=True)
    agg.pending[timely.Timestamp(3)] = [("k", LMax(1))]
    with pytest.raises(bloom.BloomError, match="aggregate 'sums'.*1 time"):
        agg.checkpoint()
    minus = _NotIn("minus", lambda r: r)
    minus.asked.add(timely.Timestamp(0))
    with pytest.raises(bloom.BloomError, match="not_in 'minus'"):
        minus.checkpoint()
    with pytest.raises(bloom.BloomError, match="needs the KeyedState"):
        _NotIn("minus", lambda r: r).restore({1: 0})
    assert _Distinct("d", persistent=False, coordinated=False).checkpoint() is None
