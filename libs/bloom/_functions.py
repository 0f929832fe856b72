"""Marking functions as monotone or as morphisms (BloomL §3), so operators know what may be
sent on before its input is complete.

A *monotone* function keeps order: ``a <= b`` implies ``f(a) <= f(b)``. Its output on a partial
value is a lower bound of its output on the final value, so it can be forwarded at once and
merged downstream. A *morphism* also distributes over merge, ``f(a.merge(b)) ==
f(a).merge(f(b))``: it may be applied to each increment alone. Anything unmarked is treated as
non-monotone and waits for a notification (coordination).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

__all__ = ["kind_of", "monotone", "morphism"]

F = TypeVar("F", bound=Callable[..., Any])

Kind = Literal["morphism", "monotone"] | None

_ATTR = "__bloom_kind__"


def monotone(fn: F) -> F:
    """Declare ``fn`` (a function or a lattice method) order-preserving."""
    setattr(fn, _ATTR, "monotone")
    return fn


def morphism(fn: F) -> F:
    """Declare ``fn`` a morphism: order-preserving and distributing over ``merge``."""
    setattr(fn, _ATTR, "morphism")
    return fn


def kind_of(fn: Callable[..., Any]) -> Kind:
    """``"morphism"``, ``"monotone"`` or None (unmarked: treat as non-monotone)."""
    return getattr(fn, _ATTR, None)  # bound methods forward attribute reads to their function
