"""`Rows` (keyed differences as columns) and `Batch` (rows sorted, consolidated, indexed by key).

A row is ``(key, value fields..., time coordinates..., diff)``, every column an int64 array:
keys and values are codes (`_columns._codes`), a time has one coordinate per loop around
the operator plus the epoch (``times[0]`` is the epoch). A batch's rows are sorted by
(key, values, time) with no two rows equal but for their diff and no zero diff, and keep
the distinct keys with the offset of each key's first row, so finding the rows of many keys
is one `numpy.searchsorted`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from .._columns import (
    EMPTY,
    FEW_KEYS,
    POLICY,
    compiled_keys,
    compiled_loops,
    consolidate,
    ranges,
    selector,
    summed_rows,
)
from .._columns._kernels import greatest, least
from ._frontier import Description

__all__ = ["FEW_KEYS", "Batch", "Keys", "Rows", "concat_rows", "le_time", "lub_time", "time_columns"]
DENSE_QUERY = 1024
"""From this many values at once, sorted keys that are dense ints (a batch's, a query's) find them through a table
indexed by key (`Batch.positions`), not by binary search."""
NO_TABLE = np.zeros(0, dtype=np.int32)
"""The key table of a batch that has none (`Batch.key_index`): the compiled loops then search."""
DENSITY = 8
"""A batch's keys are dense when they span less than this many ints per distinct key."""
TABLE_FOR_SPINE = 4096
"""A batch with this many distinct keys or more builds its key table for the compiled reads of
a whole spine (`Batch.address`): a search of its keys would miss the cache at most steps."""
SPAN_TABLE = 1024
"""A batch with up to this many distinct keys answers `Batch.span` from a dict built on the
first ask (a tenth of a binary search's cost; an update asks the small batches of a spine
hundreds of times, mostly about keys they do not have)."""
SMALL_ROWS = 64
"""Up to this many rows, a new batch is summed (`summed_rows`) and finds its key starts and
time bounds in Python lists (numpy's per-call cost exceeds the work); once the compiled loops
are loaded, one already sorted and summed (``tidy``) from `INDEX_ROWS` rows finds them in one
compiled call instead (`Policy.batch_index`)."""


class Rows:
    """Keyed differences: ``keys``, ``vals`` (one column per value field), ``times`` (one
    column per time coordinate), ``diffs``; in no particular order unless a `Batch`."""

    __slots__ = ("diffs", "keys", "times", "vals")

    def __init__(
        self, keys: np.ndarray, vals: Sequence[np.ndarray], times: Sequence[np.ndarray], diffs: np.ndarray
    ) -> None:
        self.keys = keys
        self.vals = tuple(vals)
        self.times = tuple(times)
        self.diffs = diffs

    def __len__(self) -> int:
        return len(self.diffs)

    @classmethod
    def empty(cls, nvals: int, ntimes: int) -> Rows:
        return cls(EMPTY, [EMPTY] * nvals, [EMPTY] * ntimes, EMPTY)

    @classmethod
    def at(cls, keys: np.ndarray, vals: Sequence[np.ndarray], time: Sequence[int], diffs: np.ndarray) -> Rows:
        """Rows all at one ``time``."""
        return cls(keys, vals, time_columns(time, len(diffs)), diffs)

    def take(self, idx: np.ndarray | slice) -> Rows:
        idx = selector(idx, 2 + len(self.vals) + len(self.times))
        return Rows(self.keys[idx], [v[idx] for v in self.vals], [t[idx] for t in self.times], self.diffs[idx])

    def columns(self) -> list[np.ndarray]:
        return [self.keys, *self.vals, *self.times]

    def consolidated(self, runs: bool = False) -> Rows:
        """Sorted, summed, no zero diffs (``runs``: the rows are a few sorted runs already)."""
        cols, diffs = consolidate(self.columns(), self.diffs, runs)
        nv = len(self.vals)
        return Rows(cols[0], cols[1 : 1 + nv], cols[1 + nv :], diffs)

    def negated(self) -> Rows:
        return Rows(self.keys, self.vals, self.times, -self.diffs)


