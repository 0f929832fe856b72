"""A count's change read and made in one compiled call (`_reader.count_changes`,
`_compiled.spine_count`): against a brute-force sum over every row of its two spines (the input
arranged by key alone, the output holding each key's count), with keys of one row and of many,
one and two time coordinates, counts that stay, move, vanish and appear; and the operator with
the compiled loops loaded (the path taken) against a brute-force count after every epoch,
epochs waited for and in flight, 1 and 2 workers, at the top and inside a loop."""

from __future__ import annotations

from collections import Counter
from itertools import product
from typing import Any

import numpy as np
import pytest

import timely
from tests.linq.test_count_keys import _epochs, count_after_every_epoch
from tests.support import TIMEOUT
from timely_libs import linq
from timely_libs.linq import _reduce
from timely_libs.linq._columns import _compiled  # noqa: F401  (compiled at collection, not in a timeout)
from timely_libs.linq._trace import Batch, Rows, Spine, count_changes


@pytest.fixture(scope="module", autouse=True)
def _loaded() -> None:
    linq.preload()


def _spines(
    rng: np.random.Generator, ntimes: int, crowded: bool, negative: bool
) -> tuple[Spine, Spine, list[tuple], list[tuple]]:
    """An input spine of keys alone and an output spine of ``(key, count)``, a few batches each
    (``negative``: the input's totals may go below zero); every row of each as ``(key, *vals,
    *time, diff)``."""
    spines = (Spine(0, ntimes), Spine(1, ntimes))
    every: tuple[list[tuple], list[tuple]] = ([], [])
    nkeys = 6 if crowded else 200
    for which, spine in enumerate(spines):
        for _ in range(int(rng.integers(1, 7))):
            n = int(rng.integers(1, 300))
            keys = rng.integers(0, nkeys, n)
            vals = [rng.integers(0, 4, n)] if which else []
            times = [rng.integers(0, 3, n) for _ in range(ntimes)]
            if which:
                diffs = rng.choice([-1, 1, 1, 2], n)
            elif negative:
                diffs = rng.choice([-2, -1, 1], n)
            else:  # counts that vanish but never go negative: a row's retraction comes no earlier
                diffs = rng.choice([1, 2, 3], n)
                gone = rng.random(n) < 0.4
                keys = np.concatenate([keys, keys[gone]])
                times = [np.concatenate([c, c[gone] + rng.integers(0, 2, int(gone.sum()))]) for c in times]
                diffs = np.concatenate([diffs, -diffs[gone]])
            spine.insert(Batch(Rows(keys, vals, times, diffs)))
            every[which].extend(
                zip(keys.tolist(), *(v.tolist() for v in vals), *(t.tolist() for t in times), diffs.tolist())
            )
    return spines[0], spines[1], every[0], every[1]


