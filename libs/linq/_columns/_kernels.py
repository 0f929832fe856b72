"""The few array kernels everything columnar is made of: sort rows, find groups, sum groups.

Rows are given as a sequence of equally long 1-D integer arrays, the first the most
significant (``(key, value fields..., time coordinates...)``). Sorting packs the columns into
one int64 when their ranges fit in 63 bits together (one stable argsort, about twice as fast as
`numpy.lexsort` over several columns) and falls back to lexsort otherwise; consolidation is
that sort plus `numpy.add.reduceat` over the runs of equal rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["EMPTY", "consolidate", "group_starts", "order", "ranges", "sorted_order"]

EMPTY = np.zeros(0, dtype=np.int64)


def _packed(cols: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 per row that orders like the columns lexicographically, or None if they do not fit."""
    if len(cols) == 1:
        return cols[0]
    lows = []
    bits = 0
    widths = []
    for c in cols:
        lo = int(c.min())
        hi = int(c.max())
        w = (hi - lo).bit_length()
        lows.append(lo)
        widths.append(w)
        bits += w
    if bits > 62:
        return None
    out = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, w in zip(cols, lows, widths):
        if w:
            out <<= w
            out |= c - lo if lo else c
    return out


def order(cols: Sequence[np.ndarray]) -> np.ndarray:
    """Indices that sort the rows lexicographically (first column first), stable."""
    if not len(cols[0]):
        return EMPTY
    packed = _packed(cols)
    if packed is not None:
        return np.argsort(packed, kind="stable")
    return np.lexsort(tuple(reversed(cols)))


def sorted_order(cols: Sequence[np.ndarray]) -> bool:
    """Whether the rows are already sorted (cheap check before paying for a sort)."""
    n = len(cols[0])
    if n < 2:
        return True
    packed = _packed(cols)
    if packed is not None:
        return bool((packed[1:] >= packed[:-1]).all())
    return False


def group_starts(cols: Sequence[np.ndarray]) -> np.ndarray:
    """For sorted rows: the index of the first row of each run of equal rows."""
    n = len(cols[0])
    if n == 0:
        return EMPTY
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in cols:
        change[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(change)


def consolidate(cols: Sequence[np.ndarray], diffs: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The rows sorted, equal rows summed, rows whose sum is zero dropped."""
    if not len(diffs):
        return [c[:0] for c in cols], diffs[:0]
    idx = order(cols)
    cols = [c[idx] for c in cols]
    diffs = diffs[idx]
    starts = group_starts(cols)
    if len(starts) < len(diffs):
        diffs = np.add.reduceat(diffs, starts)
        cols = [c[starts] for c in cols]
    keep = diffs != 0
    if not keep.all():
        cols = [c[keep] for c in cols]
        diffs = diffs[keep]
    return cols, diffs


def ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` for every i, without a Python loop."""
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return EMPTY
    nonzero = lengths > 0
    lo = lo[nonzero]
    lengths = lengths[nonzero]
    # each run starts at lo[i]; inside a run the index grows by one
    steps = np.ones(total, dtype=np.int64)
    ends = np.cumsum(lengths)
    steps[0] = lo[0]
    if len(lo) > 1:
        steps[ends[:-1]] = lo[1:] - (lo[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)
