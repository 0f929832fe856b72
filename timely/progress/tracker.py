"""The progress tracker: occurrence counts, the active pointstamps and their frontier (Naiad §2.3, §3.3).

Each process keeps one `ProgressTracker`: its *local view* of the pointstamps that are
active anywhere. The view changes only by `update` with an atomic batch of
``(pointstamp, delta)`` changes. Batches come from this process's own callbacks (applied at
once) and from other processes (applied in the order each sender broadcast them: FIFO per
channel). A pointstamp's count may dip below zero for a while, when a consumer's ``-1``
arrives before the producer's ``+1``; the producer's batch still holds the pointstamp that
caused it, so the view stays conservative. `docs/progress.md` has the argument.

Within a batch, positive deltas are applied before negative ones, so the frontier never
moves past a pointstamp that a batch both creates and covers.

The *frontier* is the set of active pointstamps (count > 0) that no other active pointstamp
could result in. Because could-result-in is transitive, a pointstamp ``q`` can still be
reached by some active event iff some frontier element reaches it, so every question the
runtime asks (is this notification deliverable? has this probe passed time t?) is a scan of
the frontier, which is small; and so is keeping the frontier up to date when a pointstamp
becomes active. Only when a frontier element goes are the active pointstamps scanned, for
those it alone held back. (Naiad §3.3 keeps a precursor count per active pointstamp instead,
which costs a scan of every active pointstamp on every change: with many epochs in flight
through nested loops, hundreds of them on each of thousands of changes.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .antichain import Antichain
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
    """One process's view of the active pointstamps and their frontier."""

    def __init__(self, reachability: Reachability) -> None:
        self.reach = reachability
        self.counts: dict[Pointstamp, int] = {}
        """Occurrence counts, nonzero entries only (may be negative transiently)."""
        self.active: dict[Pointstamp, None] = {}
        """The pointstamps with a positive count, in the order they became so."""
        self.frontier: set[Pointstamp] = set()
        """The active pointstamps that no other active pointstamp could result in."""
        self.newly_minimal: list[Pointstamp] = []
        """Pointstamps that joined the frontier since the runtime last drained this list."""
        self.version = 0
        """Bumped whenever the frontier changes, so watchers can skip unchanged views."""
        self.updates_applied = 0

    # Applying updates -----------------------------------------------------------------
    def update(self, changes: Mapping[Pointstamp, int] | Iterable[tuple[Pointstamp, int]]) -> None:
        """Apply one atomic batch of changes."""
        items = (
            changes.items() if type(changes) is ChangeBatch or isinstance(changes, Mapping) else _consolidate(changes)
        )
        counts = self.counts
        rising: list[Pointstamp] = []
        falling: list[Pointstamp] = []
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
                rising.append(p)
            elif new <= 0 < old:
                falling.append(p)
        self.updates_applied += 1
        for p in rising:  # positive before negative
            self._activate(p)
        for p in falling:
            self._deactivate(p)

    def _activate(self, p: Pointstamp) -> None:
        """``p`` became active. Some active pointstamp reaches it iff some frontier element
        does (could-result-in is transitive), so only the frontier is looked at."""
        self.active[p] = None
        cri = self.reach.could_result_in
        frontier = self.frontier
        for f in frontier:
            if cri(f, p):
                return
        displaced = [f for f in frontier if cri(p, f)]
        frontier.difference_update(displaced)
        frontier.add(p)
        self.newly_minimal.append(p)
        self.version += 1

    def _deactivate(self, p: Pointstamp) -> None:
        """``p`` is no longer active. Only if it was in the frontier can others join it: the
        active pointstamps that ``p`` reached, no other frontier element reaches, and are
        least among themselves."""
        del self.active[p]
        frontier = self.frontier
        if p not in frontier:
            return  # whatever p reached, the frontier element that reached p reaches too
        frontier.discard(p)
        self.version += 1
        cri = self.reach.could_result_in
        joined: list[Pointstamp] = []
        for q in self.active:
            if not cri(p, q) or any(cri(f, q) for f in frontier) or any(cri(m, q) for m in joined):
                continue
            joined = [m for m in joined if not cri(q, m)]
            joined.append(q)
        frontier.update(joined)
        self.newly_minimal.extend(joined)

    # Questions --------------------------------------------------------------------------
    def is_empty(self) -> bool:
        """No active pointstamp: nothing anywhere can happen any more."""
        return not self.active

    def is_minimal(self, p: Pointstamp) -> bool:
        """``p`` is active and no other active pointstamp could result in it."""
        return p in self.frontier

    def holds(self, p: Pointstamp, exclude_self: bool = False) -> list[Pointstamp]:
        """The frontier pointstamps that could result in ``p`` (what holds ``p`` back)."""
        cri = self.reach.could_result_in
        return [f for f in self.frontier if cri(f, p) and not (exclude_self and f == p)]

    def blocked(self, p: Pointstamp, exclude_self: bool = False) -> bool:
        """Some active pointstamp (other than ``p`` itself, if asked) could result in ``p``."""
        cri = self.reach.could_result_in
        for f in self.frontier:
            if cri(f, p) and not (exclude_self and f == p):
                return True
        return False

    def frontier_at(self, location: int) -> Antichain:
        """The earliest times at which something could still arrive at ``location``."""
        result = Antichain()
        summaries = self.reach.summaries
        for t, loc in self.frontier:
            for s in summaries[loc][location]:
                result.insert(s.apply(t))
        return result


def _consolidate(changes: Iterable[tuple[Pointstamp, int]]) -> list[tuple[Pointstamp, int]]:
    batch = ChangeBatch()
    for p, d in changes:
        batch.add(p, d)
    return list(batch.items())