def time_columns(time: Sequence[int], n: int) -> list[np.ndarray]:
    """The time columns of ``n`` rows all at ``time``: zero-stride views when many (a column of
    one value costs no memory until rows are taken), plain arrays when few (cheaper to make)."""
    if n <= SMALL_ROWS:  # from a list: half numpy.full's cost at these sizes
        return [np.array([c] * n, dtype=np.int64) for c in time]
    if n <= 4096:
        return [np.full(n, c, dtype=np.int64) for c in time]
    return [np.broadcast_to(np.int64(c), n) for c in time]


def concat_rows(parts: Sequence[Rows], nvals: int, ntimes: int) -> Rows:
    parts = [p for p in parts if len(p)]
    if not parts:
        return Rows.empty(nvals, ntimes)
    if len(parts) == 1:
        return parts[0]
    return Rows(
        np.concatenate([p.keys for p in parts]),
        [np.concatenate([p.vals[i] for p in parts]) for i in range(nvals)],
        [np.concatenate([p.times[i] for p in parts]) for i in range(ntimes)],
        np.concatenate([p.diffs for p in parts]),
    )


def le_time(times: Sequence[np.ndarray], t: Sequence[int]) -> np.ndarray:
    """Rows whose time is ``<= t`` in the product order."""
    mask = times[0] <= t[0]
    for col, c in zip(times[1:], t[1:]):
        mask &= col <= c
    return mask


def lub_time(times: Sequence[np.ndarray], t: Sequence[int]) -> list[np.ndarray]:
    """Each row's time joined with ``t`` (the least upper bound, coordinate-wise max)."""
    return [np.maximum(col, c) for col, c in zip(times, t)]


