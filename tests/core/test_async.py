"""Async callbacks: the vertex is an actor, and what it received stays pending until it returns."""

from __future__ import annotations

import asyncio
from typing import Any

import timely
from tests.support import TIMEOUT


class SlowEcho(timely.Vertex):
    """Awaits before echoing; checks it is never re-entered."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.running = 0

    async def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.running += 1
        assert self.running == 1, "an actor handles one callback at a time"
        await asyncio.sleep(0.01)
        self.log.append(f"echo {time.epoch} {sorted(records)}")
        self.send_by(self.outputs[0], records, time)
        self.running -= 1


class Barrier(timely.Vertex):
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.got: dict[timely.Timestamp, list[Any]] = {}

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if time not in self.got:
            self.got[time] = []
            self.notify_at(time)
        self.got[time].extend(records)

    async def on_notify(self, time: timely.Timestamp) -> None:
        await asyncio.sleep(0)
        self.log.append(f"complete {time.epoch} {sorted(self.got.pop(time))}")


async def test_async_callbacks_hold_back_notifications_until_they_return(workers: int) -> None:
    log: list[str] = []

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        inp = scope.new_input("in")
        out = inp.stage("echo", lambda: SlowEcho(log)).stage("barrier", lambda: Barrier(log), exchange=lambda r: 0)
        return inp, out.probe()

    async with timely.execute_async(build, workers=workers, timeout=TIMEOUT) as (comp, (inp, probe)):
        for e in range(3):
            inp.send([e, e + 10])
            inp.send([e + 20])
            inp.advance_to(e + 1)
        await comp.wait_passed(probe, 2)
        assert probe.passed(2)
    completes = [line for line in log if line.startswith("complete")]
    assert completes == [f"complete {e} {[e, e + 10, e + 20]}" for e in range(3)]
    for e in range(3):  # each epoch completes only after every echo of that epoch
        last_echo = max(i for i, line in enumerate(log) if line.startswith(f"echo {e} "))
        assert last_echo < log.index(f"complete {e} {[e, e + 10, e + 20]}")


def test_async_callbacks_work_from_synchronous_code() -> None:
    log: list[str] = []

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("echo", lambda: SlowEcho(log)).stage("barrier", lambda: Barrier(log))
        return inp

    with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
        inp.send([3, 1, 2])
    assert log == ["echo 0 [1, 2, 3]", "complete 0 [1, 2, 3]"]
