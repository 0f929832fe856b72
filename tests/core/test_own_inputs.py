"""A synchronous wait that only this program's own open input keeps from ending is refused at
once, naming the input (it used to wait out the whole timeout); waits the input cannot hold
back still run. And explanations show times as a user writes them."""

from __future__ import annotations

from typing import Any

import pytest

import timely
from tests.support import TIMEOUT


def two_inputs(scope: timely.Scope) -> tuple[timely.Input, timely.Input, timely.Probe, timely.Probe]:
    a, b = scope.new_input("a"), scope.new_input("b")
    return a, b, a.map("a_twice", lambda x: 2 * x).probe("pa"), b.probe("pb")


def test_run_with_an_open_input_says_so_at_once_and_the_computation_goes_on() -> None:
    with timely.execute(two_inputs, timeout=TIMEOUT) as (comp, (a, b, pa, pb)):
        a.send([1])
        a.advance_to(2)
        b.close()
        with pytest.raises(timely.StalledError, match=r"cannot complete: this program holds input 'a' \(at epoch 2\)"):
            comp.run()
        a.close()
        comp.run()
        assert comp.complete and pa.passed(10) and pb.passed(10)


def test_a_wait_is_refused_only_when_an_open_input_can_reach_the_probe_at_or_before_the_time() -> None:
    with timely.execute(two_inputs, timeout=TIMEOUT) as (comp, (a, b, pa, pb)):
        a.advance_to(3)
        comp.wait_passed(pa, 2)  # a is past epoch 2
        with pytest.raises(timely.StalledError, match=r"probe 'pa' cannot pass \(3\): this program holds input 'a'"):
            comp.wait_passed(pa, 3)
        b.advance_to(1)
        comp.wait_passed(pb, 0)  # a stays open at epoch 3, but it does not reach pb
        with pytest.raises(timely.StalledError, match=r"holds input 'b' \(at epoch 1\)") as info:
            comp.wait_passed(pb, 1)
        assert "'a'" not in str(info.value).split("\n")[0]
        a.advance_to(4)
        comp.wait_passed(pa, 3)


def test_a_wait_with_a_timeout_of_its_own_runs_the_computation_that_long_instead() -> None:
    # the way to let a computation work while an input stays open: the records sent get through
    seen: list[int] = []

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        a = scope.new_input("a")
        return a, a.inspect("see", seen.append).probe("pa")

    with timely.execute(build, timeout=TIMEOUT) as (comp, (a, pa)):
        a.send([1, 2, 3])
        with pytest.raises(timely.StalledError, match=r"the computation did not complete within 0\.2 s"):
            comp.run(timeout=0.2)
        assert seen == [1, 2, 3]
        with pytest.raises(timely.StalledError, match=r"probe 'pa' did not pass \(0\) within 0\.2 s"):
            comp.wait_passed(pa, 0, timeout=0.2)


class NotifyAt(timely.Vertex):
    """Asks for a notification at a set loop counter of its message's epoch."""

    def __init__(self, counter: int) -> None:
        self.counter = counter

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at((time.epoch, self.counter))


@pytest.mark.parametrize(("counter", "shown"), [(3, "(0, 3)"), (1 << 62, "(0, end)")])
def test_explanations_show_times_flat_and_a_counter_no_loop_reaches_as_end(counter: int, shown: str) -> None:
    def build(scope: timely.Scope) -> timely.Input:
        words = scope.new_input("words")
        loop = timely.LoopContext(scope, "loop")
        loop.stage("v", lambda: NotifyAt(counter), [loop.ingress(words)])
        return words

    with timely.execute(build, timeout=TIMEOUT) as (comp, words):
        words.send(["x"])
        explained = comp.explain()
        assert f"notification at {shown} for stage 'loop.v' (worker 0) waits on:" in explained, explained
        assert str(1 << 62) not in explained and "((" not in explained
