"""The few array kernels everything columnar is made of: sort rows, find groups, sum groups.

Rows are given as a sequence of equally long 1-D integer arrays, the first the most
significant (``(key, value fields..., time coordinates...)``). Sorting packs the columns into
one int64 when their ranges fit in 62 bits together (one argsort, about twice as fast as
`numpy.lexsort` over several columns) and falls back to lexsort otherwise; consolidation is
that sort plus `numpy.add.reduceat` over the runs of equal rows.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "COMPILED_KEYS",
    "COMPILED_ROWS",
    "EMPTY",
    "FEW_KEYS",
    "FUSED_BELOW",
    "POLICY",
    "WORDS_FROM",
    "WORDS_UNSORTED_BELOW",
    "Policy",
    "compiled_keys",
    "compiled_rows",
    "consolidate",
    "consolidate_parts",
    "consolidation",
    "distinct",
    "bounds",
    "every",
    "greatest",
    "group_starts",
    "time_runs",
    "least",
    "order",
    "ranges",
    "selector",
    "some",
    "summed_rows",
]

EMPTY = np.zeros(0, dtype=np.int64)

_COMPILED = f"{__package__}._compiled"
"""The compiled loops' module, in ``sys.modules`` once loaded."""
_loops: ModuleType | None = None


def compiled_loops() -> ModuleType:
    """The compiled loops' module (`_compiled`, numba), imported at the first call and kept.
    Callers ask for it where the policy chose the compiled tier; an import statement in the
    function costs a few microseconds at every call, and the reads and consolidations that
    use the loops run dozens of times per iteration of a loop."""
    global _loops
    if _loops is None:
        from . import _compiled

        _loops = _compiled
    return _loops


SMALL = 40
"""Up to this many rows, `consolidate` and `consolidation` work in Python values: cheaper than
a dozen numpy calls. Measured on random rows (a loaded 2-core machine): Python takes 10-13 us
at 16 rows, 17-22 at 32, 24-32 at 48, against numpy's 25 (two columns), 31 (three) and 55
(five, too wide to pack) at any of these sizes; a join's delta and a loop's small batches are
mostly 16-64 rows."""
COMPILED_ROWS = 16384
"""From this many rows, `consolidate` runs compiled loops (`_compiled`) when the rows pack
into one int64: one pass per column instead of a dozen numpy passes."""
COMPILED_KEYS = 1024
"""From this many keys, finding their rows in a batch (and what is computed from them) runs
compiled loops (`compiled_keys`), loading them if need be: numba's import (about a second) is
worth it for a computation with arrays this large."""
LOADED_ROWS = 1024
"""From this many rows, `consolidate` and `distinct` run compiled loops once they are loaded
(`compiled_rows`): their radix sort takes a fifth of numpy's time from a few thousand rows on."""
LOADED_KEYS = 9
"""From this many keys (just past `FEW_KEYS`), the compiled loops run once a program has asked
for them (`preload`): a read of 9 to 63 keys against a spine of six batches took a sixth to a
half of numpy's time (find 17-23 us against 82-142 us, totals 36-50 us against 94-195 us;
`tests/linq/test_reader.py` compares the tiers), and the DDIR rounds took 12-19% less CPU than
from 64 keys. Up to `FEW_KEYS`, Python values are as fast or faster."""

least = np.minimum.reduce
"""An array's least value: the ufunc's reduce, without ``ndarray.min``'s Python wrapper (a
microsecond of each call, and a loop step makes hundreds of them on small arrays)."""
greatest = np.maximum.reduce
"""An array's greatest value (as `least`)."""


def every(values: np.ndarray) -> bool:
    """Whether every value is true (non-zero): ``values.all()`` without `ndarray.all`'s Python
    wrapper, a third of its cost on the short arrays an update's operators check (a dozen
    times a loop's iteration: are the diffs non-zero, the keys in order, the mask all kept)."""
    return int(np.count_nonzero(values)) == len(values)


def some(values: np.ndarray) -> bool:
    """Whether some value is true (non-zero): ``values.any()``, as `every`."""
    return bool(np.count_nonzero(values))


def bounds(column: np.ndarray) -> tuple[int, int]:
    """The least and greatest value of a column (at least one value): once the compiled loops
    are loaded, an int64 column's in one compiled pass when short (`_compiled.column_bounds`),
    else `least` and `greatest`. An operator checks the range of most columns it is handed
    (are they their own codes?), a few hundred times a loop's round."""
    if POLICY.eager and column.dtype == np.int64:
        return compiled_loops().column_bounds(column)  # type: ignore[no-any-return]
    return int(least(column)), int(greatest(column))


