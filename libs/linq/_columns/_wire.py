"""Blocks on the wire: each column as raw bytes (int64, float64) or as its values (objects).

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


def _column(c: np.ndarray) -> tuple[str, Any]:
    kind = _KINDS.get(c.dtype)
    if kind is None:
        return ("o", tuple(c.tolist()))
    return (kind, c.tobytes())


def _array(kind: str, payload: Any) -> np.ndarray:
    if kind == "i":
        return np.frombuffer(payload, dtype=np.int64)
    if kind == "f":
        return np.frombuffer(payload, dtype=np.float64)
    return column_of(list(payload))


def encode(block: Block) -> Any:
    return (block.arity, tuple(_column(c) for c in block.cols), block.diffs.tobytes())


def decode(value: Any) -> Block:
    arity, cols, diffs = value
    return Block([_array(kind, payload) for kind, payload in cols], arity, np.frombuffer(diffs, dtype=np.int64))


def register() -> None:
    register_codec(Block, encode, decode)
