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
from timely.testing import simulated

pytestmark = pytest.mark.timeout(120)

PROCESSES = 3


class Barrier(timely.Vertex):
    """Counts the records of each time and tells the count at its notification; passes on each
    record ``r > 1`` as ``r - 1`` to the next iteration, to a worker chosen by the record."""

    def __init__(self, log: list[tuple[timely.Timestamp, int]]) -> None:
        self.log = log
        self.counts: Counter[timely.Timestamp] = Counter()
        self.done: list[timely.Timestamp] = []

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for t in self.done:
            assert not time.less_equal(t), f"a message at {time} after the notification at {t}"
        if time not in self.counts:
            self.notify_at(time)
        self.counts[time] += len(records)
        self.send_by(self.outputs[0], [r - 1 for r in records if r > 1], time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.done.append(time)
        self.log.append((time, self.counts.pop(time)))


def _build(logs: list[list[tuple[timely.Timestamp, int]]]) -> Any:
    def build(scope: timely.Scope) -> timely.Input:
        log: list[tuple[timely.Timestamp, int]] = []
        logs.append(log)
        numbers = scope.new_input("numbers")
        loop = timely.LoopContext(scope, "loop")
        back = loop.feedback("back")
        merged = loop.ingress(numbers).concat("in", back.stream)
        back.connect(merged.stage("barrier", lambda: Barrier(log), exchange=lambda r: r * 7919))
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
