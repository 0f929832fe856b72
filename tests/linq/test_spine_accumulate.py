"""The one-call consolidated read (`_compiled.spine_accumulate`, `accumulate`'s compiled
tier) against the read it replaced (every batch's rows gathered, then a time filter and a
consolidation in numpy: `_reader._accumulated`) and a brute-force sum over every row, on
spines of several value columns and time coordinates, with keys of one row and keys of
hundreds (a key's rows are ordered by insertion when few, by a merge sort when many)."""

from __future__ import annotations

from collections import Counter
from itertools import product

import numpy as np
import pytest

from timely_libs import linq
from timely_libs.linq._trace import Batch, Rows, Spine, matches
from timely_libs.linq._trace._reader import _accumulated, _spine_accumulate


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    linq.preload()


def _random_spine(rng: np.random.Generator, nvals: int, ntimes: int, crowded: bool) -> tuple[Spine, list[tuple]]:
    """A spine of a few batches; every row as ``(key, *vals, *time, diff)``. ``crowded``: a
    few keys with hundreds of rows each, else many keys of a few rows."""
    spine = Spine(nvals, ntimes)
    rows: list[tuple] = []
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.integers(1, 400))
        keys = rng.integers(0, 5 if crowded else 300, n)
        vals = [rng.integers(0, 4 if crowded else 3, n) for _ in range(nvals)]
        times = [rng.integers(0, 3, n) for _ in range(ntimes)]
        diffs = rng.choice([-2, -1, 1, 1, 3], n)
        spine.insert(Batch(Rows(keys, vals, times, diffs)))
        rows += zip(keys.tolist(), *(v.tolist() for v in vals), *(t.tolist() for t in times), diffs.tolist())
    return spine, rows


@pytest.mark.parametrize(("nvals", "ntimes", "crowded"), list(product((0, 1, 3), (1, 2, 3), (False, True))))
def test_the_one_call_read_equals_the_gathered_read_and_a_sum_of_every_row(
    nvals: int, ntimes: int, crowded: bool
) -> None:
    rng = np.random.default_rng(100 * nvals + 10 * ntimes + crowded)
    for _ in range(20):
        spine, every = _random_spine(rng, nvals, ntimes, crowded)
        asked = np.unique(rng.integers(0, 6 if crowded else 320, int(rng.integers(1, 80))))
        t = tuple(int(x) for x in rng.integers(0, 3, ntimes))
        acc, later = _spine_accumulate(asked, spine.batches(), t, nvals, ntimes)

        # the brute force: a sum per (key, values) over the rows at times <= t
        keyset = set(asked.tolist())
        want: Counter[tuple] = Counter()
        summed_later: Counter[tuple] = Counter()
        for row in every:
            k, vals, time, d = row[0], row[1 : 1 + nvals], row[1 + nvals : -1], row[-1]
            if k not in keyset:
                continue
            if all(a <= b for a, b in zip(time, t)):
                want[(k, *vals)] += d
            else:
                summed_later[(k, *vals, *time)] += d
        got = list(zip(acc.keys.tolist(), *(v.tolist() for v in acc.vals)))
        assert got == sorted(kv for kv, d in want.items() if d)  # sorted by key and values, distinct
        assert dict(zip(got, acc.diffs.tolist())) == {kv: d for kv, d in want.items() if d}
        assert acc.times == ()
        # the (key, time) of rows not <= t: those a scan keeps summed must be there, and only
        # rows of such times may be (a merge may have summed some away)
        must = {(r[0], *r[1 + nvals :]) for r, d in summed_later.items() if d}
        may = {(r[0], *r[1 + nvals :]) for r in summed_later}
        found_later = set(zip(later.keys.tolist(), *(c.tolist() for c in later.times)))
        assert must <= found_later <= may

        # the read it replaces: every row gathered, then filtered and consolidated in numpy
        found = matches(asked, spine.batches(), nvals, ntimes)
        if found is None:
            assert not len(acc) and not len(later)
            continue
        _, rows = found
        old, old_later = _accumulated(rows.keys, list(rows.vals), list(rows.times), rows.diffs, t)
        assert old.keys.tolist() == acc.keys.tolist()
        assert [v.tolist() for v in old.vals] == [v.tolist() for v in acc.vals]
        assert old.diffs.tolist() == acc.diffs.tolist()
        assert sorted(zip(old_later.keys.tolist(), *(c.tolist() for c in old_later.times))) == sorted(
            zip(later.keys.tolist(), *(c.tolist() for c in later.times))
        )


def test_a_key_whose_rows_cancel_is_left_out_and_its_later_rows_are_kept() -> None:
    spine = Spine(1, 2)
    k = np.array([7] * 40 + [8], dtype=np.int64)
    vals = np.array(list(range(20)) * 2 + [0], dtype=np.int64)
    diffs = np.array([1] * 20 + [-1] * 20 + [1], dtype=np.int64)
    spine.insert(Batch(Rows(k, [vals], [np.zeros(41, dtype=np.int64), np.zeros(41, dtype=np.int64)], diffs)))
    spine.insert(Batch(Rows.at(np.array([7]), [np.array([3])], (0, 5), np.array([1]))))
    acc, later = _spine_accumulate(np.array([7, 8]), spine.batches(), (0, 1), 1, 2)
    assert acc.keys.tolist() == [8] and acc.vals[0].tolist() == [0] and acc.diffs.tolist() == [1]
    assert later.keys.tolist() == [7] and [c.tolist() for c in later.times] == [[0], [5]]
