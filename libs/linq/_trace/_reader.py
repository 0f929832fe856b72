"""The one way operators read a trace: descriptions of batches, and vectorised reads of keys.

differential-dataflow's ``TraceReader``/``Cursor`` (``src/trace/mod.rs``, ``trace/cursor/``)
walk one key at a time; here a read asks for a sorted array of keys at once and gets columns
back, because a numpy call costs about a microsecond whatever its size. Every stateful
operator (join, reduce and its reducers, arrange, propagate) reads through these functions
(`Spine.rows`, `Spine.accumulate`, `Spine.totals`, `Spine.times`); none walks a spine's
batches itself. Each read picks its tier from the number of keys alone (`POLICY`): Python
values for an update's few keys, numpy, or the compiled loops. An operator that fuses a read
with its own computation (propagate's checks of a node's labels) walks what `indexed` (its
compiled loops) or `key_spans` (its Python values) hand it: the same batch selection, the
keys' rows only.

A read skips every batch whose key range misses the keys asked (`Batch.kmin`, `kmax`), and,
for keys that are few, every batch that holds none of them, before any array is built.

Contract (the same as ``trace/mod.rs``'s): a batch's `Description` bounds the times of its
rows, ``lower <= time`` for some element of ``lower`` and not ``upper <= time`` for any element
of ``upper``; its rows' times were advanced by ``since`` (a row at ``t`` may stand for rows at
any time ``s <= t`` with ``s`` not beyond ``since``). A read at time ``t`` is correct for every
``t`` beyond the spine's logical compaction frontier (`Spine.since`); below it the answer is
undefined (the trace cannot tell; the operator must not ask).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import is_, le

import numpy as np

from .._columns import POLICY, compiled_loops, every, selector
from ._batch import Batch, Keys, Rows, concat_rows, le_time
from ._frontier import Time

KeyIndex = tuple[np.ndarray, np.ndarray, np.ndarray, int]
"""What a compiled loop finds a batch's keys with (`Batch.key_index`)."""

__all__ = [
    "Batches",
    "SpineReads",
    "accumulate",
    "count_changes",
    "indexed",
    "key_spans",
    "key_totals",
    "later_times",
    "latest",
    "matches",
    "matches_each",
    "spine_batches",
]

# Reads ------------------------------------------------------------------------------------------


def _in_range(batches: Sequence[Batch], least: int, greatest: int) -> list[Batch]:
    """The batches whose keys overlap ``[least, greatest]``: the others hold none of them."""
    return [b for b in batches if b.kmin <= greatest and b.kmax >= least]


def matches_each(keys: np.ndarray, batches: list[Batch]) -> Iterator[tuple[Batch, slice | np.ndarray, np.ndarray]]:
    """For each batch with rows of ``keys`` (any order, repeats allowed): the batch, those rows
    and for each row the index in ``keys`` of its key, so that a caller gathers only the
    columns it needs (a join's delta against an arrangement). One searchsorted for all keys,
    `numpy.repeat` on the left, ranges on the right; a few keys (an update's case) are looked
    up one by one, with no arrays per key."""
    n = len(keys)
    if not n:
        return
    tier = POLICY.keys_tier(n)
    if tier == "python":
        ks = keys.tolist()
        for batch in _in_range(batches, min(ks), max(ks)):
            found = batch.spans_of(ks)
            if found is not None:
                yield batch, found[0], found[1]
        return
    ordered = every(keys[1:] >= keys[:-1])
    if tier == "compiled" and (ordered or n < SORT_BELOW):  # one compiled pass per batch, keys in order
        key_rows = compiled_loops().key_rows  # numba only once arrays are large
        perm = None if ordered else np.argsort(keys, kind="stable")
        probe = np.ascontiguousarray(keys if perm is None else keys[perm])
        for batch in _in_range(batches, int(probe[0]), int(probe[-1])):
            idx, rank = key_rows(probe, *batch.key_index(n))
            if len(idx):
                yield batch, idx, (rank if perm is None else perm[rank])
        return
    least, greatest = (int(keys[0]), int(keys[-1])) if ordered else (int(keys.min()), int(keys.max()))
    batches = _in_range(batches, least, greatest)
    from .._columns import ranges

    for batch in batches:
        begin, end = batch.key_ranges(keys)
        sizes = end - begin
        if not sizes.any():
            continue
        yield batch, ranges(begin, end), np.repeat(np.arange(n), sizes)


