"""libs/bloom's lattices obey the lattice laws, and every method marked monotone (or morphism)
keeps order (or distributes over merge), checked with Hypothesis on random values; the values
cross processes through timely's codec unchanged."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely
from timely_libs import bloom
from timely_libs.bloom import Lattice, LBag, LBool, LCounter, LMap, LMax, LMin, LPair, LPSet, LSet

small = st.integers(-4, 4)
lmax = st.one_of(st.none(), small).map(LMax)
lmin = st.one_of(st.none(), small).map(LMin)
lbool = st.booleans().map(LBool)
lset = st.frozensets(st.integers(0, 6), max_size=5).map(LSet)
lmap = st.dictionaries(st.integers(0, 3), lmax, max_size=4).map(LMap)
lmap_of_sets = st.dictionaries(st.sampled_from("ab"), lset, max_size=2).map(LMap)
lcounter = st.dictionaries(st.sampled_from("abc"), st.integers(0, 5), max_size=3).map(LCounter)
lbag = st.dictionaries(st.integers(0, 4), st.integers(1, 3), max_size=4).map(LBag)
lpset = st.frozensets(st.integers(0, 6), max_size=5).map(LPSet)
lmap_of_bools = st.dictionaries(st.integers(0, 3), lbool, max_size=4).map(LMap)
lpair = st.tuples(st.one_of(st.none(), lmax), st.one_of(st.none(), lset)).map(lambda t: LPair(*t))

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "LMax": lmax,
    "LMin": lmin,
    "LBool": lbool,
    "LSet": lset,
    "LMap": lmap,
    "LMap[LSet]": lmap_of_sets,
    "LCounter": lcounter,
    "LPair": lpair,
    "LBag": lbag,
    "LPSet": lpset,
    "LMap[LBool]": lmap_of_bools,
}


def triples(name: str) -> st.SearchStrategy[tuple[Any, Any, Any]]:
    s = STRATEGIES[name]
    return st.tuples(s, s, s)


@pytest.mark.parametrize("name", list(STRATEGIES))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_merge_is_associative_commutative_idempotent_with_bottom_as_identity(name: str, data: st.DataObject) -> None:
    a, b, c = data.draw(triples(name))
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(b) == b.merge(a)
    assert a.merge(a) == a
    bottom = type(a).bottom()
    assert bottom.merge(a) == a == a.merge(bottom)
    assert bottom <= a
    assert type(a).merge_all([a, b, c]) == a.merge(b).merge(c)
    assert type(a).merge_all([]) == bottom


@pytest.mark.parametrize("name", list(STRATEGIES))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_order_is_a_partial_order_with_merge_as_least_upper_bound(name: str, data: st.DataObject) -> None:
    a, b, c = data.draw(triples(name))
    m = a.merge(b)
    assert a <= m and b <= m
    if a <= c and b <= c:
        assert m <= c  # least
    if a <= b and b <= a:
        assert a == b  # antisymmetric
    if a <= b and b <= c:
        assert a <= c  # transitive
    assert hash(m) == hash(b.merge(a))


def test_orders_read_as_bloom_says() -> None:
    assert LMax(3) <= LMax(5) and not LMax(5) <= LMax(3) and LMax() <= LMax(-100)
    assert LMin(5) <= LMin(3) and LMin() <= LMin(1000)  # smaller distance is higher
    assert LBool(False) < LBool(True)
    assert LSet([1]) <= LSet([1, 2]) and not LSet([1, 3]) <= LSet([1, 2])
    assert LMap({"a": LMax(1)}).merge(LMap({"a": LMax(2), "b": LMax(0)})) == LMap({"a": LMax(2), "b": LMax(0)})
    assert LCounter.of("r1", 2).merge(LCounter.of("r1", 2)).total() == LMax(2)  # heard twice, counted once
    assert LCounter.of("r1", 2).merge(LCounter.of("r2", 3)).total() == LMax(5)
    with pytest.raises(bloom.BloomError, match="LMax.merge: needs another LMax"):
        LMax(1).merge(LSet())  # type: ignore[arg-type]
    with pytest.raises(bloom.BloomError, match="not a lattice"):
        LMap({"a": 1})  # type: ignore[arg-type]


def test_buds_other_lattices_and_methods_read_as_bud_says() -> None:
    assert LBag({"a": 2}).merge(LBag({"a": 1, "b": 1})) == LBag({"a": 2, "b": 1})
    assert LBag({"a": 2}).plus(LBag({"a": 1})).multiplicity("a") == LMax(3)
    assert LBag({"a": 2, "b": 1}).size() == LMax(3)
    assert LPSet([1, 2, 5]).pos_sum() == LMax(8)
    assert LMax(7).min_of(5) == LMax(5) and LMax(3).min_of(5) == LMax(3)
    assert LBool(False).when_true(LMax(4)) == LMax() and LBool(True).when_true(LMax(4)) == LMax(4)
    assert LSet([1, 2, 3]).group_count(lambda x: x % 2) == LMap({0: LMax(1), 1: LMax(2)})
    m = LMap({"a": LMax(1), "b": LMax(5)})
    assert m.project(["b", "z"]) == LMap({"b": LMax(5)}) and m.has_key("a") == LBool(True)
    assert m.apply(_at_least_one) == LMap({"a": LBool(True), "b": LBool(True)})
    assert m.apply(_at_least_one).filter().key_set() == LSet(["a", "b"])
    with pytest.raises(bloom.BloomError, match="not marked monotone"):
        m.apply(lambda v: v)
    with pytest.raises(bloom.BloomError, match="not a number >= 0"):
        LPSet([-1])
    with pytest.raises(bloom.BloomError, match="multiplicities are ints > 0"):
        LBag({"a": 0})
    with pytest.raises(bloom.BloomError, match="LSet.merge: needs another LSet"):
        LSet([1]).merge(LPSet([1]))


@bloom.monotone
def _at_least_one(v: LMax) -> LBool:
    return v.gt_eq(1)


# Monotone functions ------------------------------------------------------------------------------
ARGS: dict[tuple[str, str], tuple[str, tuple[Any, ...]]] = {
    # (class, method): (strategy of the receiver, extra arguments)
    ("LMax", "gt"): ("LMax", (1,)),
    ("LMax", "gt_eq"): ("LMax", (0,)),
    ("LMax", "add"): ("LMax", (3,)),
    ("LMax", "min_of"): ("LMax", (1,)),
    ("LBool", "when_true"): ("LBool", (LSet([1, 2]),)),
    ("LMin", "lt"): ("LMin", (1,)),
    ("LMin", "lt_eq"): ("LMin", (0,)),
    ("LMin", "add"): ("LMin", (2,)),
    ("LSet", "size"): ("LSet", ()),
    ("LSet", "contains"): ("LSet", (3,)),
    ("LSet", "map"): ("LSet", (lambda x: x % 3,)),
    ("LSet", "filter"): ("LSet", (lambda x: x % 2 == 0,)),
    ("LSet", "intersect"): ("LSet", (LSet([1, 2, 5]),)),
    ("LSet", "product"): ("LSet", (LSet([0, 1]),)),
    ("LSet", "group_count"): ("LSet", (lambda x: x % 2,)),
    ("LMap", "at"): ("LMap", (1, LMax())),
    ("LMap", "key_set"): ("LMap", ()),
    ("LMap", "size"): ("LMap", ()),
    ("LMap", "has_key"): ("LMap", (2,)),
    ("LMap", "project"): ("LMap", ((0, 2),)),
    ("LMap", "filter"): ("LMap[LBool]", ()),
    ("LMap", "apply"): ("LMap", (_at_least_one,)),
    ("LPSet", "pos_sum"): ("LPSet", ()),
    ("LPSet", "size"): ("LPSet", ()),
    ("LPSet", "contains"): ("LPSet", (3,)),
    ("LPSet", "map"): ("LPSet", (lambda x: x % 3,)),
    ("LPSet", "filter"): ("LPSet", (lambda x: x % 2 == 0,)),
    ("LPSet", "intersect"): ("LPSet", (LSet([1, 2, 5]),)),
    ("LPSet", "product"): ("LPSet", (LSet([0, 1]),)),
    ("LPSet", "group_count"): ("LPSet", (lambda x: x % 2,)),
    ("LBag", "multiplicity"): ("LBag", (1,)),
    ("LBag", "contains"): ("LBag", (2,)),
    ("LBag", "size"): ("LBag", ()),
    ("LBag", "plus"): ("LBag", (LBag({1: 2, 3: 1}),)),
    ("LBag", "intersect"): ("LBag", (LBag({1: 2, 3: 1}),)),
    ("LCounter", "total"): ("LCounter", ()),
    ("LPair", "first"): ("LPair", ()),
    ("LPair", "second"): ("LPair", ()),
}
CLASSES = [LMax, LMin, LBool, LSet, LMap, LCounter, LPair, LPSet, LBag]


def marked_methods() -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for cls in CLASSES:
        for attr, fn in inspect.getmembers(cls, callable):
            kind = bloom.kind_of(fn)
            if kind is not None:
                found.append((cls.__name__, attr, kind))
    return found


def test_every_marked_method_is_checked_below() -> None:
    assert {(c, m) for c, m, _ in marked_methods()} == set(ARGS)


def _le(x: Lattice | None, y: Lattice | None) -> bool:
    """Order on results, with None (an LPair component never set) as bottom."""
    if x is None:
        return True
    return y is not None and x <= y


@pytest.mark.parametrize(("cls", "method", "kind"), marked_methods())
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_marked_methods_preserve_order_and_morphisms_distribute(
    cls: str, method: str, kind: str, data: st.DataObject
) -> None:
    strategy, args = ARGS[(cls, method)]
    a, b = data.draw(st.tuples(STRATEGIES[strategy], STRATEGIES[strategy]))
    f: Callable[[Lattice], Any] = lambda x: getattr(x, method)(*args)  # noqa: E731
    joined = a.merge(b)
    assert _le(f(a), f(joined)) and _le(f(b), f(joined))  # a <= a.merge(b), so f(a) <= f(a.merge(b))
    if kind == "morphism":
        fa, fb = f(a), f(b)
        both = fa if fb is None else fb if fa is None else fa.merge(fb)
        assert f(joined) == both


def test_decorators_mark_functions() -> None:
    @bloom.monotone
    def size(s: LSet) -> LMax:
        return s.size()

    @bloom.morphism
    def evens(s: LSet) -> LSet:
        return s.filter(lambda x: x % 2 == 0)

    assert bloom.kind_of(size) == "monotone"
    assert bloom.kind_of(evens) == "morphism"
    assert bloom.kind_of(len) is None
    assert bloom.kind_of(LSet([1]).size) == "monotone"  # bound methods keep the mark


@pytest.mark.parametrize("name", list(STRATEGIES))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_values_cross_the_codec_unchanged(name: str, data: st.DataObject) -> None:
    value = data.draw(STRATEGIES[name])
    codec = timely.Codec()
    batch = [("key", value), value]
    assert codec.decode_records(codec.encode_records(batch)) == [("key", value), value]
