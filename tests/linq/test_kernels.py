"""The column kernels (`timely_libs.linq._columns._kernels`): consolidation in each of its forms (a
Python pass for a few rows, numpy passes, compiled loops for many rows) against a dictionary
that sums the same rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.linq_harness import compiled_from
from timely_libs.linq._columns import _kernels

ROWS = st.lists(
    st.tuples(st.integers(0, 40), st.integers(-3, 3), st.integers(0, 5), st.sampled_from([1, -1, 2, -2])),
    max_size=120,
)


def _summed(rows: list[tuple[int, int, int, int]]) -> list[tuple[int, ...]]:
    total: Counter[tuple[int, ...]] = Counter()
    for *row, d in rows:
        total[tuple(row)] += d
    return sorted((*row, d) for row, d in total.items() if d)


def _consolidated(cols: list[np.ndarray], diffs: np.ndarray, runs: bool) -> list[tuple[int, ...]]:
    out, sums = _kernels.consolidate(cols, diffs, runs)
    assert all(len(c) == len(sums) for c in out)
    return list(zip(*(c.tolist() for c in out), sums.tolist()))


@pytest.mark.parametrize("form", ["python", "numpy", "compiled", "fused"])
@pytest.mark.parametrize("runs", [False, True])
@settings(max_examples=150, deadline=None)
@given(rows=ROWS, spread=st.sampled_from([1, 1 << 20, 1 << 40, 1 << 56]))
def test_consolidation_sorts_sums_and_drops_zeros(form: str, runs: bool, rows: list, spread: int) -> None:
    """Also with a wide column (``spread``: keys far apart, so that wider rows no longer pack
    into one int64 with their diff and the forms fall back to sorting by columns: by
    `numpy.lexsort`, or with the compiled loops loaded by their natural merge sort). ``fused``:
    one compiled call for the whole consolidation (`_compiled.consolidate_rows`), as a program
    that loaded the compiled loops takes for fewer than `FUSED_BELOW` rows; rows too wide to
    pack are then merge-sorted by their columns as they are (`_compiled.consolidate_words`)."""
    rows = [(k * spread, v, t, d) for k, v, t, d in rows]
    with pytest.MonkeyPatch.context() as patch:
        fused = form == "fused"
        loaded = form in ("compiled", "fused")
        patch.setattr(_kernels.POLICY, "eager", loaded or _kernels.POLICY.eager)
        patch.setattr(_kernels, "FUSED_BELOW", 1 << 40 if fused else 0)
        patch.setattr(_kernels, "WORDS_FROM", 2 if loaded else 1 << 40)
        patch.setattr(_kernels, "SMALL", 1 << 40 if form == "python" else 0)
        patch.setattr(_kernels, "COMPILED_ROWS", 2 if form == "compiled" else 1 << 40)
        patch.setattr(_kernels, "LOADED_ROWS", 2 if form == "compiled" else 1 << 40)
        if loaded:
            _kernels.preload()  # the compiled loops, as a program that asked for them
        if runs:  # a few sorted runs, as a merge of batches gives
            half = len(rows) // 2
            rows = sorted(rows[:half]) + sorted(rows[half:])
        cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
        diffs = np.array([r[3] for r in rows], dtype=np.int64)
        assert _consolidated(cols, diffs, runs) == _summed(rows)


@settings(max_examples=150, deadline=None)
@given(rows=ROWS, spread=st.sampled_from([1, 1 << 40, 1 << 56]), width=st.integers(1, 4))
def test_order_sorts_rows_too_wide_for_one_word(rows: list, spread: int, width: int) -> None:
    """`order` of rows that pack into one int64, into a few words (`_words`), or not at all
    (a column of 62 bits or more): the rows it orders are Python's sort of them."""
    cols = [np.array([r[0] * spread for r in rows], dtype=np.int64)]
    cols += [np.array([r[i % 3] * (spread if i % 2 else 1) for r in rows], dtype=np.int64) for i in range(1, width)]
    if not rows:
        return
    idx = _kernels.order(cols)
    got = [tuple(int(c[i]) for c in cols) for i in idx.tolist()]
    assert got == sorted(zip(*(c.tolist() for c in cols)))


