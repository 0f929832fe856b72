"""`Propagate._absorb_edges`: an update's edge, staged as one small message, becomes a batch as
it was staged; larger or several messages are summed by (key, values) first. Shortest paths
and connected components over epochs of one to four changes (each epoch's changes one
message, so most take the small path) and the same with the small path turned off, against
NetworkX after every epoch, with 1 and 2 workers. The runs must have taken the path they
name, or they test nothing."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest

from tests.support.linq_harness import check
from tests.support.linq_reference import nx_components, nx_shortest_paths, random_epochs
from timely_libs import linq
from timely_libs.linq.propagate import _operator


def _general_absorbs(patch: pytest.MonkeyPatch) -> list[int]:
    """Counts the absorptions that took the general path (they consolidate the staged edges)."""
    calls: list[int] = []
    consolidate = _operator.consolidate

    def counting(*args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code.co_name == "_absorb_edges":
            calls.append(1)
        return consolidate(*args, **kwargs)

    patch.setattr(_operator, "consolidate", counting)
    return calls


def _run(patch: pytest.MonkeyPatch, small: bool, epochs: int, run: Any) -> None:
    if not small:
        patch.setattr(_operator, "SMALL_ROWS", 0)
    general = _general_absorbs(patch)
    run()
    if small:
        assert len(general) < epochs // 2  # the first load, and the rare epoch of two messages
    else:
        assert len(general) >= epochs  # every epoch's changes reach some worker


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("small", [True, False], ids=["small", "general"])
def test_shortest_paths(monkeypatch: pytest.MonkeyPatch, small: bool, workers: int) -> None:
    rng = random.Random(31)
    nodes = 40
    edges = random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9)), 120, epochs=40, per_epoch=4
    )
    sources = [[(0, 1)]] + [[]] * 40
    _run(
        monkeypatch,
        small,
        40,
        lambda: check(linq.shortest_paths, nx_shortest_paths, list(zip(edges, sources)), workers),
    )


@pytest.mark.parametrize("small", [True, False], ids=["small", "general"])
def test_connected_components(monkeypatch: pytest.MonkeyPatch, small: bool) -> None:
    rng = random.Random(32)
    nodes = 60
    epochs = random_epochs(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 70, epochs=40, per_epoch=4)
    _run(monkeypatch, small, 40, lambda: check(linq.connected_components, nx_components, [(e,) for e in epochs], 1))
