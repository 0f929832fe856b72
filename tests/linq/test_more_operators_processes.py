"""semijoin, antijoin, count_all, enter_at, fixed_point, prioritize and `ColumnOutput` across processes:
the union of what every process reports, epoch by epoch, equals the from-scratch recomputation
(tests/support/linq_operators_program.py), in lockstep and with every epoch in flight at once."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.support import linq_reference as ref
from tests.support.linq_operators_program import builder, inputs, reference
from tests.support.modes import Mode

TIMEOUT = 90.0
MODES = [Mode("one", workers=2), Mode("simulated", processes=2, seed=3), Mode("tcp", processes=2)]


def expected_changes(seed: int) -> dict[int, ref.Multiset]:
    a_epochs, b_epochs = inputs(seed)
    a: ref.Multiset = {}
    b: ref.Multiset = {}
    previous: ref.Multiset = {}
    out = {}
    for epoch, (ea, eb) in enumerate(zip(a_epochs, b_epochs)):
        a, b = ref.apply(a, ea), ref.apply(b, eb)
        now = reference(a, b)
        change = ref.difference(now, previous)
        if change:
            out[epoch] = change
        previous = now
    return out


def merged(results: list[dict[str, Any]], part: str) -> dict[int, ref.Multiset]:
    """Per epoch, the changes every process reported (a record reported twice counts twice)."""
    out: dict[int, Counter[str]] = {}
    for r in results:
        for epoch, changes in r[part].items():
            for record, diff in changes:
                out.setdefault(int(epoch), Counter())[json.dumps(record)] += diff
    return {e: {k: v for k, v in c.items() if v} for e, c in out.items()}


def as_json(changes: dict[int, ref.Multiset]) -> dict[int, ref.Multiset]:
    return {e: {json.dumps(json.loads(json.dumps(r))): d for r, d in c.items()} for e, c in changes.items()}


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("lag", [0, None], ids=["lockstep", "all_at_once"])
def test_operators_match_recomputation_in_every_mode(mode: Mode, lag: int | None) -> None:
    seed = 5
    results = mode.run(builder, seed, lag=lag, timeout=TIMEOUT)
    expected = as_json(expected_changes(seed))
    assert len(expected) >= 4, "the workload should change the answer in most epochs"
    assert merged(results, "changes") == expected
    assert merged(results, "columns") == expected
    if mode.processes > 1:
        assert all(r["changes"] for r in results), "every process should hold part of the answer"
