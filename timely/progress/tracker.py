"""The progress tracker: occurrence counts and, per location, the frontier of what could still
happen there (Naiad §2.3, §3.3; timely-dataflow's ``reachability::Tracker``).

Each process keeps one `ProgressTracker`: its *local view* of the pointstamps that are
active anywhere. The view changes only by `update` with an atomic batch of
``(pointstamp, delta)`` changes. Batches come from this process's own callbacks (applied at
once) and from other processes (applied in the order each sender broadcast them: FIFO per
channel). A pointstamp's count may dip below zero for a while, when a consumer's ``-1``
arrives before the producer's ``+1``; the producer's batch still holds the pointstamp that
caused it, so the view stays conservative. `docs/progress.md` has the argument.

Two `MutableAntichain` objects per location of the logical graph:

- ``pointstamps[l]``: the counts of the pointstamps at ``l``, and their frontier;
- ``implications[l]``: the times at ``l`` that some active pointstamp anywhere could result
  in, as a multiset fed by the frontier of ``pointstamps[l]`` and by the frontier of
  ``implications[s]`` moved along each one-step summary ``s -> l``. Its frontier is the
  earliest times at which anything could still happen at ``l``.

A batch changes some counts; only the frontiers that move are propagated, along one-step
summaries, in time order, so the cost of a batch follows what it changed, not how many
pointstamps are active: retiring the earliest of ten thousand open epochs costs about what
retiring one of ten does. Every question the runtime asks (may this notification run? has a
probe passed ``t``?) is answered from the frontier of one location. Applying a whole batch
before propagating makes it atomic: the frontier never moves past a pointstamp that a batch
both creates and covers.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from ..timestamp import product_le
from .antichain import Antichain, MutableAntichain
from .reachability import Pointstamp, Reachability

__all__ = ["ProgressTracker", "ChangeBatch"]


class ChangeBatch(dict):  # type: ignore[type-arg]
    """Accumulated ``pointstamp -> delta`` changes; zero entries are dropped on `drain`."""

    def add(self, pointstamp: Pointstamp, delta: int) -> None:
        self[pointstamp] = self.get(pointstamp, 0) + delta

    def drain(self) -> list[tuple[Pointstamp, int]]:
        items = [(p, d) for p, d in self.items() if d]
        self.clear()
        return items


class ProgressTracker:
    """One process's view of the active pointstamps and the frontier at every location."""

    def __init__(self, reachability: Reachability) -> None:
        self.reach = reachability
        self.counts: dict[Pointstamp, int] = {}
        """Occurrence counts, nonzero entries only (may be negative transiently)."""
        self.active_count = 0
        """How many pointstamps have a positive count."""
        self.pointstamps = [MutableAntichain(total=depth == 0) for depth in reachability.depths]
        """Per location: the counts of the pointstamps there, and their frontier."""
        self.implications = [MutableAntichain(total=depth == 0) for depth in reachability.depths]
        """Per location: the times there that some active pointstamp could result in."""
        self.changed_locations: set[int] = set()
        """Locations whose implications changed since the runtime last took this set: where a
        pending notification may have become deliverable."""
        self.version = 0
        """Bumped whenever some location's implications change, so watchers skip unchanged views."""
        self.updates_applied = 0
        self._frontier: set[Pointstamp] = set()
        self._frontier_version = -1

    # Applying updates -----------------------------------------------------------------
    def update(self, changes: Mapping[Pointstamp, int] | Iterable[tuple[Pointstamp, int]]) -> None:
        """Apply one atomic batch of changes."""
        items = (
            changes.items() if type(changes) is ChangeBatch or isinstance(changes, Mapping) else _consolidate(changes)
        )
        counts = self.counts
        by_location: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        for p, d in items:
            if not d:
                continue
            old = counts.get(p, 0)
            new = old + d
            if new:
                counts[p] = new
            else:
                del counts[p]
            if old <= 0 < new:
                self.active_count += 1
            elif new <= 0 < old:
                self.active_count -= 1
            t, loc = p
            group = by_location.get(loc)
            if group is None:
                by_location[loc] = [(t, d)]
            else:
                group.append((t, d))
        self.updates_applied += 1
        moved: dict[Pointstamp, int] = {}
        for loc, group in by_location.items():
            for t, d in self.pointstamps[loc].update(group):
                moved[(t, loc)] = d
        if moved:
            self._propagate(moved)

    def _propagate(self, work: dict[Pointstamp, int]) -> None:
        """Apply frontier changes to the implications, and move each change of an implication's
        frontier along the one-step summaries out of its location, earliest time first (so the
        changes that meet at one pointstamp are added up before they move on)."""
        heap = [(t, loc) for t, loc in work]
        heapq.heapify(heap)
        implications = self.implications
        successors = self.reach.successors
        changed = self.changed_locations
        while heap:
            key = heapq.heappop(heap)
            d = work.pop(key, 0)
            if not d:
                continue
            t, loc = key
            changed.add(loc)
            for ft, fd in implications[loc].update(((t, d),)):
                for step in successors[loc]:
                    target = (step.summary.apply(ft), step.target)
                    old = work.get(target)
                    if old is None:
                        work[target] = fd
                        heapq.heappush(heap, target)
                    else:
                        work[target] = old + fd
        self.version += 1

    # Questions --------------------------------------------------------------------------
    def is_empty(self) -> bool:
        """No active pointstamp: nothing anywhere can happen any more."""
        return not self.active_count

    @property
    def active(self) -> set[Pointstamp]:
        """The pointstamps with a positive count (built on each call: for diagnostics)."""
        return {p for p, c in self.counts.items() if c > 0}

    def blocked(self, p: Pointstamp, exclude_self: bool = False) -> bool:
        """Some active pointstamp (other than ``p`` itself, if asked) could result in ``p``.

        Excluding ``p``: its own count adds ``p``'s time once to the implications at its
        location (when it is the earliest there), and nothing ``p`` leads to comes back at or
        before it (freezing refuses cycles that do not advance), so anything else below or at
        ``p``'s time is someone else's."""
        t, loc = p
        implied = self.implications[loc]
        if not exclude_self:
            return implied.less_equal(t)
        for f in implied.frontier:
            if f != t and product_le(f, t):
                return True
        own = 1 if t in self.pointstamps[loc].frontier else 0
        return implied.counts.get(t, 0) > own

    def is_minimal(self, p: Pointstamp) -> bool:
        """``p`` is active and no other active pointstamp could result in it."""
        return self.counts.get(p, 0) > 0 and not self.blocked(p, exclude_self=True)

    @property
    def frontier(self) -> set[Pointstamp]:
        """The active pointstamps that no other active pointstamp could result in (each is the
        earliest at its location): what holds everything else back."""
        if self._frontier_version != self.version:
            self._frontier = {
                (t, loc)
                for loc, here in enumerate(self.pointstamps)
                for t in here.frontier
                if not self.blocked((t, loc), exclude_self=True)
            }
            self._frontier_version = self.version
        return self._frontier

    def holds(self, p: Pointstamp, exclude_self: bool = False) -> list[Pointstamp]:
        """The frontier pointstamps that could result in ``p`` (what holds ``p`` back)."""
        cri = self.reach.could_result_in
        return [f for f in self.frontier if cri(f, p) and not (exclude_self and f == p)]

    def frontier_at(self, location: int) -> Antichain:
        """The earliest times at which something could still arrive at ``location``."""
        result = Antichain()
        result.elements = list(self.implications[location].frontier)
        return result

    def passed(self, location: int, time: tuple[int, ...]) -> bool:
        """Nothing at or before ``time`` can happen at ``location`` any more."""
        return not self.implications[location].less_equal(time)


def _consolidate(changes: Iterable[tuple[Pointstamp, int]]) -> list[tuple[Pointstamp, int]]:
    batch = ChangeBatch()
    for p, d in changes:
        batch.add(p, d)
    return list(batch.items())
