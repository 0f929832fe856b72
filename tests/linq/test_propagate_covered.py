"""`Propagate`'s skip of staged keys that their latest evaluation covered (`_covered.Covered`).

The stamps on their own: a key evaluated on a line at or before a staged time is skipped
there, and one re-staged by a later evaluation elsewhere (its labels there may have changed)
is not. Then whole computations, with the compiled loops counted as loaded: SCC and CC
against NetworkX after every epoch of random changes, with keys skipped along the way.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from tests.support.linq_harness import check, compiled_from
from tests.support.linq_reference import nx_components, nx_scc_edges, random_epochs
from timely_libs import linq
from timely_libs.linq._columns import _kernels
from timely_libs.linq.propagate import _compiled, _covered, _line, _operator  # noqa: F401  (compiled at collection)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_kernels.POLICY, "eager", True)


def _keys(*ks: int) -> np.ndarray:
    return np.array(ks, dtype=np.int64)


def test_covered_on_the_line_at_or_after(eager: None) -> None:
    c = _covered.Covered()
    c.evaluated(_keys(1, 2, 3), (0, 1, 5))
    assert c.uncovered(_keys(0, 1, 2, 3, 4), (0, 1, 7)).tolist() == [0, 4]
    assert c.uncovered(_keys(1, 2, 3), (0, 1, 5)).tolist() == []
    assert c.uncovered(_keys(1, 2, 3), (0, 1, 4)).tolist() == [1, 2, 3]  # before the evaluation
    assert c.uncovered(_keys(1, 2, 3), (0, 2, 7)).tolist() == [1, 2, 3]  # another line
    assert c.uncovered(_keys(1, 2, 3), (1, 1, 7)).tolist() == [1, 2, 3]  # another epoch


def test_restaged_after_its_evaluation_is_evaluated(eager: None) -> None:
    """Evaluated on line (0, 1), then on (0, 0) (which stages it on (0, 1) again, at the join
    with its rows there): its labels on (0, 1) may have changed, it is not covered."""
    c = _covered.Covered()
    c.evaluated(_keys(7, 8), (0, 1, 3))
    c.evaluated(_keys(7), (0, 0, 9))
    assert c.uncovered(_keys(7, 8), (0, 1, 9)).tolist() == [7]
    c.evaluated(_keys(7), (0, 1, 9))
    assert c.uncovered(_keys(7, 8), (0, 1, 9)).tolist() == []


def test_two_evaluations_on_a_line_cover_from_the_first(eager: None) -> None:
    c = _covered.Covered()
    c.evaluated(_keys(4), (0, 1, 5))
    c.evaluated(_keys(4), (0, 1, 8))
    assert c.uncovered(_keys(4), (0, 1, 6)).tolist() == []
    assert c.uncovered(_keys(4), (0, 1, 4)).tolist() == [4]


def test_keys_without_a_stamp_are_never_skipped(eager: None) -> None:
    c = _covered.Covered()
    big = _covered.MAX_KEYS + 5
    c.evaluated(_keys(-3, 2, big), (0, 0, 1))
    assert c.uncovered(_keys(-3, 2, big), (0, 0, 2)).tolist() == [-3, big]


def test_forgets_while_the_policy_is_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation it cannot stamp would leave a stale stamp: it forgets them all instead."""
    monkeypatch.setattr(_kernels.POLICY, "eager", True)
    c = _covered.Covered()
    c.evaluated(_keys(1, 2), (0, 0, 1))
    monkeypatch.setattr(_kernels.POLICY, "eager", False)
    c.evaluated(_keys(2), (0, 1, 1))
    monkeypatch.setattr(_kernels.POLICY, "eager", True)
    assert c.uncovered(_keys(1, 2), (0, 0, 3)).tolist() == [1, 2]
    c.evaluated(_keys(1), (0, 2, 1))  # a fresh number for a line: the old stamps stay stale
    assert c.uncovered(_keys(1, 2), (0, 2, 1)).tolist() == [2]


def _skips(patch: pytest.MonkeyPatch, covered: type[_covered.Covered]) -> list[int]:
    """Every step with the compiled loops loaded, each `Propagate` keeping ``covered``; the
    number of staged keys each skip left out, as they run."""
    patch.setattr(_kernels.POLICY, "eager", True)
    compiled_from(patch, 1)
    skipped: list[int] = []

    class Counted(covered):  # type: ignore[valid-type,misc]
        def uncovered(self, keys: np.ndarray, t: tuple[int, ...]) -> np.ndarray:
            out = super().uncovered(keys, t)
            skipped.append(len(keys) - len(out))
            return out

    patch.setattr(_operator, "Covered", Counted)
    return skipped


def _epochs(seed: int, nodes: int, initial: int) -> list[tuple[list[tuple[Any, int]]]]:
    rng = random.Random(seed)
    epochs = random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), initial, epochs=6, per_epoch=40, delete=0.5
    )
    return [(e,) for e in epochs]


@pytest.mark.parametrize(
    ("algorithm", "oracle", "seed", "nodes", "initial"),
    [
        (linq.strongly_connected_components, nx_scc_edges, 31, 1500, 2400),
        (linq.connected_components, nx_components, 32, 2000, 1700),
    ],
    ids=["scc", "cc"],
)
def test_skips_keep_the_answers(
    monkeypatch: pytest.MonkeyPatch, algorithm: Any, oracle: Any, seed: int, nodes: int, initial: int
) -> None:
    skipped = _skips(monkeypatch, _covered.Covered)
    check(algorithm, oracle, _epochs(seed, nodes, initial), 1)
    if algorithm is linq.strongly_connected_components:  # an outer loop: keys staged at its next iteration
        assert sum(skipped) > 0, "no staged key was skipped"
