"""Keys of records as code columns, and where records of a key go (their route).

A keyed operator (join, reduce) needs, per block, the code of each record's key (what its
arrangement sorts and searches by) and the key's route (which worker owns the key). Both
depend on the key's *value* only (`_columns._codes`), however the key was computed: an
``itemgetter`` field of int records costs nothing, a Python key function one call per record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._columns import Block, codes_of, route_of
from ._columns._codes import codes_of_tuples, codes_of_values
from ._columns._functions import Columns, apply_columns, fields_of, identity, nothing
from ._errors import OperatorError

__all__ = ["KeyOf", "unhashable"]


def unhashable(op: str, what: str, values: list[Any], records: list[Any] | None = None) -> OperatorError:
    """The error for a value that cannot be hashed, naming the first such value."""
    for i, v in enumerate(values):
        try:
            hash(v)
        except TypeError as exc:
            if records is not None and what == "key":
                return OperatorError(
                    f"{op}: the key {v!r} of record {records[i]!r} cannot be hashed; keys must be hashable "
                    f"(use tuples, not lists): {exc}"
                )
            return OperatorError(f"{op}: {what} {v!r} cannot be hashed ({exc}); use tuples, not lists")
    return OperatorError(f"{op}: a {what} cannot be hashed")


class KeyOf:
    """The key function of one input of a keyed operator, applied to blocks."""

    __slots__ = ("field", "fn", "op", "pair", "whole")

    def __init__(self, fn: Callable[[Any], Any], op: str) -> None:
        self.fn = fn
        self.op = op
        self.whole = fn is identity
        fields = fields_of(fn)
        self.field = fields[0] if fields is not None and len(fields) == 1 else None
        self.pair = (fields[0], fields[1]) if fields is not None and len(fields) == 2 else None
        """The two fields of an ``itemgetter(i, j)`` key: their pair's codes come column-wise
        (`codes_of_tuples`, as a pair record's code), with no call per record."""

    def values(self, block: Block) -> list[Any]:
        """The keys as Python values (per record; names the record a key function fails on)."""
        fn = self.fn
        records = block.records()
        try:
            return [fn(r) for r in records]
        except Exception:
            for r in records:
                try:
                    fn(r)
                except Exception as exc:
                    raise OperatorError(
                        f"{self.op}: the key function raised {type(exc).__name__}: {exc} on record {r!r}"
                    ) from exc
            raise

    def codes(self, block: Block) -> np.ndarray:
        """The code of each record's key."""
        try:
            if self.whole:
                return block.record_codes()
            if self.field is not None and block.arity > self.field:
                return codes_of(block.cols[self.field])
            if self.pair is not None and block.arity > max(self.pair):
                codes = codes_of_tuples([block.cols[i] for i in self.pair])
                if codes is not None:
                    return codes
            if self.fn is nothing:
                return np.zeros(len(block), dtype=np.int64)
            if type(self.fn) is Columns:
                out = np.asarray(apply_columns(self.fn, block))
                if out.shape != (len(block),):
                    raise OperatorError(
                        f"{self.op}: the key function gave keys of shape {out.shape} for {len(block)} records"
                    )
                return codes_of(out)
        except TypeError:
            keys = block.records() if self.whole else block.cols[self.field].tolist() if self.field is not None else []
            raise unhashable(self.op, "record" if self.whole else "key", keys, block.records()) from None
        keys = self.values(block)
        try:
            return codes_of_values(keys, len(keys))
        except TypeError:
            raise unhashable(self.op, "key", keys, block.records()) from None

    def routes(self, block: Block) -> np.ndarray:
        """Each record's route (``% peers`` is its worker). A key that cannot be computed routes
        to 0, where the operator then raises the error that names it."""
        try:
            return route_of(self.codes(block))
        except OperatorError:
            return np.zeros(len(block), dtype=np.int64)
