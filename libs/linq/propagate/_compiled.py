"""Compiled loops (numba) that serve `propagate` alone: its checks of a node's labels and its
join of label changes with edges, each fused into one pass over a batch's rows.

They read a trace through `_trace.indexed` (a batch and its key index) and find the rows of
the keys asked with `_columns._compiled.key_matches`, as the general loops do; what is
specific to least-label propagation (a label's support, a node's label slots, the least
label a change adds) stays here, beside the operator. Compiled, cached and announced as the
general loops are (`timely_libs._numba_cache`); loaded only when `POLICY` picks the compiled
tier (or `linq.preload`).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.types import Array, Tuple, b1, i8, int8, void  # type: ignore[attr-defined]

from ... import _numba_cache
from .._columns._compiled import (
    ADDR_COLUMNS,
    ADDR_STARTS,
    ADDRESS_TABLE,
    ANY,
    IN,
    OUT,
    TABLE,
    _load,
    _spine_matches,
    key_matches,
    matched_rows,
)

_BEGUN = _numba_cache.begin(
    __file__, "timely_libs.linq.propagate: compiling its loops with numba, once per machine (a few seconds)"
)

__all__ = [
    "consistent_slots",
    "first_rows",
    "join_values",
    "label_support",
    "least_added_removed",
    "slot_rows",
    "stamp_keys",
    "supported",
    "unchanged_spine",
    "uncovered_keys",
]


@njit(void(IN, ANY, IN, IN, TABLE, i8, ANY, ANY, ANY, i8, OUT), cache=True, nogil=True)
def label_support(
    keys: np.ndarray,
    labels: np.ndarray,
    ukeys: np.ndarray,
    starts: np.ndarray,
    table: np.ndarray,
    low: int,
    vals: np.ndarray,
    last: np.ndarray,
    diffs: np.ndarray,
    td: int,
    bound: np.ndarray,
) -> None:
    """`_least._still_proposed` for one batch (found by `Batch.key_index`, with the columns
    read): add to ``bound[i]`` the diffs of the rows of ``keys[i]`` whose value is
    ``labels[i]`` and that are at or before ``td`` (the last time coordinate) or removals.
    ``keys`` and ``ukeys`` are sorted (`_matches`)."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    for p in range(m):
        i = ia[p]
        j = ju[p]
        label = labels[i]
        total = 0
        for r in range(starts[j], starts[j + 1]):
            if vals[r] == label and (last[r] <= td or diffs[r] < 0):
                total += diffs[r]
        bound[i] += total


@njit(void(IN, IN, IN, TABLE, i8, ANY, ANY, ANY, OUT, OUT, OUT, OUT), cache=True, nogil=True)
def first_rows(
    keys: np.ndarray,
    ukeys: np.ndarray,
    starts: np.ndarray,
    table: np.ndarray,
    low: int,
    vals: np.ndarray,
    last: np.ndarray,
    diffs: np.ndarray,
    count: np.ndarray,
    val: np.ndarray,
    when: np.ndarray,
    diff: np.ndarray,
) -> None:
    """For each of ``keys`` (sorted, distinct) with rows in one batch (`Batch.key_index`):
    add their number to ``count[i]``, and keep the first one's value, last time coordinate and
    diff (a key with one row in all batches: its row)."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    for p in range(m):
        i = ia[p]
        r = starts[ju[p]]
        count[i] += starts[ju[p] + 1] - r
        val[i] = vals[r]
        when[i] = last[r]
        diff[i] = diffs[r]


@njit(void(IN, IN, IN, TABLE, i8, ANY, ANY, ANY, i8, OUT, OUT, OUT, OUT), cache=True, nogil=True)
def slot_rows(
    keys: np.ndarray,
    ukeys: np.ndarray,
    starts: np.ndarray,
    table: np.ndarray,
    low: int,
    vals: np.ndarray,
    last: np.ndarray,
    diffs: np.ndarray,
    td: int,
    fill: np.ndarray,
    val: np.ndarray,
    pos: np.ndarray,
    diff: np.ndarray,
) -> None:
    """For each of ``keys`` (sorted, distinct) with rows in one batch (`Batch.key_index`):
    write its rows' value, line position (the last time coordinate, raised to ``td``) and
    diff into its slot of ``val``, ``pos``, ``diff``, from ``fill[i]`` on (which it advances):
    every key's rows of every batch, side by side, with no sort."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    for p in range(m):
        i = ia[p]
        f = fill[i]
        for r in range(starts[ju[p]], starts[ju[p] + 1]):
            val[f] = vals[r]
            x = last[r]
            pos[f] = x if x > td else td
            diff[f] = diffs[r]
            f += 1
        fill[i] = f


