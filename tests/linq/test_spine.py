"""The spine: what it holds is what was inserted (logical compaction aside), however its
merges run — by fuel on the operator's thread, or whole on the merge thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from timely_libs.linq._trace import Batch, Rows, Spine, _spine


def _contents(rows: list[tuple[int, int, int, int, int]], epoch: int) -> dict[tuple[int, ...], int]:
    """Rows ``(key, value, epoch, iteration, diff)`` summed, epochs before ``epoch`` moved to it
    (what logical compaction may do; applied to both sides, the comparison is exact)."""
    out: dict[tuple[int, ...], int] = {}
    for k, v, e, i, d in rows:
        key = (k, v, max(e, epoch), i)
        out[key] = out.get(key, 0) + d
    return {key: d for key, d in out.items() if d}


def _held(spine: Spine) -> list[tuple[int, int, int, int, int]]:
    rows = spine.rows()
    return list(
        zip(
            rows.keys.tolist(),
            rows.vals[0].tolist(),
            rows.times[0].tolist(),
            rows.times[1].tolist(),
            rows.diffs.tolist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("where", ["fuel", "merge-thread"])
def test_a_spine_holds_what_was_inserted_however_its_merges_run(where: str) -> None:
    """Batches of 1 to 20,000 rows (many keys, repeats that sum and cancel), the epoch advanced
    now and then: after every insert the spine's rows sum to the inserted rows, and after a
    `compact` (merges still running are let be) too. With ``merge-thread`` every merge of more
    than a few rows runs on the merge thread, which the test checks it did, in steps of 4,096
    rows."""
    rng = np.random.default_rng(5)
    inserted: list[tuple[int, int, int, int, int]] = []
    ran_there = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_spine, "BACKGROUND_ROWS", _spine.SMALL + 1 if where == "merge-thread" else 1 << 60)
        patch.setattr(_spine, "FINISH_CHUNK", 4096)  # a merge finished at once takes several steps
        spine = Spine(1, 2)
        epoch = 0
        for step in range(60):
            n = int(rng.choice([1, 5, 70, 900, 3000, 20000]))
            keys = rng.integers(0, 500, n)
            vals = rng.integers(0, 3, n)
            epochs = np.full(n, epoch + int(rng.integers(0, 2)))
            iters = rng.integers(0, 4, n)
            diffs = rng.choice([-1, 1, 1, 2], n)
            spine.insert(Batch(Rows(keys, [vals], [epochs, iters], diffs)))
            inserted += zip(keys.tolist(), vals.tolist(), epochs.tolist(), iters.tolist(), diffs.tolist())
            ran_there += sum(1 for here in spine.levels if isinstance(here, _spine._Merge) and here.future is not None)
            if step % 7 == 6:
                epoch += 1
                spine.advance_to(epoch)
            assert _contents(_held(spine), epoch) == _contents(inserted, epoch), step
        if where == "merge-thread":  # once the thread is idle, a read adopts every finished merge
            for _ in range(50):  # (an adopted result may start the next level's merge)
                _spine._merger().submit(lambda: None).result()
                spine.batches()
                if not spine.pending:
                    break
            assert spine.pending == 0
            assert not any(isinstance(here, _spine._Merge) and here.future is not None for here in spine.levels)
        spine.compact()
        assert len(spine.batches()) == 1
        assert _contents(_held(spine), epoch) == _contents(inserted, epoch)
    if where == "merge-thread":
        assert ran_there > 0
        assert any(t.name.startswith("linq-merge") for t in threading.enumerate())
    else:
        assert ran_there == 0


def test_a_merge_needed_out_of_the_way_is_waited_for() -> None:
    """Two large batches start a merge on the merge thread; a third of the same size needs
    their level: the spine takes the finished merge (waiting if it must) and holds every row."""
    rng = np.random.default_rng(9)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_spine, "BACKGROUND_ROWS", 1000)
        spine = Spine(1, 2)
        inserted: list[tuple[int, int, int, int, int]] = []
        for _ in range(3):
            n = 40_000
            keys = rng.integers(0, 10**6, n)
            vals = rng.integers(0, 2, n)
            zeros = np.zeros(n, dtype=np.int64)
            diffs = np.ones(n, dtype=np.int64)
            spine.insert(Batch(Rows(keys, [vals], [zeros, zeros], diffs)))
            inserted += zip(keys.tolist(), vals.tolist(), zeros.tolist(), zeros.tolist(), diffs.tolist())
        assert _contents(_held(spine), 0) == _contents(inserted, 0)


def test_a_merged_batch_keeps_one_epoch_as_a_view_and_its_rows() -> None:
    """After logical compaction moved every row to one epoch, the batch a merge makes in
    chunks holds that epoch as a zero-stride view (no int64 per row), and its rows are the inserted
    ones; a column that is not one value (the iteration) is a real array."""
    rng = np.random.default_rng(11)
    inserted: list[tuple[int, int, int, int, int]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_spine, "BACKGROUND_ROWS", 1 << 60)
        patch.setattr(_spine, "FUEL_PER_ROW", 0)  # no merge work on insert: `_work` below does it
        spine = Spine(1, 2)
        for epoch in range(3):
            n = 20_000
            keys, vals = rng.integers(0, 5000, n), rng.integers(0, 3, n)
            iters, diffs = rng.integers(0, 4, n), rng.choice([-1, 1, 1], n)
            spine.insert(Batch(Rows(keys, [vals], [np.full(n, epoch), iters], diffs)))
            inserted.extend(zip(keys.tolist(), vals.tolist(), [epoch] * n, iters.tolist(), diffs.tolist()))
            spine.advance_to(epoch + 1)
            for _ in range(50):
                spine._work(1)  # merges advance a chunk of `MIN_CHUNK` rows at a time
    batch = max(spine.batches(), key=len)
    assert len(batch) > 4096
    assert batch.times[0].strides == (0,) and int(batch.times[0][0]) == batch.since[0][0] > 0
    assert batch.times[1].strides != (0,)
    assert _contents(_held(spine), 3) == _contents(inserted, 3)


def test_a_finished_merge_of_an_idle_spine_is_adopted_when_another_spine_is_used() -> None:
    """An idle spine's merge finished on the merge thread is adopted (its inputs let go) as soon
    as any spine of the same thread inserts, not only when its own operator next runs;
    it still holds every row, and a spine of another thread is left to its own thread."""
    rng = np.random.default_rng(13)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_spine, "BACKGROUND_ROWS", 1000)
        idle, busy = Spine(1, 2), Spine(1, 2)
        inserted: list[tuple[int, int, int, int, int]] = []
        for _ in range(2):  # two batches at one level: a merge on the merge thread
            n = 30_000
            keys, vals = rng.integers(0, 10**5, n), rng.integers(0, 3, n)
            iters, diffs = rng.integers(0, 3, n), rng.choice([-1, 1, 1], n)
            idle.insert(Batch(Rows(keys, [vals], [np.zeros(n, dtype=np.int64), iters], diffs)))
            inserted += zip(keys.tolist(), vals.tolist(), [0] * n, iters.tolist(), diffs.tolist())
        merges = [here for here in idle.levels if isinstance(here, _spine._Merge)]
        assert len(merges) == 1 and merges[0].future is not None
        merges[0].future.result()  # finished, not adopted: the idle spine holds both inputs
        assert idle.pending == 1

        elsewhere = threading.Thread(target=lambda: Spine(1, 2).batches())
        elsewhere.start()
        elsewhere.join()
        assert idle.pending == 1  # another thread's spine does not adopt this thread's merges

        busy.insert(
            Batch(
                Rows(
                    np.arange(5),
                    [np.zeros(5, dtype=np.int64)],
                    [np.zeros(5, dtype=np.int64)] * 2,
                    np.ones(5, dtype=np.int64),
                )
            )
        )
        assert idle.pending == 0
        assert not any(isinstance(here, _spine._Merge) for here in idle.levels)
        assert _contents(_held(idle), 0) == _contents(inserted, 0)
