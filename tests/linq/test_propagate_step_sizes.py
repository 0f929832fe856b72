"""`Propagate`'s steps of many keys, against NetworkX: evaluated in one compiled call
(`_operator._stepped`) or in the column form, their changes joined with the edges in one
compiled pass (`Propagate._join_line`, from either form's changes) or per time and batch.

A round of a large graph's update touches a few thousand keys a step: the column form
evaluates them, and the compiled join takes their changes. Here every step takes the forms
each case asks for, whatever its size (the first answer's too): on random graphs of a few
thousand edges, with epochs of a few dozen changes, the output after every epoch must equal
NetworkX's answer and the epoch's changes exactly the difference from the previous one
(`check`), and the forms asked for must have run on steps larger than a test update's.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support.linq_harness import check, compiled_from
from tests.support.linq_reference import nx_components, nx_scc_edges, nx_shortest_paths, random_epochs
from timely_libs import linq
from timely_libs.linq._columns import _kernels
from timely_libs.linq.propagate import _line, _operator  # noqa: F401  (_line: compiled here, see below)

# The step's and join's loops compile when `_line` is first imported: here, at collection, where
# a cold cache's tens of seconds fall outside any computation's timeout (in CI they fell inside).

pytestmark = pytest.mark.timeout(600)

FORMS = {"compiled": (1 << 40, 1 << 40), "columns": (0, 1 << 40), "per_time": (0, 0)}
"""`STEP_BELOW` and `LINE_JOIN_BELOW` for each form: every step and join compiled; every step
in the column form, its changes put in the compiled step's matrix for the compiled join; or
that, joined per time and batch."""
MANY_KEYS = 128
"""A step at least this large must have run compiled (a test update's steps are smaller)."""


def _forced(patch: pytest.MonkeyPatch, form: str) -> dict[str, list[int]]:
    """Every step in ``form``; the sizes of the steps the compiled step took and of the changes
    the compiled join took, as they run."""
    patch.setattr(_operator, "STEP_BELOW", FORMS[form][0])
    patch.setattr(_operator, "LINE_JOIN_BELOW", FORMS[form][1])
    patch.setattr(_operator, "JOIN_SUMMED_BELOW", 1)  # every step's changes past the update's join
    patch.setattr(_kernels.POLICY, "eager", True)
    compiled_from(patch, 1)
    sizes: dict[str, list[int]] = {"stepped": [], "joined": []}
    stepped, joined = _operator._stepped, _operator.Propagate._join_line

    def counted_step(*args: Any) -> Any:
        out = stepped(*args)
        if out is not None:
            sizes["stepped"].append(len(args[2]))
        return out

    def counted_join(self: _operator.Propagate, changes: Any, t: Any) -> bool:
        done = joined(self, changes, t)
        if done:
            sizes["joined"].append(changes.shape[1])
        return done

    patch.setattr(_operator, "_stepped", counted_step)
    patch.setattr(_operator.Propagate, "_join_line", counted_join)
    return sizes


def _epochs(seed: int, nodes: int, initial: int) -> list[list[tuple[Any, int]]]:
    rng = random.Random(seed)
    return random_epochs(
        rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), initial, epochs=6, per_epoch=40, delete=0.5
    )


def _ran(form: str, sizes: dict[str, list[int]]) -> None:
    """The forms ``form`` asks for ran, on steps larger than a test update's."""
    compiled = max(sizes["stepped"], default=0)
    joined = max(sizes["joined"], default=0)
    if form == "compiled":
        assert compiled >= MANY_KEYS, f"no compiled step of {MANY_KEYS} keys or more: {compiled}"
    else:
        assert not compiled, f"compiled steps of {sizes['stepped'][:5]} keys"
    if form == "per_time":
        assert not joined, f"compiled joins of {sizes['joined'][:5]} changes"
    else:
        assert joined >= MANY_KEYS, f"no compiled join of {MANY_KEYS} changes or more: {joined}"


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize(
    ("algorithm", "oracle", "seed", "nodes", "initial"),
    [
        (linq.strongly_connected_components, nx_scc_edges, 21, 1500, 2400),
        (linq.connected_components, nx_components, 22, 2000, 1700),
    ],
    ids=["scc", "cc"],
)
def test_steps_of_many_keys(
    monkeypatch: pytest.MonkeyPatch, form: str, algorithm: Any, oracle: Any, seed: int, nodes: int, initial: int
) -> None:
    sizes = _forced(monkeypatch, form)
    epochs = _epochs(seed, nodes, initial)
    check(algorithm, oracle, [(e,) for e in epochs], 1)
    _ran(form, sizes)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_sssp_steps_of_many_keys(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """Weighted edges: the compiled join adds each edge's weight to the label it carries."""
    sizes = _forced(monkeypatch, form)
    rng = random.Random(23)
    wedges = random_epochs(
        rng, lambda: (rng.randrange(1200), rng.randrange(1200), rng.randint(0, 6)), 3600, epochs=5, per_epoch=40
    )
    sources = [[(s, 1) for s in range(0, 1200, 7)], *([] for _ in range(5))]
    check(linq.shortest_paths, nx_shortest_paths, list(zip(wedges, sources)), 1)
    _ran(form, sizes)
