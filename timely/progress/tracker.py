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

While few pointstamps are active (at most `FEW_ACTIVE`: one epoch going round a loop, the
common case) the per-location antichains cost more than they save: a loop iteration moves a
change through every location of the cycle (``core.loop_latency``: 30 against 7 us an
iteration). Then the tracker keeps only the global frontier: a pointstamp that becomes active
is compared with the frontier; one that leaves it is replaced from the active set, which is
small. It switches to per-location frontiers when more than `MANY_ACTIVE` are active, and back
below `FEW_ACTIVE`; both views answer every question the same (the tests run both, and the
switches, against the brute-force reference).
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

    def merge(self, more: Mapping[Pointstamp, int]) -> None:
        """Add ``more``'s changes, dropping the entries that net to zero: two consecutive atomic
        batches merged are one atomic batch, and a ``+p`` in one meets the ``-p`` in the other
        before any tracker sees either."""
        get = self.get
        for key, delta in more.items():
            total = get(key, 0) + delta
            if total:
                self[key] = total
            else:
                self.pop(key, None)

    def drain(self) -> list[tuple[Pointstamp, int]]:
        items = [(p, d) for p, d in self.items() if d]
        self.clear()
        return items


FEW_ACTIVE = 32
"""Active pointstamps below which the tracker keeps only the global frontier."""
MANY_ACTIVE = 128
"""Active pointstamps above which the tracker keeps per-location frontiers."""


