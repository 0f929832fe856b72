"""The trace reads an operator's own loops walk (`_trace.indexed`, `key_spans`, `latest`),
against a scan of every row of the same batches: each key's rows found once, in every batch
that holds them, and the join of the times bounding every row."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from timely_libs.linq._trace import Batch, Rows, Spine, indexed, key_spans, latest


def _spine(rng: np.random.Generator, spread: int = 5000) -> Spine:
    spine = Spine(1, 2)
    for _ in range(int(rng.integers(1, 12))):
        n = int(rng.integers(1, 3000))
        keys = rng.integers(0, spread, n)
        times = [rng.integers(0, 4, n), rng.integers(0, 9, n)]
        spine.insert(Batch(Rows(keys, [rng.integers(0, 3, n)], times, rng.choice([-1, 1], n))))
    return spine


def _scan(batches: list[Batch], keyset: set[int]) -> Counter[tuple[int, int, int, int, int]]:
    """Every row of ``keyset``'s keys, as (key, value, epoch, iteration, diff)."""
    out: Counter[tuple[int, int, int, int, int]] = Counter()
    for b in batches:
        rows = zip(b.keys.tolist(), b.vals[0].tolist(), *(c.tolist() for c in b.times), b.diffs.tolist())
        out.update(r for r in rows if r[0] in keyset)
    return out


@pytest.mark.parametrize("spread", [5000, 10**9])
def test_indexed_and_key_spans_find_every_row_of_the_keys_asked_once(spread: int) -> None:
    """Dense keys (a batch's key table) and sparse ones (a binary search), asked about keys
    that are there and keys that are not."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        spine = _spine(rng, spread)
        batches = spine.batches()
        present = np.concatenate([b.keys for b in batches])
        asked = np.unique(
            np.concatenate([rng.choice(present, 150), rng.integers(0, spread + 200, int(rng.integers(1, 150)))])
        )
        want = _scan(batches, set(asked.tolist()))

        walked: Counter[tuple[int, int, int, int, int]] = Counter()
        for b, (ukeys, starts, _, _) in indexed(asked, batches):
            for j in np.flatnonzero(np.isin(ukeys, asked)):
                for r in range(int(starts[j]), int(starts[j + 1])):
                    walked[
                        (int(b.keys[r]), int(b.vals[0][r]), int(b.times[0][r]), int(b.times[1][r]), int(b.diffs[r]))
                    ] += 1
        assert walked == want

        few = asked[: int(rng.integers(1, 9))].tolist()
        spanned: Counter[tuple[int, int, int, int, int]] = Counter()
        for b, i, lo, hi in key_spans(few, batches):
            assert (b.keys[lo:hi] == few[i]).all()
            spanned.update(
                zip(
                    b.keys[lo:hi].tolist(),
                    b.vals[0][lo:hi].tolist(),
                    *(c[lo:hi].tolist() for c in b.times),
                    b.diffs[lo:hi].tolist(),
                )
            )
        assert spanned == _scan(batches, set(few))


def test_latest_is_the_join_of_every_rows_time() -> None:
    rng = np.random.default_rng(8)
    assert latest([]) is None
    for _ in range(20):
        batches = _spine(rng).batches()
        times = [(int(e), int(i)) for b in batches for e, i in zip(*b.times)]
        assert latest(batches) == (max(e for e, _ in times), max(i for _, i in times))
