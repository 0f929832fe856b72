"""Finding keys in an arranged batch (`timely_libs.linq._trace`), against a scan of its rows.

A batch finds the rows of many keys at once by binary search, or, for a large query on a
batch of dense int keys, through a table indexed by key; a few keys are looked up one by one.
`lookup` also says which key each row is of, and
when the batch is the smaller side looks its own keys up among the keys asked. Every way must
give the rows a plain scan gives, for keys that are present, absent, below
the batch's least key and above its greatest.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.linq_harness import compiled_from
from timely_libs.linq._trace import Batch, Rows, _batch, matches

SIZES = st.sampled_from([1, 3, 9, 40, 300])


def _batch_of(keys: list[int]) -> Batch:
    n = len(keys)
    k = np.array(keys, dtype=np.int64)
    return Batch(Rows(k, [np.arange(n, dtype=np.int64)], [np.zeros(n, dtype=np.int64)], np.ones(n, dtype=np.int64)))


@pytest.mark.parametrize("way", ["search", "dense", "compiled", "compiled-dense"])
@settings(max_examples=150, deadline=None)
@given(
    stored=st.lists(st.integers(-50, 200), min_size=1, max_size=300),
    asked=st.lists(st.integers(-80, 260), max_size=300),
)
def test_find_and_matches_give_the_rows_a_scan_gives(way: str, stored: list[int], asked: list[int]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        # large queries by binary search, (DENSE_QUERY lowered to 1) through the key table, or
        # (compiled from one key on) by the compiled walk through sorted keys or reading the table
        patch.setattr(_batch, "DENSE_QUERY", 1 if way.endswith("dense") else 1 << 40)
        compiled_from(patch, 1 if way.startswith("compiled") else 1 << 40)
        _check(stored, asked)
        _check(stored, sorted(asked))  # a join's delta comes sorted by key


@pytest.mark.parametrize("way", ["search", "dense", "compiled", "compiled-dense"])
def test_large_batches_and_queries_give_the_rows_a_scan_gives(way: str) -> None:
    """As above, on batches of hundreds of keys asked about hundreds (hypothesis draws mostly
    short lists, which a batch answers key by key): the key table, built in numpy or by the
    compiled loop, and read by numpy or by the compiled walk."""
    rng = np.random.default_rng(7)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_batch, "DENSE_QUERY", 1 if way.endswith("dense") else 1 << 40)
        compiled_from(patch, 1 if way.startswith("compiled") else 1 << 40)
        for _ in range(40):
            stored = rng.integers(-50, 200, size=int(rng.integers(20, 400))).tolist()
            asked = rng.integers(-80, 260, size=int(rng.integers(9, 400))).tolist()
            _check(stored, asked)
            _check(stored, sorted(asked))


def _check(stored: list[int], asked: list[int]) -> None:
    batch = _batch_of(stored)
    keys = np.array(sorted(set(asked)), dtype=np.int64)
    found = batch.find(keys)
    want = [i for i, k in enumerate(batch.keys.tolist()) if k in set(asked)]
    got = [] if found is None else np.arange(len(batch))[found].tolist()
    assert got == want
    # lookup: the same rows from either side (the batch's keys among the keys, when it is the
    # smaller), each with its key's index among the keys
    looked = batch.lookup(keys)
    assert ([] if looked is None else np.arange(len(batch))[looked[0]].tolist()) == want
    if looked is not None:
        assert (keys[looked[1]] == batch.keys[looked[0]]).all()
    # a join's delta: keys in any order, repeats allowed; every (delta row, batch row) pair once
    delta = np.array(asked, dtype=np.int64)
    pairs = matches(delta, [batch], 1, 1)
    expected = sorted((i, j) for i, k in enumerate(asked) for j, s in enumerate(batch.keys.tolist()) if k == s)
    if pairs is None:
        assert expected == []
    else:
        left, right = pairs
        assert sorted(zip(left.tolist(), right.vals[0].tolist())) == sorted(
            (i, int(batch.vals[0][j])) for i, j in expected
        )


def test_a_large_query_builds_the_key_table_once_and_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_batch, "DENSE_QUERY", 4)
    batch = _batch_of([2, 3, 3, 7, 9, 10])
    assert batch.index.table is None
    assert batch.positions(np.array([0, 3, 4, 10, 11], dtype=np.int64)).tolist() == [-1, 1, -1, 4, -1]
    assert batch.index.table is not None and len(batch.index.table) == 9


@pytest.mark.parametrize("way", ["dict", "table"])
@settings(max_examples=150, deadline=None)
@given(stored=st.lists(st.integers(-50, 200), min_size=1, max_size=300), spread=st.sampled_from([1, 1000]))
def test_a_few_keys_find_their_span_as_a_scan_does(way: str, stored: list[int], spread: int) -> None:
    """`Batch.span` (an update's lookups) through the dict of a small batch, or, in a large
    one, through the key table when the keys are dense or a binary search when they are not
    (spread far apart)."""
    keys = [k * spread for k in stored]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_batch, "SPAN_TABLE", 1 << 40 if way == "dict" else 0)
        batch = _batch_of(keys)
        in_batch = batch.keys.tolist()
        for k in range((min(stored) - 3) * spread, (max(stored) + 4) * spread, spread):
            rows = [i for i, s in enumerate(in_batch) if s == k]
            assert batch.span(k) == ((rows[0], rows[-1] + 1) if rows else None)
            found = batch.spans_of([k, k])  # the many-keys form: both asks, same rows
            assert (found is None) == (not rows)
        dense = max(keys) - min(keys) < _batch.DENSITY * len(set(keys))
        assert (batch.index.table is not None) == (way == "table" and dense)
        assert (batch.spans is not None) == (way == "dict")


ROW = st.tuples(st.integers(0, 6), st.integers(-2, 2), st.integers(0, 3), st.integers(0, 2), st.integers(-2, 2))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(ROW, max_size=90), tidy_input=st.booleans())
def test_a_batch_is_its_rows_sorted_and_summed_with_key_starts_and_time_bounds(
    rows: list[tuple[int, int, int, int, int]], tidy_input: bool
) -> None:
    """A batch of any size (a few rows are made in Python values, more with numpy) against a
    dictionary: its rows sorted by (key, value, time), summed, zeros dropped; each key's
    start, its distinct keys, the join of its times, and every key's span."""
    total: dict[tuple[int, ...], int] = {}
    for *row, d in rows:
        total[tuple(row)] = total.get(tuple(row), 0) + d
    want = sorted((row, d) for row, d in total.items() if d)
    given_rows = want if tidy_input else [(tuple(r[:4]), r[4]) for r in rows]
    cols = [np.array([r[i] for r, _ in given_rows], dtype=np.int64) for i in range(4)]
    diffs = np.array([d for _, d in given_rows], dtype=np.int64)
    batch = Batch(Rows(cols[0], [cols[1]], cols[2:], diffs), tidy=tidy_input)

    got = list(zip(zip(*(c.tolist() for c in batch.columns())), batch.diffs.tolist()))
    assert got == want
    keys = [r[0] for r, _ in want]
    assert batch.ukeys.tolist() == sorted(set(keys))
    assert batch.starts.tolist() == [keys.index(k) for k in sorted(set(keys))] + [len(keys)]
    if want:
        assert batch.latest == (max(r[2] for r, _ in want), max(r[3] for r, _ in want))
        assert (batch.kmin, batch.kmax) == (min(keys), max(keys))
    for k in range(-1, 8):
        rows_of_k = [i for i, key in enumerate(keys) if key == k]
        assert batch.span(k) == ((rows_of_k[0], rows_of_k[-1] + 1) if rows_of_k else None)
    assert batch.index.few == (batch.ukeys.tolist() if len(batch.ukeys) <= _batch.FEW_KEYS else [])


@pytest.mark.parametrize("n", [0, 1, 5, 64, 65, 300, 5000])
@pytest.mark.parametrize("tidy", [False, True])
def test_a_batch_at_one_time_is_the_batch_of_its_rows(n: int, tidy: bool) -> None:
    """`Batch.at` (rows all at one time, whose join of times it takes from the caller) makes
    the batch the general constructor makes of the same rows, its `latest` included: for a
    few rows (Python values), many (numpy, zero-stride time columns), summed or given tidy,
    and rows that all cancel (no rows: ``latest`` is ``()``)."""
    rng = np.random.default_rng(n)
    keys = rng.integers(0, max(n // 3, 1), n)
    vals = rng.integers(-2, 3, n)
    diffs = rng.integers(-2, 3, n)
    if tidy:  # sorted and summed, as an operator's consolidated output comes
        order = np.lexsort([vals, keys])
        keys, vals, diffs = keys[order], vals[order], diffs[order]
        total: dict[tuple[int, int], int] = {}
        for k, v, d in zip(keys.tolist(), vals.tolist(), diffs.tolist()):
            total[(k, v)] = total.get((k, v), 0) + d
        kept = sorted((r, d) for r, d in total.items() if d)
        keys = np.array([r[0] for r, _ in kept], dtype=np.int64)
        vals = np.array([r[1] for r, _ in kept], dtype=np.int64)
        diffs = np.array([d for _, d in kept], dtype=np.int64)
    time = (4, 7)
    at = Batch.at(keys, [vals], time, diffs, tidy=tidy)
    general = Batch(Rows(keys, [vals], [np.full(len(keys), c, dtype=np.int64) for c in time], diffs), tidy=tidy)
    assert [c.tolist() for c in at.columns()] == [c.tolist() for c in general.columns()]
    assert at.diffs.tolist() == general.diffs.tolist()
    assert at.latest == general.latest == (time if len(general) else ())
    assert at.ukeys.tolist() == general.ukeys.tolist() and at.starts.tolist() == general.starts.tolist()


@pytest.mark.parametrize("way", ["numpy", "compiled", "compiled-dense"])
def test_key_totals_sum_each_keys_rows_up_to_t_as_a_scan_does(way: str) -> None:
    """`Spine.totals` (a distinct's counts) over a spine of several batches, for
    hundreds of keys: each key's diffs at epochs ``<= t`` summed, its value, and its rows at
    later epochs, as a scan of every row says; by numpy passes, or by the compiled loop (keys
    found by search, or through each batch's key table)."""
    from timely_libs.linq._trace import Spine

    rng = np.random.default_rng(11)
    with pytest.MonkeyPatch.context() as patch:
        compiled_from(patch, 1 if way.startswith("compiled") else 1 << 40)
        patch.setattr(_batch, "DENSE_QUERY", 1 if way.endswith("dense") else 1 << 40)
        for _ in range(20):
            spine = Spine(1, 1)
            everything: list[tuple[int, int, int]] = []
            for _ in range(int(rng.integers(1, 5))):
                n = int(rng.integers(1, 300))
                keys = rng.integers(0, 400, n)
                epochs = rng.integers(0, 6, n)
                diffs = rng.choice([-2, -1, 1, 3], n)
                spine.insert(Batch(Rows(keys, [keys * 7 + 1], [epochs], diffs)))
                everything += zip(keys.tolist(), epochs.tolist(), diffs.tolist())
            asked = np.unique(rng.integers(0, 450, int(rng.integers(9, 400))))
            t = int(rng.integers(0, 6))
            totals, vals, later = spine.totals(asked, (t,))
            held = {key for key, _ in _summed(everything)}  # keys with rows left once summed
            for i, k in enumerate(asked.tolist()):
                assert totals[i] == sum(d for key, e, d in everything if key == k and e <= t)
                if k in held:
                    assert vals[0][i] == k * 7 + 1
            got = sorted(zip(later.keys.tolist(), later.times[0].tolist(), later.diffs.tolist()))
            wanted = [r for r in everything if r[0] in set(asked.tolist()) and r[1] > t]
            # the spine sums rows that agree (key, value, epoch): compare the sums per (key, epoch)
            assert _summed(got) == _summed(wanted)


def _summed(rows: list[tuple[int, int, int]]) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for k, e, d in rows:
        out[(k, e)] = out.get((k, e), 0) + d
    return {key: d for key, d in out.items() if d}
