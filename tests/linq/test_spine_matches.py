"""A join's read of its delta's keys against an arrangement of many batches: the one compiled
call over the whole spine (`_compiled.spine_rows`, what `matches` takes below `SPINE_BELOW`
keys, here at every size) and `matches` itself against the batch-by-batch read
(`matches_each`) and a brute-force scan of every row. Spines of up to 30 batches, large
batches read through their key table and small ones walked from their own keys, probes of
one to thousands of keys in or out of order, with repeats and keys no batch holds, rows at
times before, at and after any time a delta could be at."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from timely_libs import linq
from timely_libs.linq._trace import Batch, Rows, matches, matches_each
from timely_libs.linq._trace._batch import TABLE_FOR_SPINE
from timely_libs.linq._trace._reader import _spine_rows


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    linq.preload()


def _random_batches(rng: np.random.Generator, nvals: int, ntimes: int, span: int) -> list[Batch]:
    """Up to 30 batches of keys in ``[0, span)``: mostly small (a spine's tail), some with
    more distinct keys than `TABLE_FOR_SPINE` (read through a key table), some of a narrow
    key range (skipped by range)."""
    batches = []
    for _ in range(int(rng.integers(1, 31))):
        kind = rng.random()
        if kind < 0.15:
            n = TABLE_FOR_SPINE + int(rng.integers(0, 3000))
            keys = rng.permutation(np.arange(span))[:n] if span > n else rng.integers(0, span, n)
        elif kind < 0.3:
            low = int(rng.integers(0, span))
            keys = rng.integers(low, min(span, low + 20), int(rng.integers(1, 40)))
        else:
            keys = rng.integers(0, span, int(rng.integers(1, 200)))
        n = len(keys)
        vals = [rng.integers(0, 50, n) for _ in range(nvals)]
        times = [rng.integers(0, 4, n) for _ in range(ntimes)]
        diffs = rng.choice([-2, -1, 1, 1, 3], n)
        batches.append(Batch(Rows(np.asarray(keys, dtype=np.int64), vals, times, diffs)))
    return batches


def _as_set(keys: np.ndarray, found: tuple[np.ndarray, Rows] | None) -> Counter[tuple]:
    """The matches as a multiset of (delta row, key, values, times, diff)."""
    if found is None:
        return Counter()
    rank, rows = found
    assert (rows.keys == keys[rank]).all()
    return Counter(
        zip(
            rank.tolist(),
            rows.keys.tolist(),
            *(v.tolist() for v in rows.vals),
            *(t.tolist() for t in rows.times),
            rows.diffs.tolist(),
        )
    )


def _whole_spine(keys: np.ndarray, batches: list[Batch], nvals: int, ntimes: int) -> Counter[tuple]:
    """The one-call read, whatever the number of keys (`matches` sorts the probe the same way)."""
    perm = np.argsort(keys, kind="stable")
    rank, cols = _spine_rows(np.ascontiguousarray(keys[perm]), batches, 2 + nvals + ntimes)
    rows = Rows(cols[0], list(cols[1 : 1 + nvals]), list(cols[1 + nvals : -1]), cols[-1])
    return _as_set(keys, (perm[rank], rows)) if len(rank) else Counter()


def _per_batch(keys: np.ndarray, batches: list[Batch]) -> Counter[tuple]:
    out: Counter[tuple] = Counter()
    for batch, idx, rank in matches_each(keys, batches):
        rows = batch.take(idx)
        out += _as_set(keys, (np.asarray(rank), rows))
    return out


def _brute(keys: np.ndarray, batches: list[Batch]) -> Counter[tuple]:
    out: Counter[tuple] = Counter()
    for batch in batches:
        cols = [batch.keys, *batch.vals, *batch.times, batch.diffs]
        stored = list(zip(*(np.broadcast_to(c, len(batch.diffs)).tolist() for c in cols)))
        by_key: dict[int, list[tuple]] = {}
        for row in stored:
            by_key.setdefault(row[0], []).append(row)
        for i, k in enumerate(keys.tolist()):
            for row in by_key.get(k, ()):
                out[(i, *row)] += 1
    return out


@pytest.mark.parametrize("nvals", [0, 1, 2])
@pytest.mark.parametrize("ntimes", [1, 2])
def test_the_whole_spine_read_equals_the_batch_by_batch_read_and_a_scan(nvals: int, ntimes: int) -> None:
    rng = np.random.default_rng(10 * nvals + ntimes)
    for trial in range(12):
        span = int(rng.choice([300, 9000, 40000]))
        batches = _random_batches(rng, nvals, ntimes, span)
        n = int(rng.choice([1, 5, 40, 1500, 6000]))
        keys = rng.integers(-5, span + 5, n)  # some below and above every batch's keys
        if trial % 3:
            keys = np.sort(keys)  # a delta arranged by key; else in no order
        if trial % 4 == 0:
            keys = np.repeat(keys, rng.integers(1, 3, n))  # repeated keys each match again
        want = _brute(keys, batches)
        assert _whole_spine(keys, batches, nvals, ntimes) == want
        assert _as_set(keys, matches(keys, batches, nvals, ntimes)) == want
        assert _per_batch(keys, batches) == want


def test_a_probe_of_absent_keys_matches_nothing() -> None:
    rng = np.random.default_rng(7)
    batches = _random_batches(rng, 1, 1, 1000)
    held = set().union(*(b.keys.tolist() for b in batches))
    absent = np.array(sorted(set(range(-10, 1010)) - held), dtype=np.int64)
    assert matches(absent, batches, 1, 1) is None
    assert matches(np.zeros(0, dtype=np.int64), batches, 1, 1) is None
