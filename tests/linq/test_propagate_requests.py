"""Which notifications `Propagate` asks for with one worker: an update's edge change and a new
node's own label (entering iterations later, `propagate.by_size`) start one walk along their
line, not a walk and a notification that finds nothing left to do.

Connected components and SCC on random graphs whose epochs add edges to nodes never seen
before, checked against NetworkX after every epoch (`check`); every notification delivered
to `Propagate` is recorded with whether anything was staged for its walk when it arrived.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.linq_harness import check
from tests.support.linq_reference import nx_components, nx_scc_edges
from timely_libs import linq
from timely_libs.linq.propagate import _operator

FAR = 1 << 62


def _growing(seed: int, epochs: int = 10) -> list[list[tuple[tuple[int, int], int]]]:
    """A first epoch of edges among 40 nodes, then epochs that each add an edge from a present
    node to a new one (its own label enters later than the edge), and now and then remove one."""
    rng = random.Random(seed)
    first = [(rng.randrange(40), rng.randrange(40)) for _ in range(60)]
    present = list(first)
    out = [[(e, 1) for e in first]]
    fresh = 1000
    for _ in range(epochs):
        fresh += rng.randrange(1, 5000)  # labels of several bit lengths: several entry iterations
        edge = (rng.choice(present)[0], fresh) if rng.random() < 0.5 else (fresh, rng.choice(present)[1])
        changes = [(edge, 1)]
        if rng.random() < 0.4:
            gone = present.pop(rng.randrange(len(present)))
            changes.append((gone, -1))
        present.append(edge)
        out.append(changes)
    return out


@pytest.fixture
def deliveries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[tuple[int, ...], bool]]]:
    """Each notification `Propagate` is delivered: its time, and whether anything was staged at
    it or later on its line (what its walk takes)."""
    seen: list[tuple[tuple[int, ...], bool]] = []
    original = _operator.Propagate.on_notify

    def on_notify(self: Any, time: Any) -> None:
        t = tuple(time)
        ahead = [u for u in (*self.staged, *self.staged_edges) if u[:-1] == t[:-1] and u[-1] >= t[-1]]
        seen.append((t, bool(ahead)))
        original(self, time)

    monkeypatch.setattr(_operator.Propagate, "on_notify", on_notify)
    yield seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cc_update_one_walk(deliveries: list[tuple[tuple[int, ...], bool]], seed: int) -> None:
    """Top scope, one worker: every notification but an epoch's end finds work on its line."""
    epochs = _growing(seed)
    check(linq.connected_components, nx_components, [(e,) for e in epochs], 1)
    assert deliveries
    empty = [t for t, staged in deliveries if not staged and t[-1] < FAR]
    assert not empty, f"notifications delivered to nothing staged: {empty}"


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_scc_update_one_walk(deliveries: list[tuple[tuple[int, ...], bool]], seed: int) -> None:
    """Inside SCC's outer loop too, where a line is staged on from another (proposals joined
    with edges of a later outer iteration) before its own edge changes arrive."""
    epochs = _growing(seed)
    check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], 1)
    assert deliveries
    empty = [t for t, staged in deliveries if not staged and t[-1] < FAR]
    assert not empty, f"notifications delivered to nothing staged: {empty}"