class Batch(Rows):
    """Sorted, consolidated rows, with ``ukeys`` (distinct keys) and ``starts`` (offset of
    each key's first row, and the length at the end); ``latest`` is the join of every time
    (every row's time is ``<= latest``), and `description` bounds the times as frontiers.
    ``since``: the logical compaction frontier its times were advanced by (set by the spine
    that merged it; ``()`` for a batch as an operator made it)."""

    __slots__ = ("addresses", "index", "kmax", "kmin", "latest", "since", "spans", "starts", "ukeys", "views")

    def __init__(self, rows: Rows, tidy: bool = False, latest: Sequence[int] | None = None) -> None:
        """``tidy``: the rows come sorted and consolidated. ``latest``: the join of their times
        when the caller knows it (`at`), else found by a pass over each time column."""
        self.since: tuple[tuple[int, ...], ...] = ()
        self.addresses: np.ndarray | None = None
        """Where its arrays are, for the compiled reads of a whole spine (`address`)."""
        self.spans: dict[int, tuple[int, int]] | None = None
        """Key to its rows' span, for a batch of at most `SPAN_TABLE` keys (built by `span`)."""
        self.views: tuple[memoryview | None, memoryview, memoryview] | None = None
        """The key table (None for sparse keys), ``starts`` and ``ukeys`` as memoryviews, for a
        larger batch (built by `span`): reading one gives a Python int, four times faster than
        a numpy scalar."""
        if 1 < len(rows.diffs) <= SMALL_ROWS and not (tidy and POLICY.batch_index(len(rows.diffs))):
            self._small(rows, tidy, latest)
            return
        if not tidy:
            rows = rows.consolidated()
        super().__init__(rows.keys, rows.vals, rows.times, rows.diffs)
        keys = self.keys
        n = len(keys)
        if not n:
            self._empty()
            return
        if n == 1:
            self.starts = np.array([0, 1], dtype=np.int64)
            self.ukeys = keys
            self.latest = tuple(int(t[0]) for t in self.times)
        else:
            if POLICY.batch_index(n):
                self.starts, self.ukeys = compiled_loops().key_starts(keys)
            else:
                change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
                self.starts = np.concatenate([[0], change, [n]]).astype(np.int64)
                self.ukeys = keys[self.starts[:-1]]
            self.latest = (
                tuple(int(t[0]) if t.strides[0] == 0 else int(greatest(t)) for t in self.times)
                if latest is None
                else tuple(latest)
            )
        self.kmin = int(keys[0])
        self.kmax = int(keys[-1])
        self.index = Keys(self.ukeys)
        """Where each key is in ``ukeys`` (its table is built on the first large query)."""

    def _empty(self) -> None:
        self.starts = np.zeros(1, dtype=np.int64)
        self.ukeys = EMPTY
        self.latest = ()
        self.kmin, self.kmax = 1, 0
        self.index = Keys(EMPTY)

    @classmethod
    def at(
        cls, keys: np.ndarray, vals: Sequence[np.ndarray], time: Sequence[int], diffs: np.ndarray, tidy: bool = False
    ) -> Batch:
        """A batch of rows all at one ``time`` (an operator's output or input at a notification):
        its `latest` is that time, with no reduction of its time columns (a few microseconds of
        numpy's call overhead per column, on the tens of batches an update makes)."""
        return cls(Rows.at(keys, vals, time, diffs), tidy, time)

    def _small(self, rows: Rows, tidy: bool, latest: Sequence[int] | None) -> None:
        """A batch of a few rows (an update's), made in Python values: summed in a dict, the
        arrays built again only if the rows did not come sorted and summed, and the key starts
        and time bounds read from the lists (numpy's per-call cost exceeds the work here)."""
        nv = len(rows.vals)
        cols = rows.columns()
        diffs = rows.diffs
        lists = [c.tolist() for c in cols]
        if not tidy:
            given = list(zip(*lists))
            table, sums = summed_rows(given, diffs.tolist())
            if not table:
                super().__init__(EMPTY, [EMPTY] * nv, [EMPTY] * (len(cols) - 1 - nv), EMPTY)
                self._empty()
                return
            if table != given:  # else the rows came sorted, distinct and non-zero: the arrays serve
                cols = list(np.array(table, dtype=np.int64).T.copy())  # one contiguous row per column
                diffs = np.array(sums, dtype=np.int64)
                lists = [list(c) for c in zip(*table)]
        super().__init__(cols[0], cols[1 : 1 + nv], cols[1 + nv :], diffs)
        ks = lists[0]
        n = len(ks)
        starts = [0, *(i for i in range(1, n) if ks[i] != ks[i - 1]), n]
        ukeys = [ks[i] for i in starts[:-1]]
        self.starts = np.array(starts, dtype=np.int64)
        self.ukeys = np.array(ukeys, dtype=np.int64)
        self.latest = tuple(map(max, lists[1 + nv :])) if latest is None else tuple(latest)
        self.kmin = ukeys[0]
        self.kmax = ukeys[-1]
        self.index = Keys(self.ukeys, ukeys)

    @property
    def description(self) -> Description:
        """The frontiers bounding this batch's times."""
        if not len(self):
            return Description((), (), self.since)
        earliest = tuple(int(t.min()) for t in self.times)
        return Description.of(earliest, self.latest, self.since)

    def find(self, keys: np.ndarray | Keys) -> slice | np.ndarray | None:
        """The rows of ``keys`` (sorted, distinct), in batch order: a slice when they are one
        run (no copy), indices otherwise, None when there are none (`lookup`)."""
        found = self.lookup(keys)
        return None if found is None else found[0]

    def lookup(self, keys: np.ndarray | Keys) -> tuple[slice | np.ndarray, np.ndarray] | None:
        """The rows of ``keys`` (sorted, distinct; a `Keys` when many batches are asked), in
        batch order (a slice when they are one run), and for each row the index of its key in
        ``keys``; None when there are none. A few keys are looked up one by one (no arrays
        built per key: an update's case); many from the smaller side: a batch with fewer rows
        than twice the keys looks its own keys up among them (the small batches of a spine,
        asked about the thousands of keys of a batch of updates), a larger one finds the
        keys' ranges."""
        query = keys if isinstance(keys, Keys) else Keys(keys)
        n = len(query.keys)
        if not n or self.kmin > self.kmax:
            return None
        if n <= FEW_KEYS:  # an update's case: each key's span, no arrays per key
            few = query.few
            if few[0] > self.kmax or few[-1] < self.kmin:  # the keys miss this batch's range
                return None
            return self.spans_of(few)
        if compiled_keys(n):
            idx, rank = compiled_loops().key_rows(  # numba only once arrays are large
                np.ascontiguousarray(query.keys), *self.key_index(n)
            )
            return (idx, rank) if len(idx) else None
        if len(self) <= 2 * n:
            rank = query.ranks(self.keys)
            idx = np.flatnonzero(rank >= 0)
            return (idx, rank[idx]) if len(idx) else None
        where = self.positions(query.keys)
        lo = self.starts[where]
        sizes = np.maximum(self.starts[where + 1] - lo, 0)  # absent keys: where -1, no rows
        idx = ranges(lo, lo + sizes)
        if not len(idx):
            return None
        return idx, np.repeat(np.arange(n), sizes)

    def spans_of(self, keys: list[int]) -> tuple[slice | np.ndarray, np.ndarray] | None:
        """`lookup` for a few keys (any order, repeats allowed), each by its span: the rows (a
        slice when one key has rows) and for each row the index of its key in ``keys``."""
        if len(keys) == 1:  # most asks, and most find nothing
            found = self.span(keys[0])
            if found is None:
                return None
            lo, hi = found
            return slice(lo, hi), np.zeros(hi - lo, dtype=np.int64)
        spans = [(i, s) for i, s in enumerate(map(self.span, keys)) if s is not None]
        if not spans:
            return None
        if len(spans) == 1:
            i, (lo, hi) = spans[0]
            return slice(lo, hi), np.full(hi - lo, i, dtype=np.int64)
        idx = np.concatenate([np.arange(lo, hi) for _, (lo, hi) in spans])
        return idx, np.repeat(np.array([i for i, _ in spans], dtype=np.int64), [hi - lo for _, (lo, hi) in spans])

    def positions(self, keys: np.ndarray) -> np.ndarray:
        """For each of ``keys`` (any order, repeats allowed): its index in ``ukeys``, or -1
        (`Keys.ranks` of the batch's own keys: its table serves the large searches of a
        batch of updates)."""
        return self.index.ranks(keys)

    def span(self, key: int) -> tuple[int, int] | None:
        """Where the rows of ``key`` begin and end (None: it has none)."""
        if key < self.kmin or key > self.kmax:
            return None
        spans = self.spans
        if spans is not None:
            return spans.get(key)
        if len(self.ukeys) <= SPAN_TABLE:
            bounds = self.starts.tolist()
            spans = self.spans = dict(zip(self.ukeys.tolist(), pairwise(bounds)))
            return spans.get(key)
        views = self.views
        if views is None:
            table = self.index.dense_table()  # built once per batch: then a read, not a search
            views = self.views = (
                None if table is None else table.data,
                self.starts.data,
                np.ascontiguousarray(self.ukeys).data,
            )
        table_view, starts, ukeys = views
        if table_view is not None:
            pos = table_view[key - self.kmin]
            if pos < 0:
                return None
        else:
            # bisect, not numpy's searchsorted: that releases the GIL, and with a merge running
            # on the merge thread, taking it back waited up to a switch interval (5 ms) per
            # call: a third of a shortest-paths update's time went there
            pos = bisect_left(ukeys, key)
            if ukeys[pos] != key:
                return None
        return starts[pos], starts[pos + 1]

    def key_index(self, queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """What a compiled loop finds keys with (`_compiled._matches`): the distinct keys, where
        each key's rows start, and the key table with its least key, for a query of ``queries``
        keys; the table is built for a large query (`DENSE_QUERY`) and kept, and is empty when
        the keys are too sparse for one (the loop then searches)."""
        index = self.index
        table = index.table
        if table is None and queries >= DENSE_QUERY:
            table = index.dense_table()
        if table is None:
            return self.ukeys, self.starts, NO_TABLE, 0
        return self.ukeys, self.starts, table, int(self.ukeys[0])

    def address(self) -> np.ndarray:
        """This batch's row of a spine's address table (`_compiled.spine_rows`): its row
        count, distinct keys' count, least and greatest key, then the address and stride of
        its distinct keys, its key starts and each column (key, values, times, diff). Made on
        the first compiled read and kept: a batch's arrays never change, and the table is
        only read while the batch is alive."""
        row = self.addresses
        if row is None:
            loops = compiled_loops()  # loaded: a compiled read asks
            put_address, put_table, ADDR_COLUMNS = loops.put_address, loops.put_table, loops.ADDR_COLUMNS
            cols = (self.keys, *self.vals, *self.times, self.diffs)
            row = np.zeros(ADDR_COLUMNS + 2 * len(cols), dtype=np.int64)
            row[:4] = (len(self.diffs), len(self.ukeys), self.kmin, self.kmax)
            put_address(row, 4, self.ukeys)
            put_address(row, 6, self.starts)
            # a large batch's keys are found through its key table (kept with the batch),
            # not by a search whose every step misses the cache
            table = self.index.dense_table() if len(self.ukeys) >= TABLE_FOR_SPINE else None
            if table is not None:
                put_table(row, 8, table)
            for i, c in enumerate(cols):
                put_address(row, ADDR_COLUMNS + 2 * i, c)
            self.addresses = row
        return row

    def key_ranges(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``keys`` (any order, repeats allowed): where its rows begin and end."""
        if not len(self.ukeys):
            z = np.zeros(len(keys), dtype=np.int64)
            return z, z
        pos = self.positions(keys)
        found = pos >= 0
        lo = np.where(found, self.starts[pos], 0)
        hi = np.where(found, self.starts[pos + 1], 0)
        return lo, hi


class Keys:
    """Sorted, distinct keys that many values are looked up among: a batch's own keys
    (`Batch.positions`), or the keys asked of every batch of a spine (`Batch.lookup`). When
    the values are many and the keys dense ints, a table from key to index is built once and
    read by every later lookup: a gather instead of a binary search per value."""

    __slots__ = ("few", "keys", "sparse", "table")

    def __init__(self, keys: np.ndarray, listed: list[int] | None = None) -> None:
        self.keys = keys
        n = len(keys)
        self.few: list[int] = (keys.tolist() if listed is None else listed) if n <= FEW_KEYS else []
        """The keys as Python ints when they are few (`Batch.lookup` asks each batch about them)."""
        self.table: np.ndarray | None = None
        self.sparse = False
        """The keys were found too sparse for a table (asked once)."""

    def __len__(self) -> int:
        return len(self.keys)

    def dense_table(self) -> np.ndarray | None:
        """The table from key (less the least key) to index (int32: half the memory), -1 where
        no key, built now if the keys are dense ints; None if they are not (a binary search is
        then the way)."""
        if self.table is None:
            keys = self.keys
            n = len(keys)
            if self.sparse or not n:
                return None
            low = int(keys[0])
            if int(keys[-1]) - low >= DENSITY * n:
                self.sparse = True
                return None
            size = int(keys[-1]) - low + 1
            if compiled_keys(n):
                self.table = compiled_loops().key_table(  # numba only once arrays are large
                    np.ascontiguousarray(keys), low, size
                )
            else:
                self.table = np.full(size, -1, dtype=np.int32)
                self.table[keys - low] = np.arange(n)
        return self.table

    def ranks(self, values: np.ndarray) -> np.ndarray:
        """The index in ``keys`` of each of ``values`` (any order, repeats allowed), or -1."""
        keys = self.keys
        n = len(keys)
        if not n:
            return np.full(len(values), -1, dtype=np.int64)
        low = int(keys[0])
        table = self.table
        if table is None and len(values) >= DENSE_QUERY:
            table = self.dense_table()
        if table is not None:
            rel = values - low
            if not len(rel) or (int(least(rel)) >= 0 and int(greatest(rel)) < len(table)):
                return table[rel].astype(np.int64)
            out = table[np.clip(rel, 0, len(table) - 1)].astype(np.int64)
            out[(rel < 0) | (rel >= len(table))] = -1  # outside the table (inside, it says -1)
            return out
        rank = np.searchsorted(keys, values)
        np.minimum(rank, n - 1, out=rank)
        return np.where(keys[rank] == values, rank, -1)
