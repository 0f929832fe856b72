"""Timestamps: an epoch and one loop counter per enclosing loop context.

A `Timestamp` is the paper's ``(e, (c1, ..., ck))``. It is stored flat, as an immutable
tuple ``(e, c1, ..., ck)``, because timestamps are hashed and compared on every message
and a tuple does both in C.

Order. Timestamps are compared with the *product* order: ``s.less_equal(t)`` holds when
every coordinate of ``s`` is at most the same coordinate of ``t``. This is a partial
order (``(1, (5,))`` and ``(2, (3,))`` are incomparable) and a lattice (``join`` and
``meet`` are the coordinate-wise max and min), which is what differential dataflow needs
to reuse work across epochs and iterations. Python's ``<``/``sorted`` on timestamps
stay the tuple's lexicographic order, a total order that extends the product order:
handy for "earliest first" scheduling, never used to decide safety. See
``docs/progress.md`` for why this order and not Naiad's lexicographic counters.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Timestamp"]


class Timestamp(tuple):  # type: ignore[type-arg]
    """An epoch followed by the loop counters, outermost first.

    >>> t = Timestamp(3, (0, 2))
    >>> t.epoch, t.counters
    (3, (0, 2))
    >>> t.advance()
    Timestamp(3, (0, 3))
    >>> t.leave().enter()
    Timestamp(3, (0, 0))
    """

    __slots__ = ()

    def __new__(cls, epoch: int, counters: Iterable[int] = ()) -> Timestamp:
        flat = (epoch, *counters)
        for c in flat:
            if type(c) is not int or c < 0:
                raise ValueError(f"timestamp coordinates must be non-negative ints, got {flat!r}")
        return tuple.__new__(cls, flat)

    # Named views -----------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self[0]  # type: ignore[no-any-return]

    @property
    def counters(self) -> tuple[int, ...]:
        return tuple(self[1:])

    @property
    def depth(self) -> int:
        """How many loop contexts enclose this time."""
        return len(self) - 1

    # The loop vertices' transformations (Naiad §2.1) ------------------------------
    def enter(self) -> Timestamp:
        """Ingress: append a loop counter starting at 0."""
        return tuple.__new__(Timestamp, (*self, 0))

    def leave(self) -> Timestamp:
        """Egress: drop the innermost loop counter."""
        if len(self) < 2:
            raise ValueError(f"{self!r} is not inside a loop")
        return tuple.__new__(Timestamp, self[:-1])

    def advance(self) -> Timestamp:
        """Feedback: increment the innermost loop counter."""
        n = len(self)
        if n == 2:  # inside one loop, the common case: no slice to build
            return tuple.__new__(Timestamp, (self[0], self[1] + 1))
        if n < 2:
            raise ValueError(f"{self!r} is not inside a loop")
        return tuple.__new__(Timestamp, self[:-1] + (self[-1] + 1,))  # noqa: RUF005 - a third faster than unpacking

    def with_epoch(self, epoch: int) -> Timestamp:
        return tuple.__new__(Timestamp, (epoch, *self[1:]))

    # The partial order and its lattice --------------------------------------------
    def less_equal(self, other: tuple[int, ...]) -> bool:
        """Product order: every coordinate at most ``other``'s."""
        return product_le(self, other)

    def less_than(self, other: tuple[int, ...]) -> bool:
        return self != other and product_le(self, other)

    def join(self, other: tuple[int, ...]) -> Timestamp:
        """Least upper bound: coordinate-wise max."""
        _same_depth(self, other)
        return tuple.__new__(Timestamp, tuple(map(max, self, other)))

    def meet(self, other: tuple[int, ...]) -> Timestamp:
        """Greatest lower bound: coordinate-wise min."""
        _same_depth(self, other)
        return tuple.__new__(Timestamp, tuple(map(min, self, other)))

    def __repr__(self) -> str:
        if len(self) == 1:
            return f"Timestamp({self[0]})"
        return f"Timestamp({self[0]}, {tuple(self[1:])!r})"

    def __str__(self) -> str:
        if len(self) == 1:
            return f"({self[0]})"
        return f"({self[0]}, {tuple(self[1:])!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_from_flat, (tuple(self),))


def _from_flat(flat: tuple[int, ...]) -> Timestamp:
    """Build a Timestamp from its flat tuple without validation (hot paths, unpickling)."""
    return tuple.__new__(Timestamp, flat)


def _same_depth(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    if len(a) != len(b):
        raise ValueError(f"timestamps {a!r} and {b!r} belong to different loop depths")


def product_le(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """``a`` is at most ``b`` in every coordinate (the two have equal length)."""
    n = len(a)
    if n == 1:
        return a[0] <= b[0]  # type: ignore[no-any-return]
    if n == 2:
        return a[0] <= b[0] and a[1] <= b[1]  # type: ignore[no-any-return]
    for x, y in zip(a, b):
        if x > y:
            return False
    return True
