"""The console of a computation in this process (``execute(console=0)``): what a sampling
profiler and the state hook show, read from ``/api/state`` while the program runs."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, cast

import pytest

import timely
from timely._runtime.sampling import PROFILE_HZ

pytest.importorskip("aiohttp")


def _state(comp: timely.Computation) -> dict[str, Any]:
    assert comp.console_url is not None
    with urllib.request.urlopen(comp.console_url + "api/state", timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _run_a_while(comp: timely.Computation, probe: timely.Probe, seconds: float) -> None:
    """Keep the computation's event loop running (the console samples it) for ``seconds``."""
    with pytest.raises(timely.StalledError):
        comp.wait_passed(probe, 10**9, timeout=seconds)


SPIN = 0.0002


def _spin(x: int) -> int:
    until = time.perf_counter() + SPIN
    while time.perf_counter() < until:
        pass
    return x


class Keep(timely.Vertex):
    """Keeps every record it is sent, and says how many (the state hook)."""

    def __init__(self) -> None:
        self.kept: list[int] = []

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        self.kept.extend(records)

    def state_size(self) -> tuple[int, int]:
        return len(self.kept), 28 * len(self.kept)


def test_the_profiler_charges_a_slow_stage_with_the_time_and_the_hook_shows_state() -> None:
    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        numbers = scope.new_input("numbers")
        slow = numbers.map("cheap", lambda x: x + 1).map("slow", _spin)
        return numbers, slow.stage("keep", Keep).probe("done")  # done: 'keep' has taken in the epoch

    with timely.execute(build, workers=2, console=0, timeout=60) as (comp, (numbers, done)):
        numbers.send(range(8000))  # ~1.6 s of spinning in 'slow'
        numbers.advance_to(1)
        comp.wait_passed(done, 0)
        _run_a_while(comp, done, 1.3)  # a sample after the work
        state = _state(comp)
        stages = {s["name"]: s for s in state["stages"]}
        spent = sum(w.callback_seconds for w in comp.statistics().workers)
        # 'slow' spun at least 0.2 ms a record: the profiler saw most of that, in 'slow', and no
        # more than the workers' own clocks counted in all callbacks, give or take the one look
        # that straddles the callback's start (a look charges the time since the one before,
        # at most two intervals)
        assert 0.7 * 8000 * SPIN <= stages["slow"]["callback_seconds"] <= spent + 2 / PROFILE_HZ
        assert stages["slow"]["callback_seconds"] > 10 * stages["cheap"]["callback_seconds"]
        kept = sum(len(cast(Any, v).kept) for v in comp.vertices("keep"))
        assert kept == 8000
        assert stages["keep"]["state_rows"] == kept and stages["keep"]["state_bytes"] == 28 * kept
        assert stages["slow"]["state_rows"] is None  # it keeps nothing and says so


def test_linq_reports_the_rows_of_its_arrangements() -> None:
    from timely_libs import linq

    keys = 500

    def build(scope: timely.Scope) -> tuple[Any, Any]:
        numbers = linq.new_input(scope, "numbers")
        counts = numbers.collection.count(lambda x: x % keys, name="per_key")
        return numbers, linq.CollectionOutput(counts)

    with timely.execute(build, console=0, timeout=60) as (comp, (numbers, out)):
        numbers.insert_all(range(10 * keys))
        numbers.advance_to(1)
        comp.wait_passed(out.probe, 0)
        _run_a_while(comp, out.probe, 1.3)
        state = _state(comp)
        assert len(out.contents()) == keys
        sized = {s["name"]: (s["state_rows"], s["state_bytes"]) for s in state["stages"] if s["state_rows"]}
        # the count arranges its input by key alone (the 10 records of a key, all at one time,
        # are one row) and its output (one count a key); nothing else in this dataflow keeps a trace
        assert list(sized) == ["per_key"]
        rows, nbytes = sized["per_key"]
        assert rows == keys + keys
        assert nbytes >= rows * 8 * 2  # at least a key and a diff of 8 bytes a row


class UpToThree(timely.Vertex):
    """Sends its records round the loop until the third iteration, where it holds them
    (a notification it cannot get while the input is open)."""

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        if time.counters[-1] < 3:
            self.send_by(self.outputs[0], records, time)
        else:
            self.notify_at(time)


def test_loops_are_nested_boxes_and_their_frontier_is_the_iteration() -> None:
    import re

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        numbers = scope.new_input("numbers")
        outer = timely.LoopContext(scope, "outer")
        inner = timely.LoopContext(outer, "inner")
        back = inner.feedback("back")
        step = inner.ingress(outer.ingress(numbers)).concat("in", back.stream).stage("step", UpToThree)
        back.connect(step)
        return numbers, numbers.probe("fed")

    with timely.execute(build, console=0, timeout=60) as (comp, (numbers, fed)):
        numbers.send([1, 2, 3])
        _run_a_while(comp, fed, 1.3)
        state = _state(comp)
        loops = {loop["name"]: loop for loop in state["loops"]}
        assert loops["outer.inner"]["active"] == ["(0, (0, 3))"]  # held at its third iteration
        assert loops["outer.inner"]["frontier"] == ["(0, (0, 0))"]  # the open input can still start one
        waiting = {w["stage_name"]: w["time"] for w in state["stall"]["waiting"]}
        assert waiting["outer.inner.step"] == "(0, (0, 3))"  # (and the probe wait the test runs under)
        with urllib.request.urlopen(comp.console_url + "api/graph", timeout=10) as response:  # type: ignore[operator]
            svg = json.loads(response.read())["svg"]
    if svg is None:
        pytest.skip("Graphviz's dot is not installed: no picture to look at")
    boxes = {}
    for outline, label in re.findall(
        r'<title>cluster_\d+</title>\s*<(?:polygon|path)[^>]*(?:points|d)="([^"]*)".*?<text[^>]*>([^<]*)</text>',
        svg,
        re.S,
    ):
        corners = [(float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", outline)]
        xs, ys = [x for x, _ in corners], [y for _, y in corners]
        boxes[label] = (min(xs), min(ys), max(xs), max(ys))
    outer_box, inner_box = boxes["loop outer"], boxes["loop outer.inner"]
    assert outer_box[0] < inner_box[0] and outer_box[1] < inner_box[1]  # the inner loop's box lies inside
    assert inner_box[2] < outer_box[2] and inner_box[3] < outer_box[3]


def test_an_input_of_blocks_counts_the_records_they_hold() -> None:
    """linq sends a block of columns as one item; the console counts its rows as records (it
    counted 1 a block), for update_columns and for inserts alike."""
    import numpy as np

    from timely_libs import linq

    def build(scope: timely.Scope) -> tuple[Any, Any]:
        numbers = linq.new_input(scope, "numbers")
        return numbers, linq.CollectionOutput(numbers.collection.distinct())

    with timely.execute(build, workers=2, console=0, timeout=60) as (comp, (numbers, out)):
        numbers.update_columns(np.arange(10_000, dtype=np.int64))
        numbers.insert_all(range(500))
        numbers.advance_to(1)
        comp.wait_passed(out.probe, 0)
        _run_a_while(comp, out.probe, 1.3)
        stages = {s["name"]: s for s in _state(comp)["stages"]}
        sent = sum(v.statistics().records_sent for v in comp.vertices("numbers"))
        assert len(out.contents()) == 10_000
        assert sent == stages["numbers"]["records_out"] == 10_500
