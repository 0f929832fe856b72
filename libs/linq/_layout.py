"""How an arrangement stores records: as ``k`` code columns, or as one column of whole records.

Records of one arity ``k >= 1`` (tuples, the common case: edges, labels) are stored as one
code column per field, so an ``itemgetter`` key or value is a column and int fields are their
own codes. Anything else (scalars, tuples of varying length, a mix) is stored as one code per
whole record. An arrangement starts with the layout of its first block and widens to whole
records, once and for good, when a block of another shape arrives (`Layout.accept`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._columns import SCALAR, Block, block_of_codes, codes_of, values_of
from ._columns._codes import codes_of_values
from ._keys import unhashable
from ._trace import Batch, Rows, Spine

__all__ = ["Layout", "widened"]


class Layout:
    __slots__ = ("arity", "op")

    def __init__(self, op: str, arity: int | None = None) -> None:
        self.op = op
        self.arity = arity
        """The tuple arity of the records stored by field, `SCALAR` for whole records, None before any."""

    @property
    def width(self) -> int:
        """How many code columns a record takes."""
        return self.arity if self.arity is not None and self.arity > 0 else 1

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
            return [codes_of(c) for c in block.cols]
        except TypeError:
            raise unhashable(self.op, "record", block.records()) from None

    def decode(self, cols: list[np.ndarray] | tuple[np.ndarray, ...], diffs: np.ndarray) -> Block:
        """The records of code columns, as a block."""
        if self.arity == SCALAR or self.arity is None:
            return Block.of_records(values_of(cols[0]), diffs)
        return block_of_codes(cols, self.arity, diffs)

    def records(self, cols: list[np.ndarray] | tuple[np.ndarray, ...]) -> list[Any]:
        if self.arity == SCALAR or self.arity is None:
            return values_of(cols[0])
        return list(zip(*(values_of(c) for c in cols)))

    def widen(self, cols: list[np.ndarray] | tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """Code columns of this layout as whole-record codes; the layout becomes `SCALAR`."""
        records = self.records(cols)
        self.arity = SCALAR
        return [codes_of_values(records, len(records))]


def widened(spine: Spine | None, layout: Layout, ntimes: int) -> Spine | None:
    """``spine`` with its records recoded as whole records (``layout`` widens to `SCALAR`)."""
    if spine is None:
        layout.widen([np.zeros(0, dtype=np.int64)] * layout.width)
        return None
    rows = spine.rows()
    vals = layout.widen(list(rows.vals))
    out = Spine(1, ntimes)
    out.advance_to(spine.epoch)
    out.insert(Batch(Rows(rows.keys, vals, rows.times, rows.diffs)))
    return out
