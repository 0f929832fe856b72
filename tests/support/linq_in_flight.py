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

Programs for `tests.support.modes.Mode.run` check the same way across real processes: each
process feeds its `share` of every epoch and reports its output's changes (`reported`); the
test adds every process's reports up epoch by epoch (`accumulated_reports`) and compares them
with the reference replayed over the same epochs (`replayed`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq

__all__ = ["accumulated", "accumulated_reports", "as_json", "assert_epoch", "drive", "replayed", "reported", "share"]

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


# Programs in several processes ------------------------------------------------------------


def share(changes: Sequence[ref.Change], index: int, processes: int) -> list[ref.Change]:
    """The changes process ``index`` of ``processes`` feeds: every ``processes``-th one."""
    return list(changes[index::processes])


def reported(out: linq.CollectionOutput) -> dict[str, list[list[Any]]]:
    """The output's changes by epoch, JSON-able: what a process reports to the test."""
    return {str(e): [[r, d] for r, d in c] for e, c in sorted(out.changes.items())}


def as_json(m: ref.Multiset) -> dict[str, int]:
    """``m`` keyed by each record's JSON text as it reads after a trip through JSON (a tuple
    comes back a list), so that it compares with `accumulated_reports`."""
    return {json.dumps(json.loads(json.dumps(r))): n for r, n in m.items() if n}


def accumulated_reports(results: Sequence[dict[str, Any]], epochs: int) -> list[dict[str, int]]:
    """Per epoch, the output accumulated over every process's changes (`reported`, under
    ``"changes"``) up to it."""
    total: Counter[str] = Counter()
    out = []
    for epoch in range(epochs):
        for r in results:
            for record, diff in r["changes"].get(str(epoch), []):
                total[json.dumps(record)] += diff
        out.append({k: v for k, v in total.items() if v})
    return out


def replayed(epochs: Sequence[Sequence[Changes]], reference: Callable[..., ref.Multiset]) -> list[dict[str, int]]:
    """Per epoch (one list of changes per input), ``reference`` over each input's collection as
    of that epoch, keyed as `as_json`: what `accumulated_reports` must equal."""
    states: list[ref.Multiset] = [{} for _ in epochs[0]] if epochs else []
    out = []
    for per_input in epochs:
        states = [ref.apply(s, changes) for s, changes in zip(states, per_input, strict=True)]
        out.append(as_json(reference(*states)))
    return out
