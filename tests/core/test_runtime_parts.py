"""The parts a `ProcessRuntime` is composed of, each on its own (as trio tests its Runner's
``Deadlines`` and ``EntryQueue``): the checkpoint fence, the scheduler, the input bindings and
the waits. Each is built here by hand around a small graph, without an event loop running a
computation, and checked against what its contract says."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any, ClassVar

import pytest

import timely
from timely._runtime.bindings import MESSAGE_BATCH, Bindings
from timely._runtime.fence import CheckpointFence
from timely._runtime.scheduler import Scheduler
from timely._runtime.waiters import Waiters
from timely._runtime.worker import QueuedMessage, Worker
from timely.checkpoint import Checkpoints
from timely.dataflow import Dataflow
from timely.progress import ChangeBatch, ProgressTracker
from timely.timestamp import Timestamp


def t(epoch: int, *counters: int) -> Timestamp:
    return Timestamp(epoch, counters)


# The checkpoint fence -------------------------------------------------------------------------------


def test_the_fence_stands_where_the_policy_says() -> None:
    assert CheckpointFence.for_policy(None, 0).epoch is None
    every3 = CheckpointFence.for_policy(Checkpoints("d", every_epochs=3), start=4)
    assert (every3.epoch, every3.step) == (6, 3)  # epochs 4, 5, 6 then a checkpoint
    timed = CheckpointFence.for_policy(Checkpoints("d", every_seconds=1.0), start=4)
    assert (timed.epoch, timed.step) == (4, 1)  # every epoch is a candidate
    assert CheckpointFence.for_policy(Checkpoints("d", every_epochs=None), start=0).epoch is None


def test_an_absent_fence_admits_everything_and_is_never_due() -> None:
    fence = CheckpointFence()
    assert fence.admits(t(10**9))
    fence.observe({(t(5), 0)})
    assert not fence.due


def entry(port: int, time: Timestamp, records: list[Any], merged: int = 1) -> QueuedMessage:
    message = QueuedMessage(None, port, time, records, (None, port, time))  # type: ignore[arg-type]  # no vertex needed
    message.messages = merged
    return message


def test_the_fence_holds_what_it_does_not_admit_and_gives_it_back_in_order_when_lifted() -> None:
    fence = CheckpointFence(epoch=2, step=3)
    assert fence.admits(t(2)) and fence.admits(t(2, 7)) and not fence.admits(t(3))
    w0, w1 = Worker(0), Worker(1)
    held = [entry(0, t(3), ["a"], 2), entry(1, t(4), ["b"]), entry(0, t(6), ["c"])]
    fence.hold(w0, held[0])
    fence.hold(w1, entry(0, t(3), ["x"]))
    fence.hold(w0, held[1])
    fence.hold(w0, held[2])
    assert fence.held_back == 5 and not w0.queue
    w0.queue.append(entry(0, t(1), ["queued"]))
    fence.lift()
    assert fence.epoch == 5 and fence.held_back == 0
    # back at the front of their worker's queue, in the order they arrived, counted as queued
    assert [e.records for e in w0.queue] == [["a"], ["b"], ["c"], ["queued"]]
    assert w0.queued == 4 and [e.records for e in w1.queue] == [["x"]]


def test_the_fence_carries_what_was_sent_past_it_until_a_fence_passes_it() -> None:
    fence = CheckpointFence(epoch=2, step=2)
    records = [1, 2]
    fence.carry(stage=3, worker=1, port=0, time=t(3), records=records)
    fence.carry(stage=3, worker=0, port=1, time=t(7), records=[9])
    records.append(3)  # a copy was kept
    assert fence.carried() == [(3, 1, 0, (3,), [1, 2]), (3, 0, 1, (7,), [9])]
    fence.lift()  # now at 4: what was sent at 3 is inside it, in the checkpoint's vertex states
    assert fence.carried() == [(3, 0, 1, (7,), [9])]


def test_a_checkpoint_is_due_once_the_whole_frontier_is_past_the_fence() -> None:
    fence = CheckpointFence(epoch=2)
    fence.observe(set())  # an empty frontier: the computation is complete, nothing to save
    assert not fence.due
    fence.observe({(t(2), 0), (t(5), 1)})
    assert not fence.due
    fence.observe({(t(3), 0), (t(3, 0), 4)})
    assert fence.due
    fence.lift()
    assert not fence.due and fence.epoch == 3


# The scheduler -----------------------------------------------------------------------------------------


class Record(timely.Vertex):
    """Keeps what it receives; asks for a notification at each time; sends on what it got."""

    seen: ClassVar[dict[int, list[Any]]] = defaultdict(list)

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        Record.seen[self.worker_index].append(("recv", time.epoch, list(records)))
        self.notify_at(time)
        self.send_by(self.outputs[0], records, time)

    def on_notify(self, time: timely.Timestamp) -> None:
        Record.seen[self.worker_index].append(("notify", time.epoch))


def small(workers: int = 2, fence: CheckpointFence | None = None) -> tuple[Scheduler, Bindings, ChangeBatch]:
    """input -> record (exchange by value) -> probe, on ``workers`` workers of one process."""

    def build(scope: timely.Scope) -> None:
        scope.new_input("in").stage("record", Record, exchange=lambda r: r).probe("out")

    dataflow, _, graph = Dataflow.build(build, 0, 1, workers)
    pending = ChangeBatch()
    tracker = ProgressTracker(graph.reachability)
    failures: list[BaseException] = []
    scheduler = Scheduler(
        graph, workers, 0, 1, pending, tracker, fence or CheckpointFence(), None, failures.append, lambda: None
    )
    host = _Host(scheduler)
    bindings = Bindings(host, graph, scheduler, tracker, pending, 0)
    dataflow.bind(bindings)
    tracker.update({(t(0), 0): workers})  # the input holds epoch 0 on every worker
    Record.seen.clear()
    return scheduler, bindings, pending


class _Host:
    """The least a binding needs of a process: no driver (as from async code), no network."""

    failure: BaseException | None = None
    driver = None

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def record_failure(self, err: BaseException) -> None:
        self.failure = err

    def wake(self) -> None:
        pass

    def backlog(self) -> int:
        return self.scheduler.backlog()

    def congested(self) -> bool:
        return False

    def ready(self) -> bool:
        return True


def settle(scheduler: Scheduler, pending: ChangeBatch) -> None:
    """What `ProcessRuntime.step` does, until nothing moves: deliver, apply progress, notify."""
    for _ in range(100):
        did = scheduler.drain(float("inf"))
        if pending:
            scheduler.tracker.update(pending)
            pending.clear()
            scheduler.recheck_notifications()
            did = True
        if scheduler.deliver_notifications():
            did = True
        if not did:
            return
    raise AssertionError("the scheduler never settled")


def test_an_input_splits_a_send_into_messages_round_robin_over_the_workers() -> None:
    scheduler, bindings, pending = small(workers=2)
    (inp,) = bindings.inputs
    inp.send(range(2 * MESSAGE_BATCH + 5))
    # three messages from the input instances (worker 0, 1, 0), each exchanged to both workers
    assert [ctx.messages_sent for ctx in inp.contexts] == [4, 2]
    assert scheduler.backlog() == 6 and sum(pending.values()) == 6


def test_messages_go_where_the_exchange_sends_them_and_before_notifications() -> None:
    scheduler, bindings, pending = small(workers=2)
    (inp,) = bindings.inputs
    inp.send([0, 1, 2, 3])
    inp.advance_to(1)
    inp.send([5])
    inp.close()
    settle(scheduler, pending)
    evens, odds = Record.seen[0], Record.seen[1]
    assert [e for e in evens if e[0] == "recv"] == [("recv", 0, [0, 2])]
    assert sorted(e for e in odds if e[0] == "recv") == [("recv", 0, [1, 3]), ("recv", 1, [5])]
    # a worker's notification at a time comes after every message it received at that time
    assert evens[-1] == ("notify", 0) and odds.index(("notify", 0)) > odds.index(("recv", 0, [1, 3]))
    assert scheduler.tracker.is_empty() and not pending


def test_a_notification_waits_while_its_time_can_still_be_reached() -> None:
    scheduler, bindings, pending = small(workers=1)
    (inp,) = bindings.inputs
    inp.send([7])
    settle(scheduler, pending)
    assert Record.seen[0] == [("recv", 0, [7])]  # the input is still open at epoch 0
    inp.advance_to(1)
    settle(scheduler, pending)
    assert Record.seen[0] == [("recv", 0, [7]), ("notify", 0)]


def test_the_scheduler_delivers_nothing_past_the_fence_until_it_lifts() -> None:
    fence = CheckpointFence(epoch=0, step=1)
    scheduler, bindings, pending = small(workers=1, fence=fence)
    (inp,) = bindings.inputs
    inp.send([1])
    inp.advance_to(1)
    inp.send([2])
    inp.advance_to(2)
    settle(scheduler, pending)
    assert Record.seen[0] == [("recv", 0, [1]), ("notify", 0)]
    assert fence.held_back == 1 and scheduler.backlog() == 1
    assert scheduler.quiet_until(0)  # nothing left at or before the fence
    fence.lift()
    settle(scheduler, pending)
    assert Record.seen[0][2:] == [("recv", 1, [2]), ("notify", 1)]


def test_send_and_request_notification_act_as_the_vertex_would() -> None:
    scheduler, bindings, pending = small(workers=1)
    (record,) = scheduler.instances_of(1)
    record.held = t(0)  # as inside a callback at epoch 0 (what recovery restores from)
    scheduler.request_notification(record, t(0), t(0))
    record.held = None
    (inp,) = bindings.inputs
    inp.close()
    settle(scheduler, pending)
    assert Record.seen[0] == [("notify", 0)]
    assert scheduler.vertices("record") == [record.vertex]
    assert scheduler.instance(1, 5) is None  # worker 5 is not in this process


# Waits -------------------------------------------------------------------------------------------


async def test_a_probe_wait_resolves_when_the_frontier_passes_its_time() -> None:
    scheduler, bindings, pending = small(workers=1)
    waiters = Waiters(scheduler.tracker)
    (inp,) = bindings.inputs
    out = scheduler.graph.by_name["out"].index
    passed0, passed1 = waiters.passed(out, t(0)), waiters.passed(out, t(1))
    assert list(waiters.probe_waits()) == [(out, t(0)), (out, t(1))]
    inp.advance_to(1)
    settle(scheduler, pending)
    waiters.frontier_changed()
    assert passed0.done() and not passed1.done()
    holds = {"ready": False}
    condition = waiters.when(lambda: holds["ready"])
    waiters.check_conditions()
    assert not condition.done() and waiters.conditions
    holds["ready"] = True
    waiters.check_conditions()
    assert condition.done() and not waiters.conditions
    passed1.cancel()
    await asyncio.sleep(0)


def test_an_input_binding_logs_each_epoch_as_it_ends() -> None:
    scheduler, bindings, pending = small(workers=1)
    (inp,) = bindings.inputs
    sealed: list[tuple[int, list[Any], int | None]] = []
    inp.log_to(lambda epoch, records, after: sealed.append((epoch, records, after)))
    inp.send([1, 2])
    inp.advance_to(3)
    inp.send([4])
    inp.close()
    assert sealed == [(0, [1, 2], 3), (3, [4], None)]
    with pytest.raises(timely.InputError, match="closed"):
        inp.send([5])


# The time slice -----------------------------------------------------------------------------------


class _SliceClock:
    """A clock for `ProcessRuntime.step` whose slice is up as soon as it has begun: the step's
    first reading (its deadline) is the real time, every later one is far past it."""

    def __init__(self) -> None:
        self.starting = False

    def perf_counter(self) -> float:
        if self.starting:
            self.starting = False
            return time.perf_counter()
        return time.perf_counter() + 1000.0


def test_a_slice_that_runs_out_of_time_says_whether_work_remains(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ProcessRuntime.step` past its deadline returns True only while a further pass would find
    work: a step that ran out of time on its last piece of work is out of work (else its
    progress is held back from the peers as a busy process's, and an empty step follows)."""
    from timely._runtime import process

    def build(scope: timely.Scope) -> Any:
        inp = scope.new_input("in")
        inp.stage("record", Record, exchange=lambda r: r).probe("out")
        return inp

    dataflow, inp, graph = Dataflow.build(build, 0, 1, 1)
    runtime = process.ProcessRuntime(graph, dataflow)
    Record.seen.clear()
    clock = _SliceClock()
    monkeypatch.setattr(process, "_time", clock)  # every step makes one pass, then its time is up
    inp.send([7])
    inp.advance_to(1)
    said = []
    for _ in range(20):
        clock.starting = True
        more = runtime.step()
        said.append(more)
        if not more:
            break
    assert Record.seen[0] == [("recv", 0, [7]), ("notify", 0)]
    # the first step left the probe's message queued; the second did the rest and said so
    assert said == [True, False]
    assert not runtime.scheduler.has_work() and not runtime.pending
    clock.starting = True
    assert runtime.step() is False  # and indeed none was left
    inp.close()
    clock.starting = True
    assert runtime.step() is False and runtime.complete
