"""Lattices as plain Python values (BloomL, Conway et al. SoCC 2012; Bud's lmax, lmin, lbool,
lset, lmap).

A lattice value is immutable. ``merge`` is its least upper bound (associative, commutative,
idempotent), ``cls.bottom()`` the identity of merge, and ``a <= b`` means ``a.merge(b) == b``.
Because merge forgives duplication and reordering, a lattice value can travel through an
asynchronous dataflow: whatever order improvements arrive in, merging them gives one answer.

Methods marked `monotone` (or `morphism`) map a lattice to another lattice while keeping
order; operators use the mark to forward derived values without waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import reduce
from typing import Any, ClassVar, TypeVar

import timely

from ._errors import BloomError
from ._functions import monotone, morphism

__all__ = ["LBool", "LCounter", "LMap", "LMax", "LMin", "LPair", "LSet", "Lattice"]

L = TypeVar("L", bound="Lattice")

_BOTTOM: Any = object()


class Lattice:
    """Base class: subclasses set ``value`` in ``__init__`` and implement ``merge``."""

    __slots__ = ("value",)
    value: Any
    _bottom_value: ClassVar[Any] = None

    def __init__(self, value: Any = _BOTTOM) -> None:
        self.value = self._bottom_value if value is _BOTTOM else value

    @classmethod
    def bottom(cls: type[L]) -> L:
        """The least value: the identity of `merge`."""
        return cls()

    def merge(self: L, other: L) -> L:
        """The least upper bound of ``self`` and ``other``."""
        raise NotImplementedError

    @classmethod
    def merge_all(cls: type[L], values: Iterable[L]) -> L:
        """The merge of ``values`` (bottom if there are none); subclasses make it cheaper."""
        return reduce(cls.merge, values, cls.bottom())

    def is_bottom(self) -> bool:
        return self == self.bottom()

    def reveal(self) -> Any:
        """The plain Python value inside (Bud's ``reveal``)."""
        return self.value

    # Order --------------------------------------------------------------------------------
    def _same(self, other: Any, what: str) -> None:
        if type(other) is not type(self):
            raise BloomError(f"{type(self).__name__}.{what}: needs another {type(self).__name__}, got {other!r}")

    def __le__(self, other: Any) -> bool:
        self._same(other, "<=")
        return self.merge(other) == other  # type: ignore[no-any-return]

    def __lt__(self, other: Any) -> bool:
        return self <= other and self != other

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.value == other.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.value,))


class LMax(Lattice):
    """The largest value seen; bottom is None (below everything)."""

    __slots__ = ()

    def merge(self, other: LMax) -> LMax:
        if type(other) is not LMax:
            self._same(other, "merge")
        a, b = self.value, other.value
        if b is None or (a is not None and a >= b):
            return self
        return other

    @classmethod
    def merge_all(cls, values: Iterable[LMax]) -> LMax:
        present = [v.value for v in values if v.value is not None]
        return LMax(max(present)) if present else LMax()

    @monotone
    def gt(self, n: Any) -> LBool:
        return LBool(self.value is not None and self.value > n)

    @monotone
    def gt_eq(self, n: Any) -> LBool:
        return LBool(self.value is not None and self.value >= n)

    @morphism
    def add(self, n: Any) -> LMax:
        return self if self.value is None else LMax(self.value + n)


class LMin(Lattice):
    """The smallest value seen (the order is reversed: smaller is *higher*); bottom is None
    (above every number, like an infinite distance)."""

    __slots__ = ()

    def merge(self, other: LMin) -> LMin:
        if type(other) is not LMin:
            self._same(other, "merge")
        a, b = self.value, other.value
        if b is None or (a is not None and a <= b):
            return self
        return other

    @classmethod
    def merge_all(cls, values: Iterable[LMin]) -> LMin:
        present = [v.value for v in values if v.value is not None]
        return LMin(min(present)) if present else LMin()

    @monotone
    def lt(self, n: Any) -> LBool:
        return LBool(self.value is not None and self.value < n)

    @monotone
    def lt_eq(self, n: Any) -> LBool:
        return LBool(self.value is not None and self.value <= n)

    @morphism
    def add(self, n: Any) -> LMin:
        """Shift by ``n`` (a path one edge longer): min(a, b) + n == min(a + n, b + n)."""
        return self if self.value is None else LMin(self.value + n)


class LBool(Lattice):
    """False until it becomes True, then True for good: a threshold that has been crossed."""

    __slots__ = ()
    _bottom_value = False

    def merge(self, other: LBool) -> LBool:
        if type(other) is not LBool:
            self._same(other, "merge")
        return self if self.value or not other.value else other

    @classmethod
    def merge_all(cls, values: Iterable[LBool]) -> LBool:
        return LBool(any(v.value for v in values))


class LSet(Lattice):
    """A growing set (a frozenset inside); merge is union."""

    __slots__ = ()

    def __init__(self, value: Iterable[Hashable] = _BOTTOM) -> None:
        self.value = frozenset() if value is _BOTTOM else frozenset(value)

    def merge(self, other: LSet) -> LSet:
        if type(other) is not LSet:
            self._same(other, "merge")
        a, b = self.value, other.value
        if b <= a:
            return self
        if a <= b:
            return other
        return LSet(a | b)

    @classmethod
    def merge_all(cls, values: Iterable[LSet]) -> LSet:
        return LSet(frozenset().union(*(v.value for v in values)))

    @monotone
    def size(self) -> LMax:
        return LMax(len(self.value))

    @monotone
    def contains(self, item: Hashable) -> LBool:
        return LBool(item in self.value)

    @morphism
    def map(self, fn: Callable[[Any], Hashable]) -> LSet:
        return LSet(fn(x) for x in self.value)

    @morphism
    def filter(self, predicate: Callable[[Any], bool]) -> LSet:
        return LSet(x for x in self.value if predicate(x))

    @morphism
    def intersect(self, other: LSet) -> LSet:
        return LSet(self.value & other.value)

    def __iter__(self) -> Any:
        return iter(self.value)

    def __len__(self) -> int:
        return len(self.value)


