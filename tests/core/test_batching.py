"""Queued messages for the same vertex, input and time are delivered as one batch, and nothing
about progress changes: every record arrives once, notifications still wait for all of them,
and an async vertex that is busy meanwhile releases exactly what it took."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from typing import Any

import timely
from tests.support import TIMEOUT
from timely_libs._hash import stable_hash


class Record(timely.Vertex):
    """Keeps every batch it gets (sizes per time) and, at each complete time, what it had."""

    def __init__(self, batches: list[tuple[int, int]], complete: dict[int, int]) -> None:
        self.batches = batches
        self.complete = complete
        self.seen: dict[timely.Timestamp, int] = {}

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if time not in self.seen:
            self.seen[time] = 0
            self.notify_at(time)
        self.seen[time] += len(records)
        self.batches.append((time.epoch, len(records)))

    def on_notify(self, time: timely.Timestamp) -> None:
        self.complete[time.epoch] = self.complete.get(time.epoch, 0) + self.seen.pop(time)


def test_queued_messages_for_one_input_and_time_arrive_as_one_batch() -> None:
    batches: list[tuple[int, int]] = []
    complete: dict[int, int] = {}

    def build(scope: timely.Scope) -> Any:
        source = scope.new_input("numbers")
        source.stage("record", lambda: Record(batches, complete))
        return source

    with timely.execute(build, timeout=TIMEOUT) as (comp, source):
        for epoch in range(3):
            for _ in range(10):  # ten messages queued before the scheduler runs
                source.send(list(range(100)))
            source.advance_to(epoch + 1)
        source.close()
        comp.run()
        stats = comp.vertices("record")[0].statistics()
    assert complete == {0: 1000, 1: 1000, 2: 1000}
    assert sum(n for _, n in batches) == 3000
    assert stats.messages_received < 30, f"{stats.messages_received} deliveries for 30 queued messages"


def test_merging_queued_messages_leaves_the_senders_lists_as_they_were() -> None:
    got: list[list[int]] = []
    sent = [[1, 2], [3], [4, 5]]
    copies = [list(batch) for batch in sent]

    def build(scope: timely.Scope) -> Any:
        source = scope.new_input("numbers")
        source.map("same", lambda x: x).subscribe(lambda t, batch: got.append(sorted(batch)))
        return source

    with timely.execute(build, timeout=TIMEOUT) as (_, source):
        for batch in sent:  # queued before the scheduler runs: they merge
            source.send(batch)
    assert got == [[1, 2, 3, 4, 5]]
    assert sent == copies


class Busy(timely.Vertex):
    """An actor that takes its time: messages queue behind it (and merge) while it awaits."""

    def __init__(self) -> None:
        self.total = 0

    async def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        await asyncio.sleep(0.005)
        self.total += len(records)
        self.send_by(self.outputs[0], records, time)


def test_a_busy_async_vertex_releases_every_merged_message() -> None:
    batches: list[tuple[int, int]] = []
    complete: dict[int, int] = {}

    def build(scope: timely.Scope) -> Any:
        source = scope.new_input("numbers")
        slow = source.stage("busy", Busy)
        slow.stage("record", lambda: Record(batches, complete), exchange=lambda r: r)
        return source

    with timely.execute(build, workers=2, timeout=TIMEOUT) as (comp, source):
        for epoch in range(4):
            for i in range(20):
                source.send([epoch * 1000 + i * 10 + k for k in range(10)])
            source.advance_to(epoch + 1)
        source.close()
        comp.run()
    assert complete == {e: 200 for e in range(4)}


def test_the_collector_threshold_is_raised_while_running_and_restored_after() -> None:
    before = gc.get_threshold()
    during: list[tuple[int, ...]] = []

    def look(r: Any) -> Any:
        during.append(gc.get_threshold())
        return r

    def build(scope: timely.Scope) -> Any:
        source = scope.new_input("x")
        source.map("look", look)
        return source

    with timely.execute(build, timeout=TIMEOUT) as (comp, source):
        source.send([1])
        source.close()
        comp.run()
    assert during and during[0][0] > before[0]
    assert gc.get_threshold() == before


def test_stable_hash_of_int_pairs_is_the_same_in_every_process() -> None:
    """Pairs of ints take Python's tuple hash, which must not depend on PYTHONHASHSEED."""
    keys = [(1, 2), (-7, 2**70), (0, 0), (123456789, -1)]
    code = f"from timely_libs._hash import stable_hash; print([stable_hash(k) for k in {keys!r}])"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
        ).stdout
        for seed in ("1", "2", "random")
    }
    assert outputs == {f"{[stable_hash(k) for k in keys]}\n"}
