"""Linear operators map a large message a bounded piece at a time (`_linear.pieces_in`).

Mapping piece by piece must not change an answer. With the piece forced down to a few rows,
and joins made to send their output in many blocks per message (`_join.MEET_CHUNK` small),
every linear operator (`select` column-wise and through records, `where`, `select_many`,
`negate`, `inspect`, and the route of an exchange on 2 workers) sees messages of many blocks
and maps each piece alone; the same programs whole (one piece per message, as before) and a
brute-force recomputation must agree after every epoch. SCC, whose trimming joins feed a
`where` and a `select`, is checked against NetworkX.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np
import pytest

from tests.support import linq_reference as ref
from tests.support.linq_harness import check
from tests.support.linq_reference import nx_scc_edges
from timely_libs import linq
from timely_libs.linq import _join, _linear
from timely_libs.linq._columns import Block

_first, _second = itemgetter(0), itemgetter(1)
WHOLE = 1 << 40
PIECES = [WHOLE, 3, 1]


def _pairs(seed: int, nodes: int) -> list[list[ref.Change]]:
    rng = random.Random(seed)
    return ref.random_epochs(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 80, 8, per_epoch=25)


def _paths(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    return a.join(b, _second, _first, linq.columns(lambda s, m, m2, d: (s, m, d)))


def _paths_reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    return ref.join(a, b, _second, _first, lambda x, y: (x[0], x[1], y[1]))


def _linear_chain(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    """Every linear operator after a join whose output comes in many blocks."""
    paths = _paths(a, b)
    kept = paths.where(linq.columns(lambda s, m, d: s != d)).where(lambda p: p[1] % 3 != 0)
    ends = kept.select(itemgetter(0, 2)).select(lambda p: (p[1], p[0]))
    many = kept.select_many(lambda p: [p[0]] * (p[1] % 3))
    seen: list[int] = []
    tapped = ends.inspect(lambda record, time, diff: seen.append(diff))
    return (
        tapped.select(lambda p: ("end", p))
        .concat(many.select(lambda n: ("many", n)))
        .concat(paths.select(lambda p: ("gone", p[0])).negate())
    )


def _linear_chain_reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    paths = _paths_reference(a, b)
    kept = ref.where(ref.where(paths, lambda p: p[0] != p[2]), lambda p: p[1] % 3 != 0)
    ends = ref.select(ref.select(kept, itemgetter(0, 2)), lambda p: (p[1], p[0]))
    many = ref.select_many(kept, lambda p: [p[0]] * (p[1] % 3))
    gone = ref.negate(ref.select(paths, lambda p: ("gone", p[0])))
    return ref.concat(ref.select(ends, lambda p: ("end", p)), ref.select(many, lambda n: ("many", n)), gone)


def _distinct_ends(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    """The output of a route (2 workers) read by a keyed operator, in pieces."""
    return _paths(a, b).select(itemgetter(0, 2)).distinct()


def _distinct_ends_reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    return ref.distinct(ref.select(_paths_reference(a, b), itemgetter(0, 2)))


PROGRAMS: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], int]] = {
    "linear": (_linear_chain, _linear_chain_reference, 2),
    "distinct": (_distinct_ends, _distinct_ends_reference, 2),
    "scc": (linq.strongly_connected_components, nx_scc_edges, 1),
}


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("piece", PIECES, ids=lambda p: "whole" if p == WHOLE else f"piece{p}")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pieces_match_recomputation(name: str, piece: int, workers: int) -> None:
    query, reference, inputs = PROGRAMS[name]
    streams = [_pairs(seed, 12 if name == "scc" else 20) for seed in range(inputs)]
    epochs = [tuple(s[i] for s in streams) for i in range(len(streams[0]))]
    pieces: list[list[int]] = []
    pieces_in = _linear.pieces_in

    def measured(records: list[Any]) -> list[Block]:
        out = pieces_in(records)
        pieces.append([len(b) for b in out])
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_join, "MEET_CHUNK", 2)  # joins send their output in many blocks
        patch.setattr(_linear, "PIECE_ROWS", piece)
        patch.setattr(_linear, "pieces_in", measured)
        check(query, reference, epochs, workers)
    if piece == WHOLE:
        assert max(len(p) for p in pieces) == 1, "a message was mapped in pieces"
    else:
        assert max(len(p) for p in pieces) > 1, "no message was large enough to be mapped in pieces"


def test_pieces_keep_every_row_in_order() -> None:
    """`pieces_in` itself: the rows of every block, in order, regrouped into pieces no larger
    than `PIECE_ROWS` unless one block is larger; empty blocks dropped."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        sizes = rng.integers(0, 9, rng.integers(1, 12)).tolist()
        blocks = []
        start = 0
        for n in sizes:
            blocks.append(Block([np.arange(start, start + n, dtype=np.int64)], -1, np.ones(n, dtype=np.int64)))
            start += n
        limit = int(rng.integers(1, 10))
        records: list[Any] = [(i % 2, b) if rng.random() < 0.3 else b for i, b in enumerate(blocks)]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_linear, "PIECE_ROWS", limit)
            out = _linear.pieces_in(records)
        got = np.concatenate([b.cols[0] for b in out]) if out else np.zeros(0, dtype=np.int64)
        assert got.tolist() == list(range(start))
        for b in out:
            assert len(b) > 0
            assert len(b) <= limit or any(len(x) == len(b) for x in blocks), "a piece joined blocks past the limit"
