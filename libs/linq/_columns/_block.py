"""`Block`: differences as columns, the unit that travels between linq's operators.

A block is the records of one timely message, all at the message's time, with their
diffs: one numpy column per record field (a record that is a tuple of ``k`` fields has
``k`` columns; any other record is one column, ``arity == SCALAR``) and an int64 column
of diffs. A field's column is int64 or float64 when every value of it is an int (within
int64) or a float, and an object array of the Python values otherwise; so a block carries
anything a record can be (strings, tuples, even unhashable values, which only a keyed
operator refuses), and records of ints cost 8 bytes a field.

Blocks are built from Python records once (`Block.of_records`), turned back into records
only where a user's Python function needs them (`Block.records`), and otherwise transformed
column-wise. Operators treat blocks as immutable: they make new ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from ._codes import PAIRS, codes_of_ints, codes_of_tuples, codes_of_values, values_of
from ._kernels import bounds, selector

__all__ = ["SCALAR", "Block", "concat_blocks", "column_of"]

SCALAR = -1
"""The arity of a block whose records are not tuples: one column holds the records."""


def column_of(values: list[Any]) -> np.ndarray:
    """One column for ``values``: int64 or float64 when they are all ints or all floats, else objects."""
    n = len(values)
    if n:
        kinds = set(map(type, values))
        if kinds == {int}:
            try:
                return np.fromiter(values, dtype=np.int64, count=n)
            except OverflowError:
                pass
        elif kinds == {float}:
            return np.fromiter(values, dtype=np.float64, count=n)
    else:
        return np.zeros(0, dtype=np.int64)
    return _object_column(values)


def _object_column(values: list[Any]) -> np.ndarray:
    """An object array of ``values`` (tuples stay values: no broadcasting into a 2-D array)."""
    return np.fromiter(values, dtype=object, count=len(values))


class Block:
    """``cols`` (one per field), ``arity`` (the tuple length, or `SCALAR`) and ``diffs``."""

    __slots__ = ("arity", "cols", "diffs")

    def __init__(self, cols: Sequence[np.ndarray], arity: int, diffs: np.ndarray) -> None:
        self.cols = tuple(cols)
        self.arity = arity
        self.diffs = diffs

    def __len__(self) -> int:
        return len(self.diffs)

    def __repr__(self) -> str:
        return f"<Block of {len(self)} differences: {self.pairs()[:4]!r}{'...' if len(self) > 4 else ''}>"

    # From and to Python records ----------------------------------------------------------------
    @classmethod
    def of_records(cls, records: list[Any], diffs: np.ndarray | None = None) -> Block:
        """A block of ``records`` (each once, unless ``diffs`` says otherwise)."""
        n = len(records)
        if diffs is None:
            diffs = np.ones(n, dtype=np.int64)
        if n and type(records[0]) is tuple:
            k = len(records[0])
            if set(map(type, records)) == {tuple} and set(map(len, records)) == {k}:
                # the common case, tuples of ints (edges): the fields gathered into one list,
                # whose types are checked and values read in C (the tuples are not walked
                # again for each: a batch's records lie scattered in memory)
                flat = list(chain.from_iterable(records)) if k else []
                if k and set(map(type, flat)) == {int}:
                    try:
                        table = np.fromiter(flat, dtype=np.int64, count=k * n).reshape(n, k)
                        return cls([table[:, i].copy() for i in range(k)], k, diffs)
                    except OverflowError:
                        pass
                fields = list(zip(*records)) if k else []
                return cls([column_of(list(f)) for f in fields], k, diffs)
        return cls((column_of(records),), SCALAR, diffs)

    @classmethod
    def of_pairs(cls, pairs: Sequence[tuple[Any, int]]) -> Block:
        """A block of ``(record, diff)`` pairs (the diffs must be ints)."""
        records = [p[0] for p in pairs]
        diffs = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
        return cls.of_records(records, diffs)

    @classmethod
    def empty(cls) -> Block:
        return cls((np.zeros(0, dtype=np.int64),), SCALAR, np.zeros(0, dtype=np.int64))

    def records(self) -> list[Any]:
        """The records as Python values (tuples for tuple records)."""
        if self.arity == SCALAR:
            return self.cols[0].tolist()  # type: ignore[no-any-return]
        if self.arity == 0:
            return [()] * len(self)
        return list(zip(*(c.tolist() for c in self.cols)))

    def pairs(self) -> list[tuple[Any, int]]:
        return list(zip(self.records(), self.diffs.tolist()))

    # Column-wise transformations -----------------------------------------------------------------
    def take(self, idx: np.ndarray | slice) -> Block:
        """The rows ``idx`` (indices, a boolean mask or a slice: then views, no copy)."""
        idx = selector(idx, len(self.cols) + 1)
        return Block([c[idx] for c in self.cols], self.arity, self.diffs[idx])

    def with_diffs(self, diffs: np.ndarray) -> Block:
        return Block(self.cols, self.arity, diffs)

    def same_layout(self, other: Block) -> bool:
        return self.arity == other.arity and all(a.dtype == b.dtype for a, b in zip(self.cols, other.cols))

    # Codes (for sorting and searching) -----------------------------------------------------------
    def record_codes(self) -> np.ndarray:
        """One code per record, for the whole record (TypeError when a record cannot be hashed)."""
        if self.arity == SCALAR:
            return codes_of(self.cols[0])
        if self.arity > 0:
            codes = codes_of_tuples(self.cols)
            if codes is not None:
                return codes
        return codes_of_values(self.records(), len(self))


def codes_of(column: np.ndarray) -> np.ndarray:
    """The codes of one column (see `_codes`)."""
    if column.dtype == np.int64:
        return codes_of_ints(column)
    return codes_of_values(column.tolist(), len(column))


def block_of_codes(cols: Sequence[np.ndarray], arity: int, diffs: np.ndarray) -> Block:
    """A block from code columns: a column of plain ints stays as it is; others become values."""
    out = []
    for c in cols:
        if not len(c) or bounds(c)[1] < PAIRS:
            out.append(c)
        else:
            out.append(_object_column(values_of(c)))
    return Block(out, arity, diffs)


def concat_blocks(blocks: Sequence[Block]) -> Block:
    """One block of all rows. Blocks of one layout concatenate column by column; blocks that
    disagree (ints here, strings there; pairs and triples) go through Python records once."""
    blocks = [b for b in blocks if len(b)]
    if not blocks:
        return Block.empty()
    first = blocks[0]
    if len(blocks) == 1:
        return first
    diffs = np.concatenate([b.diffs for b in blocks])
    if all(first.same_layout(b) for b in blocks[1:]):
        cols = [np.concatenate([b.cols[i] for b in blocks]) for i in range(len(first.cols))]
        return Block(cols, first.arity, diffs)
    if all(b.arity == first.arity for b in blocks) and first.arity != SCALAR:
        cols = []
        for i in range(first.arity):
            parts = [b.cols[i] for b in blocks]
            if all(p.dtype == parts[0].dtype for p in parts):
                cols.append(np.concatenate(parts))
            else:
                cols.append(column_of(list(chain.from_iterable(p.tolist() for p in parts))))
        return Block(cols, first.arity, diffs)
    records: list[Any] = []
    for b in blocks:
        records.extend(b.records())
    return Block.of_records(records, diffs)


def blocks_of(records: Iterable[Any]) -> list[Block]:
    """The blocks in a message: blocks themselves, or ``(destination, block)`` after an exchange."""
    out = []
    for r in records:
        out.append(r if type(r) is Block else r[1])
    return out
