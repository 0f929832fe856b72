"""`split_by`, how a `Route` cuts a block for the exchange: every row reaches the worker its
route names, in its order, with its diff, and no worker gets an empty block; checked against
a row-by-row sort for each of its paths (all rows to one worker, two workers, more)."""

from __future__ import annotations

import numpy as np
import pytest

from timely_libs.linq._columns import Block
from timely_libs.linq._linear import split_by


def rows_by_worker(block: Block, dest: np.ndarray) -> dict[int, list[tuple[object, int]]]:
    out: dict[int, list[tuple[object, int]]] = {}
    for (record, diff), w in zip(block.pairs(), dest.tolist()):
        out.setdefault(w, []).append((record, diff))
    return out


@pytest.mark.parametrize("peers", [2, 3, 9])
@pytest.mark.parametrize("rows", [1, 5, 300])
@pytest.mark.parametrize("spread", ["mixed", "one_worker"])
def test_every_row_reaches_its_worker_in_order(peers: int, rows: int, spread: str) -> None:
    rng = np.random.default_rng(peers * 1000 + rows)
    records = [(int(a), f"v{int(b)}") for a, b in rng.integers(0, 50, (rows, 2))]
    block = Block.of_records(records, rng.integers(-3, 4, rows))
    dest = rng.integers(0, peers, rows) if spread == "mixed" else np.full(rows, peers - 1, dtype=np.int64)
    parts = split_by(block, dest.astype(np.int64), peers)
    assert [w for w, _ in parts] == sorted({w for w, _ in parts}), "one block per worker, in worker order"
    assert all(len(b) for _, b in parts), "no empty block"
    assert {w: b.pairs() for w, b in parts} == rows_by_worker(block, dest)


def test_an_empty_block_goes_nowhere() -> None:
    assert split_by(Block.empty(), np.zeros(0, dtype=np.int64), 2) == []
