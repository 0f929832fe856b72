"""An arrangement keyed by one field of its tuples stores that field once, as its key.

A join's own arrangements and a shared arrangement (`arrange`) keyed by ``itemgetter(i)``
keep the other fields as values and put the key back when they are read (`Layout.full`).
Checked here against a brute-force join, after every epoch: string keys (whose codes
are not their values) and int keys, retractions, and a block of another arity arriving later,
which widens a keyed arrangement to whole records half-way through (its stored rows must come
back with their keys). The arrangements' stored columns are counted, so a layout that stored
the key again fails too.
"""

from __future__ import annotations

import random
from operator import itemgetter
from typing import Any

import numpy as np
import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq
from timely_libs.linq._arrange import Arrange
from timely_libs.linq._join import Join


def _records(rng: random.Random, arity: int) -> tuple[Any, ...]:
    """A string field (its codes are not its values), then int fields (their own codes)."""
    fields: list[Any] = [rng.choice("abcd"), rng.randrange(4), rng.randrange(3)]
    return tuple(fields[:arity])


def _epochs(seed: int, wider_from: int | None) -> list[list[ref.Change]]:
    """Changes per epoch: pairs, then (from epoch ``wider_from``) triples too."""
    rng = random.Random(seed)
    present: list[Any] = []
    out: list[list[ref.Change]] = []
    for epoch in range(6):
        arity = 3 if wider_from is not None and epoch >= wider_from and rng.random() < 0.5 else 2
        changes: list[ref.Change] = []
        for _ in range(30 if epoch == 0 else 8):
            if present and rng.random() < 0.3:
                r = present.pop(rng.randrange(len(present)))
                changes.append((r, -1))
            else:
                r = _records(rng, arity)
                present.append(r)
                changes.append((r, 1))
        out.append(changes)
    return out


def _pair(x: Any, y: Any) -> Any:
    return (x, y)


@pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
@pytest.mark.parametrize("wider_from", [None, 3], ids=["pairs", "widened"])
@pytest.mark.parametrize("fields", [(0, 0), (1, 1)], ids=["string_keys", "int_keys"])
def test_keyed_arrangements_match_a_brute_force_join(
    fields: tuple[int, int], wider_from: int | None, workers: int
) -> None:
    k1, k2 = itemgetter(fields[0]), itemgetter(fields[1])
    a_epochs, b_epochs = _epochs(1, wider_from), _epochs(2, wider_from)

    def build(scope: timely.Scope) -> Any:
        a, b = linq.new_input(scope, "a"), linq.new_input(scope, "b")
        plain = a.collection.join(b.collection, k1, k2, _pair, name="plain")
        shared = b.collection.arrange(k2, name="by_key")
        against = a.collection.join(shared, k1, None, _pair, name="against")
        return a, b, linq.CollectionOutput(plain), linq.CollectionOutput(against)

    sa: ref.Multiset = {}
    sb: ref.Multiset = {}
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (a, b, plain, against)):
        for epoch, (ca, cb) in enumerate(zip(a_epochs, b_epochs)):
            a.update(ca)
            b.update(cb)
            a.advance_to(epoch + 1)
            b.advance_to(epoch + 1)
            sa, sb = ref.apply(sa, ca), ref.apply(sb, cb)
            comp.wait_passed(plain.probe, epoch, timeout=TIMEOUT)
            comp.wait_passed(against.probe, epoch, timeout=TIMEOUT)
            expected = ref.join(sa, sb, k1, k2, _pair)
            assert plain.contents() == expected, f"epoch {epoch}: plain join"
            assert against.contents() == expected, f"epoch {epoch}: join against the arrangement"
        widened = wider_from is not None
        joins = [v for v in comp.vertices("plain") if isinstance(v, Join)]
        arranges = [v for v in comp.vertices("by_key") if isinstance(v, Arrange)]
        spines = [t for j in joins for t in j.traces if t is not None]
        spines += [x.shared.spine for x in arranges if x.shared.spine is not None]
        assert spines
        for spine in spines:
            # pairs keyed by one of their fields store one value column; widened: one whole-record code
            assert spine.nvals == 1, f"{spine.nvals} stored columns ({'widened' if widened else 'pairs'})"


@pytest.mark.parametrize(
    "values",
    [[3, -7, 0, 2**40], ["a", "b", "a"], [1.5, 2.0], [(1, 2), 5, "x"], [2**62, 1]],
    ids=["ints", "strings", "floats", "mixed", "big-int"],
)
def test_scalar_decode_gives_back_the_values(values: list[Any]) -> None:
    """A scalar layout's records come back as exactly the values that were coded (plain ints
    as their own code column, with no Python list made; everything else through values)."""
    from timely_libs.linq._columns import SCALAR, Block
    from timely_libs.linq._layout import Layout

    layout = Layout("t", SCALAR)
    block = Block.of_records(values)
    (codes,) = layout.encode(block)
    diffs = np.arange(1, len(values) + 1, dtype=np.int64)
    out = layout.decode([codes], diffs)
    assert [(r, type(r)) for r in out.records()] == [(v, type(v)) for v in values]
    assert out.diffs is diffs
