"""A join meets a large delta a chunk of rows at a time (`_join.meet`, `MEET_CHUNK`).

Chunking must not change an answer: with the chunk forced down to a few rows, so that nearly
every delta is split (a first epoch of 80 records, later ones of up to 25 changes, and inside
loops the deltas of every iteration), each join form is compared after every epoch with a
brute-force recomputation, and so is the same program unchunked: a plain join (both inputs
arranged by the join), a join against a shared arrangement (`arrange`, whose new batches meet
the reader's arrangement at many times at once), a join inside a loop, and SCC, whose
trimming joins meet labels with a history of several rows per key.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import pytest

from tests.support import linq_reference as ref
from tests.support.linq_harness import check
from tests.support.linq_reference import nx_scc_edges
from timely_libs import linq
from timely_libs.linq import _join

_first, _second = itemgetter(0), itemgetter(1)
UNCHUNKED = 1 << 40
CHUNKS = [UNCHUNKED, 3, 1]


def _pairs(seed: int, nodes: int = 30) -> list[list[ref.Change]]:
    rng = random.Random(seed)
    return ref.random_epochs(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 80, 8, per_epoch=25)


def _join2(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    return a.join(b, _second, _first, linq.columns(lambda s, m, m2, d: (s, d)))


def _join2_reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    return ref.join(a, b, _second, _first, lambda x, y: (x[0], y[1]))


def _arranged(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    """Two joins read one arrangement of ``b``."""
    by_src = b.arrange(_first)
    paths = a.join(by_src, _second, None, linq.columns(lambda s, m, m2, d: (s, d)))
    back = a.join(by_src, _first, None, linq.columns(lambda s, m, s2, d: (d, m)))
    return paths.concat(back)


def _arranged_reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    paths = ref.join(a, b, _second, _first, lambda x, y: (x[0], y[1]))
    back = ref.join(a, b, _first, _first, lambda x, y: (y[1], x[1]))
    return ref.concat(paths, back)


def _reach(edges: linq.Collection) -> linq.Collection:
    roots = edges.where(linq.columns(lambda s, d: s < 3)).select(_first).distinct()

    def step(x: linq.Collection) -> linq.Collection:
        inner = edges.enter(x.scope)
        proposals = x.join(inner, linq.columns(lambda n: n), _first, linq.columns(lambda n, s, d: d))
        return roots.enter(x.scope).concat(proposals).distinct()

    return roots.fixed_point(step)


def _reach_reference(edges: ref.Multiset) -> ref.Multiset:
    roots = ref.distinct(ref.select(ref.where(edges, lambda e: e[0] < 3), _first))

    def step(x: ref.Multiset) -> ref.Multiset:
        return ref.distinct(ref.concat(roots, ref.join(x, edges, lambda n: n, _first, lambda n, e: e[1])))

    return ref.fixed_point(roots, step)


PROGRAMS: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], int]] = {
    "join": (_join2, _join2_reference, 2),
    "arranged": (_arranged, _arranged_reference, 2),
    "reach": (_reach, _reach_reference, 1),
    "scc": (linq.strongly_connected_components, nx_scc_edges, 1),
}


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: "unchunked" if c == UNCHUNKED else f"chunk{c}")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_chunked_join_matches_recomputation(name: str, chunk: int, workers: int) -> None:
    query, reference, inputs = PROGRAMS[name]
    streams = [_pairs(seed, 12 if name == "scc" else 30) for seed in range(inputs)]
    epochs = [tuple(s[i] for s in streams) for i in range(len(streams[0]))]
    sizes: list[int] = []
    meet_rows = _join._meet_rows

    def measured(*args: Any) -> None:
        sizes.append(len(args[3]))  # the chunk's delta keys
        meet_rows(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_join, "MEET_CHUNK", chunk)
        patch.setattr(_join, "_meet_rows", measured)
        check(query, reference, epochs, workers)
    if chunk == UNCHUNKED:
        assert max(sizes) > max(CHUNKS[1:]), "no delta large enough to be split"
    else:
        assert max(sizes) <= chunk, "a delta met the arrangement whole"
