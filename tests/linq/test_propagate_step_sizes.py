"""`Propagate`'s steps of many keys in one compiled call (`_operator._stepped`, then
`_join_line`), against the column form and NetworkX.

A round of a large graph's update touches a few thousand keys a step; those steps take the
compiled step and its compiled join as an update's few keys do. Here every step takes one form
or the other, whatever its size (the first answer's too): on random graphs of a few thousand
edges, with epochs of a few dozen changes, the output after every epoch must equal NetworkX's
answer and the epoch's changes exactly the difference from the previous one (`check`), and the
compiled form must have run on steps larger than an update's.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support.linq_harness import check, compiled_from
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths, random_epochs
from timely_libs import linq
from timely_libs.linq._columns import _kernels
from timely_libs.linq.propagate import _operator

pytestmark = pytest.mark.timeout(600)

FORMS = {"compiled": 1 << 40, "columns": 0}
"""`STEP_BELOW` and `LINE_JOIN_BELOW` for each form: every step compiled, or none."""
MANY_KEYS = 256
"""A step at least this large must have run compiled (a test update's steps are smaller)."""


def _forced(patch: pytest.MonkeyPatch, form: str) -> list[int]:
    """Every step in ``form``; the sizes of the steps the compiled call took, as they run."""
    patch.setattr(_operator, "STEP_BELOW", FORMS[form])
    patch.setattr(_operator, "LINE_JOIN_BELOW", FORMS[form])
    patch.setattr(_kernels.POLICY, "eager", True)
    compiled_from(patch, 1)
    sizes: list[int] = []
    stepped = _operator._stepped

    def counted(*args: Any) -> Any:
        out = stepped(*args)
        if out is not None:
            sizes.append(len(args[2]))
        return out

    patch.setattr(_operator, "_stepped", counted)
    return sizes


def _epochs(seed: int, nodes: int, initial: int) -> list[list[tuple[Any, int]]]:
    rng = random.Random(seed)
    return random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), initial, epochs=6, per_epoch=40, delete=0.5
    )


def _ran(form: str, sizes: list[int]) -> None:
    if form == "compiled":
        assert max(sizes) >= MANY_KEYS, f"no compiled step of {MANY_KEYS} keys or more: {max(sizes, default=0)}"
    else:
        assert not sizes, f"compiled steps of {sizes[:5]} keys"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_scc_steps_of_many_keys(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    sizes = _forced(monkeypatch, form)
    epochs = _epochs(21, 2500, 4000)
    check(linq.strongly_connected_components, nx_scc_edges, [(e,) for e in epochs], 1)
    _ran(form, sizes)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_cc_steps_of_many_keys(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    sizes = _forced(monkeypatch, form)
    epochs = _epochs(22, 3000, 2500)
    check(linq.connected_components, nx_components, [(e,) for e in epochs], 1)
    _ran(form, sizes)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_sssp_steps_of_many_keys(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """Weighted edges: the compiled join adds each edge's weight to the label it carries."""
    sizes = _forced(monkeypatch, form)
    rng = random.Random(23)
    wedges = random_epochs(
        rng, lambda: (rng.randrange(2000), rng.randrange(2000), rng.randint(0, 6)), 6000, epochs=5, per_epoch=40
    )
    sources = [[(s, 1) for s in range(0, 2000, 7)], *([] for _ in range(5))]
    check(linq.shortest_paths, nx_shortest_paths, list(zip(wedges, sources)), 1)
    _ran(form, sizes)
