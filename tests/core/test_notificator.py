"""The `Notificator` against a list of pending requests: whatever mix of adds and looks, it
holds the same requests, coalesces the same repeats and hands out the same ones in the same
order as a sorted scan of everything pending would.

The notificator keeps one request alone (no heap, no set) and moves it to the heap when a
second arrives; these runs go back and forth between the two.

What is held back is, as the tracker's answers are, closed upwards: every time at or after a
held one (product order) is held too. A look inside a loop asks only about the times at no
held time found so far, so the last test counts the questions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from timely._runtime.worker import Notificator
from timely.timestamp import Timestamp, product_le

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
            if is_held(request[0], held):
                if self.total:
                    break
                continue
            taken.append(request)
        self.pending = [r for r in self.pending if r not in taken]
        return taken


def is_held(time: Timestamp, held: frozenset[Timestamp]) -> bool:
    """``time`` is at or after one of ``held`` (the product order)."""
    return any(product_le(h, time) for h in held)


def held_back_at(
    held: frozenset[Timestamp], asked: list[Timestamp] | None = None
) -> Callable[[tuple[tuple[int, ...], int], bool], bool]:
    """A stand-in for the tracker's ``blocked``: the times at or after those in ``held`` are
    held back; each question is appended to ``asked``."""

    def held_back(p: tuple[tuple[int, ...], int], exclude_self: bool) -> bool:
        assert exclude_self and p[1] == LOCATION
        if asked is not None:
            asked.append(p[0])  # type: ignore[arg-type]
        return is_held(p[0], held)  # type: ignore[arg-type]

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


def test_a_look_inside_a_loop_asks_nothing_about_times_after_one_held_back() -> None:
    """A loop stage asks for the next few iterations of two epochs, and one of a third; one
    question about a held-back iteration answers for every later one of its epoch and of the
    epochs after, and a time not after it (an earlier iteration of a later epoch) is still
    asked about, and runs."""
    notificator = Notificator(total=False)
    for epoch in (0, 1):
        for i in range(5):
            notificator.add(Timestamp(epoch, (i,)), None)
    notificator.add(Timestamp(2, (0,)), None)
    asked: list[Timestamp] = []
    held = frozenset({Timestamp(0, (1,)), Timestamp(1, (0,))})
    taken = notificator.take_ready(held_back_at(held, asked), LOCATION)
    assert taken == [(Timestamp(0, (0,)), None)]
    assert asked == [Timestamp(0, (0,)), Timestamp(0, (1,)), Timestamp(1, (0,))]
    assert len(notificator) == 10
    asked.clear()
    taken = notificator.take_ready(held_back_at(frozenset({Timestamp(0, (3,))}), asked), LOCATION)
    ran = [Timestamp(0, (1,)), Timestamp(0, (2,)), Timestamp(1, (0,)), Timestamp(1, (1,)), Timestamp(1, (2,))]
    assert [t for t, _ in taken] == [*ran, Timestamp(2, (0,))]
    assert asked == [*ran[:2], Timestamp(0, (3,)), *ran[2:], Timestamp(2, (0,))]  # not (0, 4), (1, 3), (1, 4)
    asked.clear()
    assert notificator.take_ready(held_back_at(frozenset({Timestamp(0, (3,))}), asked), LOCATION) == []
    assert asked == [Timestamp(0, (3,))]  # one question: every other pending time is after it
