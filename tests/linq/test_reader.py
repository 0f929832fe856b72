"""The trace read interface (`_trace._reader`, `Spine.find`/`accumulate`/`totals`/`times`)
against a scan of every row, in each tier the policy can choose, with times of two
coordinates (a loop's) in the product order; and batch descriptions against their rows."""

from __future__ import annotations

from collections import Counter
from itertools import product

import numpy as np
import pytest

from timely_libs.linq._columns import _kernels
from timely_libs.linq._trace import Batch, Rows, Spine, antichain, beyond, matches

TIERS = ["python", "numpy", "compiled", "spine"]


def _tier(patch: pytest.MonkeyPatch, tier: str) -> None:
    """Force ``tier`` for every read of more than one key ("spine": every batch of the
    spine in one compiled call, `Policy.spine_read`)."""
    patch.setattr(_kernels, "FEW_KEYS", 1 << 40 if tier == "python" else 0)
    for name in ("COMPILED_KEYS", "LOADED_KEYS"):
        patch.setattr(_kernels, name, 1 if tier == "compiled" else 1 << 40)
    patch.setattr(_kernels, "SPINE_BELOW", 1 << 40 if tier == "spine" else 0)
    if tier == "spine":
        patch.setattr(_kernels, "SPINE_KEYS", 1)
        patch.setattr(_kernels.POLICY, "eager", True)


def _spine(rng: np.random.Generator) -> tuple[Spine, list[tuple[int, int, int, int, int]]]:
    """A spine of a few batches of (key, value, (epoch, iteration), diff) rows; the rows."""
    spine = Spine(1, 2)
    everything: list[tuple[int, int, int, int, int]] = []
    for _ in range(int(rng.integers(1, 6))):
        n = int(rng.integers(1, 200))
        keys = rng.integers(0, 60, n)
        vals = rng.integers(0, 3, n)
        epochs, iters = rng.integers(0, 4, n), rng.integers(0, 4, n)
        diffs = rng.choice([-1, 1, 2], n)
        spine.insert(Batch(Rows(keys, [vals], [epochs, iters], diffs)))
        everything += zip(keys.tolist(), vals.tolist(), epochs.tolist(), iters.tolist(), diffs.tolist())
    return spine, everything


def _le(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1]


@pytest.mark.parametrize("tier", TIERS)
def test_reads_at_a_time_match_a_scan_of_every_row(tier: str) -> None:
    rng = np.random.default_rng(5)
    with pytest.MonkeyPatch.context() as patch:
        _tier(patch, tier)
        for _ in range(25):
            spine, everything = _spine(rng)
            asked = np.unique(rng.integers(0, 70, int(rng.integers(1, 40))))
            keyset = set(asked.tolist())
            t = (int(rng.integers(0, 4)), int(rng.integers(0, 4)))
            mine = [r for r in everything if r[0] in keyset]
            now = [r for r in mine if _le((r[2], r[3]), t)]

            acc, later = spine.accumulate(asked, t)
            want: Counter[tuple[int, int]] = Counter()
            for k, v, _, _, d in now:
                want[(k, v)] += d
            got = dict(zip(zip(acc.keys.tolist(), acc.vals[0].tolist()), acc.diffs.tolist()))
            assert got == {kv: d for kv, d in want.items() if d}

            totals, _, later_totals = spine.totals(asked, t)
            per_key: Counter[int] = Counter()
            for k, _, _, _, d in now:
                per_key[k] += d
            assert totals.tolist() == [per_key[k] for k in asked.tolist()]
            # a count's read (no values gathered): the same sums and later times
            sums_only, no_values, later_sums = spine.totals(asked, t, values=False)
            assert sums_only.tolist() == totals.tolist() and no_values == []
            assert later_sums.keys.tolist() == later_totals.keys.tolist()

            # the times not <= t: every key's (key, time) with rows there, as a scan finds them
            # (rows the spine summed to zero may be gone: compare what a scan keeps summed)
            summed: Counter[tuple[int, int, int, int]] = Counter()
            for k, v, e, i, d in mine:
                summed[(k, v, e, i)] += d
            must = {(k, e, i) for (k, v, e, i), d in summed.items() if d and not _le((e, i), t)}
            may = {(k, e, i) for k, _, e, i, _ in mine if not _le((e, i), t)}
            for rows in (later, later_totals, spine.times(asked, t)):
                found = set(zip(rows.keys.tolist(), rows.times[0].tolist(), rows.times[1].tolist()))
                assert must <= found <= may


