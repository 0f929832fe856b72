"""Seeing inside: statistics, graph pictures, two-time notifications, probes, explain() and the
stall watcher."""

from __future__ import annotations

import asyncio
import logging
import time as time_module
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT


def loop_dataflow(scope: timely.Scope) -> timely.Input:
    inp = scope.new_input("numbers")
    loop = timely.LoopContext(scope, "halve")
    fb = loop.feedback("again")
    x = loop.ingress(inp, name="enter").concat("merge", fb.stream)
    y = x.map("half", lambda v: v // 2).exchange("spread", lambda v: v)
    fb.connect(y.filter("positive", lambda v: v > 0))
    loop.egress(y, name="leave").probe("done")
    return inp


def test_statistics_count_what_was_delivered(workers: int) -> None:
    with timely.execute(loop_dataflow, workers=workers, timeout=TIMEOUT) as (comp, inp):
        inp.send([1, 2, 3, 4])
    halves = [v for x in (1, 2, 3, 4) for v in _halvings(x)]
    stats = comp.statistics()
    assert len(stats.workers) == workers
    half = comp.vertices("halve.half")
    assert sum(v.statistics().records_received for v in half) == len(halves)
    assert sum(v.statistics().records_sent for v in half) == len(halves)
    assert all(v.statistics().stage == "halve.half" for v in half)
    assert stats.records_delivered >= 5 * len(halves)
    assert stats.active_pointstamps == 0 and comp.complete


def _halvings(x: int) -> list[int]:
    out = []
    while True:
        x //= 2
        out.append(x)
        if x == 0:
            return out


def test_the_graph_exports_as_dot_and_mermaid() -> None:
    with timely.execute(loop_dataflow, timeout=TIMEOUT) as (comp, inp):
        dot = comp.graph.to_dot()
        mermaid = comp.graph.to_mermaid()
    for name in ("numbers", "halve.merge", "halve.half", "halve.again", "halve.enter", "halve.leave", "done"):
        assert f'"{name}"' in dot and f'"{name}"' in mermaid
    assert "subgraph cluster_1 {" in dot and 'label="loop halve"' in dot
    assert 'subgraph c1["loop halve"]' in mermaid
    assert dot.count("->") == len(comp.graph.connectors)
    assert mermaid.count("-. exchange .->") == 1 and dot.count('label="exchange"') == 1


class Purger(timely.Vertex):
    """Two-time notify_at: a purge notification without capability must not delay others."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time, capability=None)  # purge: holds nothing
        self.log.append(("recv", time.epoch))

    def on_notify(self, time: timely.Timestamp) -> None:
        self.log.append(("purge", time.epoch))


def test_a_notification_without_capability_never_delays_the_frontier() -> None:
    log: list[tuple[str, int]] = []

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        inp = scope.new_input("in")
        probe = inp.stage("purger", lambda: Purger(log)).probe()
        return inp, probe

    with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, probe)):
        inp.send([1])
        inp.advance_to(1)
        comp.wait_passed(probe, 0)
        assert ("purge", 0) in log
        assert comp.statistics().active_pointstamps == 1  # only the input's capability at epoch 1


class LateCapability(timely.Vertex):
    """notify_at(t, capability=c) with c > t: notified once t is complete, may send at c."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time, capability=timely.Timestamp(time.epoch + 5))

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [("late", time.epoch)], timely.Timestamp(time.epoch + 5))


def test_a_capability_later_than_the_guarantee_lets_the_vertex_send_later() -> None:
    got: list[tuple[int, Any]] = []

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("late", LateCapability).subscribe(lambda t, b: got.extend((t.epoch, r) for r in b))
        return inp

    with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
        inp.send([1])
        inp.advance_to(2)
        inp.send([2])
    assert got == [(5, ("late", 0)), (7, ("late", 2))]