@pytest.mark.parametrize("form", ["python", "numpy"])
@settings(max_examples=150, deadline=None)
@given(rows=ROWS, spread=st.sampled_from([1, 1 << 40]))
def test_a_consolidation_selects_one_row_of_each_run_with_its_sum(form: str, rows: list, spread: int) -> None:
    """`consolidation` (what a join's delta is consolidated by): the rows it selects, with its
    sums, are `consolidate`'s answer, and each selected row is one of the run's rows."""
    rows = [(k * spread, v, t, d) for k, v, t, d in rows]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels, "SMALL", 1 << 40 if form == "python" else 0)
        cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
        diffs = np.array([r[3] for r in rows], dtype=np.int64)
        idx, sums = _kernels.consolidation(cols, diffs)
    picked = [tuple(c[i] for c in cols) for i in idx.tolist()]
    assert [(*row, d) for row, d in zip(picked, sums.tolist())] == _summed(rows)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), bits=st.sampled_from([0, 1, 9, 10, 11, 20, 31, 62]))
def test_the_radix_sort_sorts_as_numpy_does(data: st.DataObject, bits: int) -> None:
    """`radix_sorted` (the compiled consolidation's sort) against `sorted`: values that
    differ in every digit, and values sharing most digits (passes that are skipped)."""
    from timely_libs.linq._columns._compiled import radix_sorted

    high = data.draw(st.sampled_from([0, bits // 2, bits]))
    ints = st.integers(0, (1 << bits) - 1) if bits else st.just(0)
    values = data.draw(st.lists(ints.map(lambda v: v >> high << high), max_size=3000))
    given_ = np.array(values, dtype=np.int64)
    assert radix_sorted(given_.copy(), bits).tolist() == sorted(values)


@pytest.mark.parametrize("form", ["numpy", "compiled"])
@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-(1 << 62), (1 << 62) - 1) | st.integers(-50, 50), max_size=300))
def test_distinct_values_are_numpys_unique(form: str, values: list[int]) -> None:
    """Negative values, and values too far apart for the radix sort (numpy's sort then)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels, "COMPILED_ROWS", 2 if form == "compiled" else 1 << 40)
        patch.setattr(_kernels, "LOADED_ROWS", 2 if form == "compiled" else 1 << 40)
        got = _kernels.distinct(np.array(values, dtype=np.int64))
    assert got.tolist() == np.unique(np.array(values, dtype=np.int64)).tolist()


@pytest.mark.parametrize("form", ["numpy", "compiled"])
def test_a_constant_column_and_one_diff_for_all_rows(form: str) -> None:
    """A broadcast time column (one value for every row, no memory) and a load's diffs (all 1):
    the runs' lengths are the sums."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels, "COMPILED_ROWS", 2 if form == "compiled" else 1 << 40)
        patch.setattr(_kernels, "LOADED_ROWS", 2 if form == "compiled" else 1 << 40)
        keys = np.array([5, 3, 5, 9, 3, 5] * 10, dtype=np.int64)
        epoch = np.broadcast_to(np.int64(7), len(keys))
        got = _consolidated([keys, epoch], np.ones(len(keys), dtype=np.int64), False)
    assert got == [(3, 7, 20), (5, 7, 30), (9, 7, 10)]


@pytest.mark.parametrize("form", ["numpy", "compiled"])
def test_batches_with_broadcast_and_sliced_columns_are_read_alike(form: str) -> None:
    """A batch's time columns are often one value broadcast (read-only, no memory) and its
    keys a slice of a larger array: the compiled loops take them as they are, and find what
    the numpy forms find."""
    from timely_libs.linq._trace import Batch, Rows, Spine, matches
    from timely_libs.linq.propagate import _least

    n = 3000
    keys = np.repeat(np.arange(0, 2 * n, 2, dtype=np.int64), 2)[: 2 * n]
    vals = np.tile(np.array([0, 5], dtype=np.int64), n)
    epoch, iteration = np.broadcast_to(np.int64(1), 2 * n), np.broadcast_to(np.int64(3), 2 * n)
    diffs = np.tile(np.array([2, -1], dtype=np.int64), n)
    batch = Batch(Rows(keys, [vals], [epoch, iteration], diffs), tidy=True)
    spine = Spine(1, 2)
    spine.insert(batch)
    asked = np.arange(0, 3 * n, 3, dtype=np.int64)[::2]  # a strided slice
    with pytest.MonkeyPatch.context() as patch:
        compiled_from(patch, 1 if form == "compiled" else 1 << 40)
        labels = np.where(asked % 4 == 0, 0, 5)
        support = _least._still_proposed(spine, asked, labels, 3)
        found = matches(asked, [batch], 1, 2)
    # key k (even, < 2n) has label 0 twice and label 5 removed once: 0 is still proposed, 5 not
    want = [(k % 2 == 0 and k < 2 * n and label == 0) for k, label in zip(asked.tolist(), labels.tolist())]
    assert support.tolist() == want
    assert found is not None
    left, rows = found
    assert (asked[left] == rows.keys).all()
    assert sorted(rows.keys.tolist()) == sorted(k for k in asked.tolist() if k % 2 == 0 and k < 2 * n for _ in (0, 1))


