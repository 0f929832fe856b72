"""The partial order on a collection's times (TR §4): the product order.

A time is a timely `Timestamp` (a flat tuple ``(epoch, c1, ..., ck)``); each loop adds a
coordinate. ``a <= b`` when every coordinate of ``a`` is at most ``b``'s, so the work of an
earlier epoch at iteration ``i`` is reused at iteration ``i`` of a later epoch, and a
change at epoch ``e`` still reaches every iteration after it. ``join`` is the least upper
bound, the first time at which two differences are both part of a collection.

(`prioritize` adds a coordinate in the product order too, not the TR's lexicographic one;
docs/linq.md, "Loops", says why.)

Operators need ``le`` and ``join`` once per record in join and reduce, so depth 0 and 1
get their own functions.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Lattice", "FAR", "advance_epoch"]

Time = tuple[int, ...]

FAR = 1 << 62
"""A loop counter no loop reaches: ``(e, FAR, ...)`` is after every time of epoch ``e``."""


def _le0(a: Time, b: Time) -> bool:
    return a[0] <= b[0]  # type: ignore[no-any-return]


def _le1(a: Time, b: Time) -> bool:
    return a[0] <= b[0] and a[1] <= b[1]  # type: ignore[no-any-return]


def _le(a: Time, b: Time) -> bool:
    for x, y in zip(a, b):
        if x > y:
            return False
    return True


def _join(a: Time, b: Time) -> Time:
    return tuple(map(max, a, b))


class Lattice:
    """The order of one scope's times; ``depth`` is the number of loops around the scope."""

    __slots__ = ("depth", "join", "le")

    def __init__(self, depth: int = 0) -> None:
        self.depth = depth
        self.le: Callable[[Time, Time], bool] = _le0 if depth == 0 else _le1 if depth == 1 else _le
        self.join: Callable[[Time, Time], Time] = _join

    def enter(self) -> Lattice:
        """The order inside a loop: one more coordinate."""
        return Lattice(self.depth + 1)

    def end_of_epoch(self, epoch: int) -> Time:
        """A time after every time of ``epoch`` (and before every time of later epochs)."""
        return (epoch, *([FAR] * self.depth))

    def __repr__(self) -> str:
        return f"Lattice(depth={self.depth})"


def advance_epoch(time: Time, epoch: int) -> Time:
    """Compaction (TR §5.3): once no time of an epoch before ``epoch`` can arrive, a time of an
    earlier epoch is indistinguishable from the same time moved to ``epoch``; moving it lets
    differences of many epochs consolidate into one."""
    if time[0] >= epoch:
        return time
    return (epoch, *time[1:])