@njit(void(IN, OUT, OUT, OUT, i8, OUT, OUT, OUT), cache=True, nogil=True)
def consistent_slots(
    offsets: np.ndarray,
    val: np.ndarray,
    pos: np.ndarray,
    diff: np.ndarray,
    td: int,
    bad: np.ndarray,
    greatest: np.ndarray,
    labelled: np.ndarray,
) -> None:
    """`_least._consistent` for the label rows of keys laid out in slots (key ``i``'s rows
    from ``offsets[i]`` to ``offsets[i + 1]``, by `slot_rows`): each slot sorted by (position,
    label) in place, then read once along the line. ``bad[i]``: some label's count goes
    negative, or the key has not exactly one label in all at each position where that total
    changes, the first being ``td``; ``greatest[i]``: the greatest label present (count > 0)
    at some position; ``labelled[i]``: one was."""
    counts_val = np.empty(64, dtype=np.int64)
    counts = np.empty(64, dtype=np.int64)
    for i in range(len(offsets) - 1):
        lo = offsets[i]
        hi = offsets[i + 1]
        for a in range(lo + 1, hi):  # insertion sort: a slot holds a few rows
            pv = pos[a]
            vv = val[a]
            dv = diff[a]
            b = a - 1
            while b >= lo and (pos[b] > pv or (pos[b] == pv and val[b] > vv)):
                pos[b + 1] = pos[b]
                val[b + 1] = val[b]
                diff[b + 1] = diff[b]
                b -= 1
            pos[b + 1] = pv
            val[b + 1] = vv
            diff[b + 1] = dv
        if hi - lo > len(counts):
            counts_val = np.empty(hi - lo, dtype=np.int64)
            counts = np.empty(hi - lo, dtype=np.int64)
        nlabels = 0
        total = 0
        seen_change = False
        r = lo
        while r < hi:
            x = pos[r]
            change = 0
            while r < hi and pos[r] == x:  # one position: each label's rows summed
                label = val[r]
                d = 0
                while r < hi and pos[r] == x and val[r] == label:
                    d += diff[r]
                    r += 1
                if d == 0:
                    continue
                change += d
                k = 0
                while k < nlabels and counts_val[k] != label:
                    k += 1
                if k == nlabels:
                    counts_val[k] = label
                    counts[k] = 0
                    nlabels += 1
                counts[k] += d
                if counts[k] < 0:
                    bad[i] = 1
                elif counts[k] > 0:
                    if label > greatest[i]:
                        greatest[i] = label
                    labelled[i] = 1
            if change == 0:
                continue
            if not seen_change and x != td:
                bad[i] = 1
            seen_change = True
            total += change
            if total != 1:
                bad[i] = 1


@njit(Tuple((OUT, OUT))(IN, ANY, ANY, i8), cache=True, nogil=True)
def least_added_removed(starts: np.ndarray, vals: np.ndarray, diffs: np.ndarray, none: int) -> tuple:  # type: ignore[type-arg]
    """For rows sorted by (key, value) (``starts``: where each key's rows begin): the least
    value each key adds and the least it removes (``none`` if it has no such row)."""
    n = len(starts) - 1
    added = np.full(n, none, dtype=np.int64)
    removed = np.full(n, none, dtype=np.int64)
    for i in range(n):
        for r in range(starts[i], starts[i + 1]):
            if diffs[r] > 0:
                if added[i] == none:
                    added[i] = vals[r]
            elif removed[i] == none:
                removed[i] = vals[r]
    return added, removed


