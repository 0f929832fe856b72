"""Times as frontiers: antichains under the product order, and a batch's `Description`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import le

__all__ = ["Antichain", "Description", "Time", "antichain", "beyond"]

Time = tuple[int, ...]
Antichain = tuple[Time, ...]
"""Mutually incomparable times (product order), sorted: a frontier."""


def antichain(times: Iterable[Time]) -> Antichain:
    """The minimal elements of ``times``: the frontier they generate."""
    out: list[Time] = []
    for t in sorted(set(times)):
        if not any(all(map(le, f, t)) for f in out):
            out = [f for f in out if not all(map(le, t, f))]
            out.append(t)
    return tuple(out)


def beyond(frontier: Antichain, t: Time) -> bool:
    """Some element of ``frontier`` is ``<= t`` (``t`` is at or beyond the frontier)."""
    return any(all(map(le, f, t)) for f in frontier)


def _upper_of(latest: Time) -> Antichain:
    """The least frontier no time ``<= latest`` is beyond: ``latest`` plus one in each coordinate."""
    return tuple((*latest[:i], latest[i] + 1, *latest[i + 1 :]) for i in range(len(latest)))


@dataclass(frozen=True, slots=True)
class Description:
    """What a batch says about its times (differential-dataflow's ``BatchReader::description``):
    every row's time is beyond ``lower`` and not beyond ``upper``, and was advanced by ``since``."""

    lower: Antichain
    upper: Antichain
    since: Antichain

    @classmethod
    def of(cls, earliest: Time, latest: Time, since: Antichain) -> Description:
        """The description of rows whose times lie between ``earliest`` and ``latest`` (the meet
        and the join of their times)."""
        return cls((earliest,), _upper_of(latest), since)

    def holds(self, t: Time) -> bool:
        """``t`` may be the time of one of the batch's rows."""
        return beyond(self.lower, t) and not beyond(self.upper, t)
