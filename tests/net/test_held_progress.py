"""Progress held back between processes (`ProgressAccumulator`, `ClusterLink.flush`): a loop whose
iterations exchange records and wait for a notification, on simulated processes with seeded
interleavings of their channels.

Every vertex checks the safety property itself (no message at or before a time it was notified
of arrives later), the per-iteration counts are compared with a recomputation from scratch, and
the runs must actually have held progress back and sent it inside DATA frames, so the path is
the one under test.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import timely
from tests.core.test_dataflows import IterationBarrier
from timely.testing import simulated

pytestmark = pytest.mark.timeout(120)

PROCESSES = 3


def _build(logs: list[list[tuple[timely.Timestamp, int]]]) -> Any:
    def build(scope: timely.Scope) -> timely.Input:
        log: list[tuple[timely.Timestamp, int]] = []
        logs.append(log)
        numbers = scope.new_input("numbers")
        loop = timely.LoopContext(scope, "loop")
        back = loop.feedback("back")
        merged = loop.ingress(numbers).concat("in", back.stream)
        back.connect(merged.stage("barrier", lambda: IterationBarrier(log), exchange=lambda r: r * 7919))
        return numbers

    return build


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_held_progress_never_lets_a_notification_overtake_a_message(seed: int) -> None:
    """Epochs of numbers go round the loop, each iteration counted at a notification on every
    process. The counts add up, per (epoch, iteration), to what a plain recomputation gives."""
    epochs = [[(seed * 31 + e * 17 + i * 13) % 40 + 1 for i in range(60)] for e in range(4)]
    logs: list[list[tuple[timely.Timestamp, int]]] = []
    async with simulated(_build(logs), processes=PROCESSES, seed=seed, timeout=60) as runs:
        for epoch, numbers in enumerate(epochs):
            for process, (_, inp) in enumerate(runs):
                inp.send(numbers[process::PROCESSES])
                inp.advance_to(epoch + 1)
    expected: Counter[tuple[int, int]] = Counter()
    for epoch, numbers in enumerate(epochs):
        for r in numbers:
            for iteration in range(r):  # r goes round as r, r - 1, ..., 1
                expected[(epoch, iteration)] += 1
    counted: Counter[tuple[int, int]] = Counter()
    for log in logs:
        for time, count in log:
            counted[(time.epoch, time.counters[0])] += count
    assert counted == expected
    network = [comp.statistics().network for comp, _ in runs]
    assert sum(n["progress_holds"] for n in network) > 0, network
    assert sum(n["progress_piggybacked"] for n in network) > 0, network
