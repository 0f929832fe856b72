"""One step for a line's later proposals (`propagate._least.line_wave`), against NetworkX.

With one worker, a step of `Propagate` may absorb the proposals staged at the later times of
its line in one batch, when a check before inserting them says none moves a label (an
update's single changed edge proposes at two or three iterations, and usually moves
nothing). Shortest paths, connected components (labels entering at several iterations) and
strongly connected components (lines inside an outer loop, with histories at every outer
iteration) run many small epochs with the wave and without it (`WAVE_ROWS` 0), in the Python
tier and with each spine read whole by the compiled loops; after every epoch the output must
equal NetworkX's answer (`check`). The runs with the wave must have absorbed some later
times, or they test nothing new.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.linq_harness import check
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths, random_epochs
from timely_libs import linq
from timely_libs.linq._columns import _kernels
from timely_libs.linq.propagate import _least, _operator

TIERS = ["python", "spine"]


def _tier(patch: pytest.MonkeyPatch, tier: str) -> None:
    patch.setattr(_kernels, "FEW_KEYS", 8)
    for name in ("COMPILED_KEYS", "LOADED_KEYS"):
        patch.setattr(_kernels, name, 1 << 40)
    patch.setattr(_kernels, "SPINE_KEYS", 1)
    patch.setattr(_kernels, "SPINE_BELOW", 1 << 40 if tier == "spine" else 0)
    if tier == "spine":
        patch.setattr(_kernels.POLICY, "eager", True)


def _counted(patch: pytest.MonkeyPatch) -> list[int]:
    """How many later times each step absorbed (a step's own time not counted)."""
    absorbed: list[int] = []
    wave = _least.line_wave

    def counting(staged: dict[Any, Any], staged_edges: Any, t: Any, *spines: Any) -> Any:
        before = len(staged) - (t in staged)
        out = wave(staged, staged_edges, t, *spines)
        absorbed.append(before - len(staged))
        return out

    patch.setattr(_operator, "line_wave", counting)
    return absorbed


def _run(patch: pytest.MonkeyPatch, tier: str, wave: bool, run: Callable[[], None]) -> None:
    _tier(patch, tier)
    if not wave:
        patch.setattr(_least, "WAVE_ROWS", 0)
    absorbed = _counted(patch)
    run()
    assert (sum(absorbed) > 0) == wave


def _single_changes(rng: random.Random, new: Callable[[], Any], initial: int, epochs: int) -> list[list[Any]]:
    """A first epoch of ``initial`` records, then epochs of one change each (an update's case)."""
    return random_epochs(rng, new, initial, epochs=epochs, per_epoch=1, delete=0.5)


@pytest.mark.parametrize("wave", [True, False], ids=["wave", "steps"])
@pytest.mark.parametrize("tier", TIERS)
def test_shortest_paths(monkeypatch: pytest.MonkeyPatch, tier: str, wave: bool) -> None:
    rng = random.Random(21)
    nodes = 40
    wedges = _single_changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9)), 120, 40)
    sources = [[(0, 1)]]
    _run(
        monkeypatch,
        tier,
        wave,
        lambda: check(linq.shortest_paths, nx_shortest_paths, list(zip(wedges, sources + [[]] * 40)), 1),
    )


@pytest.mark.parametrize("wave", [True, False], ids=["wave", "steps"])
@pytest.mark.parametrize("tier", TIERS)
def test_connected_components(monkeypatch: pytest.MonkeyPatch, tier: str, wave: bool) -> None:
    rng = random.Random(22)
    nodes = 60
    epochs = _single_changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 70, 40)
    _run(monkeypatch, tier, wave, lambda: check(linq.connected_components, nx_components, [(e,) for e in epochs], 1))


@pytest.mark.parametrize("wave", [True, False], ids=["wave", "steps"])
@pytest.mark.parametrize("tier", TIERS)
def test_strongly_connected_components(monkeypatch: pytest.MonkeyPatch, tier: str, wave: bool) -> None:
    rng = random.Random(23)
    nodes = 30
    epochs = _single_changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 60, 25)
    _run(
        monkeypatch,
        tier,
        wave,
        lambda: check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], 1),
    )


def _edge_waves(patch: pytest.MonkeyPatch) -> list[bool]:
    """Each check of an update's edge proposals made straight into one batch
    (`Propagate._wave_edges`): whether they were absorbed (else staged)."""
    said: list[bool] = []
    absorbs = _least.absorbs_wave

    def counting(*args: Any) -> bool:
        said.append(absorbs(*args))
        return said[-1]

    patch.setattr(_operator, "absorbs_wave", counting)
    return said


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("algo", ["sssp", "cc"])
def test_edge_wave(monkeypatch: pytest.MonkeyPatch, tier: str, algo: str) -> None:
    """An update's edge change whose proposals go straight to the wave check, absorbed when
    they move nothing and staged for the steps when they may: both must happen, and the
    output must equal NetworkX's after every epoch."""
    _tier(monkeypatch, tier)
    said = _edge_waves(monkeypatch)
    rng = random.Random(24)
    nodes = 40
    if algo == "sssp":
        epochs = _single_changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9)), 120, 60)
        check(linq.shortest_paths, nx_shortest_paths, list(zip(epochs, [[(0, 1)]] + [[]] * 60)), 1)
    else:
        epochs = _single_changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 50, 60)
        check(linq.connected_components, nx_components, [(e,) for e in epochs], 1)
    assert any(said) and not all(said)
