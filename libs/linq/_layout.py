"""How an arrangement stores records: as ``k`` code columns, or as one column of whole records.

Records of one arity ``k >= 1`` (tuples, the common case: edges, labels) are stored as one
code column per field, so an ``itemgetter`` key or value is a column and int fields are their
own codes. Anything else (scalars, tuples of varying length, a mix) is stored as one code per
whole record. An arrangement starts with the layout of its first block and widens to whole
records, once and for good, when a block of another shape arrives (`Layout.accept`).

When the arrangement's key is one field of its tuples (``itemgetter(i)``, ``k >= 2``), that
field is not stored again: its codes are the key column the arrangement keeps anyway (the
key's codes and the field's are made by the same `codes_of`), so the stored values are the
other ``k - 1`` fields and a read puts the key back (`Layout.full`). An arrangement of edges
by source keeps ``(key, dst)`` instead of ``(key, src, dst)``: a sixth less per row with two
time coordinates, a seventh less for SCC's labelled edges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._columns import SCALAR, Block, block_of_codes, bounds, codes_of, values_of
from ._columns._codes import PAIRS, codes_of_values
from ._keys import unhashable
from ._trace import Batch, Rows, Spine

__all__ = ["Layout", "widened"]


class Layout:
    __slots__ = ("arity", "key", "op")

    def __init__(self, op: str, arity: int | None = None, key: int | None = None) -> None:
        self.op = op
        self.arity = arity
        """The tuple arity of the records stored by field, `SCALAR` for whole records, None before any."""
        self.key = key
        """The field that is the arrangement's key (an ``itemgetter(i)`` key), None for another key."""

    @property
    def keyed(self) -> bool:
        """Whether the key's field is left out of the stored values (tuples of two fields or more)."""
        return self.key is not None and self.arity is not None and 0 <= self.key < self.arity and self.arity > 1

    @property
    def width(self) -> int:
        """How many code columns a record takes."""
        if self.arity is None or self.arity <= 0:
            return 1
        return self.arity - 1 if self.keyed else self.arity

    def stored(self, cols: list[np.ndarray] | tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """Of a record's full code columns, those the arrangement stores."""
        if not self.keyed:
            return list(cols)
        return [c for i, c in enumerate(cols) if i != self.key]

    def full(self, cols: list[np.ndarray] | tuple[np.ndarray, ...], keys: np.ndarray | None) -> list[np.ndarray]:
        """A record's full code columns from the stored ones and the rows' ``keys``."""
        if not self.keyed:
            return list(cols)
        if keys is None:
            raise AssertionError(f"{self.op}: the records of a keyed arrangement need their keys")
        key = self.key
        assert key is not None
        return [*cols[:key], keys, *cols[key:]]

    def accept(self, block: Block) -> bool:
        """Fix the layout on the first block; False if ``block`` needs the arrangement widened
        to whole records first (`widen`)."""
        arity = block.arity if block.arity > 0 else SCALAR
        if self.arity is None:
            self.arity = arity
            return True
        return self.arity == arity or self.arity == SCALAR

    def encode(self, block: Block) -> list[np.ndarray]:
        """The code columns of the block's records (after `accept`)."""
        try:
            if self.arity == SCALAR:
                return [block.record_codes()]
            return [codes_of(c) for c in self.stored(block.cols)]
        except TypeError:
            raise unhashable(self.op, "record", block.records()) from None

    def decode(
        self, cols: list[np.ndarray] | tuple[np.ndarray, ...], diffs: np.ndarray, keys: np.ndarray | None = None
    ) -> Block:
        """The records of stored code columns (and their rows' ``keys``), as a block."""
        if self.arity == SCALAR or self.arity is None:
            col = cols[0]
            if len(col) and bounds(col)[1] < PAIRS:  # plain ints are their own codes: no Python list
                return Block((col,), SCALAR, diffs)
            return Block.of_records(values_of(col), diffs)
        return block_of_codes(self.full(cols, keys), self.arity, diffs)

    def records(self, cols: list[np.ndarray] | tuple[np.ndarray, ...], keys: np.ndarray | None = None) -> list[Any]:
        if self.arity == SCALAR or self.arity is None:
            return values_of(cols[0])
        return list(zip(*(values_of(c) for c in self.full(cols, keys))))

    def widen(
        self, cols: list[np.ndarray] | tuple[np.ndarray, ...], keys: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Stored code columns of this layout as whole-record codes; the layout becomes `SCALAR`."""
        records = self.records(cols, keys)
        self.arity = SCALAR
        return [codes_of_values(records, len(records))]


def widened(spine: Spine | None, layout: Layout, ntimes: int) -> Spine | None:
    """``spine`` with its records recoded as whole records (``layout`` widens to `SCALAR`)."""
    if spine is None:
        empty = np.zeros(0, dtype=np.int64)
        layout.widen([empty] * layout.width, empty)
        return None
    rows = spine.rows()
    vals = layout.widen(list(rows.vals), rows.keys)
    out = Spine(1, ntimes)
    out.advance_to(spine.epoch)
    out.insert(Batch(Rows(rows.keys, vals, rows.times, rows.diffs)))
    return out