@pytest.mark.parametrize("tier", TIERS)
def test_matches_gives_every_row_of_the_keys_asked_with_its_key(tier: str) -> None:
    """A join's read (`matches`: every batch's rows of the keys, gathered) against a scan,
    with a large batch among small ones (its key table serves the whole-spine read)."""
    rng = np.random.default_rng(11)
    with pytest.MonkeyPatch.context() as patch:
        _tier(patch, tier)
        for trial in range(12):
            spine, _ = _spine(rng)
            if trial % 2:  # a large batch of dense keys: `Batch.address` gives its key table
                n = 9000
                big = Batch(
                    Rows(
                        rng.integers(0, 6000, n),
                        [rng.integers(0, 3, n)],
                        [rng.integers(0, 4, n)] * 2,
                        np.ones(n, dtype=np.int64),
                    )
                )
                spine.insert(big)
            asked = rng.integers(0, 6100 if trial % 2 else 70, int(rng.integers(1, 60)))
            if rng.random() < 0.5:
                asked = np.sort(asked)
            every = Counter(
                (i, k, v, e, it, d)
                for b in spine.batches()
                for k, v, e, it, d in zip(
                    b.keys.tolist(), b.vals[0].tolist(), b.times[0].tolist(), b.times[1].tolist(), b.diffs.tolist()
                )
                for i, a in enumerate(asked.tolist())
                if a == k
            )
            found = matches(asked, spine.batches(), 1, 2)
            if found is None:
                assert not every
                continue
            rank, rows = found
            assert rows.keys.tolist() == asked[rank].tolist()
            got = Counter(
                zip(
                    rank.tolist(),
                    rows.keys.tolist(),
                    rows.vals[0].tolist(),
                    rows.times[0].tolist(),
                    rows.times[1].tolist(),
                    rows.diffs.tolist(),
                )
            )
            assert got == every


@pytest.mark.parametrize("tier", TIERS)
def test_find_gives_every_row_of_the_keys_asked_with_its_key(tier: str) -> None:
    rng = np.random.default_rng(9)
    with pytest.MonkeyPatch.context() as patch:
        _tier(patch, tier)
        for _ in range(25):
            spine, _ = _spine(rng)
            asked = rng.integers(0, 70, int(rng.integers(1, 30)))  # repeats allowed
            if rng.random() < 0.5:  # a sorted probe, or a delta in arrival order
                asked = np.sort(asked)
            found: list[tuple[int, int, int, int]] = []
            for batch, idx, rank in spine.find(asked):
                rows = batch.take(idx)
                assert rows.keys.tolist() == asked[rank].tolist()
                found += zip(rank.tolist(), rows.keys.tolist(), rows.vals[0].tolist(), rows.diffs.tolist())
            every = [
                (i, k, v, d)
                for b in spine.batches()
                for k, v, d in zip(b.keys.tolist(), b.vals[0].tolist(), b.diffs.tolist())
                for i, a in enumerate(asked.tolist())
                if a == k
            ]
            assert sorted(found) == sorted(every)


def test_a_batch_description_bounds_its_times_and_a_merge_says_its_since() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        spine, _ = _spine(rng)
        spine.advance_to(int(rng.integers(0, 3)))
        spine.compact()
        for b in spine.batches():
            d = b.description
            assert d.since == spine.since
            for e, i in zip(b.times[0].tolist(), b.times[1].tolist()):
                assert d.holds((e, i))
            assert not d.holds(tuple(x + 1 for x in b.latest))  # beyond every row's time


def test_antichain_keeps_the_minimal_times() -> None:
    times = [(a, b) for a, b in product(range(4), range(4)) if a + b >= 3]
    assert antichain(times) == ((0, 3), (1, 2), (2, 1), (3, 0))
    assert beyond(antichain(times), (2, 2)) and not beyond(antichain(times), (1, 1))