@pytest.mark.parametrize(("ntimes", "crowded"), list(product((1, 2), (False, True))))
def test_the_change_equals_a_brute_force_difference_of_the_new_counts_and_the_old(ntimes: int, crowded: bool) -> None:
    rng = np.random.default_rng(10 * ntimes + crowded)
    negative = checked = 0
    for i in range(60):
        inputs, outputs, rows_in, rows_out = _spines(rng, ntimes, crowded, negative=i % 5 == 0)
        asked = np.unique(rng.integers(0, 8 if crowded else 220, int(rng.integers(1, 120))))
        t = tuple(int(x) for x in rng.integers(0, 3, ntimes))
        got = count_changes(asked, t, inputs.batches(), outputs.batches(), ntimes)

        keyset = set(asked.tolist())
        totals: Counter[int] = Counter()
        before: Counter[tuple[int, int]] = Counter()
        later_sums: Counter[tuple] = Counter()
        for row in rows_in:
            k, time, d = row[0], row[1:-1], row[-1]
            if k in keyset:
                if all(a <= b for a, b in zip(time, t)):
                    totals[k] += d
                else:
                    later_sums[(0, k, *time)] += d
        for row in rows_out:
            k, v, time, d = row[0], row[1], row[2:-1], row[-1]
            if k in keyset:
                if all(a <= b for a, b in zip(time, t)):
                    before[(k, v)] += d
                else:
                    later_sums[(1, k, *time)] += d
        if any(totals[k] < 0 for k in keyset):
            assert got is None, "a negative total is left to the general read, which names the key"
            negative += 1
            continue
        assert got is not None
        delta, later = got
        want: Counter[tuple[int, int]] = Counter({(k, n): 1 for k, n in totals.items() if n > 0})
        want.subtract(before)
        pairs = list(zip(delta.keys.tolist(), delta.vals[0].tolist()))
        assert pairs == sorted(p for p, d in want.items() if d)  # sorted by key and count, distinct
        assert dict(zip(pairs, delta.diffs.tolist())) == {p: d for p, d in want.items() if d}
        assert delta.times == ()
        # the later (key, time) of either spine: those a scan keeps summed must be there, and
        # only rows of such times may be (a merge may have summed some away)
        must = {r[1:] for r, d in later_sums.items() if d}
        may = {r[1:] for r in later_sums}
        found = set(zip(later.keys.tolist(), *(c.tolist() for c in later.times)))
        assert must <= found <= may
        assert len(later.times) == ntimes
        checked += 1
    assert checked >= 40 and negative > 0


def test_a_count_that_stays_changes_nothing_and_one_that_moves_retracts_the_old() -> None:
    inputs, outputs = Spine(0, 1), Spine(1, 1)
    inputs.insert(Batch(Rows.at(np.array([1, 1, 2, 3]), [], (0,), np.array([1, 1, 1, 2]))))
    # the output at 0: key 1 counted 2 (stays), key 2 counted 3 (now 1), key 4 counted 1 (gone)
    outputs.insert(Batch(Rows.at(np.array([1, 2, 4]), [np.array([2, 3, 1])], (0,), np.array([1, 1, 1]))))
    got = count_changes(np.array([1, 2, 3, 4]), (0,), inputs.batches(), outputs.batches(), 1)
    assert got is not None
    delta, later = got
    assert list(zip(delta.keys.tolist(), delta.vals[0].tolist(), delta.diffs.tolist())) == [
        (2, 1, 1),
        (2, 3, -1),
        (3, 2, 1),
        (4, 1, -1),
    ]
    assert not len(later)


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("in_flight", [False, True], ids=["waited", "in_flight"])
@pytest.mark.parametrize("where", ["top", "loop"])
def test_the_operator_with_the_loops_loaded_equals_a_brute_force_count(
    workers: int, in_flight: bool, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused = Counter[bool]()
    real = _reduce.count_changes

    def counted(*args: Any) -> Any:
        out = real(*args)
        fused[out is not None] += 1
        return out

    monkeypatch.setattr(_reduce, "count_changes", counted)
    count_after_every_epoch(_epochs(31 + workers + 2 * in_flight, epochs=10), workers, in_flight, where)
    assert fused[True] > 0, "the one-call path ran"


def test_a_negative_count_with_the_loops_loaded_names_the_key() -> None:
    def build(scope: timely.Scope) -> Any:
        edges = linq.new_input(scope, "edges")
        return edges, linq.CollectionOutput(edges.collection.count(lambda e: e[0], name="degree"))

    with pytest.raises(Exception) as caught:
        with timely.execute(build, timeout=TIMEOUT) as (comp, (edges, out)):
            edges.update([((3, 1), 1), ((4, 1), 1)])
            edges.advance_to(1)
            comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
            edges.update([((3, 2), -2), ((4, 1), 1)])  # the output exists: the one-call path reads
            edges.advance_to(2)
            comp.wait_passed(out.probe, 1, timeout=TIMEOUT)
    assert "degree: key 3 has multiplicity -1" in str(caught.value), caught.value
