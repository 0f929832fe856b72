"""Misuse and failure: every one a typed error that names the stage and time; never a hang."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely.dataflow import Dataflow
from timely.graph import GraphBuilder, StageKind
from timely.progress import PathSummary


class SendsBack(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], records, timely.Timestamp(time.epoch - 1))


class NotifiesBack(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(timely.Timestamp(time.epoch - 1))


class WrongDepth(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], records, time.enter())


@pytest.mark.parametrize(
    ("vertex", "words"),
    [(SendsBack, "send at (2), earlier than the time (3)"), (NotifiesBack, "notify_at at (2), earlier than")],
)
def test_a_vertex_acting_back_in_time_gets_a_timestamp_error(workers: int, vertex: type, words: str) -> None:
    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("culprit", vertex).probe()
        return inp

    with pytest.raises(timely.TimestampError) as info:
        with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
            inp.advance_to(3)
            inp.send([1])
    assert "'culprit'" in str(info.value) and words in str(info.value)
    assert info.value.stage == "culprit" and info.value.held == timely.Timestamp(3)


def test_a_send_with_the_wrong_loop_depth_is_refused() -> None:
    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("culprit", WrongDepth).probe()
        return inp

    with pytest.raises(timely.TimestampError, match="1 loop counters, but the stage is inside 0 loop"):
        with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
            inp.send([1])


def test_a_cycle_without_feedback_is_refused_naming_its_stages() -> None:
    g = GraphBuilder()
    src = g.add_stage("source", StageKind.INPUT, 0, None, 0, [PathSummary.identity(0)])
    a = g.add_stage("a", StageKind.VERTEX, 0, object, 2, [PathSummary.identity(0)])
    b = g.add_stage("b", StageKind.VERTEX, 0, object, 1, [PathSummary.identity(0)])
    g.connect(src, 0, a, 0)
    g.connect(a, 0, b, 0)
    g.connect(b, 0, a, 1)
    with pytest.raises(timely.CycleError) as info:
        g.freeze()
    assert set(info.value.stages) == {"a", "b"}
    assert "a -> b -> a" in str(info.value) or "b -> a -> b" in str(info.value)


def test_loop_misuse_is_refused_when_building() -> None:
    def unconnected(scope: timely.Scope) -> None:
        loop = timely.LoopContext(scope, "l")
        loop.feedback("fb")
        loop.ingress(scope.new_input("in")).probe()

    with pytest.raises(timely.GraphError, match="feedback 'l.fb' was never connected"):
        with timely.execute(unconnected, timeout=TIMEOUT):
            pass

    def mixed_scopes(scope: timely.Scope) -> None:
        inp = scope.new_input("in")
        loop = timely.LoopContext(scope, "l")
        inner = loop.ingress(inp)
        loop.stage("join", timely.Vertex, [inner, inp])

    with pytest.raises(timely.ScopeError, match="stage 'join' is in scope 'l' but its input from 'in'"):
        with timely.execute(mixed_scopes, timeout=TIMEOUT):
            pass

    def egress_from_outside(scope: timely.Scope) -> None:
        loop = timely.LoopContext(scope, "l")
        loop.egress(scope.new_input("in"))

    with pytest.raises(timely.ScopeError, match="egress takes a stream of this loop"):
        with timely.execute(egress_from_outside, timeout=TIMEOUT):
            pass

    def feedback_from_another_loop(scope: timely.Scope) -> None:
        inp = scope.new_input("in")
        one, two = timely.LoopContext(scope, "one"), timely.LoopContext(scope, "two")
        fb = one.feedback("fb")
        fb.connect(two.ingress(inp))

    with pytest.raises(timely.ScopeError, match="feedback 'one.fb' of loop 'one' was connected"):
        with timely.execute(feedback_from_another_loop, timeout=TIMEOUT):
            pass

    def duplicate_names(scope: timely.Scope) -> None:
        inp = scope.new_input("in")
        inp.map("m", str)
        inp.map("m", repr)

    with pytest.raises(timely.GraphError, match="'m' is already used"):
        with timely.execute(duplicate_names, timeout=TIMEOUT):
            pass


class Explodes(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if 13 in records:
            raise ValueError("unlucky record")
        self.send_by(self.outputs[0], records, time)


def test_a_user_exception_ends_the_computation_chained_with_stage_and_time(workers: int) -> None:
    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        loop = timely.LoopContext(scope, "loop")
        x = loop.ingress(inp).stage("explodes", Explodes, exchange=lambda r: r)
        loop.egress(x).probe()
        return inp

    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
            inp.send(list(range(5)))
            inp.advance_to(2)
            inp.send([13])
    err = info.value
    assert isinstance(err.__cause__, ValueError) and str(err.__cause__) == "unlucky record"
    assert err.stage == "loop.explodes" and err.time == timely.Timestamp(2, (0,)) and err.callback == "on_recv"
    assert "stage 'loop.explodes'" in str(err) and "ValueError" in str(err) and "(2, (0,))" in str(err)
    with pytest.raises(timely.ComputationFailed):
        inp.send([1])


def test_a_user_exception_during_a_synchronous_wait_is_raised_by_that_wait() -> None:
    """A process on its own runs the scheduler on the waiting caller's stack, not the event
    loop's: a callback's exception must still come out of that wait as the chained
    `VertexError` the loop raises, once, and leave the computation failed."""

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        inp = scope.new_input("in")
        return inp, inp.stage("explodes", Explodes).probe()

    seen: list[BaseException] = []
    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, probe)):
            inp.send([1, 2])
            inp.advance_to(1)
            comp.wait_passed(probe, 0)  # passes: the same path, with nothing raised
            inp.send([13])
            inp.advance_to(2)
            try:
                comp.wait_passed(probe, 1)
            except timely.VertexError as exc:
                seen.append(exc)
            with pytest.raises(timely.ComputationFailed):
                comp.wait_passed(probe, 1)
    assert len(seen) == 1 and seen[0] is info.value
    err = info.value
    assert isinstance(err.__cause__, ValueError) and str(err.__cause__) == "unlucky record"
    assert err.stage == "explodes" and err.time == timely.Timestamp(1) and err.callback == "on_recv"


class ALibrarysError(timely.LibraryError):
    """What a library raises: a TimelyError, but one that reports a user function's failure."""


