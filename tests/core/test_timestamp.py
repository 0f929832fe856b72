"""Timestamps: the paper's table for ingress/egress/feedback, the product order and its lattice."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely import Timestamp

times = st.integers(0, 3).flatmap(
    lambda d: st.tuples(st.integers(0, 5), st.tuples(*[st.integers(0, 5)] * d)).map(lambda p: Timestamp(*p))
)


def test_loop_vertices_change_times_as_in_the_papers_table() -> None:
    t = Timestamp(4, (1, 2))
    assert t.enter() == Timestamp(4, (1, 2, 0))  # ingress
    assert t.leave() == Timestamp(4, (1,))  # egress
    assert t.advance() == Timestamp(4, (1, 3))  # feedback
    inner = Timestamp(4, (7,)).advance()  # one loop: built without a slice
    assert inner == Timestamp(4, (8,)) and type(inner) is Timestamp
    assert (t.epoch, t.counters, t.depth) == (4, (1, 2), 2)
    with pytest.raises(ValueError, match="not inside a loop"):
        Timestamp(1).advance()
    with pytest.raises(ValueError, match="non-negative"):
        Timestamp(-1)


@given(times, times, times)
def test_product_order_is_a_partial_order_with_join_and_meet(a: Timestamp, b: Timestamp, c: Timestamp) -> None:
    assert a.less_equal(a)
    if a.depth != b.depth:
        return
    if a.less_equal(b) and b.less_equal(a):
        assert a == b
    brute = all(x <= y for x, y in zip(a, b))
    assert a.less_equal(b) == brute
    j, m = a.join(b), a.meet(b)
    assert a.less_equal(j) and b.less_equal(j) and m.less_equal(a) and m.less_equal(b)
    if c.depth == a.depth and a.less_equal(c) and b.less_equal(c):
        assert j.less_equal(c)
    if a.less_equal(b):
        assert a <= b  # the tuple order is a linear extension of the product order


def test_product_order_leaves_some_times_incomparable() -> None:
    a, b = Timestamp(1, (5,)), Timestamp(2, (3,))
    assert not a.less_equal(b) and not b.less_equal(a)
    assert a.join(b) == Timestamp(2, (5,)) and a.meet(b) == Timestamp(1, (3,))
    for x, y in itertools.permutations([a, b]):
        assert not x.less_than(y)


def test_timestamps_hash_and_print_as_the_paper_writes_them() -> None:
    assert str(Timestamp(3, (0, 1))) == "(3, (0, 1))" and str(Timestamp(3)) == "(3)"
    assert {Timestamp(1, (2,)): "x"}[Timestamp(1, (2,))] == "x"
    assert repr(Timestamp(1, (2,))) == "Timestamp(1, (2,))"
