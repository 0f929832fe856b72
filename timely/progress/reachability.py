"""Could-result-in on the logical graph (Naiad §2.3).

`Reachability` is built once, when the graph is frozen, from the locations (vertices and
edges of the logical graph, each with its loop depth) and the one-step summaries between
them. It computes, for every ordered pair of locations, the antichain of path summaries
that no other path dominates, and answers ``could_result_in(p, q)``: whether an event at
pointstamp ``p`` could lead to one at ``q``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ..timestamp import product_le
from .summary import PathSummary

__all__ = ["Reachability", "Step", "Pointstamp"]

Pointstamp = tuple[tuple[int, ...], int]
"""``(time, location)``; the time is a flat timestamp tuple, the location an int."""


@dataclass(frozen=True, slots=True)
class Step:
    """One edge of the location graph: ``source`` leads to ``target`` through ``summary``."""

    source: int
    target: int
    summary: PathSummary


class Reachability:
    """All-pairs minimal path summaries and the could-result-in relation."""

    def __init__(self, depths: Sequence[int], steps: Sequence[Step]) -> None:
        self.depths = list(depths)
        n = len(self.depths)
        successors: list[list[Step]] = [[] for _ in range(n)]
        for step in steps:
            if step.summary.output_length != self.depths[step.target] + 1:
                raise ValueError(f"step {step} does not reach the depth of location {step.target}")
            successors[step.source].append(step)
        self.successors = successors
        # summaries[a][b]: tuple of undominated summaries from a to b (empty: unreachable)
        self.summaries: list[list[tuple[PathSummary, ...]]] = [self._from(a) for a in range(n)]
        self.reaches: list[list[bool]] = [[bool(s) for s in row] for row in self.summaries]
        """``reaches[a][b]``: some path leads from location ``a`` to ``b``. A list lookup, where
        `could_result_in` is a call: the tracker asks it first, since in a wide graph most pairs of
        active pointstamps are at locations no path joins."""
        # identity[a][b]: the only summary from a to b is the identity (the common case)
        self._identity = [
            [len(s) == 1 and s[0] == PathSummary.identity(self.depths[a]) for s in row]
            for a, row in enumerate(self.summaries)
        ]
        # lone[a][b]: (keep, inc) when the only summary from a to b keeps the first ``keep <= 2``
        # coordinates, adds ``inc`` to the last kept one and appends zeros (which every time
        # is at or after: coordinates are non-negative), else None. Such pairs (a loop's locations,
        # round its feedback; into and out of one loop) are what a loop's progress asks about.
        self._lone: list[list[tuple[int, int] | None]] = [[_lone(s) for s in row] for row in self.summaries]

    def _from(self, source: int) -> list[tuple[PathSummary, ...]]:
        n = len(self.depths)
        best: list[list[PathSummary]] = [[] for _ in range(n)]
        start = PathSummary.identity(self.depths[source])
        best[source].append(start)
        work = deque([(source, start)])
        while work:
            loc, summary = work.popleft()
            if summary not in best[loc]:
                continue  # superseded since it was queued
            for step in self.successors[loc]:
                candidate = summary.then(step.summary)
                antichain = best[step.target]
                if any(s.dominates(candidate) for s in antichain):
                    continue
                antichain[:] = [s for s in antichain if not candidate.dominates(s)]
                antichain.append(candidate)
                work.append((step.target, candidate))
        return [tuple(a) for a in best]

    def could_result_in(self, p: Pointstamp, q: Pointstamp) -> bool:
        """Whether an event at pointstamp ``p`` could cause one at ``q`` (reflexive)."""
        a, b = p[1], q[1]
        if self._identity[a][b]:
            return product_le(p[0], q[0])
        lone = self._lone[a][b]
        if lone is not None:
            early, late = p[0], q[0]
            keep, inc = lone
            if keep == 1:
                return early[0] + inc <= late[0]  # type: ignore[no-any-return]
            return early[0] <= late[0] and early[1] + inc <= late[1]  # type: ignore[no-any-return]
        for s in self.summaries[a][b]:
            if s.results_le(p[0], q[0]):
                return True
        return False

    def reachable(self, a: int, b: int) -> bool:
        return bool(self.summaries[a][b])

    def results_at(self, p: Pointstamp, location: int) -> list[tuple[int, ...]]:
        """The earliest times at ``location`` that an event at ``p`` could cause."""
        return [s.apply(p[0]) for s in self.summaries[p[1]][location]]


def _lone(summaries: tuple[PathSummary, ...]) -> tuple[int, int] | None:
    """``(keep, inc)`` of a lone summary that keeps at most two coordinates and appends only
    zeros; None for anything else (`Reachability._lone`)."""
    if len(summaries) != 1:
        return None
    (s,) = summaries
    if s.keep > 2 or any(s.tail):
        return None
    return s.keep, s.inc
