"""One step of `Propagate` in one compiled call: the read of a few keys' histories from both
arrangements and their evaluation along a line (`line_step`).

What `_least` does for a step in up to a few dozen numpy calls (or a Python pass per key) --
read the keys' rows from the proposals and the labels (`rows_of`), keep those on ``t``'s line
(`split_line`), replay them along it (`line_changes`), and find where the rest meet ``t``
(`later_keys`) -- is done here in one pass per key over both spines, read whole through their
address tables (`Batch.address`). A medium SCC round takes about 280 such steps of a few
dozen keys each: their fixed cost, not the rows, is what a step cost. The answer is the same
as the Python replay's (`_least._replay`), so the evaluated labels do not depend on which
form ran; `tests/linq/test_line_step.py` compares the two on random histories.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.types import Array, Tuple, i8, int64, void  # type: ignore[attr-defined]

from ... import _numba_cache
from .._columns._compiled import ADDR_COLUMNS, ADDR_STARTS, ADDRESS_TABLE, IN, _load, _spine_matches

_BEGUN = _numba_cache.begin(
    __file__, "timely_libs.linq.propagate: compiling its line step with numba, once per machine (a few seconds)"
)

__all__ = ["MAX_KEY_ROWS", "NEGATIVE", "NOT_INTS", "TOO_MANY", "line_join", "line_step"]

MAX_KEY_ROWS = 4096
"""A key with more rows on the line than this (a hub) is left to the column form, whose cost
does not grow with the square of a key's distinct labels."""
NOT_INTS, NEGATIVE, TOO_MANY = -1, -2, -3
"""`line_step`'s status when it gives up: a label that is not an int (interned codes do not
order as their values), a proposal with a negative count at ``t`` (the caller raises, naming
the key, label and count from the first three cells of the changes), a hub key."""


ORDER_BELOW = 32
"""Up to this many rows, a key's rows are ordered by insertion (they come as a few sorted runs,
one per batch); more take numpy's sort."""


@njit(void(Array(int64, 1, "C"), i8, IN), cache=True, nogil=True)
def _order(at: np.ndarray, n: int, pos: np.ndarray) -> None:
    """``at[:n]`` (row indices) stably ordered by their ``pos``."""
    if n > ORDER_BELOW:
        at[:n] = at[:n][np.argsort(pos[at[:n]], kind="mergesort")]
        return
    for a in range(1, n):
        row = at[a]
        p = pos[row]
        b = a
        while b > 0 and pos[at[b - 1]] > p:
            at[b] = at[b - 1]
            b -= 1
        at[b] = row


@njit(i8(Array(int64, 1, "C"), i8), cache=True, nogil=True)
def _distinct(values: np.ndarray, n: int) -> int:
    """``values[:n]`` sorted and made distinct in place; how many are left."""
    if n > ORDER_BELOW:
        values[:n] = np.sort(values[:n])
    else:
        for a in range(1, n):
            v = values[a]
            b = a
            while b > 0 and values[b - 1] > v:
                values[b] = values[b - 1]
                b -= 1
            values[b] = v
    m = 0
    for a in range(n):
        if m == 0 or values[a] != values[m - 1]:
            values[m] = values[a]
            m += 1
    return m


MATRIX = Array(int64, 2, "C")


@njit(void(MATRIX, i8, i8), cache=True, nogil=True)
def _by_label(out: np.ndarray, lo: int, hi: int) -> None:
    """A key's changes ``out[:, lo:hi]``, made in order of position, put in order of (label,
    position) by a stable sort on the label: a batch's order, so the caller's `Batch` takes
    them as they are."""
    n = hi - lo
    if n > ORDER_BELOW:
        idx = lo + np.argsort(out[1, lo:hi], kind="mergesort")
        for c in range(4):
            out[c, lo:hi] = out[c, idx]
        return
    for a in range(lo + 1, hi):
        k, label, x, d = out[0, a], out[1, a], out[2, a], out[3, a]
        b = a
        while b > lo and out[1, b - 1] > label:
            for c in range(4):
                out[c, b] = out[c, b - 1]
            b -= 1
        out[0, b], out[1, b], out[2, b], out[3, b] = k, label, x, d


