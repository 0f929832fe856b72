"""Compiled loops (numba) for the large cases of a few column kernels.

A numpy expression of a consolidation or of a count over a key's rows makes a dozen passes
over its rows, each writing a temporary array; for the hundreds of thousands of rows an
update of a large graph moves, those passes are most of its time. Here each is one or two
loops over the rows, compiled to machine code by numba. Each loop has one signature (`OUT`,
`IN`, `ANY`), compiled at the first import on a machine (a few seconds, which the import
announces before and reports after) and loaded from the per-user cache afterwards
(`timely_libs._numba_cache`; with numba's own import, about 0.9 s the first time a process
meets a large array). Callers load them only for many rows or keys
(`_kernels.COMPILED_ROWS`, `COMPILED_KEYS`), so a small computation never imports numba;
once loaded, they also serve a thousand rows or a few dozen keys (`LOADED_ROWS`,
`LOADED_KEYS`). The numpy forms are the reference the tests compare these loops with.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numba import njit
from numba.extending import intrinsic
from numba.types import Array, CPointer, Tuple, boolean, i8, int32, int64, void  # type: ignore[attr-defined]

from ... import _numba_cache

# The loops are cached in the per-user cache directory (or NUMBA_CACHE_DIR), never beside this
# file; a first compile is announced before it starts, and `_numba_cache.finish` (the end) restores numba's.
_BEGUN = _numba_cache.begin(
    __file__, "timely_libs.linq: compiling its numeric loops with numba, once per machine (about 10 s)"
)

OUT = Array(int64, 1, "C")
"""An int64 array the loop writes."""
IN = Array(int64, 1, "C", readonly=True)
"""A contiguous int64 array the loop reads (callers make it so; ``readonly``: writable arrays
are taken too)."""
ANY = Array(int64, 1, "A", readonly=True)
"""An int64 array the loop reads, of any layout: a batch's column broadcast from one value
(read-only) or a slice takes the same machine code."""
TABLE = Array(int32, 1, "C", readonly=True)
"""A batch's key table (`key_table`): int32, half the memory of an index column (the tables of
a large computation's batches took 160 MiB of its peak as int64) and half the cache lines."""

NO_FLOOR = np.iinfo(np.int64).min
"""A floor that raises nothing."""

__all__ = [
    "bounds_loop",
    "column_bounds",
    "consolidate_packed",
    "consolidate_rows",
    "consolidate_words",
    "key_matches",
    "key_rows",
    "key_starts",
    "key_sums",
    "key_table",
    "matched_rows",
    "put_address",
    "put_table",
    "radix_sorted",
    "spine_accumulate",
    "spine_count",
    "spine_rows",
    "spine_sums",
]


@njit(void(OUT, IN, i8, i8, i8), cache=True, nogil=True)
def _pack_into(out: np.ndarray, col: np.ndarray, lo: int, width: int, floor: int) -> None:
    """Shift ``width`` bits of ``col`` (raised to ``floor``, less ``lo``) into ``out``."""
    for r in range(len(out)):
        v = col[r]
        if v < floor:
            v = floor
        out[r] = (out[r] << width) | (v - lo)


RADIX_BITS = 10
"""The digit of `radix_sorted`: 1,024 counters per pass stay in the first-level cache."""


