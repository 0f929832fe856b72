"""A spine's listing, address table and latest time after a small insert
(`_spine._with_tail_batch`): kept up to date instead of rebuilt, they must equal what a rebuild
from the spine's batches gives, and a compiled read of every key through them must find exactly
the rows inserted so far."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from timely_libs.linq._columns import compiled_loops
from timely_libs.linq._trace import Batch, Rows, Spine, latest
from timely_libs.linq._trace._reader import _addresses, _latest, address_table, matches


def test_small_inserts_keep_the_listing_and_table_of_a_rebuild() -> None:
    compiled_loops()  # the table is made by the compiled reads
    rng = random.Random(7)
    spine = Spine(1, 2)
    inserted: Counter[tuple[int, ...]] = Counter()
    extended = kept_latest = 0
    for step in range(60):
        n = rng.choice([1, 2, 5, 40, 300, 2000])  # mostly tail batches, now and then a level's
        keys = np.array([rng.randrange(500) for _ in range(n)], dtype=np.int64)
        vals = np.array([rng.randrange(9) for _ in range(n)], dtype=np.int64)
        epoch = np.full(n, step // 10, dtype=np.int64)
        line = np.array([rng.randrange(4) for _ in range(n)], dtype=np.int64)
        diffs = np.ones(n, dtype=np.int64)
        for row in zip(keys.tolist(), vals.tolist(), epoch.tolist(), line.tolist()):
            inserted[row] += 1
        before = spine.reads
        if before is not None and before.table is None:
            address_table(spine.batches())  # a compiled read made the table
        if before is not None and step % 3:
            latest(spine.batches())  # a join asked the latest time: kept, it must follow the insert
        spine.insert(Batch(Rows(keys, [vals], [epoch, line], diffs)))
        if spine.reads is not None:
            extended += 1
            kept_latest += spine.reads.latest_known
        held = spine.batches()
        expected = [*spine.tail] + [b for level in spine.levels if level is not None for b in _listed(level)]
        assert list(held) == expected
        assert np.array_equal(address_table(held), _addresses(expected))
        assert latest(held) == _latest(expected) == (max(r[2] for r in inserted), max(r[3] for r in inserted))
        probe = np.arange(500, dtype=np.int64)
        found = matches(probe, held, 1, 2)
        got: Counter[tuple[int, ...]] = Counter()
        if found is not None:
            rank, rows = found
            for k, v, e, x, d in zip(
                probe[rank].tolist(),
                rows.vals[0].tolist(),
                rows.times[0].tolist(),
                rows.times[1].tolist(),
                rows.diffs.tolist(),
            ):
                got[(k, v, e, x)] += d
        assert +got == +inserted
    assert extended > 10  # the kept form was exercised, not only rebuilds
    assert kept_latest > 10


def _listed(level: object) -> list[Batch]:
    """A level's batches as `Spine.batches` lists them (a merge in progress: its two inputs)."""
    if isinstance(level, Batch):
        return [level]
    return [level.a, level.b]  # type: ignore[attr-defined]