@pytest.mark.parametrize("form", ["numpy", "compiled"])
@settings(max_examples=100, deadline=None)
@given(first=ROWS, second=ROWS, floor=st.integers(0, 6))
def test_a_merge_of_two_parts_raises_the_epoch_column_then_consolidates(
    form: str, first: list, second: list, floor: int
) -> None:
    """What a spine's merge does with its two inputs' rows: times of epochs before the
    compaction epoch move to it (column 2 here), then equal rows are summed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels, "COMPILED_ROWS", 1 if form == "compiled" else 1 << 40)
        patch.setattr(_kernels, "LOADED_ROWS", 1 if form == "compiled" else 1 << 40)
        parts = []
        for rows in (sorted(first), sorted(second)):
            cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
            parts.append((cols, np.array([r[3] for r in rows], dtype=np.int64)))
        if not first and not second:
            return
        out, sums = _kernels.consolidate_parts(parts, (2, floor), runs=True)
    got = list(zip(*(c.tolist() for c in out), sums.tolist()))
    assert got == _summed([(k, v, max(t, floor), d) for k, v, t, d in first + second])


def test_the_first_import_on_a_machine_says_it_compiles_and_later_ones_load_quietly(tmp_path: Path) -> None:
    """Compiling the loops takes seconds inside whatever step first meets a large array: the
    first process (an empty numba cache) says so, once; the next loads them without a word."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    said = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", "import timely_libs.linq._columns._compiled"],
            env=env,
            cwd=Path(__file__).parents[2],
            capture_output=True,
            text=True,
            timeout=540,  # a cold compile of 25 loops: 122 s at load 10 (test_numba_cache's bound)
            check=True,
        )
        said.append(done.stderr)
    assert re.search(r"compiled \d+ numeric loops with numba in [\d.]+ s; once per machine", said[0]), said[0]
    assert said[1] == ""


