"""Path summaries: what a path through the graph does to a timestamp.

Every path is a sequence of ingress (append a 0), egress (drop the last counter) and
feedback (increment the last counter) steps, and any such sequence has the normal form

    t  ->  t[:keep-1] + (t[keep-1] + inc,) + tail

i.e. keep the first ``keep`` coordinates, add ``inc`` to the last kept one, then append
the constant coordinates ``tail`` (counters created by ingress and bumped by feedback after
the path's shallowest point). Summaries compose (`then`) and are partially ordered by
`dominates`: ``a.dominates(b)`` when ``a(t) <= b(t)`` for every ``t``. Between two locations
the progress tracker keeps the antichain of summaries no other path dominates.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..timestamp import _from_flat

__all__ = ["PathSummary"]


@dataclass(frozen=True, slots=True)
class PathSummary:
    keep: int
    inc: int = 0
    tail: tuple[int, ...] = ()

    # Constructors for the four kinds of step ------------------------------------
    @staticmethod
    def identity(depth: int) -> PathSummary:
        return PathSummary(depth + 1)

    @staticmethod
    def ingress(depth: int) -> PathSummary:
        """From ``depth`` loop counters to ``depth + 1``."""
        return PathSummary(depth + 1, 0, (0,))

    @staticmethod
    def egress(depth: int) -> PathSummary:
        """From ``depth`` loop counters (``depth >= 1``) to ``depth - 1``."""
        if depth < 1:
            raise ValueError("egress needs a loop counter to drop")
        return PathSummary(depth)

    @staticmethod
    def feedback(depth: int) -> PathSummary:
        if depth < 1:
            raise ValueError("feedback needs a loop counter to advance")
        return PathSummary(depth + 1, 1)

    @property
    def output_length(self) -> int:
        return self.keep + len(self.tail)

    # Using a summary -------------------------------------------------------------
    def apply(self, time: tuple[int, ...]) -> tuple[int, ...]:
        k = self.keep
        if k == len(time) and not self.inc and not self.tail:
            return time
        return _from_flat((*time[: k - 1], time[k - 1] + self.inc, *self.tail))

    def results_le(self, time: tuple[int, ...], target: tuple[int, ...]) -> bool:
        """``apply(time) <= target`` in the product order, without building the result."""
        k = self.keep - 1
        for i in range(k):
            if time[i] > target[i]:
                return False
        if time[k] + self.inc > target[k]:
            return False
        for j, c in enumerate(self.tail, k + 1):
            if c > target[j]:
                return False
        return True

    # Algebra -----------------------------------------------------------------------
    def then(self, other: PathSummary) -> PathSummary:
        """The summary of following this path and then ``other``."""
        coords = self._coords()
        k2 = other.keep
        out = coords[: k2 - 1]
        kind, value = coords[k2 - 1]
        out.append((kind, value + other.inc))
        out.extend(("c", c) for c in other.tail)
        return PathSummary._from_coords(out)

    def dominates(self, other: PathSummary) -> bool:
        """``self(t) <= other(t)`` for every timestamp ``t``."""
        a, b = self._coords(), other._coords()
        if len(a) != len(b):
            return False
        for (ka, va), (kb, vb) in zip(a, b):
            if ka == "v" and kb == "c":
                return False  # an unbounded input coordinate is not below a constant
            if va > vb:
                return False
        return True

    def _coords(self) -> list[tuple[str, int]]:
        """Each output coordinate as ("v", offset) = input coordinate + offset, or ("c", value)."""
        coords: list[tuple[str, int]] = [("v", 0)] * (self.keep - 1)
        coords.append(("v", self.inc))
        coords.extend(("c", c) for c in self.tail)
        return coords

    @staticmethod
    def _from_coords(coords: list[tuple[str, int]]) -> PathSummary:
        keep = 0
        while keep < len(coords) and coords[keep][0] == "v":
            keep += 1
        if keep == 0:
            raise ValueError("a path summary must keep the epoch")
        return PathSummary(keep, coords[keep - 1][1], tuple(v for _, v in coords[keep:]))

    def __repr__(self) -> str:
        parts = [f"keep={self.keep}"]
        if self.inc:
            parts.append(f"inc={self.inc}")
        if self.tail:
            parts.append(f"tail={self.tail}")
        return f"PathSummary({', '.join(parts)})"
