"""User functions over records, applied to blocks: per record in Python, or over columns.

A selector, predicate, key or value function is an ordinary Python function of one record,
or one of two forms linq applies to whole columns at once (the fast path):

- ``operator.itemgetter(i)`` (and ``itemgetter(i, j, ...)``): the field(s) of tuple records,
  taken as columns without touching a record;
- ``linq.columns(fn)``: ``fn`` receives the record's fields as numpy arrays (one per field of a
  tuple record, or one array of the records) and returns one array, or a tuple of arrays for
  tuple records (a predicate returns a boolean array).

Everything else is called once per record on the records as Python values.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from ._block import SCALAR, Block, column_of

__all__ = ["Columns", "columns", "fields_of", "identity", "left", "nothing", "twice"]


def identity(record: Any) -> Any:
    return record


def nothing(record: Any) -> int:
    """0, for every record: the key of a whole collection as one group, taken without a call
    per record by a keyed operator (`Collection.count_all`)."""
    return 0


def left(a: Any, b: Any) -> Any:
    """A join's left record as it is: taken column-wise by `join` (the left side's columns)."""
    return a


def twice(record: Any) -> tuple[Any, Any]:
    """``(record, record)``: taken column-wise by `select` (the record's column twice)."""
    return (record, record)


class Columns:
    """A function written over columns (see the module doc); make one with `columns`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"columns() needs a function of numpy arrays, got {fn!r}")
        self.fn = fn

    def __call__(self, *records: Any) -> Any:
        """The same function on one record (or, for a join, one record of each side), as the
        per-record path would call it: each field as an array of one value."""
        args = [np.asarray([x]) for r in records for x in (r if type(r) is tuple else (r,))]
        out = self.fn(*args)
        if isinstance(out, tuple):
            return tuple(o[0].item() if hasattr(o[0], "item") else o[0] for o in out)
        v = out[0]
        return v.item() if hasattr(v, "item") else v

    def __repr__(self) -> str:
        return f"columns({self.fn!r})"


def columns(fn: Callable[..., Any]) -> Columns:
    """Mark ``fn`` as a function of columns: it receives numpy arrays, one per record field,
    and returns an array (or a tuple of arrays), applied to a whole block at once."""
    return Columns(fn)


def fields_of(fn: Any) -> tuple[int, ...] | None:
    """The field indices of an ``operator.itemgetter`` of ints, else None."""
    if type(fn) is not itemgetter:
        return None
    items = fn.__reduce__()[1]
    if all(type(i) is int for i in items):
        return tuple(items)
    return None


def apply_columns(fn: Columns, block: Block) -> Any:
    """``fn`` on the block's fields."""
    if block.arity == 0:
        return fn.fn()
    return fn.fn(*block.cols)


def as_block(out: Any, diffs: np.ndarray, what: str) -> Block:
    """The result of a columns function (an array or a tuple of arrays) as a block."""
    if isinstance(out, tuple):
        cols = [_column(o, len(diffs), what) for o in out]
        return Block(cols, len(cols), diffs)
    return Block([_column(out, len(diffs), what)], SCALAR, diffs)


def _column(values: Any, n: int, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"the {what} returned an array of shape {arr.shape}; expected {n} values, one per record")
    if arr.dtype == np.int64 or arr.dtype == np.float64:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64) if arr.dtype.kind != "b" else column_of(arr.tolist())
    if arr.dtype.kind == "f":
        return arr.astype(np.float64)
    return column_of(arr.tolist())
