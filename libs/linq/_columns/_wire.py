"""Blocks on the wire: each column as raw bytes (int64, float64) or as its values (objects),
and a column whose values are all one int (a label flooding the graph, the diffs of an
insertion) as that int and its length: a third of the bytes for the proposals of a
label-propagation loop, which otherwise fill the sockets between processes faster than a
busy peer reads them.

Registered with timely's codec when linq is imported, in every process alike, so a block
crossing processes costs one memory copy per numeric column and no per-record encoding. A
column of objects travels as a tuple of its values (the codec's rules apply: lists arrive
as tuples). Codes never travel: they are process-local (see `_codes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timely import register_codec

from ._block import Block, column_of

__all__ = ["register"]

_KINDS = {np.dtype(np.int64): "i", np.dtype(np.float64): "f"}


_INT = np.dtype(np.int64)


def _one_value(c: np.ndarray) -> int | None:
    """The int every value of an int64 column equals, if there is one (and more than one value)."""
    if len(c) > 1 and c.dtype == _INT and c[0] == c[-1]:
        first = c[0]
        if (c == first).all():
            return int(first)
    return None


def _column(c: np.ndarray) -> tuple[Any, ...]:
    one = _one_value(c)
    if one is not None:
        return ("k", one, len(c))
    kind = _KINDS.get(c.dtype)
    if kind is None:
        return ("o", tuple(c.tolist()))
    return (kind, c.tobytes())


def _array(kind: str, payload: Any, *length: int) -> np.ndarray:
    if kind == "i":
        return np.frombuffer(payload, dtype=np.int64)
    if kind == "f":
        return np.frombuffer(payload, dtype=np.float64)
    if kind == "k":
        return np.full(length[0], payload, dtype=np.int64)
    return column_of(list(payload))


def encode(block: Block) -> Any:
    one = _one_value(block.diffs)
    diffs = block.diffs.tobytes() if one is None else (one, len(block.diffs))
    return (block.arity, tuple(_column(c) for c in block.cols), diffs)


def decode(value: Any) -> Block:
    arity, cols, diffs = value
    if type(diffs) is tuple:
        diffs = np.full(diffs[1], diffs[0], dtype=np.int64)
    else:
        diffs = np.frombuffer(diffs, dtype=np.int64)
    return Block([_array(*column) for column in cols], arity, diffs)


def register() -> None:
    register_codec(Block, encode, decode, code=65)  # explicit: stable if the module moves