FUSED_BELOW = 1024
"""Below this many rows, once the compiled loops are loaded (`preload`), `consolidate` is one
compiled call (`_compiled.consolidate_rows`: pack, sort, sum and unpack in one loop) instead
of numpy's dozen calls or a Python pass. Measured (loaded 2-core machine, 2 and 4 columns):
5-6 us at 8-32 rows against Python's 7-19, 6-10 us at 48-200 rows against numpy's 30-41 and
`consolidate_packed`'s 21-32, 14-24 us at 800; at 1,500 rows the radix sort of
`consolidate_packed` catches up, and from 4,000 it is twice as fast."""
WORDS_FROM = 2
"""From this many rows, once the compiled loops are loaded, rows too wide for one int64 are
consolidated by a compiled natural merge sort of their packed words instead of
`numpy.lexsort`: a spine's merge of two sorted batches of them (triangles' paths) is then one
linear pass."""
WORDS_UNSORTED_BELOW = 1 << 16
"""Rows in no known order (not a merge's sorted runs) take the compiled merge sort only below
this many: larger ones (a first load's millions of paths) sorted by `numpy.lexsort` in half
the time (large triangles' first answer: 0.96 s of CPU by merge sort, 0.65 s by lexsort)."""
FEW_KEYS = 8
"""Up to this many keys (an update's case), readers look them up one by one in Python values,
with no arrays built per batch (`_trace`'s readers), unless the compiled loops are loaded
and read the whole spine at once (`Policy.spine_read`)."""


SPINE_KEYS = 1
"""From this many keys, once the compiled loops are loaded, a read takes every batch of a
spine in one compiled call (`Policy.spine_read`), a few keys too: an update's read of 1 to 8
keys visits 4 to 12 batches (kcore at medium scale), and Python values cost per key and
batch. Paired rounds (alternating in one run, load 22-28): kcore 0.90x of batch by batch
from 1 key, 1.01x from 9; triangles 0.88x and 0.89x."""
MERGED_RUNS_BELOW = 2048
"""Below this many rows, once the compiled loops are loaded, a spine's merge (sorted runs) is
one natural merge (`_merged_runs`). Measured (CPU, two runs of 4 columns): 11-43 us at 70 to
1,700 rows against 14-51 for `consolidate_packed` or the fused consolidation; even at 2,400;
from 4,000 rows the radix sort of packed rows is faster (66 us against 106)."""
INDEX_ROWS = 8
"""From this many rows, once the compiled loops are loaded, a new batch finds its distinct
keys and their starts in one compiled call (`Policy.batch_index`). Measured (paired, old and
new in turn, load 4-5, a batch of one value and two time columns): 15-19 us from 10 to 3,000
rows against 16-27 us for a few dozen rows in Python lists and 25-84 us from 100 to 3,000
by numpy; at 3 rows the Python lists are as fast or faster (11-21 us against 16-18)."""
SPINE_BELOW = 1024
"""Reads of this many keys or more go batch by batch: a batch's key table (`Keys.dense_table`)
finds each key in one step, and the per-batch calls are a small part of such a read."""


