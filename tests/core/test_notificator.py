"""The `Notificator` against a list of pending requests: whatever mix of adds and looks, it
holds the same requests, coalesces the same repeats and hands out the same ones in the same
order as a sorted scan of everything pending would.

The notificator keeps one request alone (no heap, no set) and moves it to the heap when a
second arrives; these runs go back and forth between the two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from timely._runtime.worker import Notificator
from timely.timestamp import Timestamp

LOCATION = 3

times = st.builds(lambda e, c: Timestamp(e, (c,)), st.integers(0, 2), st.integers(0, 2))
capabilities = st.one_of(st.none(), times)
adds = st.tuples(st.just("add"), times, capabilities)
looks = st.tuples(st.just("look"), st.frozensets(times, max_size=4), st.none())


class Reference:
    """Pending requests in arrival order; a look takes those not held back, sorted by
    (guarantee, arrival). A total order stops at the first held back one."""

    def __init__(self, total: bool) -> None:
        self.total = total
        self.pending: list[tuple[Timestamp, Timestamp | None]] = []

    def add(self, guarantee: Timestamp, capability: Timestamp | None) -> bool:
        if (guarantee, capability) in self.pending:
            return False
        self.pending.append((guarantee, capability))
        return True

    def take_ready(self, held: frozenset[Timestamp]) -> list[tuple[Timestamp, Timestamp | None]]:
        ordered = sorted(enumerate(self.pending), key=lambda e: (e[1][0], e[0]))
        taken = []
        for _, request in ordered:
            if request[0] in held:
                if self.total:
                    break
                continue
            taken.append(request)
        self.pending = [r for r in self.pending if r not in taken]
        return taken


def held_back_at(held: frozenset[Timestamp]) -> Callable[[tuple[tuple[int, ...], int], bool], bool]:
    """A stand-in for the tracker's ``blocked``: the times in ``held`` are held back."""

    def held_back(p: tuple[tuple[int, ...], int], exclude_self: bool) -> bool:
        assert exclude_self and p[1] == LOCATION
        return p[0] in held

    return held_back


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.lists(st.one_of(adds, looks), max_size=30))
def test_the_notificator_holds_and_hands_out_what_a_sorted_scan_would(total: bool, ops: list[Any]) -> None:
    notificator = Notificator(total)
    reference = Reference(total)

    for op, a, b in ops:
        if op == "add":
            assert notificator.add(a, b) == reference.add(a, b)
        else:
            assert notificator.take_ready(held_back_at(a), LOCATION) == reference.take_ready(a)
        assert len(notificator) == len(reference.pending)
        ordered = sorted(enumerate(reference.pending), key=lambda e: (e[1][0], e[0]))
        assert [tuple(r) for r in notificator] == [r for _, r in ordered]
        assert notificator.earliest() == (ordered[0][1][0] if ordered else None)
        assert all(type(r).__name__ == "NotificationRequest" for r in notificator)
