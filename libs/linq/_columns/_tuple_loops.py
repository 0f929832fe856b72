"""The compiled tier of `_tuples.TupleTable` (numba): one loop over a block's rows.

The numpy tier probes in rounds, each a few passes over the rows still looking; for the
hundreds of thousands of rows of a large block, one compiled pass that probes each row to its
end (and adds it, if missing) is several times cheaper. Loaded only for large blocks
(`_kernels.POLICY`), cached like `_compiled`'s loops (`timely_libs._numba_cache`).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.types import Array, UniTuple, i8, int32, int64, void  # type: ignore[attr-defined]

from ... import _numba_cache

__all__ = ["find_or_add", "place"]

_BEGUN = _numba_cache.begin(
    __file__, "timely_libs.linq: compiling its tuple table's loops with numba, once per machine"
)

VEC = Array(int64, 1, "C")
INDEX = Array(int32, 1, "C")
ROWS = Array(int64, 2, "C")
KEYS = Array(int64, 2, "C", readonly=True)
IN = Array(int64, 1, "C", readonly=True)


@njit(UniTuple(i8, 2)(INDEX, ROWS, VEC, KEYS, IN, IN, IN, i8, i8, VEC), cache=True)
def find_or_add(
    index: np.ndarray,
    rows: np.ndarray,
    routes: np.ndarray,
    keys: np.ndarray,
    key_routes: np.ndarray,
    homes: np.ndarray,
    free: np.ndarray,
    nfree: int,
    size: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """Set ``out[r]`` to the id of ``keys[r]``, probing ``index`` from ``homes[r]``; a missing
    key gets the id on top of ``free`` (``nfree`` of them) or else ``size``, its row and route
    written. Returns the new ``size`` and ``nfree``. The index has room (at most half full)."""
    mask = len(index) - 1
    width = keys.shape[1]
    for r in range(len(keys)):
        s = homes[r]
        while True:
            i = int(index[s])
            if i < 0:
                if nfree > 0:
                    nfree -= 1
                    i = free[nfree]
                else:
                    i = size
                    size += 1
                for j in range(width):
                    rows[i, j] = keys[r, j]
                routes[i] = key_routes[r]
                index[s] = i
                break
            same = True
            for j in range(width):
                if rows[i, j] != keys[r, j]:
                    same = False
                    break
            if same:
                break
            s = (s + 1) & mask
        out[r] = i
    return size, nfree


@njit(void(INDEX, IN, IN), cache=True)
def place(index: np.ndarray, ids: np.ndarray, homes: np.ndarray) -> None:
    """Put each of ``ids`` at the first empty slot of ``index`` from its home on."""
    mask = len(index) - 1
    for r in range(len(ids)):
        s = homes[r]
        while index[s] >= 0:
            s = (s + 1) & mask
        index[s] = ids[r]


_numba_cache.finish(_BEGUN, globals(), __name__, "timely_libs.linq", "tuple-table loops")