@njit(Tuple((OUT, OUT, OUT, OUT))(IN, ANY, ANY, IN, IN, TABLE, i8, ANY, ANY, ANY, i8), cache=True, nogil=True)
def join_values(
    keys: np.ndarray,
    vals: np.ndarray,
    diffs: np.ndarray,
    ukeys: np.ndarray,
    starts: np.ndarray,
    table: np.ndarray,
    low: int,
    bvals: np.ndarray,
    bdiffs: np.ndarray,
    blast: np.ndarray,
    floor: int,
) -> tuple:  # type: ignore[type-arg]
    """A join of rows ``(keys, vals, diffs)`` (sorted by key) with a batch's rows of the same
    keys (`Batch.key_index`): for each pair, the row's value, the batch row's value and the
    product of the diffs (what `key_rows` and four gathers give, in one loop), and, if
    ``blast`` (the batch's last time coordinate) is not empty, that coordinate of the pair's
    joined time: the batch row's, raised to ``floor``."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    total = matched_rows(ju, m, starts)
    left = np.empty(total, dtype=np.int64)
    right = np.empty(total, dtype=np.int64)
    product = np.empty(total, dtype=np.int64)
    timed = len(blast) > 0
    last = np.empty(total if timed else 0, dtype=np.int64)
    r = 0
    for p in range(m):
        i = ia[p]
        v = vals[i]
        d = diffs[i]
        for row in range(starts[ju[p]], starts[ju[p] + 1]):
            left[r] = v
            right[r] = bvals[row]
            product[r] = d * bdiffs[row]
            if timed:
                x = blast[row]
                last[r] = x if x > floor else floor
            r += 1
    return left, right, product, last


@njit(b1(IN, i8, ADDRESS_TABLE, i8, i8, i8), cache=True, nogil=True)
def supported(key: np.ndarray, label: int, proposals: np.ndarray, ntimes: int, td: int, need: int) -> bool:
    """`_least._still_proposed` for one key (``key``, of one element) over a whole spine (its
    address table): whether the proposal ``label`` keeps a count of at least ``need`` (1, less
    what changes not yet inserted add) at every line time from ``td`` on."""
    found, m, _ = _spine_matches(key, proposals)
    last_col = ADDR_COLUMNS + 2 * (1 + ntimes)
    diff_col = last_col + 2
    bound = 0
    for p in range(m):
        b = found[p, 0]
        j = found[p, 2]
        starts_at, stride = proposals[b, ADDR_STARTS], proposals[b, ADDR_STARTS + 1]
        for r in range(_load(starts_at, j * stride), _load(starts_at, (j + 1) * stride)):
            if _load(proposals[b, ADDR_COLUMNS + 2], r * proposals[b, ADDR_COLUMNS + 3]) != label:
                continue
            d = _load(proposals[b, diff_col], r * proposals[b, diff_col + 1])
            if _load(proposals[b, last_col], r * proposals[b, last_col + 1]) <= td or d < 0:
                bound += d
    return bound >= need


@njit(Tuple((Array(int8, 1, "C"), OUT, OUT, i8))(IN, ANY, ANY, ANY, ANY, ADDRESS_TABLE, i8, i8), cache=True, nogil=True)
def unchanged_spine(
    keys: np.ndarray,
    starts: np.ndarray,
    vals: np.ndarray,
    when: np.ndarray,
    diffs: np.ndarray,
    labels: np.ndarray,
    ntimes: int,
    first_code: int,
) -> tuple:  # type: ignore[type-arg]
    """`_least.unchanged_few` for a few keys, reading the label arrangement whole (its address
    table, `Batch.address`) in this one call: for each of ``keys`` (sorted, distinct; a batch
    of proposal changes ``starts``, ``vals``, ``when`` (their positions on the line),
    ``diffs``, sorted by (key, value)), 1 if its labels are consistent along the line from
    its first change on and the changes cannot move them, 2 if so provided that a label
    (the second array) stays proposed from a position (the third: `supported`), else 0; and
    how many 2s, or -1 if a label is not an int (a code from ``first_code``: the caller
    takes the general path). Every row is on the changes' line, so only the last time
    coordinate (column ``1 + ntimes``) is read. A change at position ``v`` is checked against
    the greatest label at a line time from ``v`` on (labels fall along an update's line, so
    a change late on it meets the small labels only)."""
    n = len(keys)
    out = np.zeros(n, dtype=np.int8)
    most = np.zeros(n, dtype=np.int64)
    at = np.zeros(n, dtype=np.int64)
    checks = 0
    for c in range(len(vals)):
        if vals[c] >= first_code:
            return out, most, at, -1
    found, m, total = _spine_matches(keys, labels)
    pos = np.empty(total, dtype=np.int64)
    val = np.empty(total, dtype=np.int64)
    diff = np.empty(total, dtype=np.int64)
    seen = np.empty(total, dtype=np.int64)
    counts = np.empty(total, dtype=np.int64)
    segment_at = np.empty(total, dtype=np.int64)
    segment_most = np.empty(total, dtype=np.int64)
    last_col = ADDR_COLUMNS + 2 * (1 + ntimes)
    diff_col = last_col + 2
    for i in range(n):
        td = when[starts[i]]  # the key's first change
        for c in range(starts[i] + 1, starts[i + 1]):
            if when[c] < td:
                td = when[c]
        rows = 0  # the key's label rows, sorted by (position, label) as they come
        for p in range(m):
            if found[p, 1] != i:
                continue
            b = found[p, 0]
            j = found[p, 2]
            starts_at, stride = labels[b, ADDR_STARTS], labels[b, ADDR_STARTS + 1]
            for r in range(_load(starts_at, j * stride), _load(starts_at, (j + 1) * stride)):
                v = _load(labels[b, ADDR_COLUMNS + 2], r * labels[b, ADDR_COLUMNS + 3])
                if v >= first_code:
                    return out, most, at, -1
                x = _load(labels[b, last_col], r * labels[b, last_col + 1])
                x = x if x > td else td
                d = _load(labels[b, diff_col], r * labels[b, diff_col + 1])
                a = rows
                while a > 0 and (pos[a - 1] > x or (pos[a - 1] == x and val[a - 1] > v)):
                    pos[a] = pos[a - 1]
                    val[a] = val[a - 1]
                    diff[a] = diff[a - 1]
                    a -= 1
                pos[a] = x
                val[a] = v
                diff[a] = d
                rows += 1
        if rows == 0 or pos[0] != td:  # no label at the first change
            continue
        # one label in all, with count 1, at each position along the line: a segment each
        nlabels = 0
        segments = 0
        ok = True
        r = 0
        while r < rows:
            x = pos[r]
            while r < rows and pos[r] == x:
                k = 0
                while k < nlabels and seen[k] != val[r]:
                    k += 1
                if k == nlabels:
                    seen[k] = val[r]
                    counts[k] = 0
                    nlabels += 1
                counts[k] += diff[r]
                r += 1
            present = -1
            for k in range(nlabels):
                if counts[k] != 0:
                    if present >= 0:
                        ok = False
                    present = k
            if not ok or present < 0 or counts[present] != 1:
                ok = False
                break
            segment_at[segments] = x
            segment_most[segments] = seen[present]
            segments += 1
        if not ok:
            continue
        for g in range(segments - 2, -1, -1):  # the greatest label from each segment on
            if segment_most[g + 1] > segment_most[g]:
                segment_most[g] = segment_most[g + 1]
        # the changes: adding no smaller, removing greater, or the greatest while it stays proposed
        check = False
        for c in range(starts[i], starts[i + 1]):
            g = 0
            while g + 1 < segments and segment_at[g + 1] <= when[c]:
                g += 1
            greatest = segment_most[g]
            if diffs[c] > 0:
                ok = vals[c] >= greatest
            elif vals[c] > greatest:
                ok = True
            elif vals[c] == greatest and (not check or most[i] == greatest):
                at[i] = when[c] if not check or when[c] < at[i] else at[i]
                most[i] = greatest
                check = True
            else:
                ok = False
            if not ok:
                break
        out[i] = (2 if check else 1) if ok else 0
        checks += ok and check
    return out, most, at, checks


@njit(void(IN, OUT, i8, i8), cache=True, nogil=True)
def stamp_keys(keys: np.ndarray, stamps: np.ndarray, line: int, x: int) -> None:
    """`_covered.Covered.evaluated`'s loop: each of ``keys`` within ``stamps`` stamped ``line +
    x``, unless its stamp is on that line (``line`` to ``line + 2**32``) at an earlier position."""
    size = len(stamps)
    end = line + (1 << 32)
    for k in keys:
        if 0 <= k < size:
            s = stamps[k]
            if not (line <= s < end and s <= line + x):
                stamps[k] = line + x


@njit(OUT(IN, IN, i8, i8), cache=True, nogil=True)
def uncovered_keys(keys: np.ndarray, stamps: np.ndarray, line: int, x: int) -> np.ndarray:
    """`_covered.Covered.uncovered`'s loop: ``keys`` less those stamped on ``line`` at a
    position at or before ``x``."""
    out = np.empty(len(keys), dtype=np.int64)
    size = len(stamps)
    n = 0
    for k in keys:
        if 0 <= k < size and line <= stamps[k] <= line + x:
            continue
        out[n] = k
        n += 1
    return out[:n]


_numba_cache.finish(_BEGUN, globals(), __name__, "timely_libs.linq.propagate", "loops")
