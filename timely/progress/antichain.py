"""Antichains of timestamps under the product order: the shape of a frontier."""

from __future__ import annotations

from collections.abc import Iterable

from ..timestamp import product_le

__all__ = ["Antichain"]


class Antichain:
    """A set of mutually incomparable times; ``less_equal(t)`` asks if some element is <= t."""

    __slots__ = ("elements",)

    def __init__(self, times: Iterable[tuple[int, ...]] = ()) -> None:
        self.elements: list[tuple[int, ...]] = []
        for t in times:
            self.insert(t)

    def insert(self, time: tuple[int, ...]) -> bool:
        """Add ``time`` unless an element is <= it; drop the elements it is <= to."""
        for e in self.elements:
            if product_le(e, time):
                return False
        self.elements = [e for e in self.elements if not product_le(time, e)]
        self.elements.append(time)
        return True

    def less_equal(self, time: tuple[int, ...]) -> bool:
        """Some element is <= ``time``: ``time`` has not passed this frontier."""
        for e in self.elements:
            if product_le(e, time):
                return True
        return False

    def less_than(self, time: tuple[int, ...]) -> bool:
        for e in self.elements:
            if e != time and product_le(e, time):
                return True
        return False

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self.elements))

    def __len__(self) -> int:
        return len(self.elements)

    def __bool__(self) -> bool:
        return bool(self.elements)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return sorted(self.elements) == sorted(other.elements)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Antichain({sorted(self.elements)!r})"