def test_preload_loads_the_compiled_loops_that_a_small_computation_never_loads() -> None:
    """In a fresh process: a small computation (a few hundred keys) runs without numba;
    `linq.preload` then loads the compiled loops (and says how long it took), a second call
    has nothing to do, and from then on the loops take a few dozen keys and a thousand rows too."""
    program = """
import sys, timely
from timely_libs import linq
from timely_libs.linq._columns._kernels import COMPILED_KEYS, COMPILED_ROWS, LOADED_KEYS, LOADED_ROWS
from timely_libs.linq._columns._kernels import compiled_keys, compiled_rows
def build(scope):
    i = linq.new_input(scope)
    return i, linq.CollectionOutput(i.collection.distinct())
with timely.execute(build, timeout=60) as (comp, (i, out)):
    i.insert_all([*range(300), 2]); i.advance_to(1); comp.wait_passed(out.probe, 0)
    assert out.contents() == dict.fromkeys(range(300), 1), out.contents()
assert "numba" not in sys.modules and "timely_libs.linq._columns._compiled" not in sys.modules
assert not compiled_keys(COMPILED_KEYS - 1) and compiled_keys(COMPILED_KEYS)
assert not compiled_rows(COMPILED_ROWS - 1) and compiled_rows(COMPILED_ROWS)
took = linq.preload()
assert took > 0 and "timely_libs.linq._columns._compiled" in sys.modules, took
assert linq.preload() == 0
assert compiled_keys(LOADED_KEYS) and not compiled_keys(LOADED_KEYS - 1)
assert compiled_rows(LOADED_ROWS) and not compiled_rows(LOADED_ROWS - 1)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


@pytest.mark.parametrize("form", ["python", "numpy", "compiled"])
@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.integers(-5, 60), min_size=1, max_size=150),
    broadcast=st.booleans(),
    step=st.sampled_from([1, 2]),
)
def test_a_batch_indexes_its_keys_as_numpys_unique(form: str, keys: list[int], broadcast: bool, step: int) -> None:
    """A new batch's distinct keys, where each one's rows start and its latest time, in each
    form (`Policy.batch_index`: a few rows in Python lists, numpy, or one compiled call), with
    keys of one value broadcast (a constant key) or a strided slice, against `numpy.unique`."""
    from timely_libs.linq._trace import Batch, Rows

    with pytest.MonkeyPatch.context() as patch:
        loaded = form == "compiled"
        patch.setattr(_kernels.POLICY, "eager", loaded)
        patch.setattr(_kernels, "INDEX_ROWS", 2 if loaded else 1 << 40)
        patch.setattr(_kernels, "COMPILED_ROWS", 2 if loaded else 1 << 40)
        patch.setattr("timely_libs.linq._trace._batch.SMALL_ROWS", 1 << 40 if form == "python" else 0)
        if loaded:
            _kernels.preload()
        n = len(keys)
        if broadcast:
            column = np.broadcast_to(np.int64(keys[0]), n)
        else:
            column = np.repeat(np.sort(np.array(keys, dtype=np.int64)), step)[::step]
        epoch = np.broadcast_to(np.int64(3), n)
        iteration = np.arange(n, dtype=np.int64) % 7
        vals = np.arange(n, dtype=np.int64)  # distinct: the rows are consolidated as they are
        batch = Batch(Rows(column, [vals], [epoch, iteration], np.ones(n, dtype=np.int64)), tidy=True)
    ukeys, first = np.unique(column, return_index=True)
    assert batch.ukeys.tolist() == ukeys.tolist()
    assert batch.starts.tolist() == [*first.tolist(), n]
    assert (batch.kmin, batch.kmax) == (int(ukeys[0]), int(ukeys[-1]))
    assert batch.latest == (3, int(iteration.max()))
    assert all(batch.span(k) == (s, e) for k, s, e in zip(ukeys.tolist(), first.tolist(), [*first.tolist()[1:], n]))


@pytest.mark.parametrize("form", ["numpy", "compiled"])
@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(-(1 << 62), 1 << 62), min_size=1, max_size=60),
    layout=st.sampled_from(["contiguous", "strided", "broadcast", "long"]),
)
def test_a_columns_bounds_are_its_least_and_greatest_value(form: str, values: list[int], layout: str) -> None:
    """`bounds` (what `codes_of` checks a column's range with), in one compiled pass for a
    short column or numpy's two reductions, of every layout a batch's column takes; ``long``:
    past `_compiled.BOUNDS_BELOW`, where the compiled tier hands over to numpy."""
    column = np.array(values, dtype=np.int64)
    if layout == "strided":
        column = np.repeat(column, 2)[::2]
    elif layout == "broadcast":
        column = np.broadcast_to(column[:1], len(values))
    elif layout == "long":
        column = np.resize(column, 5000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_kernels.POLICY, "eager", form == "compiled")
        if form == "compiled":
            _kernels.preload()
        lo, hi = _kernels.bounds(column)
    assert (lo, hi) == (min(column.tolist()), max(column.tolist()))
    assert type(lo) is int and type(hi) is int
    with pytest.MonkeyPatch.context() as patch:  # a column of another int type: numpy's reductions
        patch.setattr(_kernels.POLICY, "eager", form == "compiled")
        small = np.clip(column, -100, 100).astype(np.int32)
        assert _kernels.bounds(small) == (int(small.min()), int(small.max()))


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-2, 2), max_size=20), as_mask=st.booleans())
def test_every_and_some_are_all_and_any(values: list[int], as_mask: bool) -> None:
    """`every` and `some` (the operators' checks of diffs, masks and key order) answer as
    Python's ``all`` and ``any`` do, of ints (non-zero is true) and of masks, empty ones too."""
    column: np.ndarray = np.array(values, dtype=np.int64)
    if as_mask:
        column = column > 0
    assert _kernels.every(column) is all(values if not as_mask else [v > 0 for v in values])
    assert _kernels.some(column) is any(values if not as_mask else [v > 0 for v in values])
