"""What one step of `Propagate` evaluates, against NetworkX: the join of label changes with
the edges (all of a small delta's times in one read, its proposals summed, or a time and a
batch at a time) and the label changes leaving the loop once per callback.

SCC (two label propagations inside a loop, so label and edge histories span several outer
iterations and epochs), shortest paths (weights added in the join) and CC on graphs whose edges are removed epochs after they were
added (an edge's history that adds up to nothing across batches), each join form in each
read tier; after every epoch the output must equal NetworkX's answer and the epoch's changes
exactly the difference from the previous one (`check`).
"""

from __future__ import annotations

import random

import pytest

from tests.support.linq_harness import check
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths, random_epochs
from timely_libs import linq
from timely_libs.linq._columns import _kernels
from timely_libs.linq.propagate import _operator

JOINS = {"summed": 1 << 40, "per_time": 0}
"""`JOIN_SUMMED_BELOW` for each join form: every delta summed, or none."""
TIERS = ["python", "numpy", "spine"]


def _forced(patch: pytest.MonkeyPatch, join: str, tier: str) -> None:
    patch.setattr(_operator, "JOIN_SUMMED_BELOW", JOINS[join])
    patch.setattr(_kernels, "FEW_KEYS", 1 << 40 if tier == "python" else 0)
    for name in ("COMPILED_KEYS", "LOADED_KEYS"):
        patch.setattr(_kernels, name, 1 << 40)
    patch.setattr(_kernels, "SPINE_BELOW", 1 << 40 if tier == "spine" else 0)
    if tier == "spine":
        patch.setattr(_kernels, "SPINE_KEYS", 1)
        patch.setattr(_kernels.POLICY, "eager", True)


def _epochs(seed: int, nodes: int, initial: int) -> list[list[tuple[tuple[int, int], int]]]:
    rng = random.Random(seed)
    return random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), initial, epochs=12, per_epoch=8, delete=0.6
    )


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("join", sorted(JOINS))
def test_scc_steps(monkeypatch: pytest.MonkeyPatch, join: str, tier: str) -> None:
    _forced(monkeypatch, join, tier)
    epochs = _epochs(11, 30, 45)
    check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], 1)


@pytest.mark.parametrize("join", sorted(JOINS))
def test_scc_steps_two_workers(monkeypatch: pytest.MonkeyPatch, join: str) -> None:
    """With peers, each notification is one step, its changes one message."""
    _forced(monkeypatch, join, "spine")
    epochs = _epochs(12, 30, 45)
    check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], 2)


@pytest.mark.parametrize("join", sorted(JOINS))
def test_cc_steps(monkeypatch: pytest.MonkeyPatch, join: str) -> None:
    _forced(monkeypatch, join, "spine")
    epochs = _epochs(13, 60, 50)
    check(linq.connected_components, nx_components, [(e,) for e in epochs], 1)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("join", sorted(JOINS))
def test_sssp_steps(monkeypatch: pytest.MonkeyPatch, join: str, workers: int) -> None:
    """Weighted edges: the compiled join adds each edge's weight to the label it carries."""
    _forced(monkeypatch, join, "spine")
    rng = random.Random(14)
    wedges = random_epochs(rng, lambda: (rng.randrange(40), rng.randrange(40), rng.randint(0, 6)), 70, per_epoch=6)
    sources = random_epochs(rng, lambda: rng.randrange(40), 2, per_epoch=1, delete=0.4)
    check(linq.shortest_paths, nx_shortest_paths, list(zip(wedges, sources)), workers)
