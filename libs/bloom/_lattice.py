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
from ._functions import kind_of, monotone, morphism

__all__ = ["LBag", "LBool", "LCounter", "LMap", "LMax", "LMin", "LPSet", "LPair", "LSet", "Lattice"]

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

    @morphism
    def min_of(self, n: Any) -> LMax:
        """Bud's ``min_of``: the value capped at ``n`` (max(a, b) capped is the max of the caps)."""
        return self if self.value is None or self.value <= n else LMax(n)


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

    @morphism
    def when_true(self, then: Lattice) -> Lattice:
        """Bud's ``when_true``: ``then`` once true, its bottom before (a guarded value)."""
        return then if self.value else then.bottom()


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

    @morphism
    def product(self, other: LSet) -> LSet:
        """Every pair ``(x, y)``, ``x`` here and ``y`` in ``other`` (Bud's ``eqjoin`` without a predicate)."""
        return LSet((x, y) for x in self.value for y in other.value)

    @monotone
    def group_count(self, key: Callable[[Any], Hashable]) -> LMap:
        """Bud's ``group_count``: per ``key(x)``, how many elements have it, as an `LMap` of `LMax`."""
        counts: dict[Hashable, int] = {}
        for x in self.value:
            k = key(x)
            counts[k] = counts.get(k, 0) + 1
        return LMap({k: LMax(n) for k, n in counts.items()})

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

    @morphism
    def has_key(self, key: Hashable) -> LBool:
        """Bud's ``key?``."""
        return LBool(key in self.value)

    @morphism
    def project(self, keys: Iterable[Hashable]) -> LMap:
        """The map restricted to ``keys`` (a projection: distributes over the key-wise merge)."""
        wanted = set(keys)
        return LMap({k: v for k, v in self.value.items() if k in wanted})

    @morphism
    def filter(self) -> LMap:
        """Bud's ``filter`` on a map of `LBool`: the keys whose value is true (as ``LBool(True)``)."""
        for k, v in self.value.items():
            if not isinstance(v, LBool):
                raise BloomError(f"LMap.filter: the value of key {k!r} is {v!r}, not an LBool")
        return LMap({k: v for k, v in self.value.items() if v.value})

    @monotone
    def apply(self, fn: Callable[[Any], Lattice]) -> LMap:
        """Bud's ``apply``: ``fn`` on every value; ``fn`` must be marked `monotone` or `morphism`
        (an unmarked one would make the result non-monotone, so it is refused)."""
        if kind_of(fn) is None:
            raise BloomError(f"LMap.apply: {fn!r} is not marked monotone or morphism")
        return LMap({k: fn(v) for k, v in self.value.items()})


class LPSet(LSet):
    """Bud's ``lpset``: a growing set of non-negative numbers, whose sum only grows."""

    __slots__ = ()

    def __init__(self, value: Iterable[Hashable] = _BOTTOM) -> None:
        super().__init__(value)
        for x in self.value:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
                raise BloomError(f"LPSet: {x!r} is not a number >= 0")

    def merge(self, other: LSet) -> LPSet:  # type: ignore[override]
        if type(other) is not LPSet:
            self._same(other, "merge")
        a, b = self.value, other.value
        if b <= a:
            return self
        if a <= b:
            return other  # type: ignore[return-value]  # an LPSet: checked above
        return LPSet(a | b)

    @classmethod
    def merge_all(cls, values: Iterable[LSet]) -> LPSet:  # type: ignore[override]
        return LPSet(frozenset().union(*(v.value for v in values)))

    @monotone
    def pos_sum(self) -> LMax:
        """Bud's ``pos_sum``: the sum (it grows with the set, as every element is >= 0)."""
        return LMax(sum(self.value))


class LBag(Lattice):
    """Bud's ``lbag``: a multiset, element -> multiplicity (an int > 0); merge keeps the larger
    multiplicity of each element. Treat the dict inside as read-only."""

    __slots__ = ()

    def __init__(self, value: Mapping[Any, int] | Iterable[tuple[Any, int]] = _BOTTOM) -> None:
        counts = {} if value is _BOTTOM else dict(value)
        for x, n in counts.items():
            if type(n) is not int or n <= 0:
                raise BloomError(f"LBag: {x!r} has multiplicity {n!r}; multiplicities are ints > 0")
        self.value = counts

    def merge(self, other: LBag) -> LBag:
        if type(other) is not LBag:
            self._same(other, "merge")
        a, b = self.value, other.value
        merged = None
        for x, n in b.items():
            if n > a.get(x, 0):
                if merged is None:
                    merged = dict(a)
                merged[x] = n
        return self if merged is None else LBag(merged)

    def __hash__(self) -> int:
        return hash(("LBag", frozenset(self.value.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return (LBag, (tuple(self.value.items()),))

    @morphism
    def multiplicity(self, x: Hashable) -> LMax:
        return LMax(self.value.get(x, 0))

    @morphism
    def contains(self, x: Hashable) -> LBool:
        """Bud's ``contains?``."""
        return LBool(x in self.value)

    @monotone
    def size(self) -> LMax:
        """How many elements, counted with their multiplicity."""
        return LMax(sum(self.value.values()))

    @morphism
    def plus(self, other: LBag) -> LBag:
        """Bud's ``+``: multiplicities added (``max(a, b) + c == max(a + c, b + c)``)."""
        counts = dict(self.value)
        for x, n in other.value.items():
            counts[x] = counts.get(x, 0) + n
        return LBag(counts)

    @morphism
    def intersect(self, other: LBag) -> LBag:
        """The smaller multiplicity of every element in both."""
        return LBag({x: min(n, other.value[x]) for x, n in self.value.items() if x in other.value})


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
timely.register_codec(LPSet, lambda x: tuple(x.value), LPSet, code=117)
timely.register_codec(LBag, lambda x: tuple(x.value.items()), LBag, code=33)