class Policy:
    """Which tier computes over ``n`` keys or rows: Python values, numpy, or the compiled loops.

    The choice depends on the size and on one explicit setting, never on what happened to run
    earlier in the process. Lazy (the default): the compiled loops from `COMPILED_KEYS` keys or
    `COMPILED_ROWS` rows, imported at the first such array (numba's import costs about a
    second, worth it only for large arrays). Eager (`preload`, for programs that will meet
    large arrays): loaded at start-up, and used from `LOADED_KEYS` keys and `LOADED_ROWS` rows,
    where their fixed cost per call is already below numpy's dozen calls.
    """

    __slots__ = ("eager",)

    def __init__(self) -> None:
        self.eager = False

    def keys_tier(self, n: int) -> str:
        """``"python"``, ``"numpy"`` or ``"compiled"`` for a read of ``n`` keys."""
        if n <= FEW_KEYS:
            return "python"
        return "compiled" if self.compiled_keys(n) else "numpy"

    def compiled_keys(self, n: int) -> bool:
        return n >= (LOADED_KEYS if self.eager else COMPILED_KEYS)

    def compiled_rows(self, n: int) -> bool:
        return n >= (LOADED_ROWS if self.eager else COMPILED_ROWS)

    def compiled_words(self, n: int) -> bool:
        """Whether ``n`` rows too wide for one int64 are sorted by the compiled natural merge
        sort (`_compiled.consolidate_words`): once the loops are loaded, from `WORDS_FROM`."""
        return self.eager and n >= WORDS_FROM

    def spine_read(self, n: int) -> bool:
        """Whether a read of ``n`` keys reads every batch of a spine in one compiled call
        (`_compiled.spine_rows`, `spine_sums`): once the loops are loaded, from `SPINE_KEYS`
        keys and below `SPINE_BELOW`."""
        return self.eager and SPINE_KEYS <= n < SPINE_BELOW

    def batch_index(self, n: int) -> bool:
        """Whether a new batch of ``n`` rows finds its distinct keys and their starts in one
        compiled pass (`_compiled.key_starts`) rather than numpy's seven calls."""
        return n >= (INDEX_ROWS if self.eager else COMPILED_ROWS)

    def merged_runs(self, n: int) -> bool:
        """Whether a merge of sorted runs of ``n`` rows is one compiled natural merge
        (`_merged_runs`): once the loops are loaded, below `MERGED_RUNS_BELOW`."""
        return self.eager and 1 < n < MERGED_RUNS_BELOW

    def fused_rows(self, n: int) -> bool:
        """Whether ``n`` rows are consolidated by one compiled call (`_compiled.consolidate_rows`):
        once the loops are loaded, below `FUSED_BELOW`."""
        return self.eager and n < FUSED_BELOW


POLICY = Policy()
"""The process's one tier policy (`preload` makes it eager)."""


MIXED_MASK = 2048
"""From this many rows, a boolean mask that keeps neither few nor most of them is turned into
indices before it selects from several arrays (`selector`)."""


def selector(idx: Any, arrays: int) -> Any:
    """What to index ``arrays`` equally long arrays with, to take the rows ``idx`` (indices, a
    slice or a boolean mask). A mask that keeps a mixed share of many rows selects through
    indices: numpy's boolean selection branches per row and mispredicts on such a mask (half
    of a million rows over three arrays: 20 ms by mask, 8 by indices, found by one
    `numpy.flatnonzero`); a mask that keeps few or most rows is fastest as it is."""
    if arrays < 2 or type(idx) is not np.ndarray or idx.dtype != np.bool_ or len(idx) < MIXED_MASK:
        return idx
    n = len(idx)
    kept = int(np.count_nonzero(idx))
    if n >> 4 < kept < n - (n >> 4):
        return np.flatnonzero(idx)
    return idx


def _pack(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, list[int], list[int]] | None:
    """One int64 per row that orders like the columns lexicographically (with each column's
    lowest value and bit width, to unpack it again), or None if they do not fit in 62 bits."""
    lows = []
    widths = []
    bits = 0
    for c in cols:
        lo = int(least(c))
        w = (int(greatest(c)) - lo).bit_length()
        lows.append(lo)
        widths.append(w)
        bits += w
    if bits > 62:
        return None
    if len(cols) == 1 and lows[0] >= 0:
        return cols[0], lows, widths
    out = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, w in zip(cols, lows, widths):
        if w:
            out <<= w
            out |= c - lo if lo else c
    return out, lows, widths


def _unpack(packed: np.ndarray, lows: list[int], widths: list[int]) -> list[np.ndarray]:
    """The columns of `_pack` back from its packed values."""
    if len(lows) == 1 and lows[0] >= 0:
        return [packed]
    out = []
    shift = 0
    for lo, w in zip(reversed(lows), reversed(widths)):
        if w:
            c = (packed >> shift) & ((1 << w) - 1)
            if lo:
                c += lo
        else:
            c = np.broadcast_to(np.int64(lo), len(packed))
        out.append(c)
        shift += w
    out.reverse()
    return out


def order(cols: Sequence[np.ndarray]) -> np.ndarray:
    """Indices that sort the rows lexicographically (first column first); ties in any order."""
    if not len(cols[0]):
        return EMPTY
    if len(cols) == 1:
        return np.argsort(cols[0])
    packed = _pack(cols)
    if packed is not None:
        return np.argsort(packed[0])
    return np.lexsort(tuple(reversed(_words(cols))))