class Marks(timely.Vertex):
    """Asks to be notified at every time it sees: explain() has a notification to talk about."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time)


def test_explain_answers_about_the_present_after_sleep_advance_and_close() -> None:
    # The event loop runs only inside timely calls: explain() must first let the runtime take in
    # what the program did meanwhile (it used to say "still open at epoch 0" after advance_to(1)).
    def build(scope: timely.Scope) -> timely.Input:
        words = scope.new_input("words")
        words.stage("marks", Marks)
        return words

    with timely.execute(build, timeout=TIMEOUT) as (comp, words):
        words.send(["a"])
        assert comp.explain() == (
            "notification at (0) for stage 'marks' (worker 0) waits on:\n"
            "  - input 'words' is still open at epoch 0 (advance_to or close it)"
        )
        time_module.sleep(0.3)
        words.advance_to(1)
        assert comp.explain() == (
            "active pointstamps on the frontier:\n  - input 'words' is still open at epoch 1 (advance_to or close it)"
        )
        words.close()
        assert comp.explain() == "nothing is active: the computation is complete"
        assert comp.complete


class MarksEachEpochNamed(timely.Vertex):
    """Asks to be notified at the epoch each record names: as many epochs open as records."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for r in records:
            self.notify_at(timely.Timestamp(r))


@pytest.mark.parametrize("open_epochs", [5, 150])
def test_statistics_and_explain_say_when_many_epochs_are_open(open_epochs: int) -> None:
    """The input stays open at epoch 0, so none of the requested epochs can complete: the
    statistics count them, and from a hundred on explain() says the inputs run ahead and names
    Input.throttle."""

    def build(scope: timely.Scope) -> timely.Input:
        numbers = scope.new_input("numbers")
        numbers.stage("marks", MarksEachEpochNamed)
        return numbers

    with timely.execute(build, timeout=TIMEOUT) as (comp, numbers):
        numbers.send(list(range(open_epochs)) * 2)  # repeats coalesce
        text = comp.explain()  # runs the computation until it is idle first
        stats = comp.statistics()
        assert stats.open_epochs == open_epochs
        assert stats.pending_notifications == open_epochs
        ahead = text.startswith(
            f"{open_epochs} epochs are open with notifications pending (epochs 0 to {open_epochs - 1}):"
        )
        assert ahead == (open_epochs >= 100) == ("Input.throttle" in text)
        assert f"notification at ({open_epochs - 1}) for stage 'marks'" in text
        numbers.close()
    assert comp.statistics().open_epochs == 0
    assert comp.vertices("marks")[0].statistics().notifications_delivered == open_epochs


class BusyThenSlow(timely.Vertex):
    """A millisecond per message, then one callback that holds the event loop for seconds."""

    def __init__(self, last: int, seconds: float) -> None:
        self.last, self.seconds = last, seconds

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        time_module.sleep(self.seconds if records[-1] == self.last else 0.001)
        self.send_by(self.outputs[0], records, time)


async def test_a_long_callback_is_not_a_stall(caplog: pytest.LogCaptureFixture) -> None:
    # The scheduler is busy (many short callbacks: the stall watcher looks in between), then one
    # callback keeps the event loop for 2.5 s, then the scheduler idles, the input left open. The
    # idle time counts from when it went idle: 0.6 s, under the 1 s limit, so no stall is logged.
    # Then it idles for 1.6 s: that is a stall, logged once with the open input.
    last = 300

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        numbers = scope.new_input("numbers")
        return numbers, numbers.stage("work", lambda: BusyThenSlow(last, 2.5)).probe("done")

    with caplog.at_level(logging.WARNING, logger="timely"):
        async with timely.execute_async(build, stall_log_after=1.0, timeout=TIMEOUT) as (comp, (numbers, probe)):
            for epoch in range(last + 1):  # one message per epoch: none merges with another
                numbers.send([epoch])
                numbers.advance_to(epoch + 1)
            started = time_module.perf_counter()
            await comp.wait_passed(probe, last)
            assert time_module.perf_counter() - started > 2.5  # it was busy all that time
            await asyncio.sleep(0.6)
            assert not [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
            await asyncio.sleep(1.0)
    stalls = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
    assert len(stalls) == 1, stalls
    assert stalls[0].startswith("no progress for 1 s; what holds it back:\n")
    assert f"input 'numbers' is still open at epoch {last + 1}" in stalls[0]
