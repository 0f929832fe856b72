"""Feeding a linq dataflow with several epochs in flight, and checking each epoch as it passes.

`tests/support/linq_harness.check` moves in lockstep: feed an epoch, wait for it, compare. Here the
inputs run ahead of the outputs: epoch ``e`` is fed while epochs ``e - lag .. e - 1`` may
still be computing, so an operator holds differences of several epochs at once, and inside a
loop it sees times such as ``(2, 0)`` and ``(1, 5)`` that the product order leaves
incomparable. An input may also be closed early, before the outputs have caught up (and
before the other inputs stop).

Because later epochs may already have been absorbed when epoch ``w`` passes, an output's
``contents()`` may be ahead of ``w``; the checks here read the per-epoch change log instead
(`accumulated`), which holds exactly the epochs that have been reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq

__all__ = ["accumulated", "assert_epoch", "drive"]

Changes = Sequence[tuple[Any, int]]


def drive(
    comp: timely.Computation,
    inputs: Sequence[linq.CollectionInput],
    epochs: Sequence[Sequence[Changes]],
    probe: timely.Probe,
    on_passed: Callable[[int], None],
    *,
    lag: int = 0,
    close_after: Sequence[int | None] | None = None,
    timeout: float = TIMEOUT,
) -> None:
    """Feed ``epochs`` (per epoch, one list of changes per input) to ``inputs``, never more
    than ``lag`` epochs ahead of ``probe``; call ``on_passed(w)`` once for each epoch ``w`` in
    order, as soon as ``probe`` has passed it.

    ``close_after[i]`` closes input ``i`` right after it was fed that epoch (instead of
    advancing it); the epochs after that must have no changes for it. ``None``: the input is
    advanced to the epoch after the last and left open. ``lag`` of ``len(epochs)`` or more
    feeds everything before waiting for anything.
    """
    closing = list(close_after) if close_after is not None else [None] * len(inputs)
    assert len(closing) == len(inputs)
    passed = -1
    for epoch, per_input in enumerate(epochs):
        assert len(per_input) == len(inputs), f"epoch {epoch}: one list of changes per input"
        for i, (inp, changes) in enumerate(zip(inputs, per_input)):
            if inp.input.closed:
                assert not changes, f"epoch {epoch}: changes for input {i}, closed after epoch {closing[i]}"
                continue
            if changes:
                inp.update(changes)
            if closing[i] == epoch:
                inp.close()
            else:
                inp.advance_to(epoch + 1)
        while passed < epoch - lag:
            passed += 1
            comp.wait_passed(probe, passed, timeout=timeout)
            on_passed(passed)
    while passed < len(epochs) - 1:
        passed += 1
        comp.wait_passed(probe, passed, timeout=timeout)
        on_passed(passed)


def accumulated(out: linq.CollectionOutput, epoch: int) -> ref.Multiset:
    """The output's collection at ``epoch``: the sum of the changes reported for it and before."""
    return ref.apply({}, [c for e, changes in out.changes.items() if e <= epoch for c in changes])


def assert_epoch(out: linq.CollectionOutput, epoch: int, expected: ref.Multiset, previous: ref.Multiset) -> None:
    """The output reported, for ``epoch``, exactly the change from ``previous`` to ``expected``
    (consolidated: each record once), and its accumulation up to ``epoch`` is ``expected``."""
    got = accumulated(out, epoch)
    assert got == expected, (
        f"epoch {epoch}: missing {ref.difference(expected, got)}, extra {ref.difference(got, expected)}"
    )
    reported = out.changes.get(epoch, [])
    assert len({r for r, _ in reported}) == len(reported), f"epoch {epoch}: unconsolidated {reported}"
    assert dict(reported) == ref.difference(expected, previous), f"epoch {epoch}: changes {reported}"