def _words(cols: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Rows too wide for one int64 (`_pack`) as a few int64 words, each packing consecutive
    columns by their ranges, that order like the columns: `numpy.lexsort` takes a pass per
    key, so a triangle's paths (a pair key of 50 bits and three 20-bit fields) sort in two
    passes, not five. A column wider than 62 bits is a word of its own, as it is."""
    words: list[np.ndarray] = []
    group: list[np.ndarray] = []
    bits = 0
    for c in cols:
        w = (int(greatest(c)) - int(least(c))).bit_length()
        if group and bits + w > 62:
            words.append(_word(group))
            group, bits = [], 0
        group.append(c)
        bits += w
    words.append(_word(group))
    return words


def _word(cols: list[np.ndarray]) -> np.ndarray:
    packed = _pack(cols) if len(cols) > 1 else None
    return cols[0] if packed is None else packed[0]


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


def time_runs(times: Sequence[np.ndarray]) -> Iterator[tuple[tuple[int, ...], int, int]]:
    """For rows sorted by their ``times`` columns: each distinct time, as a tuple of ints, with
    the start and end of its rows (one ``tolist`` per column, not an int per cell)."""
    starts = group_starts(times)
    bounds = [*starts.tolist(), len(times[0])]
    return zip(zip(*(c[starts].tolist() for c in times)), bounds, bounds[1:])


def consolidate(
    cols: Sequence[np.ndarray], diffs: np.ndarray, runs: bool = False
) -> tuple[list[np.ndarray], np.ndarray]:
    """The rows sorted, equal rows summed, rows whose sum is zero dropped.

    When the columns pack into one int64 the rows are sorted as one array and the columns
    unpacked from it (no gathering of columns by index); when every diff is the same (a load,
    a retraction of many) the values alone are sorted (`numpy.sort`, twice as fast as an
    argsort) and the sums are run lengths. ``runs``: the rows are a few sorted runs (a
    merge of batches), which a stable sort (timsort) merges in linear time."""
    kind: Any = "stable" if runs else None
    n = len(diffs)
    if not n:
        return [c[:0] for c in cols], diffs[:0]
    if n == 1:
        return (list(cols), diffs) if diffs[0] else ([c[:0] for c in cols], diffs[:0])
    if POLICY.fused_rows(n):
        fused = _consolidate_fused(cols, diffs)
        if fused is not None:
            return fused
    if n <= SMALL:
        return _consolidate_small(cols, diffs)
    if compiled_rows(n):
        done = compiled_loops().consolidate_packed([(list(cols), diffs)], runs)
        if done is not None:
            return done
    p = _pack(cols)
    if p is None and POLICY.compiled_words(n) and (runs or n < WORDS_UNSORTED_BELOW):
        kept, sums, m = compiled_loops().consolidate_words(np.array(_words(cols)), np.ascontiguousarray(diffs))
        kept = kept[:m]
        return [c[kept] for c in cols], sums[:m]
    if p is None:
        words = _words(cols)
        idx = np.lexsort(tuple(reversed(words)))
        diffs = diffs[idx]
        starts = group_starts([w[idx] for w in words])
        if len(starts) < n:
            diffs = np.add.reduceat(diffs, starts)
            idx = idx[starts]
        cols = [c[idx] for c in cols]
    else:
        packed, lows, widths = p
        first = diffs[0]
        if (diffs == first).all():
            values = np.sort(packed, kind=kind)
            starts = _runs(values)
            diffs = np.diff(np.append(starts, n)) * first if len(starts) < n else diffs
        else:
            dlo, dhi = int(least(diffs)), int(greatest(diffs))
            dbits = (dhi - dlo).bit_length()
            if sum(widths) + dbits <= 62:
                # the diff rides in the low bits: sort values, not indices, and gather nothing
                both = np.sort((packed << dbits) | (diffs - dlo), kind=kind)
                values = both >> dbits
                diffs = (both & ((1 << dbits) - 1)) + dlo
            else:
                idx = np.argsort(packed, kind=kind)
                values = packed[idx]
                diffs = diffs[idx]
            starts = _runs(values)
            if len(starts) < n:
                diffs = np.add.reduceat(diffs, starts)
        values = values[starts] if len(starts) < n else values
        keep = diffs != 0
        if not keep.all():  # drop the cancelled rows before unpacking: one array, not every column
            keep = selector(keep, 2)
            values, diffs = values[keep], diffs[keep]
        return _unpack(values, lows, widths), diffs
    keep = diffs != 0
    if not keep.all():
        keep = selector(keep, len(cols) + 1)
        cols = [c[keep] for c in cols]
        diffs = diffs[keep]
    return cols, diffs


def consolidate_parts(
    parts: Sequence[tuple[Sequence[np.ndarray], np.ndarray]], floor: tuple[int, int] | None, runs: bool = False
) -> tuple[list[np.ndarray], np.ndarray]:
    """`consolidate` of the rows of several ``parts`` (columns and diffs each; a merge's two
    inputs), column ``floor[0]`` first raised to at least ``floor[1]`` (logical compaction;
    None: no floor): for many rows packed straight from the parts, with no concatenation;
    sorted ``runs`` (a spine's merge, a reduce's new output against its old) of fewer than
    `MERGED_RUNS_BELOW` rows by one natural merge (`_merged_runs`), linear in a few runs where
    a sort of a few hundred rows costs tens of microseconds in mispredicted branches."""
    n = sum(len(diffs) for _, diffs in parts)
    if runs and POLICY.merged_runs(n):
        merged = _merged_runs(parts, floor)
        if merged is not None:
            return merged
    if compiled_rows(n):
        loops = compiled_loops()
        done = loops.consolidate_packed([(list(cols), diffs) for cols, diffs in parts], runs, floor or NO_FLOOR)
        if done is not None:
            return done
    ncols = len(parts[0][0])
    cols = [np.concatenate([c[j] for c, _ in parts]) for j in range(ncols)]
    diffs = np.concatenate([d for _, d in parts])
    if floor is not None:
        j, least = floor
        if len(diffs) and int(cols[j].min()) < least:
            cols[j] = np.maximum(cols[j], least)
    return consolidate(cols, diffs, runs)


NO_FLOOR = (0, np.iinfo(np.int64).min)
"""A floor that raises nothing (`_compiled.NO_FLOOR` in the first column)."""


def _merged_runs(
    parts: Sequence[tuple[Sequence[np.ndarray], np.ndarray]], floor: tuple[int, int] | None
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """`consolidate_parts` of sorted runs in one compiled call: the parts side by side as one
    matrix, the floor applied, then the natural merge sort of `_compiled.consolidate_words`
    (linear in two runs; the floor only reorders rows within a run of equal key and values,
    which it finds as shorter runs) and one gather. A merge of a few thousand rows took about
    two hundred microseconds as `consolidate_packed`'s dozen calls (each column's range, its
    packing, the sort, the sums, each column's unpacking). None when a column is not int64."""
    mats = [np.array(cols) for cols, diffs in parts if len(diffs)]
    if not mats:
        return None
    rows = mats[0] if len(mats) == 1 else np.concatenate(mats, axis=1)
    if rows.dtype != np.int64 or rows.ndim != 2:
        return None
    diffs = np.concatenate([d for _, d in parts]) if len(parts) > 1 else parts[0][1]
    if diffs.dtype != np.int64:
        return None
    if floor is not None:
        np.maximum(rows[floor[0]], floor[1], out=rows[floor[0]])
    kept, sums, m = compiled_loops().consolidate_words(rows, np.ascontiguousarray(diffs))
    out = rows.take(kept[:m], axis=1)  # a third of ``rows[:, kept]``'s cost (numpy's general indexing)
    return list(out), sums[:m]


def summed_rows(rows: Iterable[tuple[int, ...]], diffs: Iterable[int]) -> tuple[list[tuple[int, ...]], list[int]]:
    """`consolidate` in Python values, for a few rows (where numpy's cost per call dominates):
    the rows sorted, equal ones' diffs summed, zero sums dropped; and their sums."""
    total: dict[tuple[int, ...], int] = {}
    for row, d in zip(rows, diffs):
        total[row] = total.get(row, 0) + d
    table = sorted(r for r, d in total.items() if d)
    return table, [total[r] for r in table]


def _consolidate_fused(cols: Sequence[np.ndarray], diffs: np.ndarray) -> tuple[list[np.ndarray], np.ndarray] | None:
    """`consolidate` in one compiled call (`POLICY.fused_rows`); rows too wide for one int64
    (a triangle's paths keyed by a pair) in two, the natural merge sort of their columns as
    they are (`_compiled.consolidate_words`) and one gather, where packing them into words
    first took a dozen numpy calls for their ranges. None when not all int64."""
    loops = compiled_loops()  # loaded: `fused_rows` says so
    rows = np.array(cols)  # equally long columns: a matrix (a quarter of numpy.stack's cost)
    if rows.dtype != np.int64 or rows.ndim != 2 or diffs.dtype != np.int64:
        return None
    diffs = np.ascontiguousarray(diffs)
    out, sums, m = loops.consolidate_rows(rows, diffs)
    if m < 0:  # too wide to pack
        kept, sums, m = loops.consolidate_words(rows, diffs)
        out = rows.take(kept[:m], axis=1)
    return [out[j, :m] for j in range(len(cols))], sums[:m]


def _consolidate_small(cols: Sequence[np.ndarray], diffs: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """`consolidate` of a few rows through `summed_rows`, back as columns."""
    rows, sums = summed_rows(zip(*(c.tolist() for c in cols)), diffs.tolist())
    if not rows:
        return [c[:0] for c in cols], diffs[:0]
    out = np.array(rows, dtype=np.int64).reshape(len(rows), len(cols))
    return [out[:, i] for i in range(len(cols))], np.array(sums, dtype=np.int64)


def consolidation(cols: Sequence[np.ndarray], diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`consolidate` as a selection: the index of one row of each run of equal rows, in sorted
    order, and the run's summed diff, runs that sum to zero left out. For a caller that must
    keep its rows' other columns (a join's delta keeps the records it received, not their
    codes). A few rows in Python values."""
    n = len(diffs)
    if n <= SMALL:
        first: dict[tuple[int, ...], int] = {}
        total: dict[tuple[int, ...], int] = {}
        for i, (row, d) in enumerate(zip(zip(*(c.tolist() for c in cols)), diffs.tolist())):
            if row in total:
                total[row] += d
            else:
                first[row] = i
                total[row] = d
        table = sorted(r for r, d in total.items() if d)
        return (
            np.array([first[r] for r in table], dtype=np.int64),
            np.array([total[r] for r in table], dtype=np.int64),
        )
    idx = order(cols)
    starts = group_starts([c[idx] for c in cols])
    sums = np.add.reduceat(diffs[idx], starts)
    keep = sums != 0
    return idx[starts[keep]], sums[keep]


def distinct(values: np.ndarray, ordered: bool = False) -> np.ndarray:
    """The distinct values of an int64 array, sorted (``ordered``: already sorted). A sort and
    a comparison of neighbours: cheaper than `numpy.unique`'s hashing for int keys."""
    if len(values) < 2:
        return values
    if not ordered:
        values = _sorted_ints(values)
    return values[_runs(values)]


def _sorted_ints(values: np.ndarray) -> np.ndarray:
    """An int64 array sorted: by digits (`_compiled.radix_sorted`) when many, else numpy's sort."""
    if compiled_rows(len(values)) and values.dtype == np.int64:
        lo, hi = int(values.min()), int(values.max())
        bits = (hi - lo).bit_length()
        if bits <= 62:
            out = compiled_loops().radix_sorted(values - lo, bits)
            out += lo
            return out
    return np.sort(values)


def _runs(values: np.ndarray) -> np.ndarray:
    """The start of each run of equal values of a sorted array."""
    change = np.empty(len(values), dtype=bool)
    change[0] = True
    np.not_equal(values[1:], values[:-1], out=change[1:])
    return np.flatnonzero(change)


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


def compiled_rows(n: int) -> bool:
    """Whether ``n`` rows are sorted and consolidated by the compiled loops (`POLICY`)."""
    return POLICY.compiled_rows(n)


def compiled_keys(n: int) -> bool:
    """Whether the rows of ``n`` keys are found (and what is computed from them) by the
    compiled loops (`POLICY`)."""
    return POLICY.compiled_keys(n)


def preload() -> float:
    """Load the compiled loops (`_compiled`, numba) now, not at the first large array; the
    seconds it took (0 if they were loaded). A program that will meet large arrays calls it
    at start-up: in several processes, each would otherwise stop at its own first large
    array, at its own moment, and every stop holds up the others. It also makes `POLICY`
    eager: the loops then serve a few dozen keys and a thousand rows too."""
    import time

    POLICY.eager = True
    if _COMPILED in sys.modules:
        return 0.0
    started = time.perf_counter()
    from . import _compiled  # noqa: F401

    return time.perf_counter() - started
