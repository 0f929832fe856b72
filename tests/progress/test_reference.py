"""The pure progress layer against a brute-force reference (tests/support/progress_reference.py).

Random logical graphs with nested loops are built through `GraphBuilder`; could-result-in,
path summaries, the single-process tracker and the distributed broadcast protocol
(Naiad §2.3, §3.3) are compared with exhaustive search over concrete states.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter, deque
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from tests.support.progress_reference import (
    ReferenceModel,
    builders,
    describe,
    graphs,
    le,
    minimal,
    pointstamps,
    times_of_depth,
)
from timely.dataflow import Dataflow
from timely.errors import CycleError
from timely.graph import FrozenGraph, GraphBuilder, StageKind
from timely.loop_context import LoopContext
from timely.operators import Forward
from timely.progress import (
    Antichain,
    ChangeBatch,
    MutableAntichain,
    PathSummary,
    ProgressAccumulator,
    ProgressTracker,
)

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]

pytestmark = pytest.mark.timeout(600)
"""Passing runs take seconds; a failing one spends minutes shrinking its example, which must
not be cut short by the suite's 120 s timeout (a dump of stacks instead of the example)."""

MAX_COORD = 3
"""Coordinates of the times the tests make up; the reference's cap is at least one more."""


def _pointstamps(graph: FrozenGraph, ref: ReferenceModel, max_coord: int) -> st.SearchStrategy:
    """Pointstamps anywhere, or (half the time, when the graph has any) at a location with
    several incomparable path summaries to somewhere, where mistakes are likeliest."""
    rows = graph.reachability.summaries
    forks = [a for a, row in enumerate(rows) if any(len(s) > 1 for s in row)]
    anywhere = pointstamps(ref.depths, max_coord)
    if not forks:
        return anywhere
    at_forks = st.sampled_from(forks).flatmap(
        lambda loc: times_of_depth(ref.depths[loc], max_coord).map(lambda t: (t, loc))
    )
    return st.one_of(anywhere, at_forks)


def _grid(depth: int, top: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(top + 1), repeat=depth + 1))


# Could-result-in and path summaries ------------------------------------------------------