class LMap(Lattice):
    """A growing map from keys to lattice values; merge is key-wise (values merged where both
    sides have the key). Treat the dict inside as read-only."""

    __slots__ = ()

    def __init__(self, value: Mapping[Any, Lattice] | Iterable[tuple[Any, Lattice]] = _BOTTOM) -> None:
        self.value = {} if value is _BOTTOM else dict(value)
        for k, v in self.value.items():
            if not isinstance(v, Lattice):
                raise BloomError(f"LMap: the value of key {k!r} is {v!r}, not a lattice")

    def merge(self, other: LMap) -> LMap:
        if type(other) is not LMap:
            self._same(other, "merge")
        a, b = self.value, other.value
        if len(a) < len(b):
            a, b = b, a
        merged = None
        for k, v in b.items():
            mine = a.get(k)
            new = v if mine is None else mine.merge(v)
            if new is not mine:
                if merged is None:
                    merged = dict(a)
                merged[k] = new
        if merged is None:
            return self if a is self.value else other
        return LMap(merged)

    def __hash__(self) -> int:
        return hash(("LMap", frozenset(self.value.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return (LMap, (tuple(self.value.items()),))

    @monotone
    def at(self, key: Hashable, bottom: Lattice) -> Lattice:
        """The value at ``key``, or ``bottom`` (the bottom of the value lattice) if absent."""
        return self.value.get(key, bottom)

    @morphism
    def key_set(self) -> LSet:
        return LSet(self.value)

    @monotone
    def size(self) -> LMax:
        return LMax(len(self.value))


class LCounter(Lattice):
    """A grow-only counter (a G-counter): each replica's own count, merged by max, so the same
    increment heard twice counts once. ``LCounter.of(replica, n)`` is one replica's count."""

    __slots__ = ()

    def __init__(self, value: Mapping[Any, int] | Iterable[tuple[Any, int]] = _BOTTOM) -> None:
        counts = {} if value is _BOTTOM else dict(value)
        for replica, n in counts.items():
            if type(n) is not int or n < 0:
                raise BloomError(f"LCounter: replica {replica!r} has count {n!r}; counts are ints >= 0")
        self.value = {r: n for r, n in counts.items() if n}  # a zero count is no count: one bottom

    @classmethod
    def of(cls, replica: Hashable, count: int) -> LCounter:
        return cls({replica: count})

    def merge(self, other: LCounter) -> LCounter:
        if type(other) is not LCounter:
            self._same(other, "merge")
        a, b = self.value, other.value
        merged = None
        for k, n in b.items():
            if n > a.get(k, 0):
                if merged is None:
                    merged = dict(a)
                merged[k] = n
        return self if merged is None else LCounter(merged)

    def __hash__(self) -> int:
        return hash(("LCounter", frozenset(self.value.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return (LCounter, (tuple(self.value.items()),))

    @monotone
    def total(self) -> LMax:
        return LMax(sum(self.value.values()))


class LPair(Lattice):
    """The product of two lattices, merged component-wise. Bottom is ``(None, None)``: None
    stands for the bottom of whichever lattice the component turns out to be."""

    __slots__ = ()

    def __init__(self, first: Lattice | None = None, second: Lattice | None = None) -> None:
        self.value = (first, second)

    def merge(self, other: LPair) -> LPair:
        if type(other) is not LPair:
            self._same(other, "merge")
        (a1, a2), (b1, b2) = self.value, other.value
        m1 = a1 if b1 is None else b1 if a1 is None else a1.merge(b1)
        m2 = a2 if b2 is None else b2 if a2 is None else a2.merge(b2)
        if m1 is a1 and m2 is a2:
            return self
        if m1 is b1 and m2 is b2:
            return other
        return LPair(m1, m2)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LPair, self.value)

    @morphism
    def first(self) -> Lattice | None:
        return self.value[0]  # type: ignore[no-any-return]

    @morphism
    def second(self) -> Lattice | None:
        return self.value[1]  # type: ignore[no-any-return]


# Crossing processes: every class has a codec (registered identically in every process), with an
# explicit extension code: codes derived from names collide among seven classes (LMap and LSet did
# once the package was renamed), and a fixed code keeps the wire format when a module moves.
timely.register_codec(LMax, lambda x: x.value, LMax, code=96)
timely.register_codec(LMin, lambda x: x.value, LMin, code=45)
timely.register_codec(LBool, lambda x: x.value, LBool, code=105)
timely.register_codec(LSet, lambda x: tuple(x.value), LSet, code=116)
timely.register_codec(LMap, lambda x: tuple(x.value.items()), LMap, code=22)
timely.register_codec(LCounter, lambda x: tuple(x.value.items()), LCounter, code=17)
timely.register_codec(LPair, lambda x: x.value, lambda v: LPair(*v), code=60)
