"""Aggregators (Pregel §3.3): every vertex may contribute a value in superstep s; the values
are merged on each worker, then across workers by the master, and everybody reads the result
in superstep s + 1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Aggregator", "Max", "Min", "Sum"]


class Aggregator:
    """Merges contributions with ``merge(a, b)``, which must be commutative and associative
    (contributions arrive in no particular order). ``initial`` is what a reader sees when
    nobody contributed (in superstep 0, or after a quiet superstep).

    A *persistent* aggregator (Giraph's term) carries its value over: the result of superstep
    s merges the contributions of s into the result of s - 1 (or what the master set), where a
    regular one starts from nothing each superstep.

    Subclass it and override `merge`, or pass ``merge`` to the constructor.
    """

    def __init__(
        self, merge: Callable[[Any, Any], Any] | None = None, initial: Any = None, *, persistent: bool = False
    ) -> None:
        if merge is not None:
            self.merge = merge  # type: ignore[method-assign,assignment]
        self.initial = initial
        self.persistent = persistent

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define merge(a, b) or be given one")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(initial={self.initial!r}, persistent={self.persistent})"


class Sum(Aggregator):
    """The sum of the contributions; ``initial`` (0) when there were none."""

    def __init__(self, initial: Any = 0, *, persistent: bool = False) -> None:
        super().__init__(initial=initial, persistent=persistent)

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


class Min(Aggregator):
    """The least contribution; ``initial`` (None) when there were none."""

    def __init__(self, initial: Any = None, *, persistent: bool = False) -> None:
        super().__init__(initial=initial, persistent=persistent)

    def merge(self, a: Any, b: Any) -> Any:
        return b if b < a else a


class Max(Aggregator):
    """The greatest contribution; ``initial`` (None) when there were none."""

    def __init__(self, initial: Any = None, *, persistent: bool = False) -> None:
        super().__init__(initial=initial, persistent=persistent)

    def merge(self, a: Any, b: Any) -> Any:
        return b if b > a else a