class ProgressTracker:
    """One process's view of the active pointstamps and the frontier at every location."""

    def __init__(self, reachability: Reachability, few: int = FEW_ACTIVE, many: int = MANY_ACTIVE) -> None:
        if not 0 <= few <= many:
            raise ValueError(f"need 0 <= few <= many, got {few} and {many}")
        self.reach = reachability
        self.few, self.many = few, many
        self.counts: dict[Pointstamp, int] = {}
        """Occurrence counts, nonzero entries only (may be negative transiently)."""
        self.active_count = 0
        """How many pointstamps have a positive count."""
        self.per_location = False
        """Whether the per-location frontiers are kept (many active) or only the global one."""
        self.pointstamps: list[MutableAntichain] = []
        """Per location (while `per_location`): the pointstamps there, and their frontier."""
        self.implications: list[MutableAntichain] = []
        """Per location (while `per_location`): the times there that some active pointstamp
        could result in."""
        self._active: dict[Pointstamp, None] = {}
        """While not `per_location`: the active pointstamps."""
        self._frontier: set[Pointstamp] = set()
        """While not `per_location`: the frontier; else the last one built (`frontier`)."""
        self._frontier_version = -1
        self.changed_locations: set[int] = set()
        """Locations whose implications changed since the runtime last took them
        (`take_changed_locations`): where a pending notification may have become deliverable."""
        self._changed_everywhere = False
        """The global frontier moved (without per-location frontiers): any location may have."""
        self._released: list[int] | None = []
        """While not `per_location`: the locations of the pointstamps that left the global
        frontier since the last `take_changed_locations` (None: not known, e.g. after a switch)."""
        self.released: list[int] | None = None
        """What `_released` held when `take_changed_locations` last answered None: only what
        these locations reach can have stopped being blocked (`notifications_may_run`)."""
        self.version = 0
        """Bumped whenever the frontier may have changed, so watchers skip unchanged views."""
        self.updates_applied = 0

    # Applying updates -----------------------------------------------------------------
    def update(self, changes: Mapping[Pointstamp, int] | Iterable[tuple[Pointstamp, int]]) -> None:
        """Apply one atomic batch of changes."""
        if type(changes) is ChangeBatch or isinstance(changes, Mapping):
            if len(changes) == 2 and self.active_count == 1 and not self.per_location and self._move_lone(changes):
                return
            items: Iterable[tuple[Pointstamp, int]] = changes.items()
        else:
            items = _consolidate(changes)
        counts = self.counts
        rising: list[Pointstamp] = []
        falling: list[Pointstamp] = []
        for p, d in items:
            if not d:
                continue
            old = counts.pop(p, 0)  # one lookup when the count goes to zero, the common retirement
            new = old + d
            if new:
                counts[p] = new
            if old <= 0 < new:
                rising.append(p)
            elif new <= 0 < old:
                falling.append(p)
        self.updates_applied += 1
        active = self.active_count = self.active_count + len(rising) - len(falling)
        if self.per_location:
            if active < self.few:
                self._leave_per_location()
            else:
                self._update_locations([(p, d) for p, d in items if d])
        elif active > self.many:
            self._enter_per_location()
        elif active <= 1:
            if rising or falling:
                self._replace_lone(rising, falling, active)
        else:
            for p in rising:  # positive before negative
                self._activate(p)
            for p in falling:
                self._deactivate(p)

    # The global frontier alone (few active) ------------------------------------------------
    def _move_lone(self, changes: Mapping[Pointstamp, int]) -> bool:
        """Apply a batch that moves the only active pointstamp's whole count to a new one, if
        ``changes`` is that; else change nothing and say so. It is what one epoch going round
        a loop does at every iteration (on each worker, when they go round together), and the
        new pointstamp is the frontier by itself: a third of the general path's work, which is
        a third of such an iteration."""
        (p, d), (q, e) = changes.items()
        if d < 0:
            p, d, q, e = q, e, p, d
        counts = self.counts
        if d + e or counts.get(q) != d or p in counts:
            return False
        del counts[q]
        counts[p] = d
        self.updates_applied += 1
        lone = self._active
        lone.clear()
        lone[p] = None
        frontier = self._frontier
        frontier.clear()
        frontier.add(p)
        self._released = None  # the lone pointstamp held everything back: whatever waits may run
        self.version += 1
        self._changed_everywhere = True
        return True

    def _replace_lone(self, rising: list[Pointstamp], falling: list[Pointstamp], active: int) -> None:
        """At most one pointstamp is active after the batch: it is the frontier by itself, with
        no could-result-in to ask (one epoch going round a loop, the common case)."""
        lone = self._active
        for p in rising:
            lone[p] = None
        for p in falling:
            del lone[p]
        frontier = self._frontier
        if active:
            (only,) = lone
            if only in frontier and len(frontier) == 1:
                return
        elif not frontier:
            return
        self._released = None  # one pointstamp held everything back: whatever waits may run
        frontier.clear()
        if active:
            frontier.add(only)
        self.version += 1
        self._changed_everywhere = True

    def _release(self, left: Iterable[Pointstamp]) -> None:
        """``left`` leave the global frontier: remember where they were (once in a row, so
        that a loop going round without a step keeps the list short)."""
        released = self._released
        if released is not None:
            for p in left:
                loc = p[1]
                if not released or released[-1] != loc:
                    released.append(loc)

    def _activate(self, p: Pointstamp) -> None:
        """``p`` became active. Some active pointstamp reaches it iff some frontier element
        does (could-result-in is transitive), so only the frontier is looked at."""
        self._active[p] = None
        reach = self.reach
        cri = reach.could_result_in
        reaches = reach.reaches
        loc = p[1]
        frontier = self._frontier
        for f in frontier:
            if reaches[f[1]][loc] and cri(f, p):
                return
        downstream = reaches[loc]
        displaced = [f for f in frontier if downstream[f[1]] and cri(p, f)]
        frontier.difference_update(displaced)
        frontier.add(p)
        self.version += 1
        self._changed_everywhere = True

    def _deactivate(self, p: Pointstamp) -> None:
        """``p`` is no longer active. Only if it was in the frontier can others join it: the
        active pointstamps that no other frontier element reaches (``p`` reached each of them,
        since the frontier reached every active pointstamp, so that is not asked again: in a
        loop it almost always does), least among themselves. A location no path joins answers
        no at once (`reaches`), so a wide graph's many incomparable pointstamps cost a list
        lookup each, not a call."""
        del self._active[p]
        frontier = self._frontier
        if p not in frontier:
            return  # whatever p reached, the frontier element that reached p reaches too
        frontier.discard(p)
        self.version += 1
        self._changed_everywhere = True
        released = self._released
        if released is not None:
            released.append(p[1])
        reach = self.reach
        cri = reach.could_result_in
        reaches = reach.reaches
        downstream = reaches[p[1]]
        joined: list[Pointstamp] = []
        for q in self._active:  # plain loops: this runs once a loop stage, a generator costs
            loc = q[1]
            if not downstream[loc]:
                continue
            for f in frontier:
                if reaches[f[1]][loc] and cri(f, q):
                    break
            else:
                for m in joined:
                    if reaches[m[1]][loc] and cri(m, q):
                        break
                else:
                    if joined:
                        joined = [m for m in joined if not (reaches[loc][m[1]] and cri(q, m))]
                    joined.append(q)
        frontier.update(joined)

    def _frontier_moved(self) -> None:
        self.version += 1
        self._changed_everywhere = True
        self._released = None

    # Per-location frontiers (many active) ----------------------------------------------------
    def _enter_per_location(self) -> None:
        """Build the per-location frontiers from the counts, and keep them from now on."""
        depths = self.reach.depths
        self.pointstamps = [MutableAntichain(total=depth == 0) for depth in depths]
        self.implications = [MutableAntichain(total=depth == 0) for depth in depths]
        self.per_location = True
        self._active.clear()
        self._update_locations(list(self.counts.items()))
        self._changed_everywhere = True
        self._released = None

    def _leave_per_location(self) -> None:
        """Few are active again: rebuild the global frontier from them, drop the rest."""
        self.per_location = False
        self.pointstamps, self.implications = [], []
        cri = self.reach.could_result_in
        active = [p for p, c in self.counts.items() if c > 0]
        self._active = dict.fromkeys(active)
        self._frontier = {p for p in active if not any(q != p and cri(q, p) for q in active)}
        self._frontier_moved()

    def _update_locations(self, applied: list[tuple[Pointstamp, int]]) -> None:
        by_location: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        for (t, loc), d in applied:
            group = by_location.get(loc)
            if group is None:
                by_location[loc] = [(t, d)]
            else:
                group.append((t, d))
        moved: dict[Pointstamp, int] = {}
        for loc, group in by_location.items():
            for t, d in self.pointstamps[loc].update(group):
                moved[(t, loc)] = d
        if moved:
            self._propagate(moved)

    def _propagate(self, work: dict[Pointstamp, int]) -> None:
        """Apply frontier changes to the implications, and move each change of an implication's
        frontier along the one-step summaries out of its location, earliest time first (so the
        changes that meet at one pointstamp are added up before they move on: a wave of
        ``-t`` and the ``+t'`` behind it cancel where they meet, which is what ends a cycle)."""
        heap = list(work)
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

    def take_changed_locations(self) -> set[int] | None:
        """The locations whose frontier may have moved since the last call, and forget them;
        None when it may have moved anywhere (the global frontier alone moved: then `released`
        says from which locations pointstamps left it)."""
        if self._changed_everywhere:
            self._changed_everywhere = False
            self.changed_locations.clear()
            self.released = self._released
            self._released = []
            return None
        changed = set(self.changed_locations)
        self.changed_locations.clear()
        return changed

    def notifications_may_run(self, locations: Iterable[int]) -> list[int]:
        """Of ``locations``, those where a notification `blocked` before the last
        `take_changed_locations` answered None may run now: only a pointstamp leaving the
        frontier unblocks anything (one joining it is reached by, or reaches, what was there),
        and only where it leads. A wide graph's frontier moves with every message; most of its
        waiting notifications lie where the message that left could not lead."""
        released = self.released
        if released is None:
            return list(locations)
        reaches = self.reach.reaches
        may: list[int] = []
        for loc in locations:  # plain loops: asked at every step whose frontier moved
            for r in released:
                if reaches[r][loc]:
                    may.append(loc)
                    break
        return may

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

        With per-location frontiers, excluding ``p``: its own count adds ``p``'s time once to
        the implications at its location (when it is the earliest there), and nothing ``p``
        leads to comes back at or before it (freezing refuses cycles that do not advance), so
        anything else below or at ``p``'s time is someone else's."""
        if not self.per_location:
            frontier = self._frontier
            if exclude_self and len(frontier) == 1 and p in frontier:
                return False  # p alone holds everything back: a loop going round asks this
            reach = self.reach
            into = p[1]
            reaches = reach.reaches
            for f in frontier:
                if exclude_self and f == p:
                    continue
                if reaches[f[1]][into] and reach.could_result_in(f, p):
                    return True
            return False
        t, loc = p
        implied = self.implications[loc]
        if not exclude_self:
            return implied.less_equal(t)
        for earliest in implied.frontier:
            if earliest != t and product_le(earliest, t):
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
        if self.per_location and self._frontier_version != self.version:
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
        if self.per_location:
            result.elements = list(self.implications[location].frontier)
            return result
        summaries = self.reach.summaries
        for t, loc in self._frontier:
            for s in summaries[loc][location]:
                result.insert(s.apply(t))
        return result

    def passed(self, location: int, time: tuple[int, ...]) -> bool:
        """Nothing at or before ``time`` can happen at ``location`` any more."""
        if self.per_location:
            return not self.implications[location].less_equal(time)
        return not self.blocked((time, location))


def _consolidate(changes: Iterable[tuple[Pointstamp, int]]) -> list[tuple[Pointstamp, int]]:
    batch = ChangeBatch()
    for p, d in changes:
        batch.add(p, d)
    return list(batch.items())