@settings(deadline=None, max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_could_result_in_matches_bfs_reference(data: st.DataObject) -> None:
    """`Reachability.could_result_in` equals breadth-first search over concrete states: for a
    few sources against every location and every time there with coordinates up to 2, and
    for random pairs with coordinates up to 5. ``reaches`` (the tracker's first, cheap
    question) is never false where the reference finds a path."""
    graph = data.draw(graphs(), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    reach = graph.reachability
    assert reach.depths == ref.depths
    # every source against every location and every small time there
    sources = data.draw(st.lists(_pointstamps(graph, ref, 2), min_size=1, max_size=3), label="sources")
    for p in sources:
        for loc in range(ref.locations):
            for t in _grid(ref.depths[loc], 2):
                q = (t, loc)
                expected = ref.could_result_in(p, q)
                assert reach.could_result_in(p, q) == expected, (p, q)
                assert reach.reaches[p[1]][loc] or not expected, (p, q)
    # random pairs with larger coordinates (and so other caps)
    pairs = data.draw(
        st.lists(st.tuples(pointstamps(ref.depths, 5), pointstamps(ref.depths, 5)), max_size=40), label="pairs"
    )
    for p, q in pairs:
        assert reach.could_result_in(p, q) == ref.could_result_in(p, q), (p, q)


@settings(deadline=None, max_examples=120, suppress_health_check=SLOW)
@given(st.data())
def test_results_at_and_summaries_match_bfs_reference(data: st.DataObject) -> None:
    """Summaries exist exactly between locations a path joins, form an antichain, and
    `results_at` gives exactly the minimal times the reference reaches (with no extras)."""
    graph = data.draw(graphs(), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    reach = graph.reachability
    n = ref.locations
    for a in range(n):
        for b in range(n):
            summaries = reach.summaries[a][b]
            assert reach.reachable(a, b) == ref.reaches(a, b) == bool(summaries), (a, b)
            for s in summaries:  # each summary maps an a-time to a b-time
                assert s.output_length == ref.depths[b] + 1
            for s, s2 in itertools.permutations(summaries, 2):  # an antichain of summaries
                assert not s.dominates(s2), (a, b, summaries)
    sources = data.draw(st.lists(_pointstamps(graph, ref, MAX_COORD), min_size=1, max_size=4), label="sources")
    for p in sources:
        for loc in range(n):
            results = reach.results_at(p, loc)
            # each result is reachable, and the minimal ones are exactly the minimal times
            # reachable from p at loc (exact: the cap exceeds every coordinate involved)
            for r in results:
                assert ref.could_result_in(p, (r, loc)), (p, loc, r)
            cap = ref.cap_for(p[0], *results)
            assert minimal(results) == ref.minimal_results([p], loc, cap), (p, loc, results)


def _step_summaries(depth: int) -> list[tuple[str, PathSummary, int]]:
    """The one-step summaries leaving a location of ``depth``: (name, summary, new depth)."""
    steps = [("identity", PathSummary.identity(depth), depth), ("ingress", PathSummary.ingress(depth), depth + 1)]
    if depth >= 1:
        steps += [("egress", PathSummary.egress(depth), depth - 1), ("feedback", PathSummary.feedback(depth), depth)]
    return steps


def _concrete(name: str, t: tuple[int, ...]) -> tuple[int, ...]:
    return {
        "identity": t,
        "ingress": (*t, 0),
        "egress": t[:-1],
        "feedback": (*t[:-1], t[-1] + 1),
    }[name]


@st.composite
def _paths(draw: st.DrawFn, depth: int) -> tuple[PathSummary, list[str], int]:
    """A random sequence of steps from ``depth`` (at most 3 loops deep) and its composed summary."""
    summary = PathSummary.identity(depth)
    names: list[str] = []
    d = depth
    for _ in range(draw(st.integers(0, 6))):
        options = [s for s in _step_summaries(d) if s[2] <= 3]
        name, step, d = draw(st.sampled_from(options))
        summary = summary.then(step)
        names.append(name)
    return summary, names, d


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_summary_then_and_dominates_match_concrete_steps(data: st.DataObject) -> None:
    """A composed summary (`then`) applies like its steps one by one; `results_le` is
    ``apply`` then ``<=``; `dominates` holds exactly when it holds pointwise."""
    depth = data.draw(st.integers(0, 3), label="depth")
    s1, names1, d1 = data.draw(_paths(depth), label="path1")
    s2, names2, d2 = data.draw(_paths(depth), label="path2")
    for t in _grid(depth, 2):
        u = t
        for name in names1:
            u = _concrete(name, u)
        assert s1.apply(t) == u, (names1, t)
        if d1 == d2:
            target = data.draw(times_of_depth(d2, 4), label="target")
            assert s1.results_le(t, target) == le(u, target)
    if d1 == d2:
        # two coordinate values per input coordinate witness any failure of dominance
        top = 2 + max([0, s1.inc, s2.inc, *s1.tail, *s2.tail])
        witnesses = list(itertools.product((0, top), repeat=depth + 1))
        assert s1.dominates(s2) == all(le(s1.apply(t), s2.apply(t)) for t in witnesses), (s1, s2)


@settings(deadline=None, max_examples=80, suppress_health_check=SLOW)
@given(st.data())
def test_generated_graphs_give_an_antisymmetric_could_result_in(data: st.DataObject) -> None:
    """Sanity of the generator (and of the frontier's premise): no pointstamp can lead to a
    different one at the same location with an earlier-or-equal time, so could-result-in is
    a partial order and the frontier of a non-empty set is never empty."""
    graph = data.draw(graphs(), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    ps = data.draw(st.lists(pointstamps(ref.depths, 2), min_size=1, max_size=6), label="pointstamps")
    for t, loc in ps:
        assert ref.minimal_reached((t, loc), ref.cap_for(t))[loc] == {t}
    for p, q in itertools.product(ps, repeat=2):
        if p != q:
            assert not (graph.reachability.could_result_in(p, q) and graph.reachability.could_result_in(q, p))


def _successor(data: st.DataObject, ref: ReferenceModel, p: tuple) -> tuple | None:
    """A pointstamp that ``p`` could result in and is not ``p`` (or None when its
    coordinates would exceed MAX_COORD): one step along the graph, or a later time at p's
    location (like a notification request), then any coordinates bumped.

    Strictly later matters in the distributed protocol: a batch ``{p: +2, p: -1}`` nets to
    an increment at ``p`` with no decrement below it, and a consumer's ``-1`` that overtakes
    it can then cancel the very count that covers it. The protocol assumes every increment
    in a batch is strictly later than some decrement in it."""
    t, loc = p
    target, move = data.draw(st.sampled_from([(loc, None), *ref.succ[loc]]), label="move")
    u = t if move is None else ref.move(move, t)
    bump = data.draw(st.tuples(*[st.integers(0, 1)] * len(u)), label="bump")
    u = tuple(x + y for x, y in zip(u, bump))
    if (u, target) == p or max(u) > MAX_COORD:
        return None
    return (u, target)


def _tracker(data: st.DataObject, graph: FrozenGraph) -> ProgressTracker:
    """A tracker whose switch between the global frontier alone (few active pointstamps) and
    per-location frontiers (many) happens at small counts, so that runs see both and the
    switches between them."""
    few = data.draw(st.integers(0, 3), label="few active")
    many = data.draw(st.integers(few, 5), label="many active")
    return ProgressTracker(graph.reachability, few, many)


# One location's frontier -------------------------------------------------------------------


@settings(deadline=None, max_examples=200, suppress_health_check=SLOW)
@given(st.data())
def test_mutable_antichain_matches_the_minimal_positive_times(data: st.DataObject) -> None:
    """After every batch of count changes (negative counts included), the frontier is the set
    of minimal times with a positive count, and the changes it reports add up to the move
    from the old frontier to the new one. Depth 0 takes the heap of a total order."""
    depth = data.draw(st.integers(0, 2), label="depth")
    times = st.tuples(*[st.integers(0, MAX_COORD)] * (depth + 1))
    antichain = MutableAntichain(total=depth == 0)
    counts: Counter = Counter()
    for _ in range(data.draw(st.integers(1, 12), label="batches")):
        batch = data.draw(st.lists(st.tuples(times, st.integers(-2, 2)), max_size=6), label="batch")
        old = set(antichain.frontier)
        changes = antichain.update(batch)
        for t, d in batch:
            counts[t] += d
        expected = set(minimal([t for t, c in counts.items() if c > 0]))
        assert set(antichain.frontier) == expected
        assert len(antichain.frontier) == len(expected)
        assert antichain.counts == {t: c for t, c in counts.items() if c}
        assert {t for t, d in changes if d > 0} == expected - old
        assert {t for t, d in changes if d < 0} == old - expected
        for t in _grid(depth, MAX_COORD):
            assert antichain.less_equal(t) == any(le(f, t) for f in expected)


# One tracker -------------------------------------------------------------------------------


def _check_tracker(tracker: ProgressTracker, ref: ReferenceModel, counts: Counter, probes: list) -> None:
    active = {p for p, c in counts.items() if c > 0}
    assert tracker.counts == {p: c for p, c in counts.items() if c}
    expected = ref.frontier(active)
    assert tracker.frontier == expected
    assert tracker.is_empty() == (not active)
    for q in [*active, *probes]:
        assert tracker.is_minimal(q) == (q in expected), q
        for exclude in (True, False):
            assert tracker.blocked(q, exclude_self=exclude) == ref.blocked(active, q, exclude), (q, exclude)
        assert set(tracker.holds(q, exclude_self=True)) == {
            f for f in expected if f != q and ref.could_result_in(f, q)
        }, q
    per_loc = [tracker.frontier_at(loc) for loc in range(ref.locations)]
    cap = ref.cap_for(*(t for t, _ in active), *(t for a in per_loc for t in a.elements)) if active else 1
    for loc, antichain in enumerate(per_loc):
        assert isinstance(antichain, Antichain)
        elements = antichain.elements
        assert len(set(elements)) == len(elements) == len(minimal(elements)), (loc, elements)
        assert set(elements) == ref.minimal_results(sorted(active), loc, cap), (loc, elements)


def _run_tracker(data: st.DataObject, allow_negative: bool) -> None:
    graph = data.draw(graphs(), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    pool = data.draw(st.lists(_pointstamps(graph, ref, 2), min_size=1, max_size=8, unique=True), label="pool")
    probes = data.draw(st.lists(_pointstamps(graph, ref, MAX_COORD), max_size=6), label="probes")
    tracker = _tracker(data, graph)
    counts: Counter = Counter()
    frontiers: list[set] = [set() for _ in range(ref.locations)]
    for _ in range(data.draw(st.integers(1, 8), label="batches")):
        active = sorted(p for p, c in counts.items() if c > 0)
        process_one: bool = data.draw(st.booleans(), label="process one")
        if active and process_one:
            # the shape of a callback's batch: consume one, create some strictly later ones
            consumed = data.draw(st.sampled_from(active), label="consumed")
            net: dict[Any, int] = Counter({consumed: -1})
            for _ in range(data.draw(st.integers(1, 2), label="created")):
                q = _successor(data, ref, consumed)
                if q is not None:
                    net[q] += 1
        else:
            chosen = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
            net = {
                p: data.draw(st.integers(-3, 3) if allow_negative else st.integers(-counts[p], 2), label="delta")
                for p in chosen
            }
        if data.draw(st.booleans(), label="as pairs"):
            # the same changes as a list with repeated pointstamps, to be consolidated
            pairs = []
            for p, d in net.items():
                k = data.draw(st.integers(-2, 2), label="split")
                pairs += [(p, d - k), (p, k)]
            batch: object = data.draw(st.permutations(pairs), label="order")
        else:
            batch = net
        old_frontier, version = set(tracker.frontier), tracker.version
        asked = [*counts, *probes]
        was_blocked = {(q, exclude) for q in asked for exclude in (True, False) if tracker.blocked(q, exclude)}
        tracker.take_changed_locations()
        tracker.update(batch)  # type: ignore[arg-type]
        counts.update(net)
        _check_tracker(tracker, ref, counts, probes)
        unblocked = {q[1] for q, exclude in was_blocked if not tracker.blocked(q, exclude)}
        if tracker.frontier != old_frontier:
            assert tracker.version != version
        event("per-location frontiers" if tracker.per_location else "the global frontier alone")
        # a location whose frontier moved is reported, so the runtime looks at its notifications
        moved = {loc for loc in range(ref.locations) if frontiers[loc] != set(tracker.frontier_at(loc).elements)}
        changed = tracker.take_changed_locations()
        assert changed is None or moved <= changed
        if changed is None:
            # where a notification stopped being blocked, the scheduler is told to look
            assert unblocked <= set(tracker.notifications_may_run(range(ref.locations)))
        frontiers = [set(tracker.frontier_at(loc).elements) for loc in range(ref.locations)]


@settings(deadline=None, max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_tracker_matches_bruteforce_frontier_reference(data: st.DataObject) -> None:
    """After every atomic batch (non-negative counts): counts, frontier, `is_minimal`,
    `blocked`, `holds` and `frontier_at` equal the brute-force answers over the active set."""
    _run_tracker(data, allow_negative=False)


@settings(deadline=None, max_examples=120, suppress_health_check=SLOW)
@given(st.data())
def test_tracker_with_negative_counts_matches_bruteforce_frontier_reference(data: st.DataObject) -> None:
    """Counts may dip below zero in the distributed protocol; only positive ones are active."""
    _run_tracker(data, allow_negative=True)


@settings(deadline=None, max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_tracker_moving_its_lone_pointstamp_matches_bruteforce_frontier_reference(data: st.DataObject) -> None:
    """One epoch going round a loop: most batches move the only active pointstamp's whole count
    to one successor (the shape the tracker applies without its general path; a count of 2 is
    two workers going round together); the others break that shape in one way (the successor
    already has a negative count, only part of the count moves, or a third change rides along),
    so the tracker must notice and fall back. Checked against the reference after every batch,
    and the notifications that became deliverable are said."""
    graph = data.draw(graphs(), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    start = data.draw(_pointstamps(graph, ref, 1), label="start")
    tracker = ProgressTracker(graph.reachability)  # default thresholds: the global frontier alone
    tracker.update({start: 1})
    counts: Counter = Counter({start: 1})
    for _ in range(data.draw(st.integers(1, 10), label="batches")):
        active = [p for p, c in counts.items() if c > 0]
        if not active:
            break
        lone = active[0] if len(active) == 1 else data.draw(st.sampled_from(sorted(active)), label="retired")
        successor = _successor(data, ref, lone)
        if successor is None:
            break
        batch = ChangeBatch({successor: 1, lone: -1})
        shape = data.draw(st.sampled_from(["move", "move", "both", "negative", "twice", "third"]), label="shape")
        if shape == "both":
            tracker.update({lone: 1})  # the second worker's capability at the same pointstamp
            counts[lone] += 1
            batch = ChangeBatch({successor: counts[lone], lone: -counts[lone]})
        elif shape == "negative" and successor not in counts:
            tracker.update({successor: -1})  # a peer's consumption that overtook the production
            counts[successor] -= 1
        elif shape == "twice":
            tracker.update({lone: 1})
            counts[lone] += 1
        elif shape == "third":
            other = data.draw(_pointstamps(graph, ref, MAX_COORD), label="third")
            if other not in batch:
                batch[other] = 1
        asked = [*counts, successor]
        was_blocked = {q for q in asked if tracker.blocked(q, True)}
        tracker.take_changed_locations()
        old_frontier, version = set(tracker.frontier), tracker.version
        tracker.update(batch)
        counts.update(batch)
        event(f"shape {shape}")
        _check_tracker(tracker, ref, counts, [successor, lone])
        if tracker.frontier != old_frontier:
            assert tracker.version != version
        changed = tracker.take_changed_locations()
        unblocked = {q[1] for q in was_blocked if not tracker.blocked(q, True)}
        assert changed is None or unblocked <= changed
        if changed is None:
            assert unblocked <= set(tracker.notifications_may_run(range(ref.locations)))


# The distributed protocol (Naiad §3.3) -------------------------------------------------------


class _Protocol:
    """N participants, each with a tracker, FIFO channels between every ordered pair, and the
    truth: who holds which active pointstamp.

    How a participant's batches reach the views (``mode``):

    - ``each``: every batch is broadcast on its own, to every participant itself included;
    - ``merged``: consecutive batches are merged and the merged batch broadcast at random
      moments (itself included);
    - ``held``: as the runtime does it. A participant applies its batches to its own view at
      once and merges them into a `ProgressAccumulator`; it may keep them from its peers only
      while the accumulator says so (`may_hold`), and releases the whole buffer to its peers
      at random moments or when it must. Participants also *spawn*: create later pointstamps
      from one they keep (an input's records, a notification requested under a capability),
      a batch with no negative in it.
      A peer's batches go first into the receiver's ``arrived`` batch (merged, as
      `ClusterLink.arrived` merges the frames of one pass of the event loop), which the
      receiver applies either alone or merged into its own next batch after releasing that to
      its accumulator: one tracker update for both, as `ProcessRuntime.step` does.
    - ``settled``: ``held``, and once the steps are over the participants run to the end as
      the runtime does out of work: each keeps its buffer while it waits on others
      (`ProgressAccumulator.waits_on_others`, with its own view's `ProgressTracker.blocked`)
      and releases it otherwise, and retires a pointstamp it holds only once nothing else in
      its own view could result in it (as a notification is delivered). Liveness: nothing
      may stay held, nor active, at the end.
    """

    def __init__(self, data: st.DataObject, graph: FrozenGraph, ref: ReferenceModel, mode: str) -> None:
        self.data, self.ref, self.mode = data, ref, mode
        self.n = data.draw(st.integers(2, 4), label="participants")
        self.trackers = [_tracker(data, graph) for _ in range(self.n)]
        self.channels: dict[tuple[int, int], deque[Any]] = {
            (i, j): deque() for i in range(self.n) for j in range(self.n)
        }
        self.pending = [ChangeBatch() for _ in range(self.n)]  # merged, not yet broadcast
        self.merged = [0] * self.n  # how many batches each pending one merges
        self.held = [ProgressAccumulator(graph.reachability) for _ in range(self.n)]
        self.arrived = [ChangeBatch() for _ in range(self.n)]  # peers' batches not yet applied
        self.truth: Counter = Counter()  # (pointstamp, owner) -> count
        initial = data.draw(st.lists(pointstamps(ref.depths, 1), min_size=1, max_size=4), label="initial")
        for p in initial:
            self.truth[(p, data.draw(st.integers(0, self.n - 1), label="owner"))] += 1
        for tracker in self.trackers:
            tracker.update(Counter(initial))

    def active(self) -> Counter:
        total: Counter = Counter()
        for (p, _), c in self.truth.items():
            total[p] += c
        return +total

    def process(self) -> None:
        """A participant consumes one pointstamp it holds and creates some it could result in
        (or, in ``held`` mode, sometimes keeps it and only creates: spawns)."""
        owned = sorted(k for k, c in self.truth.items() if c > 0)
        p, i = self.data.draw(st.sampled_from(owned), label="process")
        spawn = self.mode != "merged" and self.data.draw(st.integers(0, 3), label="spawn") == 0
        batch = ChangeBatch()
        for _ in range(self.data.draw(st.integers(1 if spawn else 0, 3), label="created")):
            q = _successor(self.data, self.ref, p)
            if q is not None:
                self.truth[(q, self.data.draw(st.integers(0, self.n - 1), label="owner"))] += 1
                batch.add(q, +1)
        if not spawn:
            self.truth[(p, i)] -= 1
            batch.add(p, -1)
        if self.mode == "each":
            self.broadcast(i, batch)
        elif self.mode == "merged":
            for q, d in batch.items():  # merge into what i has not broadcast yet
                self.pending[i].add(q, d)
            self.merged[i] += 1
            if self.data.draw(st.booleans(), label="flush now"):
                self.flush(i)
        else:
            self.held[i].add(batch)
            if self.arrived[i] and self.data.draw(st.booleans(), label="with what arrived"):
                event("a participant applies its peers' batches merged into its own")
                own = ChangeBatch(batch)
                own.merge(self.arrived[i])
                self.arrived[i].clear()
                self.trackers[i].update(dict(own))  # its own view at once, with what arrived
            else:
                self.trackers[i].update(dict(batch))  # its own view at once
            if not self.held[i].may_hold():
                event("a batch that may not be held is released at once")
                self.release(i)
            elif self.data.draw(st.booleans(), label="release now"):
                self.release(i)

    def flush(self, i: int) -> None:
        if self.merged[i] > 1:
            event("a broadcast batch merges several callbacks' batches")
        self.broadcast(i, self.pending[i])
        self.pending[i] = ChangeBatch()
        self.merged[i] = 0

    def broadcast(self, i: int, batch: ChangeBatch) -> None:
        changes = dict(batch.drain())
        for j in range(self.n):
            self.channels[(i, j)].append(dict(changes))

    def release(self, i: int) -> None:
        """Send participant i's held updates to every other participant, as one batch."""
        if len(self.held[i].buffer) > 1:
            event("a released batch merges several updates")
        changes = dict(self.held[i].release())
        for j in range(self.n):
            if j != i:
                self.channels[(i, j)].append(dict(changes))

    def deliver(self, i: int, j: int) -> None:
        batch = self.channels[(i, j)].popleft()
        if self.mode not in ("held", "settled"):
            self.trackers[j].update(batch)
            return
        self.arrived[j].merge(batch)  # after any earlier one from i: FIFO kept
        if self.data.draw(st.booleans(), label="apply what arrived now"):
            self.apply_arrived(j)

    def apply_arrived(self, j: int) -> None:
        """Participant j's view takes every peer batch that arrived, as one batch."""
        if self.arrived[j]:
            self.trackers[j].update(dict(self.arrived[j]))
            self.arrived[j].clear()

    def step(self) -> None:
        kinds = []
        if any(c > 0 for c in self.truth.values()):
            kinds.append("process")
        busy = sorted(k for k, q in self.channels.items() if q)
        if busy:
            kinds.append("deliver")
        flushable = [i for i in range(self.n) if self.pending[i] or self.held[i]]
        if flushable:
            kinds.append("flush")
        if not kinds:
            return
        kind = self.data.draw(st.sampled_from(kinds), label="step")
        if kind == "process":
            self.process()
        elif kind == "deliver":
            self.deliver(*self.data.draw(st.sampled_from(busy), label="channel"))
        else:
            i = self.data.draw(st.sampled_from(flushable), label="flush")
            self.release(i) if self.mode in ("held", "settled") else self.flush(i)

    def check_safety(self) -> None:
        """No local frontier is ahead of the global one (Naiad §3.3), and what a participant
        holds back is covered as `ProgressAccumulator.may_hold` promises."""
        ref = self.ref
        active = set(self.active())
        for j, tracker in enumerate(self.trackers):
            local_active = {p for p, c in tracker.counts.items() if c > 0}
            assert tracker.frontier == ref.frontier(local_active), j
            if any(c < 0 for c in tracker.counts.values()):
                event("a local count is negative")
            if active - local_active:
                event("a truly active pointstamp is not yet active locally")
            for p in active:
                assert any(ref.could_result_in(f, p) for f in tracker.frontier), (
                    f"participant {j}'s frontier {sorted(tracker.frontier)} is ahead of active {p}"
                )
            for f in tracker.frontier & active:  # a deliverable notification is globally minimal
                assert not any(q != f and ref.could_result_in(q, f) for q in active), (j, f)
        for j, held in enumerate(self.held):
            if held:
                event("a participant holds updates back")
                negatives = [q for q, d in held.buffer.items() if d < 0]
                for p, d in held.buffer.items():
                    if d > 0:
                        assert any(q != p and ref.could_result_in(q, p) for q in negatives), (j, p)

    def settle(self) -> None:
        """Run to the end as the runtime does out of work (``settled`` mode): deliver what is in
        flight, release each buffer unless it waits on others, retire the pointstamps whose
        owner's view holds nothing else before them; until none of it is left to do."""
        while True:
            busy = sorted(k for k, q in self.channels.items() if q)
            if busy:
                self.deliver(*self.data.draw(st.sampled_from(busy), label="settle"))
                self.check_safety()
                continue
            for i in range(self.n):
                self.apply_arrived(i)  # a step takes in what arrived before its flush
            released = False
            for i in range(self.n):
                if not self.held[i]:
                    continue
                if self.held[i].waits_on_others(functools.partial(self.trackers[i].blocked, exclude_self=True)):
                    event("a participant out of work waits on others")
                else:
                    self.release(i)
                    released = True
            if released:
                continue
            ready = sorted(
                (p, i)
                for (p, i), c in self.truth.items()
                if c > 0 and not self.trackers[i].blocked(p, exclude_self=True)
            )
            if not ready:
                break
            p, i = self.data.draw(st.sampled_from(ready), label="retire")
            self.truth[(p, i)] -= 1
            self.trackers[i].update({p: -1})
            self.held[i].add({p: -1})
            self.check_safety()
        assert not any(self.held), "a buffer stays held with nothing left to do"
        assert not self.active(), "a pointstamp stays active with nothing left to do"

    def drain(self) -> None:
        if self.mode == "settled":
            self.settle()
        for i in range(self.n):
            if self.pending[i]:
                self.flush(i)
            if self.held[i]:
                self.release(i)
        while busy := sorted(k for k, q in self.channels.items() if q):
            self.deliver(*self.data.draw(st.sampled_from(busy), label="drain"))
            self.check_safety()
        for i in range(self.n):
            self.apply_arrived(i)
        active = self.active()
        for tracker in self.trackers:
            assert tracker.counts == dict(active)
            assert tracker.frontier == self.ref.frontier(active)


def _run_protocol(data: st.DataObject, mode: str) -> None:
    graph = data.draw(graphs(max_ops=8), label="graph")
    note(describe(graph))
    ref = ReferenceModel(graph, min_cap=MAX_COORD + 1)
    protocol = _Protocol(data, graph, ref, mode)
    protocol.check_safety()
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        protocol.step()
        protocol.check_safety()
    in_flight = sum(len(q) for q in protocol.channels.values())
    event("batches in flight before draining: " + ("none" if not in_flight else "1-5" if in_flight <= 5 else "6+"))
    protocol.drain()


@settings(deadline=None, max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_broadcast_protocol_local_frontier_never_ahead_of_global(data: st.DataObject) -> None:
    """Every batch broadcast on its own, channels delivered in any interleaving: every truly
    active pointstamp stays covered by each participant's frontier, and once drained every
    participant's counts equal the truth."""
    _run_protocol(data, "each")


@settings(deadline=None, max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_broadcast_protocol_with_accumulated_batches_never_ahead_of_global(data: st.DataObject) -> None:
    """The same, with each participant merging consecutive batches into one before
    broadcasting it (per-process accumulation)."""
    _run_protocol(data, "merged")


@settings(deadline=None, max_examples=200, suppress_health_check=SLOW)
@given(st.data())
def test_broadcast_protocol_with_held_updates_never_ahead_of_global(data: st.DataObject) -> None:
    """The runtime's accumulation: each participant's own view takes its batches at once, its
    peers get them only when it releases its `ProgressAccumulator`, which it may hold only
    while every positive in it is covered by a negative in it. Peers consume pointstamps whose
    creation they have not heard of (data before progress). Safety after every step, the
    truth once drained."""
    _run_protocol(data, "held")


@settings(deadline=None, max_examples=200, suppress_health_check=SLOW)
@given(st.data())
def test_broadcast_protocol_settles_with_updates_held_while_waiting_on_others(data: st.DataObject) -> None:
    """``held``, and at the end each participant keeps its buffer while every retirement in it
    is of a pointstamp something else in its own view still holds back, as the runtime does
    out of work: nobody waits on a buffer that waits on it, so everything retires and every
    buffer goes."""
    _run_protocol(data, "settled")


def test_accumulator_holds_only_covered_positives_and_releases_positives_first() -> None:
    """One feedback loop: a consumed notification at iteration 0 covers the messages it sends
    to iteration 1; an input's own capability, or an iteration before the consumed one, may
    not be held; a release empties the buffer, positives first, zero entries dropped."""
    root = Dataflow().root
    loop = LoopContext(root, "loop")
    fb = loop.feedback("fb")
    body = loop.stage("body", Forward, [loop.ingress(root.new_input("in")), fb.stream])
    fb.connect(body)
    graph = root.dataflow.freeze()
    where = {s.name: graph.stage_location(i) for i, s in enumerate(graph.stages)}
    body_at, input_at = where["loop.body"], where["in"]
    acc = ProgressAccumulator(graph.reachability)
    assert not acc and acc.may_hold()
    acc.add({((0, 1), body_at): +1, ((0, 0), body_at): -1})
    assert acc.may_hold()
    acc.add({((0,), input_at): +1})  # nothing in the loop leads back to the input
    assert not acc.may_hold()
    acc.add({((0,), input_at): -1})
    assert acc.may_hold()  # the entry nets to zero
    assert acc.release() == [(((0, 1), body_at), 1), (((0, 0), body_at), -1)]
    assert not acc and acc.may_hold() and acc.release() == []
    acc.add({((0, 0), body_at): +1, ((0, 1), body_at): -1})  # iterations only go forward
    assert not acc.may_hold()


# Graphs the progress layer cannot handle: freezing refuses them ------------------------------


def test_builder_refuses_a_cycle_that_leaves_its_loop_context() -> None:
    root = Dataflow().root
    loop = LoopContext(root, "loop")
    fb = loop.feedback("fb")
    x = loop.stage("x", Forward, [fb.stream])
    v = root.stage("v", Forward, [loop.egress(x)])  # out of the loop ...
    fb.connect(loop.ingress(v))  # ... and back in: the counter restarts at 0
    # Accepted, could-result-in would stop being antisymmetric: ((0, 5), x) and ((0, 1), x)
    # could each result in the other, and progress could never be decided.
    with pytest.raises(CycleError, match="leaves the feedback's loop") as info:
        root.dataflow.freeze()
    assert {"loop.x", "loop.fb"} <= set(info.value.stages)


def _non_advancing_cycles(ref: ReferenceModel, stages: int, top: int) -> list[int]:
    """Stages from which some time ``t`` leads back to the same stage at a different time
    ``t' <= t`` (a cycle that does not advance). ``t`` has every counter at ``top``, which
    must exceed the constants such a cycle can leave behind (one per feedback passed)."""
    found = []
    for loc in range(stages):
        t = (0, *[top] * ref.depths[loc])
        reached = ref.minimal_reached((t, loc), top + 1)[loc]
        if any(u != t and le(u, t) for u in reached):
            found.append(loc)
    return found


@settings(deadline=None, max_examples=200, suppress_health_check=SLOW)
@given(builders(max_loops=3, max_ops=8, any_feedback=True))
def test_freeze_refuses_exactly_the_graphs_with_a_non_advancing_cycle(builder: GraphBuilder) -> None:
    """Feedbacks here may read any stream of their loop, so some cycles leave the loop and come
    back through an ingress, restarting the counter. Freezing must refuse exactly the graphs
    where the reference finds a cycle that does not advance the time: for the others
    could-result-in is a partial order."""
    note(describe(builder))
    ref = ReferenceModel(builder)
    feedbacks = sum(s.kind == StageKind.FEEDBACK for s in builder.stages)
    bad = _non_advancing_cycles(ref, len(builder.stages), top=feedbacks + 1)
    event("a cycle leaves its loop" if bad else "every cycle advances")
    if bad:
        with pytest.raises(CycleError):
            builder.freeze()
    else:
        builder.freeze()
