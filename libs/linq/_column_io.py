"""Collections to and from plain timely streams of numpy columns (`Collection.from_columns`,
`Collection.to_columns`): data that is columnar already (Arrow batches from Spark, Parquet,
numpy) enters and leaves a dataflow without a Python object per record.

A record of such a stream is ``(columns, diffs)``: ``columns`` one numpy array of records
(scalar records) or a tuple of arrays, one per field of tuple records, all of one length;
``diffs`` an int array of that length, or None for each record once. One record is one block
of differences, made as `CollectionInput.update_columns` makes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timely import Timestamp, Vertex

from ._columns import SCALAR, concat_blocks
from ._columns._functions import as_block
from ._errors import OperatorError
from ._linear import block_in

__all__ = ["FromColumns", "ToColumns"]


class FromColumns(Vertex):
    """``(columns, diffs)`` records as blocks."""

    def __init__(self, op: str) -> None:
        self.op = op

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        blocks = []
        for record in records:
            if not (isinstance(record, tuple) and len(record) == 2):
                raise OperatorError(f"{self.op}: expected (columns, diffs) records, got {type(record).__name__}")
            columns, diffs = record
            if isinstance(columns, tuple) and not columns:
                raise OperatorError(f"{self.op}: a record needs at least one column")
            n = len(columns[0] if isinstance(columns, tuple) else columns)
            d = np.ones(n, dtype=np.int64) if diffs is None else np.asarray(diffs, dtype=np.int64)
            if d.shape != (n,):
                raise OperatorError(f"{self.op}: {n} records but diffs of shape {d.shape}")
            try:
                blocks.append(as_block(columns, d, "from_columns record"))
            except ValueError as exc:
                raise OperatorError(f"{self.op}: {exc}") from exc
        block = concat_blocks(blocks)
        if len(block):
            self.send_by(self.outputs[0], [block], time)


class ToColumns(Vertex):
    """Each message's block as one ``(columns, diffs)`` record."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        if len(block):
            columns = block.cols[0] if block.arity == SCALAR else tuple(block.cols)
            self.send_by(self.outputs[0], [(columns, block.diffs)], time)
