"""The trace read interface (`_trace._reader`, `Spine.find`/`accumulate`/`totals`/`times`)
against a scan of every row, in each tier the policy can choose, with times of two
coordinates (a loop's) in the product order; and batch descriptions against their rows."""

from __future__ import annotations

from collections import Counter
from itertools import product

import numpy as np
import pytest

from timely_libs.linq._columns import _kernels
from timely_libs.linq._trace import Batch, Rows, Spine, antichain, beyond, latest, matches
from timely_libs.linq._trace import _spine as spine_module
from timely_libs.linq._trace._reader import address_table

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


def _listed(spine: Spine) -> list[Batch]:
    """The spine's batches walked from its levels and tail now (no kept list)."""
    out = list(spine.tail)
    for here in spine.levels:
        if isinstance(here, spine_module._Merge):
            out += [here.a, here.b]
        elif here is not None:
            out.append(here)
    return out


def test_the_kept_address_table_follows_every_change_of_the_spine() -> None:
    """A spine keeps its batches' address table between reads; every change (an insert into
    the tail, a tail merge, a level's batch, a merge finished by fuel or adopted from the merge
    thread, compaction) must make
    the next read see the batches as they are, not a kept table of the ones before."""
    rng = np.random.default_rng(21)
    with pytest.MonkeyPatch.context() as patch:
        _tier(patch, "spine")
        # small sizes, so tail merges, level merges and merges by fuel all happen in a few rows
        # and merges of 60 rows or more on the merge thread, adopted when a read comes
        sizes = (("TAIL", 12), ("TAIL_BATCHES", 3), ("SMALL", 4), ("MIN_CHUNK", 4), ("FUEL_PER_ROW", 1))
        for name, value in (*sizes, ("BACKGROUND_ROWS", 60)):
            patch.setattr(spine_module, name, value)
        spine = Spine(1, 2)
        everything: list[tuple[int, int, int, int, int]] = []
        changes = Counter[str]()
        merging = 0
        for _ in range(200):
            action = rng.choice(["tail", "level", "undo", "advance", "compact"], p=[0.4, 0.25, 0.2, 0.1, 0.05])
            if action == "undo" and len(spine) > spine_module.TAIL:
                # everything in one batch, then its negation at its level: a merge by fuel whose
                # rows all cancel, so it has no result to place
                spine.compact()
                rows = spine.rows()
                keys, vals, epochs, iters = rows.keys, rows.vals[0], rows.times[0], rows.times[1]
                diffs = -rows.diffs
            else:
                n = int(rng.integers(1, 6)) if action == "tail" else int(rng.integers(13, 40))
                keys, vals = rng.integers(0, 40, n), rng.integers(0, 3, n)
                epochs = rng.integers(spine.epoch, spine.epoch + 3, n)
                iters, diffs = rng.integers(0, 4, n), rng.choice([-1, 1, 2], n)
            if action in ("tail", "level", "undo"):
                spine.insert(Batch(Rows(keys, [vals], [epochs, iters], diffs)))
                everything += zip(keys.tolist(), vals.tolist(), epochs.tolist(), iters.tolist(), diffs.tolist())
            elif action == "advance":
                spine.advance_to(spine.epoch + 1)
            else:
                spine.compact()
            changes[str(action)] += 1
            merging += any(isinstance(h, spine_module._Merge) for h in spine.levels)
            while True:  # the merge thread's merges done and adopted: no race below
                spine.batches()  # a read while they run (the spine keeps its list), then one that adopts them
                running = [h.future for h in spine.levels if isinstance(h, spine_module._Merge) and h.future]
                if not running:
                    break
                for future in running:
                    future.result()
            listed = _listed(spine)
            kept = address_table(spine.batches())
            assert all(a is b for a, b in zip(spine.batches(), listed)) and len(spine.batches()) == len(listed)
            if listed:
                assert np.array_equal(kept, np.array([b.address() for b in listed]))
                assert address_table(spine.batches()) is kept  # no change since: the same table
            # the kept join of every row's time, read twice (the second from the spine's reads)
            held = [(int(e), int(it)) for b in listed for e, it in zip(b.times[0].tolist(), b.times[1].tolist())]
            top = (max(e for e, _ in held), max(it for _, it in held)) if held else None
            assert latest(spine.batches()) == top
            assert latest(spine.batches()) == top
            # reads at times the compaction allows, against a scan of every row inserted
            asked = np.unique(rng.integers(0, 42, int(rng.integers(2, 20))))
            t = (spine.epoch + int(rng.integers(0, 3)), int(rng.integers(0, 4)))
            keyset = set(asked.tolist())
            want: Counter[tuple[int, int]] = Counter()
            per_key: Counter[int] = Counter()
            for k, v, e, it, d in everything:
                if k in keyset and _le((max(e, spine.epoch), it), t):
                    want[(k, v)] += d
                    per_key[k] += d
            acc, _ = spine.accumulate(asked, t)
            assert dict(zip(zip(acc.keys.tolist(), acc.vals[0].tolist()), acc.diffs.tolist())) == {
                kv: d for kv, d in want.items() if d
            }
            totals, _, _ = spine.totals(asked, t)
            assert totals.tolist() == [per_key[k] for k in asked.tolist()]
            found = matches(asked, spine.batches(), 1, 2)
            rows_now = Counter(
                (k, v, e, it, d)
                for b in listed
                for k, v, e, it, d in zip(
                    b.keys.tolist(), b.vals[0].tolist(), b.times[0].tolist(), b.times[1].tolist(), b.diffs.tolist()
                )
                if k in keyset
            )
            got = (
                Counter()
                if found is None
                else Counter(
                    zip(
                        found[1].keys.tolist(),
                        found[1].vals[0].tolist(),
                        found[1].times[0].tolist(),
                        found[1].times[1].tolist(),
                        found[1].diffs.tolist(),
                    )
                )
            )
            assert got == rows_now
        # every kind of change happened, and merges went on by fuel between reads
        assert len(changes) == 5 and merging > 10


def test_a_caller_extending_its_list_of_batches_is_not_read_through_the_kept_table() -> None:
    """A shared arrangement adds batches still in flight to the spine's list; the read must
    cover them, not stop at the table the spine kept for its own batches."""
    with pytest.MonkeyPatch.context() as patch:
        _tier(patch, "spine")
        spine = Spine(1, 1)
        spine.insert(
            Batch(
                Rows(
                    np.array([1, 2, 3]),
                    [np.array([0, 0, 0])],
                    [np.zeros(3, dtype=np.int64)],
                    np.ones(3, dtype=np.int64),
                )
            )
        )
        address_table(spine.batches())  # the spine now keeps a table of its one batch
        assert latest(spine.batches()) == (0,)  # and the join of its times
        extra = Batch(
            Rows(np.array([2, 5]), [np.array([7, 7])], [np.full(2, 4, dtype=np.int64)], np.ones(2, dtype=np.int64))
        )
        batches = spine.batches()
        batches.append(extra)
        assert latest(batches) == (4,)
        found = matches(np.array([2, 5]), batches, 1, 1)
        assert found is not None
        assert sorted(zip(found[1].keys.tolist(), found[1].vals[0].tolist())) == [(2, 0), (2, 7), (5, 7)]