@njit(Tuple((MATRIX, MATRIX, i8))(IN, ADDRESS_TABLE, ADDRESS_TABLE, IN, i8), cache=True, nogil=True)
def line_step(keys: np.ndarray, proposals: np.ndarray, labels: np.ndarray, t: np.ndarray, first_code: int) -> tuple:  # type: ignore[type-arg]
    """The label changes of ``keys`` (sorted, distinct) along ``t``'s line, from their rows in
    the ``proposals`` and ``labels`` spines (address tables, one value column each): a matrix
    of rows ``(key, label, position, diff)`` (one column each), consolidated per (key,
    position, label) and in a batch's order, (key, label, position); the keys' rows off
    the line as ``(time..., key)`` columns, each time the join of the row's with ``t``
    (where the key is evaluated again, TR §4.3); and a status, 0 or one of `NOT_INTS`,
    `NEGATIVE`, `TOO_MANY`.

    Per key, as `_least._replay`: rows at or before ``t`` count from ``t[-1]``; at ``t[-1]``
    and each later position of the key's rows, the key's label must be the least proposal
    with a positive count, less the labels sent so far (a label row counts from its
    position on), and the change from the previous position is emitted."""
    n = len(keys)
    ntimes = len(t)
    td = t[ntimes - 1]
    empty = np.empty((4, 0), dtype=np.int64)
    no_later = np.empty((ntimes + 1, 0), dtype=np.int64)
    found_p, m_p, total_p = _spine_matches(keys, proposals)
    found_l, m_l, total_l = _spine_matches(keys, labels)
    total = total_p + total_l
    # each key's rows, side by side (a slot per key): position, side, label, diff
    count = np.zeros(n + 1, dtype=np.int64)
    for p in range(m_p):
        b = found_p[p, 0]
        j = found_p[p, 2]
        s, ss = proposals[b, ADDR_STARTS], proposals[b, ADDR_STARTS + 1]
        count[found_p[p, 1] + 1] += _load(s, (j + 1) * ss) - _load(s, j * ss)
    for p in range(m_l):
        b = found_l[p, 0]
        j = found_l[p, 2]
        s, ss = labels[b, ADDR_STARTS], labels[b, ADDR_STARTS + 1]
        count[found_l[p, 1] + 1] += _load(s, (j + 1) * ss) - _load(s, j * ss)
    offsets = np.cumsum(count)
    fill = offsets[:-1].copy()
    pos = np.empty(total, dtype=np.int64)
    side = np.empty(total, dtype=np.int64)
    val = np.empty(total, dtype=np.int64)
    diff = np.empty(total, dtype=np.int64)
    later = np.empty((ntimes + 1, total), dtype=np.int64)
    nlater = 0
    time_col = ADDR_COLUMNS + 4  # column 2: the first time coordinate (key, value before it)
    diff_col = ADDR_COLUMNS + 2 * (2 + ntimes)
    for which in range(2):
        table = proposals if which == 0 else labels
        found = found_p if which == 0 else found_l
        m = m_p if which == 0 else m_l
        for p in range(m):
            b = found[p, 0]
            i = found[p, 1]
            j = found[p, 2]
            s, ss = table[b, ADDR_STARTS], table[b, ADDR_STARTS + 1]
            vaddr, vstride = table[b, ADDR_COLUMNS + 2], table[b, ADDR_COLUMNS + 3]
            daddr, dstride = table[b, diff_col], table[b, diff_col + 1]
            for r in range(_load(s, j * ss), _load(s, (j + 1) * ss)):
                v = _load(vaddr, r * vstride)
                if v >= first_code:
                    return empty, no_later, NOT_INTS
                on_line = True
                for c in range(ntimes - 1):
                    if _load(table[b, time_col + 2 * c], r * table[b, time_col + 2 * c + 1]) > t[c]:
                        on_line = False
                        break
                if not on_line:  # met again at its join with t
                    for c in range(ntimes):
                        x = _load(table[b, time_col + 2 * c], r * table[b, time_col + 2 * c + 1])
                        later[c, nlater] = x if x > t[c] else t[c]
                    later[ntimes, nlater] = keys[i]
                    nlater += 1
                    continue
                f = fill[i]
                x = _load(table[b, time_col + 2 * (ntimes - 1)], r * table[b, time_col + 2 * (ntimes - 1) + 1])
                pos[f] = x if x > td else td
                side[f] = which
                val[f] = v
                diff[f] = _load(daddr, r * dstride)
                fill[i] = f + 1
    widest = 0
    for i in range(n):
        widest = max(widest, fill[i] - offsets[i])
    if widest > MAX_KEY_ROWS:
        return empty, no_later, TOO_MANY
    # scratch for one key at a time, made once per call: a key's few rows are ordered in place
    # (`_order`), with no array made per key
    at = np.empty(widest, dtype=np.int64)
    distinct_labels = np.empty(widest, dtype=np.int64)
    index = np.empty(widest, dtype=np.int64)
    proposed = np.zeros(widest, dtype=np.int64)
    sent = np.zeros(widest, dtype=np.int64)  # change to emit per label at this position
    touched = np.empty(widest + 2, dtype=np.int64)
    marked = np.zeros(widest, dtype=np.bool_)
    out = np.empty((4, 3 * total + 2 * n), dtype=np.int64)  # per position: its label rows, +1, -1
    nout = 0
    for i in range(n):
        lo = offsets[i]
        hi = fill[i]  # the key's rows on the line
        rows = hi - lo
        if rows == 0:
            continue
        first = nout
        for r in range(rows):
            at[r] = lo + r
            distinct_labels[r] = val[lo + r]
        _order(at, rows, pos)
        nl = _distinct(distinct_labels, rows)
        for r in range(rows):
            index[r] = np.searchsorted(distinct_labels[:nl], val[lo + r])
        proposed[:nl] = 0
        before = -1
        r = 0
        x = td
        while True:
            nt = 0
            while r < rows and pos[at[r]] <= x:
                row = at[r]
                li = index[row - lo]
                if side[row] == 0:
                    proposed[li] += diff[row]
                else:  # a label sent counts from its position on: less it from here
                    sent[li] -= diff[row]
                    if not marked[li]:
                        marked[li] = True
                        touched[nt] = li
                        nt += 1
                r += 1
            least = -1
            for li in range(nl):
                c = proposed[li]
                if c < 0 and x == td:
                    out[0, 0] = keys[i]
                    out[1, 0] = distinct_labels[li]
                    out[2, 0] = c
                    return out, no_later, NEGATIVE
                if c > 0 and least < 0:
                    least = li
                    if x != td:
                        break
            if least != before:
                for li, d in ((least, 1), (before, -1)):
                    if li >= 0:
                        sent[li] += d
                        if not marked[li]:
                            marked[li] = True
                            touched[nt] = li
                            nt += 1
            for q in range(nt):
                li = touched[q]
                marked[li] = False
                if sent[li] != 0:
                    out[0, nout] = keys[i]
                    out[1, nout] = distinct_labels[li]
                    out[2, nout] = x
                    out[3, nout] = sent[li]
                    nout += 1
                    sent[li] = 0
            before = least
            if r >= rows:
                break
            x = pos[at[r]]
        _by_label(out, first, nout)
    return out[:, :nout].copy(), later[:, :nlater].copy(), 0