def matches(keys: np.ndarray, batches: list[Batch], nvals: int, ntimes: int) -> tuple[np.ndarray, Rows] | None:
    """Every row of ``batches`` whose key is among ``keys`` (any order, repeats allowed), with,
    for each, the index in ``keys`` of the key it matched (None: no match): `matches_each`,
    its rows gathered. Each column is gathered straight into one array of all the matches
    (one gather per batch and column, no rows per batch to concatenate after), and the
    key column is read from ``keys``: a small probe's fixed cost is these calls. Where the
    policy says so (`Policy.spine_read`), every batch is read in one compiled call."""
    n = len(keys)
    if n and POLICY.spine_read(n) and batches:
        ordered = every(keys[1:] >= keys[:-1])
        perm = None if ordered else np.argsort(keys, kind="stable")
        probe = np.ascontiguousarray(keys if perm is None else keys[perm])
        rank, cols = _spine_rows(probe, batches, 2 + nvals + ntimes)
        if not len(rank):
            return None
        if perm is not None:
            rank = perm[rank]
        return rank, Rows(cols[0], list(cols[1 : 1 + nvals]), list(cols[1 + nvals : -1]), cols[-1])
    found = list(matches_each(keys, batches))
    if not found:
        return None
    if len(found) == 1:
        batch, idx, rank = found[0]
        return rank, batch.take(idx)
    rank = np.concatenate([r for _, _, r in found])
    vals, times, diffs = _gathered([(b, idx) for b, idx, _ in found], len(rank), nvals, ntimes)
    return rank, Rows(keys[rank], vals, times, diffs)


class SpineReads:
    """A spine's batches as of its last change, and their address table once a compiled read
    has asked for it, and their `latest` once a reader has: kept by the spine until its
    batches change (an insert, a merge's result, a compaction), so the reads between two
    changes share one table and one join of times."""

    __slots__ = ("batches", "latest", "latest_known", "table")

    def __init__(self, batches: tuple[Batch, ...]) -> None:
        self.batches = batches
        self.table: np.ndarray | None = None
        self.latest: Time | None = None
        self.latest_known = False


class Batches(list[Batch]):
    """A spine's batches as `Spine.batches` hands them out: a list of the caller's own (it may
    extend it) that knows the spine's `SpineReads`, where `address_table` finds the table."""

    __slots__ = ("reads",)
    reads: SpineReads


def spine_batches(reads: SpineReads) -> Batches:
    """A list of ``reads``' batches that knows them (no Python ``__init__``: this is every read's)."""
    out = Batches(reads.batches)
    out.reads = reads
    return out


def address_table(batches: Sequence[Batch]) -> np.ndarray:
    """The batches as the compiled whole-spine reads take them (`Batch.address`): the spine's
    kept table when ``batches`` are still exactly the batches it describes (a caller may have
    extended its list), else built now."""
    reads = _reads_of(batches)
    if reads is None:
        return _addresses(batches)
    table = reads.table
    if table is None:
        table = reads.table = _addresses(reads.batches)
    return table


def _reads_of(batches: Sequence[Batch]) -> SpineReads | None:
    """The spine's `SpineReads` that ``batches`` (from `Spine.batches`) are still exactly."""
    if type(batches) is Batches:
        reads = batches.reads
        held = reads.batches
        if len(held) == len(batches) and all(map(is_, held, batches)):
            return reads
    return None


