"""Arrow batches to what the timely inputs take, and the output stream's records back to Arrow.

Two forms (`run`'s ``columns``):

- *rows*: a tuple of Python values per row. Python-level work per value is the cost that
  matters: a numeric column without nulls goes through numpy (``tolist`` is about ten times
  faster than ``to_pylist``), other columns through ``to_pylist``, and rows are put together
  with ``zip`` rather than built one dict at a time.
- *columns*: one record per Arrow batch, a tuple of numpy arrays (one per column); numeric and
  boolean columns without nulls as numpy arrays sharing Arrow's memory where they can, others
  as object arrays of the Python values. On the way out, a record is a tuple of arrays, one per
  output column, and each array becomes an Arrow array in one call. No Python object per row
  either way (but for values that are Python objects anyway).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa

from ._errors import SparkBridgeError

__all__ = ["BATCH_ROWS", "column_array", "column_values", "columns_of", "output_rows", "rows_of", "to_batches"]

BATCH_ROWS = 65536
"""Rows per output RecordBatch: big enough to amortise Arrow's per-batch cost, small enough to
stream (Spark reads each batch as it is yielded)."""


def _numeric(array: pa.Array | pa.ChunkedArray) -> bool:
    t = array.type
    return array.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def column_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The Python values of one column."""
    if _numeric(array):
        return array.to_numpy(zero_copy_only=False).tolist()  # type: ignore[no-any-return]
    return array.to_pylist()  # type: ignore[no-any-return]


def column_array(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One column as a numpy array: of numbers (Arrow's memory, when it can) or of Python values."""
    if _numeric(array):
        return array.to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]
    values = array.to_pylist()
    return np.fromiter(values, dtype=object, count=len(values))  # lists stay values: no 2-D array


def rows_of(struct: pa.StructArray) -> list[tuple[Any, ...]]:
    """One tuple per element of a struct array (its fields in order)."""
    columns = [column_values(child) for child in struct.flatten()]
    if not columns:
        return [()] * len(struct)
    return list(zip(*columns))


def columns_of(struct: pa.StructArray) -> tuple[np.ndarray, ...]:
    """A struct array's fields as numpy arrays."""
    return tuple(column_array(child) for child in struct.flatten())


def output_rows(records: Sequence[Any], columns: bool) -> int:
    """How many rows the output stream's ``records`` hold."""
    if not columns:
        return len(records)
    return sum(len(r[0]) for r in records if isinstance(r, tuple) and r and hasattr(r[0], "__len__"))


def to_batches(
    records: Sequence[Any], schema: pa.Schema, epoch: int | None = None, what: str = "output", columns: bool = False
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of ``schema`` holding ``records`` — rows (tuples of the schema's width) or,
    with ``columns``, tuples of that many arrays of one length — of one less column when
    ``epoch`` is given: then the first column is ``epoch`` for every row."""
    fields = list(schema)
    epoch_field = None
    if epoch is not None:
        epoch_field, fields = fields[0], fields[1:]
    chunks = _column_chunks(records, fields, what) if columns else _row_chunks(records, fields, what)
    for values in chunks:
        arrays = [_arrow(v, field, what) for v, field in zip(values, fields)]
        n = len(values[0]) if values else 0
        if epoch_field is not None:
            arrays.insert(0, pa.array(np.full(n, epoch, dtype=np.int32), type=epoch_field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _row_chunks(rows: Sequence[Any], fields: list[pa.Field], what: str) -> Iterator[list[Any]]:
    """Per chunk of `BATCH_ROWS` rows, the values of each column."""
    width = len(fields)
    for start in range(0, len(rows), BATCH_ROWS):
        chunk = rows[start : start + BATCH_ROWS]
        try:
            widths = set(map(len, chunk))
        except TypeError:
            bad = next(r for r in chunk if not hasattr(r, "__len__"))
            raise _wrong_shape(what, fields, repr(bad)) from None
        if widths != {width}:
            raise _wrong_shape(what, fields, repr(next(r for r in chunk if len(r) != width)))
        yield [list(map(itemgetter(i), chunk)) for i in range(width)]  # 10x faster than zip(*chunk) over many rows


def _column_chunks(records: Sequence[Any], fields: list[pa.Field], what: str) -> Iterator[list[np.ndarray]]:
    """The records' arrays, concatenated per column, in chunks of `BATCH_ROWS` rows."""
    width = len(fields)
    for r in records:
        if not (isinstance(r, tuple) and len(r) == width and all(isinstance(c, np.ndarray) for c in r)):
            raise _wrong_shape(what, fields, f"{type(r).__name__} {_sample(r)}", columns=True)
        if len({len(c) for c in r}) > 1:
            raise SparkBridgeError(f"the {what} stream's arrays differ in length: {[len(c) for c in r]}")
    if not records:
        return
    whole = [np.concatenate([r[i] for r in records]) for i in range(width)]
    for start in range(0, len(whole[0]), BATCH_ROWS):
        yield [c[start : start + BATCH_ROWS] for c in whole]


def _sample(record: Any) -> str:
    text = repr(record)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong_shape(what: str, fields: list[pa.Field], got: str, columns: bool = False) -> SparkBridgeError:
    names = ", ".join(f.name for f in fields)
    if columns:
        return SparkBridgeError(
            f"the {what} stream must carry tuples of {len(fields)} numpy arrays, one per column ({names}), got {got}"
        )
    return SparkBridgeError(f"the {what} stream must carry tuples of {len(fields)} values ({names}), got {got}")


def _arrow(values: Any, field: pa.Field, what: str) -> pa.Array:
    try:
        return pa.array(values, type=field.type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        sample = next((v for v in values if v is not None), None)
        raise SparkBridgeError(
            f"column {field.name!r} of the {what} ({field.type}) cannot hold {sample!r} ({type(sample).__name__}): {e}"
        ) from None
