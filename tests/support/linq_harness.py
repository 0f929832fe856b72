"""The driver the linq tests share: feed epochs to a query, compare with a reference after each.

``check`` builds ``query`` over one input collection per list of changes, feeds the epochs,
and after every epoch asserts that the output's accumulated contents equal ``reference`` of
the accumulated inputs, and that the changes it reported for the epoch are exactly the
difference from the previous answer (consolidated, and at no later epoch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import zip_longest

import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq
from timely_libs.linq._columns import _kernels

Epochs = Sequence[Sequence[ref.Change]]


def compiled_from(patch: pytest.MonkeyPatch, keys: int) -> None:
    """The compiled loops (numba) find the rows of ``keys`` keys or more, whether or not they
    are loaded yet: 1 for always, ``1 << 40`` for never (the numpy forms)."""
    patch.setattr(_kernels, "COMPILED_KEYS", keys)
    patch.setattr(_kernels, "LOADED_KEYS", keys)


def together(*per_input: Epochs) -> list[tuple[list[ref.Change], ...]]:
    """Per-input epoch lists side by side; a shorter list is padded with empty epochs."""
    return [tuple(list(e or []) for e in epoch) for epoch in zip_longest(*per_input)]


def check(
    query: Callable[..., linq.Collection],
    reference: Callable[..., ref.Multiset],
    epochs: Sequence[tuple[Sequence[ref.Change], ...]],
    workers: int,
    after_epoch: Callable[[int, list[ref.Multiset]], None] | None = None,
    numbers: Sequence[int] | None = None,
) -> None:
    """Feed ``epochs`` (per epoch, one list of changes per input) to ``query``; after each
    epoch compare the output with ``reference`` of the accumulated inputs. ``numbers`` are
    the epochs' numbers (increasing; by default 0, 1, 2, ...)."""
    n = len(epochs[0])
    numbers = list(numbers) if numbers is not None else list(range(len(epochs)))

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        inputs = [linq.new_input(scope, f"in{i}") for i in range(n)]
        return inputs, linq.CollectionOutput(query(*(i.collection for i in inputs)))

    states: list[ref.Multiset] = [{} for _ in range(n)]
    previous: ref.Multiset = {}
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        for epoch, changes in zip(numbers, epochs):
            for i, (inp, batch) in enumerate(zip(inputs, changes)):
                if inp.epoch < epoch:
                    inp.advance_to(epoch)
                if batch:
                    inp.update(batch)
                states[i] = ref.apply(states[i], batch)
                inp.advance_to(epoch + 1)
            comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
            expected = reference(*states)
            got = out.contents()
            assert got == expected, (
                f"epoch {epoch}: missing {ref.difference(expected, got)}, extra {ref.difference(got, expected)}; "
                f"inputs {states}"
            )
            reported = out.changes.get(epoch, [])
            assert len({r for r, _ in reported}) == len(reported), f"epoch {epoch}: unconsolidated {reported}"
            assert dict(reported) == ref.difference(expected, previous), f"epoch {epoch}: changes"
            assert all(t <= epoch for t in out.changes), f"epoch {epoch}: changes at a later epoch"
            previous = expected
            if after_epoch is not None:
                after_epoch(epoch, states)