class RaisesALibraryError(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        raise ALibrarysError(f"the user's reducer failed on {records[0]!r}")


def test_a_library_error_in_a_callback_is_wrapped_like_the_users_own_exception() -> None:
    """Library errors are TimelyErrors (one tree), yet the runtime still adds where they happened:
    timely's own errors pass through as they are, a library's gets a VertexError around it."""

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("reduce", RaisesALibraryError).probe()
        return inp

    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
            inp.advance_to(4)
            inp.send(["k"])
    err = info.value
    assert isinstance(err.__cause__, ALibrarysError) and isinstance(err.__cause__, timely.TimelyError)
    assert err.stage == "reduce" and err.time == timely.Timestamp(4) and err.callback == "on_recv"
    assert "the user's reducer failed on 'k'" in str(err)


def test_an_exception_in_a_notification_or_a_subscriber_is_reported() -> None:
    class BadNotify(timely.Vertex):
        def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
            self.notify_at(time)

        def on_notify(self, time: timely.Timestamp) -> None:
            raise KeyError("gone")

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("bad", BadNotify).probe()
        return inp

    with pytest.raises(timely.VertexError, match="'bad' .* KeyError in on_notify at time \\(0\\)"):
        with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
            inp.send([1])

    def subscriber(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.subscribe(lambda t, b: 1 / 0, name="reader")
        return inp

    with pytest.raises(timely.VertexError, match="subscriber 'reader' raised ZeroDivisionError") as info:
        with timely.execute(subscriber, timeout=TIMEOUT) as (comp, inp):
            inp.send([1])
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_inputs_refuse_misuse() -> None:
    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.probe()
        return inp

    with timely.execute(build, timeout=TIMEOUT) as (comp, inp):
        inp.advance_to(3)
        with pytest.raises(timely.InputError, match="at epoch 3; it cannot go to 2"):
            inp.advance_to(2)
        inp.close()
        with pytest.raises(timely.InputError, match="'in' is closed"):
            inp.send([1])
    unbound = Dataflow().root.new_input("x")
    with pytest.raises(timely.TimelyError, match="not running yet"):
        unbound.send([1])


class Holds(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time)
        self.send_by(self.outputs[0], records, time)


def test_a_stalled_wait_explains_which_pointstamps_hold_it_back() -> None:
    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        inp = scope.new_input("words")
        probe = inp.stage("holder", Holds).probe("watch")
        return inp, probe

    with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, probe)):
        inp.send(["a"])
        with pytest.raises(timely.StalledError) as info:  # at once: only this program can advance words
            comp.wait_passed(probe, 0)
        assert "probe 'watch' cannot pass (0): this program holds input 'words' (at epoch 0) open" in str(info.value)
        assert "input 'words' is still open at epoch 0" in info.value.explanation
        explained = comp.explain()
        assert "notification at (0) for stage 'holder' (worker 0) waits on:" in explained
        assert "input 'words' is still open at epoch 0" in explained
        inp.advance_to(1)
        comp.wait_passed(probe, 0, timeout=TIMEOUT)
        assert probe.passed(0) and not probe.passed(1)


async def test_a_stall_is_logged_with_the_explanation(caplog: pytest.LogCaptureFixture) -> None:
    gate = asyncio.Event()

    class Slow(timely.Vertex):
        async def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
            await gate.wait()
            self.send_by(self.outputs[0], records, time)

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("slow", Slow).probe()
        return inp

    with caplog.at_level(logging.WARNING, logger="timely"):
        async with timely.execute_async(build, stall_log_after=0.1, timeout=TIMEOUT) as (comp, inp):
            inp.send([1])
            await asyncio.sleep(0.4)
            gate.set()
    messages = [r.getMessage() for r in caplog.records]
    assert any("no progress for" in m and "stage 'slow' (worker 0) is running an async callback" in m for m in messages)


def test_a_computation_that_never_finishes_times_out_with_an_explanation() -> None:
    class Forever(timely.Vertex):
        async def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
            await asyncio.sleep(3600)

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("in")
        inp.stage("forever", Forever).probe()
        return inp

    with pytest.raises(timely.StalledError, match="did not complete") as info:
        with timely.execute(build, timeout=0.3) as (comp, inp):
            inp.send([1])
    assert "stage 'forever' (worker 0) is running an async callback" in info.value.explanation
