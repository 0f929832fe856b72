"""Backpressure: a fast input feeding a slow stage in another process keeps memory bounded,
and an input can be held a fixed number of epochs ahead of a probe."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

import timely
import timely.testing
from tests.support import TIMEOUT

BATCH = 1000
BATCHES = 400  # 400,000 records: far more than the queues may hold


class Slow(timely.Vertex):
    """Every batch awaits a little: the stage consumes much slower than the input produces."""

    def __init__(self) -> None:
        self.count = 0

    async def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        await asyncio.sleep(0.0005)
        self.count += len(records)


def slow_sink(scope: timely.Scope) -> tuple[timely.Input, Any]:
    inp = scope.new_input("fast")
    # every record goes to the last worker, which lives in the last process
    inp.stage("slow", Slow, exchange=lambda r: scope.peers - 1).probe()
    return inp, None


async def test_a_fast_input_into_a_slow_remote_stage_keeps_queues_bounded() -> None:
    async with timely.testing.simulated(slow_sink, processes=2, seed=3, timeout=TIMEOUT) as runs:
        (producer, (inp, _)), (consumer, _) = runs
        network = producer.runtime.transport.network  # type: ignore[union-attr]  # simulated: a SimTransport
        peak_channel = 0
        for i in range(BATCHES):
            inp.send(range(i * BATCH, (i + 1) * BATCH))
            await producer.drain(timeout=TIMEOUT)
            peak_channel = max(peak_channel, max(network.queued_bytes.values()))
    received = sum(cast(Slow, v).count for v in consumer.vertices("slow"))
    assert received == BATCH * BATCHES  # nothing lost
    stats = [comp.statistics() for comp, _ in runs]
    # The consumer stopped reading at 256 queued messages (each <= 1000 records) and the
    # producer waited: far fewer than the 400 batches ever sat in one place.
    assert stats[1].max_queued_messages < 300, stats[1]
    assert stats[0].max_queued_messages <= 40, stats[0]
    assert peak_channel < 8 << 20  # the in-memory channel's bytes stayed near its high-water mark


class Burst(timely.Vertex):
    """Each record ``n`` becomes one message of `BURST` records: large messages, as a busy stage
    sends (the messages it takes in are merged, up to 65,536 records)."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for n in records:
            self.send_by(self.outputs[0], list(range(n * BURST, (n + 1) * BURST)), time)


BURST = 50_000


def bursts_into_a_slow_sink(scope: timely.Scope) -> tuple[timely.Input, Any]:
    inp = scope.new_input("few")
    burst = inp.stage("burst", Burst, exchange=lambda r: 0)  # on the first process
    burst.stage("slow", Slow, exchange=lambda r: scope.peers - 1).probe()
    return inp, None


async def test_large_messages_into_a_slow_remote_stage_keep_its_queued_records_bounded() -> None:
    # 40 messages of 50,000 records each: 2M records, far below the 256 messages at which the
    # consumer used to stop reading, so before backpressure counted records they all queued there.
    async with timely.testing.simulated(bursts_into_a_slow_sink, processes=2, seed=5, timeout=TIMEOUT) as runs:
        (producer, (inp, _)), (consumer, _) = runs
        for n in range(40):  # an epoch each: 40 callbacks of Burst, 40 messages
            inp.send([n])
            inp.advance_to(n + 1)
    assert sum(cast(Slow, v).count for v in consumer.vertices("slow")) == 40 * BURST  # nothing lost
    queued = consumer.statistics().max_queued_records
    # It stopped reading past 256 Ki records; what one delivery brings on top is a message or so.
    assert 0 < queued <= 256 * 1024 + 2 * BURST, queued


async def test_a_message_too_large_for_one_frame_goes_as_several_and_arrives_whole() -> None:
    # One callback sends 400,000 records (about 2 MB encoded) to the other process: they go as
    # messages of at most 1 MiB, each in a frame well inside the receiver's decode budget.
    big = 400_000

    def build(scope: timely.Scope) -> tuple[timely.Input, Any]:
        inp = scope.new_input("one")
        burst = inp.stage("burst", lambda: BigBurst(big), exchange=lambda r: 0)
        burst.stage("slow", Slow, exchange=lambda r: scope.peers - 1).probe()
        return inp, None

    async with timely.testing.simulated(build, processes=2, seed=9, timeout=TIMEOUT) as runs:
        (producer, (inp, _)), (consumer, _) = runs
        inp.send([0])
    assert sum(cast(Slow, v).count for v in consumer.vertices("slow")) == big
    network = producer.statistics().network
    assert network["data_frames_sent"] >= 2 and network["data_bytes_sent"] > 1 << 20, network
    assert network["data_bytes_sent"] / network["data_frames_sent"] <= (1 << 20) + 100, network


class BigBurst(timely.Vertex):
    def __init__(self, size: int) -> None:
        self.size = size

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], list(range(10**6, 10**6 + self.size)), time)


def throttled(scope: timely.Scope) -> tuple[timely.Input, timely.Probe, list[tuple[int, int]]]:
    seen: list[tuple[int, int]] = []
    inp = scope.new_input("epochs")
    probe = inp.stage("slow", Slow).probe("done")
    inp.throttle(probe, epochs_ahead=2)
    return inp, probe, seen


def test_an_input_is_held_to_k_epochs_ahead_of_its_probe() -> None:
    with timely.execute(throttled, timeout=TIMEOUT) as (comp, (inp, probe, _)):
        for e in range(1, 12):
            inp.send(range(100))
            inp.advance_to(e)
            # after advance_to(e) returns, the probe has passed e - 3: at most 2 epochs in flight
            if e >= 3:
                assert probe.passed(e - 3)
            frontier = list(probe.frontier())
            assert frontier and frontier[0].epoch >= e - 2


def two_inputs_one_throttled(scope: timely.Scope) -> tuple[timely.Input, timely.Input, timely.Probe]:
    first, second = scope.new_input("first"), scope.new_input("second")
    probe = first.concat("both", second).probe("done")
    first.throttle(probe, epochs_ahead=0)
    return first, second, probe


def test_a_throttle_that_another_open_input_holds_back_is_refused_not_hung() -> None:
    """Advancing `first` to 2 waits for the probe to pass epoch 1, which `second` (open at epoch
    0, and only this program can advance it) holds back for ever: refused at once, naming it."""
    with (
        pytest.raises(timely.StalledError, match=r"throttled input.*'second' \(at epoch 0\)"),
        timely.execute(two_inputs_one_throttled, timeout=TIMEOUT) as (_, (first, second, _probe)),
    ):
        first.advance_to(1)  # waits for epoch -1: nothing to wait for
        first.advance_to(2)


def test_a_throttle_passes_once_the_other_input_moves_first() -> None:
    """The same program, fed in the order that lets every wait end, runs to completion."""
    with timely.execute(two_inputs_one_throttled, timeout=TIMEOUT) as (_, (first, second, probe)):
        for e in range(1, 5):
            second.advance_to(e)
            first.advance_to(e)
            assert probe.passed(e - 1)