def _addresses(batches: Iterable[Batch]) -> np.ndarray:
    return np.array([b.address() for b in batches])


def _spine_rows(keys: np.ndarray, batches: Sequence[Batch], ncols: int) -> tuple[np.ndarray, np.ndarray]:
    return compiled_loops().spine_rows(keys, address_table(batches), ncols)  # type: ignore[no-any-return]


def _gathered(
    found: list[tuple[Batch, slice | np.ndarray]], total: int, nvals: int, ntimes: int, with_keys: bool = False
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The value, time and diff columns (and first the key column, ``with_keys``) of the rows
    ``idx`` of each batch, ``total`` in all, each gathered straight into one array: one gather
    per batch and column, and no rows per batch to concatenate after."""
    width = nvals + ntimes + 1 + with_keys
    outs = [np.empty(total, dtype=np.int64) for _ in range(width)]
    start = 0
    for batch, idx in found:
        cols = (*((batch.keys,) if with_keys else ()), *batch.vals, *batch.times, batch.diffs)
        first = cols[-1][idx]
        end = start + len(first)
        outs[-1][start:end] = first
        for out, col in zip(outs[:-1], cols[:-1]):
            out[start:end] = col[idx]
        start = end
    return outs[: width - ntimes - 1], outs[width - ntimes - 1 : -1], outs[-1]


def indexed(keys: np.ndarray, batches: Sequence[Batch]) -> Iterator[tuple[Batch, KeyIndex]]:
    """For a compiled walk over the rows of ``keys`` (sorted, distinct; the compiled tier's
    many): each batch whose key range meets them, with what the walk finds keys with
    (`Batch.key_index`: its distinct keys, their rows' starts, its key table). An operator's
    own compiled loop (a fused read that `matches` and a gather would make in several
    passes) reads a trace this way."""
    n = len(keys)
    if not n:
        return
    for b in _in_range(batches, int(keys[0]), int(keys[-1])):
        yield b, b.key_index(n)


def key_spans(keys: list[int], batches: Sequence[Batch]) -> Iterator[tuple[Batch, int, int, int]]:
    """For a few ``keys`` (sorted, distinct, as Python ints: the Python tier's update case):
    each ``(batch, i, lo, hi)`` where rows ``lo:hi`` of ``batch`` are those of ``keys[i]``,
    batch by batch. No array is built: a reader takes the spans' values with ``tolist``."""
    if not keys:
        return
    for b in _in_range(batches, keys[0], keys[-1]):
        span = b.span
        for i, k in enumerate(keys):
            found = span(k)
            if found is not None:
                yield b, i, found[0], found[1]


def latest(batches: Sequence[Batch]) -> Time | None:
    """The join of the times of every row of ``batches`` (None: no rows): every row's time is
    ``<= latest``, so a read at a time at or after it needs no time filter. Kept with the
    spine's batches until they change (`SpineReads`): `Propagate` asks it of both its
    arrangements at every step."""
    reads = _reads_of(batches)
    if reads is None:
        return _latest(batches)
    if not reads.latest_known:
        reads.latest = _latest(reads.batches)
        reads.latest_known = True
    return reads.latest


def _latest(batches: Sequence[Batch]) -> Time | None:
    times = [b.latest for b in batches if b.latest]  # an empty batch's is ()
    if not times:
        return None
    return times[0] if len(times) == 1 else tuple(map(max, *times))


SORT_BELOW = 1024
"""An unsorted probe of fewer keys is sorted for the compiled pass; a larger one (a load) is
found by numpy's searchsorted per batch, cheaper than sorting it."""

FEW_ROWS = 64
"""Up to this many rows, `accumulate` sums in Python."""


def accumulate(batches: list[Batch], keys: np.ndarray, t: Time, nvals: int, ntimes: int) -> tuple[Rows, Rows]:
    """The rows of ``keys`` (sorted, distinct) accumulated at ``t`` (summed over times ``<= t``,
    no time columns, sorted and consolidated), and the (key, time) of their rows at times not
    ``<= t``.

    What is summed is the key's compacted history: one row per (record, time) in each batch,
    with the times of finished epochs moved to the first open one (`Spine.advance_to`), so it
    grows with the distinct loop positions of the key, never with the number of epochs. A few
    rows in all (an update's case) are summed in Python."""
    if len(keys) and POLICY.spine_read(len(keys)) and batches:
        return _spine_accumulate(keys, batches, t, nvals, ntimes)
    found: list[tuple[Batch, slice | np.ndarray]] = []
    total = 0
    if len(keys):
        query = Keys(keys)
        for b in _in_range(batches, int(keys[0]), int(keys[-1])):
            idx = b.find(query)
            if idx is not None:
                found.append((b, idx))
                total += idx.stop - idx.start if type(idx) is slice else len(idx)
    if total <= FEW_ROWS:
        return _accumulate_few([b.take(idx) for b, idx in found], t, nvals, ntimes)
    # every batch's rows in one set of columns (in batch order: a few sorted runs), then one
    # time filter and one consolidation for them all
    cols, times, diffs = _gathered(found, total, nvals, ntimes, with_keys=True)
    return _accumulated(cols[0], cols[1:], times, diffs, t)


def _spine_accumulate(keys: np.ndarray, batches: list[Batch], t: Time, nvals: int, ntimes: int) -> tuple[Rows, Rows]:
    """`accumulate` in one compiled call over every batch (`_compiled.spine_accumulate`): the
    read, the time filter and the consolidation in one pass, with no array per batch or
    column and no Python value per row (an update's reduce reads its output this way at every
    iteration, a few dozen keys of a few rows each)."""
    t_ = np.array(t, dtype=np.int64)
    acc, m, rank, later, k = compiled_loops().spine_accumulate(
        np.ascontiguousarray(keys), address_table(batches), nvals, t_
    )
    rows = Rows(acc[0, :m], list(acc[1 : 1 + nvals, :m]), (), acc[1 + nvals, :m])
    if not k:
        return rows, Rows.empty(0, ntimes)
    return rows, Rows(keys[rank[:k]], (), list(later[:ntimes, :k]), later[ntimes, :k])


def _accumulated(
    keys_: np.ndarray, vals: list[np.ndarray], times: list[np.ndarray], diffs: np.ndarray, t: Time
) -> tuple[Rows, Rows]:
    """`accumulate`'s answer from the rows of its keys (a few sorted runs)."""
    nvals, ntimes = len(vals), len(times)
    now = le_time(times, t)
    if now.all():
        return Rows(keys_, vals, (), diffs).consolidated(runs=True), Rows.empty(0, ntimes)
    gone = ~now
    later = Rows(keys_[gone], (), [c[gone] for c in times], diffs[gone])
    now = selector(now, 2 + nvals)
    acc = Rows(keys_[now], [v[now] for v in vals], (), diffs[now]).consolidated(runs=True)
    return acc, later


def key_totals(
    batches: list[Batch], keys: np.ndarray, t: Time, nvals: int, ntimes: int, values: bool = True
) -> tuple[np.ndarray, list[np.ndarray], Rows]:
    """For each of ``keys`` (sorted, distinct): the sum of the diffs of its rows at times
    ``<= t``, the values of one of its rows (any: where the key is the record, every row of
    it holds the same values; none, ``[]``, unless ``values``), and the (key, time) of its
    rows at times not ``<= t``. `accumulate` for keys of one record each, summed with no
    sort; a few keys (an update's) in Python values, span by span; many by one compiled pass
    per batch."""
    n = len(keys)
    if POLICY.spine_read(n) and batches:
        t_ = np.array(t, dtype=np.int64)
        table = address_table(batches)
        totals, vals_, rank, later_, k = compiled_loops().spine_sums(
            np.ascontiguousarray(keys), table, nvals, nvals if values else 0, t_
        )
        later_rows = (
            Rows(keys[rank[:k]], (), list(later_[:ntimes, :k]), later_[ntimes, :k]) if k else Rows.empty(0, ntimes)
        )
        return totals, list(vals_), later_rows
    if not values:
        nvals = 0  # a count needs only the sums: no gather of values per batch
    if not n:
        return keys, [keys for _ in range(nvals)], Rows.empty(0, ntimes)
    batches = _in_range(batches, int(keys[0]), int(keys[-1]))
    tier = POLICY.keys_tier(n)
    if tier == "python":
        return _key_totals_few(batches, keys.tolist(), t, nvals, ntimes)
    if tier == "compiled" and ntimes > 2:  # the compiled loops read one or two time coordinates
        tier = "numpy"
    totals = np.zeros(n, dtype=np.int64)
    vals = [np.zeros(n, dtype=np.int64) for _ in range(nvals)]
    later: list[Rows] = []
    query = Keys(keys)
    if tier == "compiled":
        key_sums = compiled_loops().key_sums  # numba only once arrays are large
        keys_c = np.ascontiguousarray(keys)
        row = np.full(n, -1, dtype=np.int64)
        t1 = t[1] if ntimes == 2 else 0
        for b in batches:
            if vals:
                row.fill(-1)
            second = b.times[1] if ntimes == 2 else _zeros(len(b))  # no second coordinate
            rank, idx = key_sums(keys_c, *b.key_index(n), b.times[0], second, b.diffs, t[0], t1, totals, row)
            if len(idx):  # rows at later times
                later.append(Rows(keys[rank], (), [c[idx] for c in b.times], b.diffs[idx]))
            if vals:
                has = np.flatnonzero(row >= 0)
                for out, col in zip(vals, b.vals):
                    out[has] = col[row[has]]
        return totals, vals, concat_rows(later, 0, ntimes)
    for b in batches:
        found = b.lookup(query)
        if found is None:
            continue
        idx, rank = found
        diffs = b.diffs[idx]
        for out, col in zip(vals, b.vals):
            out[rank] = col[idx]
        times = [c[idx] for c in b.times]
        now = le_time(times, t)
        if not now.all():
            gone = ~now
            later.append(Rows(keys[rank[gone]], (), [c[gone] for c in times], diffs[gone]))
            rank, diffs = rank[now], diffs[now]
        totals += np.bincount(rank, weights=diffs, minlength=n).round().astype(np.int64)
    return totals, vals, concat_rows(later, 0, ntimes)


def count_changes(
    keys: np.ndarray, t: Time, inputs: list[Batch], outputs: list[Batch], ntimes: int
) -> tuple[Rows, Rows] | None:
    """A count's change at ``t`` for ``keys`` (sorted, distinct), read from its two spines at
    once: ``inputs`` arranged by key alone (no values), ``outputs`` holding each key's count as
    its one value. The new ``(key, total)`` rows (a positive total) less the output
    accumulated at ``t``, sorted and consolidated (``(key, [count], (), diff)``), and the
    ``(key, time)`` of either spine's rows at times not ``<= t`` (the keys' later times): what
    `key_totals`, `accumulate` and a merge of the answer with the old output make, in one
    compiled call (`_compiled.spine_count`) instead of three and a dozen numpy calls. None
    where the compiled whole-spine reads do not apply (`Policy.spine_read`, an empty spine)
    and where a total is negative (the caller's general read names the key)."""
    n = len(keys)
    if not (n and POLICY.spine_read(n) and inputs and outputs):
        return None
    t_ = np.array(t, dtype=np.int64)
    out, m, rank, later, k = compiled_loops().spine_count(
        np.ascontiguousarray(keys), address_table(inputs), address_table(outputs), t_
    )
    if m < 0:
        return None
    delta = Rows(out[0, :m], (out[1, :m],), (), out[2, :m])
    if not k:
        return delta, Rows.empty(0, ntimes)
    return delta, Rows(keys[rank], (), list(later[:ntimes]), later[ntimes])


_ZEROS = np.zeros(0, dtype=np.int64)


def _zeros(n: int) -> np.ndarray:
    """``n`` zeros, read-only: a slice of one array kept for the purpose (grown, never
    shrunk; its untouched pages cost no memory), for a loop that reads a second time
    coordinate where there is none. A third of `numpy.broadcast_to`'s cost."""
    global _ZEROS
    if len(_ZEROS) < n:
        _ZEROS = np.zeros(max(n, 2 * len(_ZEROS)), dtype=np.int64)
        _ZEROS.flags.writeable = False
    return _ZEROS[:n]


def later_times(batches: list[Batch], keys: np.ndarray, t: Time, ntimes: int) -> Rows:
    """The (key, time) of the rows of ``keys`` (sorted, distinct) at times not ``<= t``: the
    times at which a change at ``t`` to these keys may change an answer (joined with ``t``)."""
    if not len(keys):
        return Rows.empty(0, ntimes)
    out: list[Rows] = []
    for b, idx, rank in matches_each(keys, _in_range(batches, int(keys[0]), int(keys[-1]))):
        if all(map(le, b.latest, t)):
            continue
        times = [c[idx] for c in b.times]
        gone = ~le_time(times, t)
        if gone.any():
            out.append(Rows(keys[rank[gone]], (), [c[gone] for c in times], b.diffs[idx][gone]))
    return concat_rows(out, 0, ntimes)


def _key_totals_few(
    batches: list[Batch], keys: list[int], t: Time, nvals: int, ntimes: int
) -> tuple[np.ndarray, list[np.ndarray], Rows]:
    n = len(keys)
    totals = [0] * n
    vals = [[0] * n for _ in range(nvals)]
    later: list[tuple[int, ...]] = []
    for b in batches:
        for i, k in enumerate(keys):
            found = b.span(k)
            if found is None:
                continue
            lo, hi = found
            for out, col in zip(vals, b.vals):
                out[i] = int(col[lo])
            for time, d in zip(zip(*(c[lo:hi].tolist() for c in b.times)), b.diffs[lo:hi].tolist()):
                if all(map(le, time, t)):
                    totals[i] += d
                else:
                    later.append((k, *time))
    vals_ = [np.array(v, dtype=np.int64) for v in vals]
    return np.array(totals, dtype=np.int64), vals_, _later_rows(later, ntimes)


def _later_rows(later: list[tuple[int, ...]], ntimes: int) -> Rows:
    """``(key, *time)`` tuples as the rows `Reduce.schedule` takes (their diffs unused)."""
    if not later:
        return Rows.empty(0, ntimes)
    cols = np.array(later, dtype=np.int64).reshape(len(later), 1 + ntimes)
    return Rows(cols[:, 0], (), [cols[:, 1 + i] for i in range(ntimes)], np.ones(len(later), dtype=np.int64))


def _accumulate_few(parts: list[Rows], t: Time, nvals: int, ntimes: int) -> tuple[Rows, Rows]:
    total: dict[tuple[int, ...], int] = {}
    later: list[tuple[int, ...]] = []
    for rows in parts:
        times = list(zip(*(c.tolist() for c in rows.times)))
        for row, d, s in zip(zip(rows.keys.tolist(), *(v.tolist() for v in rows.vals)), rows.diffs.tolist(), times):
            if all(map(le, s, t)):
                total[row] = total.get(row, 0) + d
            else:
                later.append((row[0], *s))
    found = sorted(r for r, d in total.items() if d)
    if found:
        cols = np.array(found, dtype=np.int64).reshape(len(found), 1 + nvals)
        acc = Rows(
            cols[:, 0], [cols[:, 1 + i] for i in range(nvals)], (), np.array([total[r] for r in found], dtype=np.int64)
        )
    else:
        acc = Rows.empty(nvals, 0)
    return acc, _later_rows(later, ntimes)