@njit(OUT(OUT, i8), cache=True, nogil=True)
def radix_sorted(values: np.ndarray, bits: int) -> np.ndarray:
    """``values`` (non-negative, below ``2**bits``) sorted: a least-significant-digit radix
    sort, one counting pass for every digit and one scattering pass per digit (skipped where
    every value has the same digit). For the packed rows of a consolidation numpy's sort
    compares its way through about 45 ns a row here (200,000 rows: 9 ms); this takes 1.5 ms.
    ``values`` is scratch: the result may be it or a new array."""
    n = len(values)
    radix = 1 << RADIX_BITS
    mask = radix - 1
    passes = max((bits + RADIX_BITS - 1) // RADIX_BITS, 1)
    counts = np.zeros((passes, radix), dtype=np.int64)
    for i in range(n):
        v = values[i]
        for p in range(passes):
            counts[p, (v >> (p * RADIX_BITS)) & mask] += 1
    src = values
    dst = np.empty_like(values)
    for p in range(passes):
        shift = p * RADIX_BITS
        count = counts[p]
        if n == 0 or count[(src[0] >> shift) & mask] == n:
            continue
        total = 0
        for b in range(radix):
            c = count[b]
            count[b] = total
            total += c
        for i in range(n):
            v = src[i]
            b = (v >> shift) & mask
            dst[count[b]] = v
            count[b] += 1
        src, dst = dst, src
    return src


@njit(Tuple((OUT, OUT, i8))(IN, i8, i8), cache=True, nogil=True)
def _sum_runs(ordered: np.ndarray, dbits: int, dlo: int) -> tuple:  # type: ignore[type-arg]
    """Sorted packed rows (the diff in the low ``dbits`` bits, less ``dlo``): each run of
    equal rows summed, zero sums dropped; the packed rows kept, and their sums. Every row
    writes its run's value and sum so far, and a run's end advances the output if the sum is
    not zero: no branch to mispredict (three times faster than branching on run ends)."""
    n = len(ordered)
    dmask = (1 << dbits) - 1
    kept = np.empty(n, dtype=np.int64)
    diffs = np.empty(n, dtype=np.int64)
    m = 0
    value = ordered[0] >> dbits
    total = (ordered[0] & dmask) + dlo
    for i in range(1, n):
        row = ordered[i]
        v = row >> dbits
        d = (row & dmask) + dlo
        end = v != value
        kept[m] = value
        diffs[m] = total
        m += end and total != 0
        total = d if end else total + d
        value = v
    kept[m] = value
    diffs[m] = total
    m += total != 0
    return kept, diffs, m


@njit(void(OUT, IN, i8, i8, i8), cache=True, nogil=True)
def _unpack_into(out: np.ndarray, packed: np.ndarray, shift: int, width: int, lo: int) -> None:
    mask = (1 << width) - 1
    for r in range(len(out)):
        out[r] = ((packed[r] >> shift) & mask) + lo


def _range(columns: Iterable[np.ndarray]) -> tuple[int, int]:
    """The least and greatest value of some columns together (a broadcast one: its value)."""
    lo = hi = None
    for c in columns:
        a, b = (int(c[0]), int(c[0])) if c.strides[0] == 0 else column_bounds(c)
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    assert lo is not None and hi is not None
    return lo, hi


def consolidate_packed(
    parts: list[tuple[list[np.ndarray], np.ndarray]], stable: bool, floor: tuple[int, int] = (0, NO_FLOOR)
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """`_kernels.consolidate` for many rows whose columns and diffs pack into one int64 (None
    when they do not), given in ``parts`` (columns and diffs each: a merge's two inputs need
    no concatenation), column ``floor[0]`` raised to at least ``floor[1]`` (a merge's logical
    compaction). One pass per column to pack, a sort (`radix_sorted`, or numpy's timsort for
    a merge of sorted runs: ``stable``), one loop to sum the runs and unpack."""
    parts = [(cols, diffs) for cols, diffs in parts if len(diffs)]
    n = sum(len(diffs) for _, diffs in parts)
    if not n:
        return None
    ncols = len(parts[0][0])
    lows: list[int] = []
    widths: list[int] = []
    for j in range(ncols):
        lo, hi = _range(c[j] for c, _ in parts)
        if j == floor[0]:
            lo, hi = max(lo, floor[1]), max(hi, floor[1])
        lows.append(lo)
        widths.append((hi - lo).bit_length())
    dlo, dhi = _range(diffs for _, diffs in parts)
    dbits = (dhi - dlo).bit_length()
    if sum(widths) + dbits > 62:
        return None
    packed = np.zeros(n, dtype=np.int64)
    start = 0
    for cols, diffs in parts:
        region = packed[start : start + len(diffs)]
        start += len(diffs)
        for j, (c, lo, w) in enumerate(zip(cols, lows, widths)):
            if w:
                _pack_into(region, np.ascontiguousarray(c), lo, w, floor[1] if j == floor[0] else NO_FLOOR)
        _pack_into(region, np.ascontiguousarray(diffs), dlo, dbits, NO_FLOOR)
    # a merge's few sorted runs: timsort merges them in linear time; other rows: by digits
    ordered = np.sort(packed, kind="stable") if stable else radix_sorted(packed, sum(widths) + dbits)
    kept, sums, m = _sum_runs(ordered, dbits, dlo)
    kept, sums = (kept[:m].copy(), sums[:m].copy()) if m < n // 2 else (kept[:m], sums[:m])
    out = []
    shift = 0
    for lo, w in zip(reversed(lows), reversed(widths)):
        if w:
            c = np.empty(m, dtype=np.int64)
            _unpack_into(c, kept, shift, w, lo)
        else:
            c = np.broadcast_to(np.int64(lo), m)
        out.append(c)
        shift += w
    out.reverse()
    return out, sums


MATRIX = Array(int64, 2, "C", readonly=True)
"""Rows as a matrix, one row of it per column (`numpy.stack` of the columns)."""


@njit(i8(i8), cache=True)
def _bits(v: int) -> int:
    """``int.bit_length`` of a non-negative int."""
    w = 0
    while v > 0:
        v >>= 1
        w += 1
    return w


@njit(Tuple((Array(int64, 2, "C"), OUT, i8))(MATRIX, IN), cache=True)
def consolidate_rows(rows: np.ndarray, diffs: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """`_kernels.consolidate` of a few hundred rows in one call: `consolidate_packed` makes a
    dozen calls (each column's range, its packing, the sort, the sums, each column's
    unpacking), and at these sizes their fixed cost is most of its time. ``rows`` holds one
    row per column; the answer is the consolidated columns (the first ``m`` of each), their
    sums and ``m``; ``m`` is -1 (nothing done) when the columns and diffs do not pack into
    62 bits. Not ``nogil``: a call this short would wait longer to take the GIL back from the
    merge thread than it runs."""
    ncols, n = rows.shape
    lows = np.empty(ncols, dtype=np.int64)
    widths = np.empty(ncols, dtype=np.int64)
    bits = 0
    for j in range(ncols):
        lo = rows[j, 0]
        hi = lo
        for i in range(1, n):
            v = rows[j, i]
            if v < lo:
                lo = v
            elif v > hi:
                hi = v
        lows[j] = lo
        widths[j] = _bits(hi - lo)
        bits += widths[j]
    dlo = diffs[0]
    dhi = dlo
    for i in range(1, n):
        d = diffs[i]
        if d < dlo:
            dlo = d
        elif d > dhi:
            dhi = d
    dbits = _bits(dhi - dlo)
    out = np.empty((ncols, n), dtype=np.int64)
    sums = np.empty(n, dtype=np.int64)
    if bits + dbits > 62:
        return out, sums, -1
    packed = np.empty(n, dtype=np.int64)
    for i in range(n):
        x = 0
        for j in range(ncols):
            x = (x << widths[j]) | (rows[j, i] - lows[j])
        packed[i] = (x << dbits) | (diffs[i] - dlo)
    packed.sort()
    dmask = (1 << dbits) - 1
    m = 0
    i = 0
    while i < n:
        value = packed[i] >> dbits
        total = 0
        while i < n and (packed[i] >> dbits) == value:
            total += (packed[i] & dmask) + dlo
            i += 1
        if total != 0:
            for j in range(ncols - 1, -1, -1):
                w = widths[j]
                out[j, m] = (value & ((1 << w) - 1)) + lows[j]
                value >>= w
            sums[m] = total
            m += 1
    return out, sums, m


@njit(boolean(MATRIX, i8, i8), cache=True)
def _before(words: np.ndarray, a: int, b: int) -> bool:
    """Whether row ``a`` of ``words`` (one row of it per word) sorts strictly before row ``b``."""
    for w in range(words.shape[0]):
        x = words[w, a]
        y = words[w, b]
        if x != y:
            return x < y  # type: ignore[no-any-return]
    return False


@njit(Tuple((OUT, OUT, i8))(MATRIX, IN), cache=True)
def consolidate_words(words: np.ndarray, diffs: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """`_kernels.consolidate` of rows too wide for one int64, given as a few packed words
    (`_kernels._words`, one row of ``words`` per word): one row of each run of equal rows
    (its index), in sorted order, with the run's summed diff, zero sums left out, and how many
    (the first ``m`` of each). A natural merge sort: the rows' ascending runs are found, then
    merged pairwise, so a merge of two sorted batches (a spine's) is one linear pass where
    `numpy.lexsort` sorts every word afresh."""
    n = words.shape[1]
    src = np.arange(n)
    dst = np.empty(n, dtype=np.int64)
    bounds = np.empty(n + 1, dtype=np.int64)
    nb = 1
    bounds[0] = 0
    for i in range(1, n):
        if _before(words, i, i - 1):
            bounds[nb] = i
            nb += 1
    bounds[nb] = n
    nb += 1
    while nb > 2:  # more than one run: merge them in pairs
        k = 0
        kept = 0
        while k + 1 < nb:
            lo = bounds[k]
            mid = bounds[k + 1]
            hi = bounds[k + 2] if k + 2 < nb else mid
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if _before(words, src[j], src[i]):
                    dst[o] = src[j]
                    j += 1
                else:  # ties from the left run first: stable
                    dst[o] = src[i]
                    i += 1
                o += 1
            while i < mid:
                dst[o] = src[i]
                i += 1
                o += 1
            while j < hi:
                dst[o] = src[j]
                j += 1
                o += 1
            bounds[kept] = lo
            kept += 1
            k += 2
        bounds[kept] = n
        nb = kept + 1
        src, dst = dst, src
    rows = np.empty(n, dtype=np.int64)
    sums = np.empty(n, dtype=np.int64)
    m = 0
    i = 0
    while i < n:
        first = src[i]
        total = diffs[first]
        i += 1
        while i < n and not _before(words, first, src[i]):
            total += diffs[src[i]]
            i += 1
        if total != 0:
            rows[m] = first
            sums[m] = total
            m += 1
    return rows, sums, m


@njit(i8(IN, i8, i8), cache=True, nogil=True)
def _seek(ordered: np.ndarray, key: int, j: int) -> int:
    """The first index from ``j`` on whose key is not below ``key`` (galloping: a few steps
    when the next key is near, a binary search over a doubling range when it is far)."""
    n = len(ordered)
    if j >= n or ordered[j] >= key:
        return j
    step = 1
    lo = j
    hi = j + 1
    while hi < n and ordered[hi] < key:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    # ordered[lo] < key, and ordered[hi] >= key (or hi == n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ordered[mid] < key:
            lo = mid
        else:
            hi = mid
    return hi


@njit(Array(int32, 1, "C")(IN, i8, i8), cache=True, nogil=True)
def key_table(keys: np.ndarray, low: int, size: int) -> np.ndarray:
    """`Keys.dense_table` for many keys: a table of ``size`` entries from key (less ``low``)
    to its index in ``keys``, -1 where no key; one pass (numpy's scatter through temporary
    index arrays took 0.8 ms for 100,000 keys, this 0.07)."""
    table = np.full(size, -1, dtype=np.int32)
    for i in range(len(keys)):
        table[keys[i] - low] = i
    return table


@njit(Tuple((i8, i8))(ANY), cache=True)
def bounds_loop(column: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """The least and greatest value of a column (at least one value), in one pass."""
    lo = hi = column[0]
    for i in range(1, len(column)):
        v = column[i]
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    return lo, hi


def column_bounds(column: np.ndarray) -> tuple[int, int]:
    """The least and greatest value of an int64 column (at least one value): one compiled pass
    below `BOUNDS_BELOW` values, where numpy's two reductions cost a microsecond or two each
    in call overhead; numpy's vectorised reductions beyond."""
    if len(column) < BOUNDS_BELOW:
        return bounds_loop(column)  # type: ignore[no-any-return]
    return int(np.minimum.reduce(column)), int(np.maximum.reduce(column))


BOUNDS_BELOW = 4096
"""Up to this many values `column_bounds` is one compiled pass. Measured (load 4-5): 0.4-0.7 us
from 10 to 200 values against 5.6-6.8 for two reductions; even at 5,000; at 400,000 numpy's
vectorised reductions take half the time."""


@njit(Tuple((OUT, OUT))(ANY), cache=True)
def key_starts(keys: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """For sorted ``keys`` (at least one): where each distinct key's rows start, the length at
    the end, and the distinct keys (`Batch`'s index of its rows). One pass, where numpy took
    seven calls (a comparison, ``flatnonzero``, a shift, a concatenation, a cast, two gathers)."""
    n = len(keys)
    starts = np.empty(n + 1, dtype=np.int64)
    ukeys = np.empty(n, dtype=np.int64)
    starts[0] = 0
    ukeys[0] = keys[0]
    m = 1
    for i in range(1, n):
        if keys[i] != keys[i - 1]:
            starts[m] = i
            ukeys[m] = keys[i]
            m += 1
    starts[m] = n
    if m < n // 2:  # a large batch of few keys would keep its rows' length twice over
        return starts[: m + 1].copy(), ukeys[:m].copy()
    return starts[: m + 1], ukeys[:m]


@njit(Tuple((OUT, OUT, i8))(IN, IN, TABLE, i8), cache=True, nogil=True)
def key_matches(keys: np.ndarray, ukeys: np.ndarray, table: np.ndarray, low: int) -> tuple:  # type: ignore[type-arg]
    """The pairs ``(i, j)`` with ``keys[i] == ukeys[j]`` (both sorted, ``ukeys`` distinct),
    in order. With the batch's key table (``table[key - low]``: the key's index in ``ukeys``
    or -1; `Keys.dense_table`), each key is one read: ten times faster than a search for the
    thousands of keys of a batch of updates. Without one (empty ``table``: the batch's keys
    are sparse, or few were asked), a walk driven by the shorter of the two, galloping
    through the longer, so a batch of a few keys asked about many costs a few seeks (and
    many keys asked of a large batch, one pass)."""
    n = len(keys)
    nu = len(ukeys)
    ia = np.empty(n, dtype=np.int64)
    ju = np.empty(n, dtype=np.int64)
    m = 0
    size = len(table)
    if size:
        for i in range(n):
            rel = keys[i] - low
            if 0 <= rel < size:
                j = table[rel]
                if j >= 0:
                    ia[m] = i
                    ju[m] = j
                    m += 1
    elif nu < n:
        i = 0
        for j in range(nu):
            key = ukeys[j]
            i = _seek(keys, key, i)
            while i < n and keys[i] == key:
                ia[m] = i
                ju[m] = j
                m += 1
                i += 1
            if i == n:
                break
    else:
        j = 0
        for i in range(n):
            key = keys[i]
            j = _seek(ukeys, key, j)
            if j == nu:
                break
            if ukeys[j] == key:
                ia[m] = i
                ju[m] = j
                m += 1
    return ia, ju, m


@njit(i8(IN, i8, IN), cache=True, nogil=True)
def matched_rows(ju: np.ndarray, m: int, starts: np.ndarray) -> int:
    """How many rows the first ``m`` matched keys ``ju`` (indices into a batch's keys) have."""
    total = 0
    for p in range(m):
        total += starts[ju[p] + 1] - starts[ju[p]]
    return total


@njit(Tuple((OUT, OUT))(IN, IN, IN, TABLE, i8), cache=True, nogil=True)
def key_rows(keys: np.ndarray, ukeys: np.ndarray, starts: np.ndarray, table: np.ndarray, low: int) -> tuple:  # type: ignore[type-arg]
    """The rows of a batch (its distinct sorted keys ``ukeys``, where each key's rows start,
    its key table if any: `Batch.key_index`) whose key is among ``keys`` (sorted; repeats
    allowed: each repeat matches again), and for each row the index in ``keys`` of its key."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    total = matched_rows(ju, m, starts)
    idx = np.empty(total, dtype=np.int64)
    rank = np.empty(total, dtype=np.int64)
    r = 0
    for p in range(m):
        for row in range(starts[ju[p]], starts[ju[p] + 1]):
            idx[r] = row
            rank[r] = ia[p]
            r += 1
    return idx, rank


@njit(Tuple((OUT, OUT))(IN, IN, IN, TABLE, i8, ANY, ANY, ANY, i8, i8, OUT, OUT), cache=True, nogil=True)
def key_sums(
    keys: np.ndarray,
    ukeys: np.ndarray,
    starts: np.ndarray,
    table: np.ndarray,
    low: int,
    times0: np.ndarray,
    times1: np.ndarray,
    diffs: np.ndarray,
    t0: int,
    t1: int,
    totals: np.ndarray,
    row: np.ndarray,
) -> tuple:  # type: ignore[type-arg]
    """`_trace._reader.key_totals` for one batch (`Batch.key_index`, then its time and diff
    columns) of rows with one or two time coordinates (one: ``times1`` all zeros, ``t1``
    zero): add to ``totals[i]`` the diffs of the rows of ``keys[i]`` at times ``<= (t0, t1)``
    in the product order, and set ``row[i]`` to the index of one of its rows (-1 left for keys
    with none). Returns, for the rows at other times, the index in ``keys`` of their key
    and their row, so that the caller reads them without a second search."""
    ia, ju, m = key_matches(keys, ukeys, table, low)
    bound = matched_rows(ju, m, starts)
    rank = np.empty(bound, dtype=np.int64)
    idx = np.empty(bound, dtype=np.int64)
    later = 0
    for p in range(m):
        i = ia[p]
        lo = starts[ju[p]]
        row[i] = lo
        total = 0
        for r in range(lo, starts[ju[p] + 1]):
            if times0[r] <= t0 and times1[r] <= t1:
                total += diffs[r]
            else:
                rank[later] = i
                idx[later] = r
                later += 1
        totals[i] += total
    return rank[:later], idx[:later]


# Reads over every batch of a spine in one call ---------------------------------------------------
#
# A read of a few dozen keys visits every batch of a spine (5 to 10: its levels, its small tail
# batches), and per batch a search, two returned arrays and a gather per column cost more than the
# rows found. These loops take the spine's batches as one table (`Batch.address`: per batch its
# row count, key range, and the address and stride of its distinct keys, key starts and columns)
# and read every batch in one call. The table is only read while the spine holds the batches it
# describes (`Spine.address_table` keeps them together), and batches never change their columns.

ADDR_ROWS, ADDR_UKEYS, ADDR_STARTS, ADDR_TABLE, ADDR_COLUMNS = 0, 4, 6, 8, 10
"""Where a batch's table row keeps its row count (then its distinct keys' count, least and
greatest key), its distinct keys (address, stride), its key starts, its key table (address
and size, 0 for none: `Keys.dense_table`, int32, from the least key), and then each column
(key, values, times, diff; address, stride)."""

ADDRESS_TABLE = Array(int64, 2, "C", readonly=True)
"""A spine's batches as a table, one row per batch (`Batch.address`)."""


@njit(void(OUT, i8, ANY), cache=True)
def put_address(row: np.ndarray, at: int, column: np.ndarray) -> None:
    """Write where ``column``'s values are (address, then stride in values) into ``row[at:]``."""
    row[at] = column.ctypes.data
    row[at + 1] = column.strides[0] // 8


@njit(void(OUT, i8, TABLE), cache=True)
def put_table(row: np.ndarray, at: int, table: np.ndarray) -> None:
    """Write where a key table is (address, then its size) into ``row[at:]``."""
    row[at] = table.ctypes.data
    row[at + 1] = len(table)


def _load_int64(typingctx, address, index):  # type: ignore[no-untyped-def]
    """The int64 at ``address + 8 * index``: a column of a batch read through the table."""
    sig = int64(int64, int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        pointer = builder.inttoptr(args[0], context.get_value_type(CPointer(int64)))
        return builder.load(builder.gep(pointer, [args[1]]))

    return sig, codegen


_load: Any = intrinsic(_load_int64)


def _load_int32(typingctx, address, index):  # type: ignore[no-untyped-def]
    """The int32 at ``address + 4 * index``, as an int64: a batch's key table."""
    sig = int64(int64, int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        pointer = builder.inttoptr(args[0], context.get_value_type(CPointer(int32)))
        return builder.sext(builder.load(builder.gep(pointer, [args[1]])), context.get_value_type(int64))

    return sig, codegen


_load32: Any = intrinsic(_load_int32)


@njit(i8(i8, i8, i8, i8, i8), cache=True)
def _seek_at(address: int, stride: int, n: int, key: int, j: int) -> int:
    """`_seek` over a column read through its address: the first index from ``j`` whose
    value is not below ``key``."""
    if j >= n or _load(address, j * stride) >= key:
        return j
    step = 1
    lo = j
    hi = j + 1
    while hi < n and _load(address, hi * stride) < key:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _load(address, mid * stride) < key:
            lo = mid
        else:
            hi = mid
    return hi


@njit(Tuple((Array(int64, 2, "C"), i8, i8))(IN, ADDRESS_TABLE), cache=True)
def _spine_matches(keys: np.ndarray, table: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """Every (batch, key index, distinct key index) with ``keys[i]`` among the batch's keys
    (``keys`` sorted, repeats allowed), batch by batch and in key order within a batch, as
    the rows of a matrix; how many, and how many rows of the batches they cover. A batch
    with a key table reads it once per key; one without is walked from the shorter side
    (as `key_matches`): a small batch asked about many keys (a delta of hundreds against a
    spine's small tail batches) costs a seek per batch key, not a step per key."""
    n = len(keys)
    found = np.empty((table.shape[0] * n, 3), dtype=np.int64)
    m = 0
    rows = 0
    if n == 0:
        return found, 0, 0
    first = keys[0]
    last = keys[n - 1]
    for b in range(table.shape[0]):
        if table[b, 2] > last or table[b, 3] < first:
            continue
        nu = table[b, 1]
        ukeys, us = table[b, ADDR_UKEYS], table[b, ADDR_UKEYS + 1]
        starts, ss = table[b, ADDR_STARTS], table[b, ADDR_STARTS + 1]
        index, size, low = table[b, ADDR_TABLE], table[b, ADDR_TABLE + 1], table[b, 2]
        if not size and nu < n:
            i = 0
            for j in range(_seek_at(ukeys, us, nu, first, 0), nu):
                key = _load(ukeys, j * us)
                i = _seek(keys, key, i)
                if i == n:
                    break
                span = _load(starts, (j + 1) * ss) - _load(starts, j * ss)
                while i < n and keys[i] == key:
                    found[m, 0] = b
                    found[m, 1] = i
                    found[m, 2] = j
                    m += 1
                    rows += span
                    i += 1
            continue
        j = 0
        for i in range(n):
            key = keys[i]
            if size:  # one read of the key table, not a search through a large batch's keys
                rel = key - low
                if rel < 0 or rel >= size:
                    continue
                j = _load32(index, rel)
                if j < 0:
                    continue
            else:
                j = _seek_at(ukeys, us, nu, key, j)
                if j == nu:
                    break
                if _load(ukeys, j * us) != key:
                    continue
            found[m, 0] = b
            found[m, 1] = i
            found[m, 2] = j
            m += 1
            rows += _load(starts, (j + 1) * ss) - _load(starts, j * ss)
    return found, m, rows


@njit(Tuple((OUT, OUT, OUT))(Array(int64, 2, "C"), i8, i8, ADDRESS_TABLE), cache=True)
def _placed(found: np.ndarray, m: int, total: int, table: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """Each row of the ``m`` matches of `_spine_matches` (batch by batch) given its place: the
    index in the keys of its key, its row in its batch, and where each batch's rows end."""
    rank = np.empty(total, dtype=np.int64)
    where = np.empty(total, dtype=np.int64)
    ends = np.zeros(table.shape[0], dtype=np.int64)
    r = 0
    for p in range(m):
        b = found[p, 0]
        i = found[p, 1]
        j = found[p, 2]
        starts, ss = table[b, ADDR_STARTS], table[b, ADDR_STARTS + 1]
        lo = _load(starts, j * ss)
        hi = _load(starts, (j + 1) * ss)
        for row in range(lo, hi):
            rank[r] = i
            where[r] = row
            r += 1
        ends[b] = r
    return rank, where, ends


@njit(void(ADDRESS_TABLE, i8, IN, IN, OUT), cache=True)
def _gather(table: np.ndarray, column: int, where: np.ndarray, ends: np.ndarray, out: np.ndarray) -> None:
    """Column ``column`` (0 the key, then values, times, diff) of the rows `_placed` placed,
    into ``out``: batch by batch, a loop of one load per row."""
    r = 0
    for b in range(table.shape[0]):
        if ends[b] <= r:
            continue
        address = table[b, ADDR_COLUMNS + 2 * column]
        stride = table[b, ADDR_COLUMNS + 2 * column + 1]
        for q in range(r, ends[b]):
            out[q] = _load(address, where[q] * stride)
        r = ends[b]


@njit(Tuple((OUT, Array(int64, 2, "C")))(IN, ADDRESS_TABLE, i8), cache=True)
def spine_rows(keys: np.ndarray, table: np.ndarray, ncols: int) -> tuple:  # type: ignore[type-arg]
    """The rows of a spine's batches (``table``, `Batch.address`) whose key is among ``keys``
    (sorted; repeats allowed: each repeat matches again), batch by batch: for each row the
    index in ``keys`` of its key, and its first ``ncols`` columns (key, values, times, diff),
    one row of the matrix per column. `_trace._reader.matches_each` and a gather of every
    column, for every batch, in one call. The key column is the probe's key, not read: a large
    batch is cold when an update reads it, and each column read is a cache miss per key."""
    found, m, total = _spine_matches(keys, table)
    # each row's place first, then one column at a time, batch by batch, in a loop of one load
    # per row: every load is independent of the others, so the processor has many cache misses
    # in flight (a large batch's rows are cold), where reading each match's columns in turn
    # behind its key's start waited for one miss after another, and each match's short loop
    # of a row or two mispredicted its branch (a read of 8,192 keys over 26 batches: 9.9 ms
    # that way, 5.7 ms this way); beyond its output, a read allocates only the places and a
    # row end per batch (no copy of the table), so a read of a few keys costs what it did
    rank, where, ends = _placed(found, m, total, table)
    out = np.empty((ncols, total), dtype=np.int64)
    for r in range(total):
        out[0, r] = keys[rank[r]]
    for c in range(1, ncols):
        _gather(table, c, where, ends, out[c])
    return rank, out


@njit(Tuple((OUT, Array(int64, 2, "C"), OUT, Array(int64, 2, "C"), i8))(IN, ADDRESS_TABLE, i8, i8, IN), cache=True)
def spine_sums(keys: np.ndarray, table: np.ndarray, nvals: int, gather: int, t: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """`_trace._reader.key_totals` over every batch of a spine (``table``) in one call, for
    ``keys`` sorted and distinct and times of ``len(t)`` coordinates: per key the sum of the
    diffs of its rows at times ``<= t`` (product order) and the first ``gather`` of its
    ``nvals`` values, from one of its rows (zeros for a key with none); and the rows at other times: the index in
    ``keys`` of each one's key, and its time columns and diff (one row of the matrix each),
    the first ``k`` of each (the last answer)."""
    n = len(keys)
    ntimes = len(t)
    found, m, total = _spine_matches(keys, table)
    # the rows' times and diffs gathered first, a column at a time (`spine_rows`: many cache
    # misses in flight), then summed from the gathered columns
    rank, where, ends = _placed(found, m, total, table)
    cols = np.empty((ntimes + 1, total), dtype=np.int64)
    for c in range(ntimes + 1):
        _gather(table, 1 + nvals + c, where, ends, cols[c])
    totals = np.zeros(n, dtype=np.int64)
    vals = np.zeros((gather, n), dtype=np.int64)
    if gather and total:
        got = np.empty(total, dtype=np.int64)
        for c in range(gather):
            _gather(table, 1 + c, where, ends, got)
            for r in range(total):
                vals[c, rank[r]] = got[r]
    later_rank = np.empty(total, dtype=np.int64)
    later = np.empty((ntimes + 1, total), dtype=np.int64)
    k = 0
    for r in range(total):
        now = True
        for c in range(ntimes):
            if cols[c, r] > t[c]:
                now = False
                break
        if now:
            totals[rank[r]] += cols[ntimes, r]
        else:
            later_rank[k] = rank[r]
            for c in range(ntimes + 1):
                later[c, k] = cols[c, r]
            k += 1
    return totals, vals, later_rank, later, k


MATRIX = Array(int64, 2, "C")
"""Rows of int64 columns, one row of the matrix per column."""


@njit(boolean(MATRIX, i8, i8, i8), cache=True)
def _row_less(cols: np.ndarray, ncols: int, a: int, b: int) -> bool:
    """Whether column entry ``a`` sorts before ``b`` over the first ``ncols`` rows of ``cols``."""
    for c in range(ncols):
        x = cols[c, a]
        y = cols[c, b]
        if x != y:
            return x < y
    return False


SORT_INSERTION = 16
"""A key's rows of up to this many are ordered by insertion (an update's key has a few); more
by a merge sort (a large group's)."""


@njit(void(MATRIX, i8, OUT, OUT, i8, i8), cache=True)
def _sort_span(cols: np.ndarray, ncols: int, idx: np.ndarray, tmp: np.ndarray, lo: int, hi: int) -> None:
    """``idx[lo:hi]`` ordered by the entries they name in ``cols`` (`_row_less`): insertion for
    a short span, else a bottom-up merge sort through ``tmp``."""
    if hi - lo <= SORT_INSERTION:
        for a in range(lo + 1, hi):
            v = idx[a]
            b = a - 1
            while b >= lo and _row_less(cols, ncols, v, idx[b]):
                idx[b + 1] = idx[b]
                b -= 1
            idx[b + 1] = v
        return
    width = 1
    src = idx
    dst = tmp
    swapped = False
    while width < hi - lo:
        for left in range(lo, hi, 2 * width):
            mid = min(left + width, hi)
            right = min(left + 2 * width, hi)
            i = left
            j = mid
            for o in range(left, right):
                if i < mid and (j >= right or not _row_less(cols, ncols, src[j], src[i])):
                    dst[o] = src[i]
                    i += 1
                else:
                    dst[o] = src[j]
                    j += 1
        src, dst = dst, src
        swapped = not swapped
        width *= 2
    if swapped:  # the sorted span is in tmp
        for o in range(lo, hi):
            idx[o] = src[o]


@njit(
    Tuple((MATRIX, i8, OUT, MATRIX, i8))(IN, ADDRESS_TABLE, i8, IN),
    cache=True,
)
def spine_accumulate(keys: np.ndarray, table: np.ndarray, nvals: int, t: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """`_trace._reader.accumulate` over every batch of a spine (``table``) in one call, for
    ``keys`` sorted and distinct and times of ``len(t)`` coordinates: the rows of the keys at
    times ``<= t`` (product order) summed per (key, values), zero sums dropped, sorted by key
    and values: a matrix of the key, the ``nvals`` values and the sum (one row of the matrix
    each), the first ``m`` of each; and the rows at other times: the index in ``keys`` of each
    one's key, its time columns and diff, the first ``k``. What `spine_rows`, a time filter
    and a consolidation make in three passes and a sort, with one pass over the rows found and
    a sort of each key's own rows (an update's key has a few)."""
    n = len(keys)
    ntimes = len(t)
    found, m, total = _spine_matches(keys, table)
    # every column of the rows gathered first (`spine_rows`: many cache misses in flight), then
    # the rows at times <= t placed by key (a count per key, then a place per row)
    rank_all, where, ends = _placed(found, m, total, table)
    got = np.empty((nvals + ntimes + 1, total), dtype=np.int64)
    for c in range(nvals + ntimes + 1):
        _gather(table, 1 + c, where, ends, got[c])
    cols = np.empty((nvals + 1, total), dtype=np.int64)
    now = np.empty(total, dtype=np.bool_)
    place = np.empty(total, dtype=np.int64)
    starts = np.zeros(n + 1, dtype=np.int64)
    rank = np.empty(total, dtype=np.int64)
    later = np.empty((ntimes + 1, total), dtype=np.int64)
    k = 0
    for r in range(total):
        here = True
        for c in range(ntimes):
            if got[nvals + c, r] > t[c]:
                here = False
                break
        now[r] = here
        if here:
            starts[rank_all[r] + 1] += 1
        else:
            rank[k] = rank_all[r]
            for c in range(ntimes + 1):
                later[c, k] = got[nvals + c, r]
            k += 1
    for i in range(n):
        starts[i + 1] += starts[i]
    fill = starts[:n].copy()
    for r in range(total):
        if now[r]:
            i = rank_all[r]
            at = fill[i]
            fill[i] += 1
            for c in range(nvals):
                cols[c, at] = got[c, r]
            cols[nvals, at] = got[nvals + ntimes, r]
    # each key's rows ordered by values, equal values summed
    for q in range(starts[n]):
        place[q] = q
    tmp = np.empty(starts[n], dtype=np.int64)
    out = np.empty((nvals + 2, starts[n]), dtype=np.int64)
    o = 0
    for i in range(n):
        lo = starts[i]
        hi = starts[i + 1]
        if hi - lo > 1:
            _sort_span(cols, nvals, place, tmp, lo, hi)
        q = lo
        while q < hi:
            a = place[q]
            total_diff = cols[nvals, a]
            q += 1
            while q < hi and not _row_less(cols, nvals, a, place[q]):
                total_diff += cols[nvals, place[q]]
                q += 1
            if total_diff != 0:
                out[0, o] = keys[i]
                for c in range(nvals):
                    out[1 + c, o] = cols[c, a]
                out[nvals + 1, o] = total_diff
                o += 1
    return out, o, rank, later, k


@njit(
    Tuple((MATRIX, i8, OUT, MATRIX, i8))(IN, ADDRESS_TABLE, ADDRESS_TABLE, IN),
    cache=True,
)
def spine_count(keys: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, t: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """A count's change at ``t`` for ``keys`` (sorted, distinct) in one call: each key's input
    total (`spine_sums` over ``inputs``, an arrangement of keys alone), its output accumulated
    at ``t`` (`spine_accumulate` over ``outputs``, whose one value is the count), and their
    difference: the new ``(key, total)`` row where the total is positive, less the output's
    rows, as a matrix of key, count and diff (one row of the matrix each; sorted by key and
    count, consolidated), the first ``m``; ``m`` is -1 when a total is negative (the caller
    names the key). Then the rows of either arrangement at times not ``<= t``: the index in
    ``keys`` of each one's key, its time columns and diff, the first ``k``."""
    n = len(keys)
    ntimes = len(t)
    totals, _, rank_in, later_in, k_in = spine_sums(keys, inputs, 0, 0, t)
    acc, m, rank_out, later_out, k_out = spine_accumulate(keys, outputs, 1, t)
    k = k_in + k_out
    rank = np.empty(k, dtype=np.int64)
    later = np.empty((ntimes + 1, k), dtype=np.int64)
    rank[:k_in] = rank_in[:k_in]
    rank[k_in:] = rank_out[:k_out]
    for c in range(ntimes + 1):
        later[c, :k_in] = later_in[c, :k_in]
        later[c, k_in:] = later_out[c, :k_out]
    out = np.empty((3, n + m), dtype=np.int64)
    o = 0
    p = 0
    for i in range(n):
        key = keys[i]
        total = totals[i]
        if total < 0:
            return out, -1, rank, later, k
        placed = total == 0  # no new row: the key's count is gone
        while p < m and acc[0, p] == key:
            v = acc[1, p]
            d = -acc[2, p]
            if not placed and total <= v:
                placed = True
                if total < v:
                    out[0, o] = key
                    out[1, o] = total
                    out[2, o] = 1
                    o += 1
                else:
                    d += 1
            if d != 0:
                out[0, o] = key
                out[1, o] = v
                out[2, o] = d
                o += 1
            p += 1
        if not placed:
            out[0, o] = key
            out[1, o] = total
            out[2, o] = 1
            o += 1
    return out, o, rank, later, k


_numba_cache.finish(_BEGUN, globals(), __name__, "timely_libs.linq", "numeric loops")