@njit(Tuple((MATRIX, i8))(MATRIX, ADDRESS_TABLE, IN, i8, i8), cache=True, nogil=True)
def line_join(changes: np.ndarray, edges: np.ndarray, t: np.ndarray, nvals: int, first_code: int) -> tuple:  # type: ignore[type-arg]
    """The proposals of a step's label changes (`line_step`'s ``changes``: rows ``(key,
    label, position, diff)`` at times ``(t[:-1], position)``, sorted by key) met with the
    ``edges`` spine (an address table; values ``dst`` and, with ``nvals`` 2, ``weight``): a
    matrix of rows ``(time..., dst, label, diff)``, one per (change, edge row) pair, each at
    the join of the two rows' times, with the label plus the weight and the product of the
    diffs (not consolidated); and a status, 0 or `NOT_INTS` (a weight that is not an int).

    What `Propagate._join` does for label changes with a search per batch, a gather per
    column and a maximum per time coordinate, in one pass over the pairs."""
    ntimes = len(t)
    found, m, total = _spine_matches(changes[0], edges)
    out = np.empty((ntimes + 3, total), dtype=np.int64)
    time_col = ADDR_COLUMNS + 2 * (1 + nvals)
    diff_col = time_col + 2 * ntimes
    r = 0
    for p in range(m):
        b = found[p, 0]
        i = found[p, 1]
        j = found[p, 2]
        s, ss = edges[b, ADDR_STARTS], edges[b, ADDR_STARTS + 1]
        daddr, dstride = edges[b, ADDR_COLUMNS + 2], edges[b, ADDR_COLUMNS + 3]
        label, x, d = changes[1, i], changes[2, i], changes[3, i]
        for e in range(_load(s, j * ss), _load(s, (j + 1) * ss)):
            for c in range(ntimes - 1):
                y = _load(edges[b, time_col + 2 * c], e * edges[b, time_col + 2 * c + 1])
                out[c, r] = y if y > t[c] else t[c]
            y = _load(edges[b, time_col + 2 * (ntimes - 1)], e * edges[b, time_col + 2 * (ntimes - 1) + 1])
            out[ntimes - 1, r] = y if y > x else x
            out[ntimes, r] = _load(daddr, e * dstride)
            if nvals == 2:
                w = _load(edges[b, ADDR_COLUMNS + 4], e * edges[b, ADDR_COLUMNS + 5])
                if w >= first_code:
                    return out[:, :0].copy(), NOT_INTS
                out[ntimes + 1, r] = label + w
            else:
                out[ntimes + 1, r] = label
            out[ntimes + 2, r] = d * _load(edges[b, diff_col], e * edges[b, diff_col + 1])
            r += 1
    return out, 0


_numba_cache.finish(_BEGUN, globals(), __name__, "timely_libs.linq.propagate", "line step")
