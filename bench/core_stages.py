"""``core.stages``: what timely costs per stage of a pipeline and per stage of a loop iteration.

A program written as a user writes one: stages that map, filter, and (every third) hold an
epoch's records until `Vertex.notify_at` says the epoch is complete, then send them on. Each
epoch carries `RECORDS` records, so what is measured is coordination (progress updates,
frontier changes, scheduler steps, notifications), not data.

- ``pipeline``: K = 1, 10, 30 such stages in a row, fed many small epochs, the input throttled
  to one epoch ahead of a probe at the end (one or two epochs in flight, as a streaming job
  runs). Records µs per stage-epoch: the wall time from the first epoch sent to the last one out
  (the graph's build left out) over epochs * K.
- ``wide``: K such stages side by side, each fed every record of the input, their outputs
  concatenated (a Bloom program's rules, all run per timestep): K messages are in flight at
  once at K locations no path joins, the case where progress tracking can grow with K.
- ``loop``: the same K stages inside a `timely.LoopContext`, the records going round
  `ITERATIONS` times (the feedback edge stops them), one epoch after another. Records µs per
  stage-iteration: wall time over epochs * iterations * K.

Baseline: a plain Python loop doing the same work in the same run (the same stage functions
over the same lists, the holding stages keeping a dict per time and popping it), per
stage-epoch and per stage-iteration. Every run's output is checked against what the inputs
imply. ``.marginal`` records the cost of one more stage: (time at K = 30 - time at K = 1) over
29 stages, which leaves out what an epoch costs regardless of K (sending it, the probe).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import timely
from bench._harness import BenchmarkError, Context, benchmark

RECORDS = 20
"""Records per epoch: tens, so that the cost is coordination, not data."""
STAGES = (1, 10, 30)
EPOCHS_FULL = 2_000
EPOCHS_QUICK = 400
LOOP_EPOCHS_FULL = 40
LOOP_EPOCHS_QUICK = 10
ITERATIONS = 50
"""Iterations of the loop per epoch."""
RUNS = 3
CLOCK = time.perf_counter
"""What the runs are timed with (an A/B on a loaded machine may set ``time.process_time``)."""
"""Runs per configuration; the best is kept (a loaded machine only ever adds time)."""


def _kind(i: int) -> str:
    return ("map", "filter", "hold")[i % 3]


def _plus_one(x: int) -> int:
    return x + 1


def _keep(x: int) -> bool:
    return x >= 0


class Step(timely.Vertex):
    """Map or filter, on every input (a loop's first stage has two: ingress and feedback)."""

    def __init__(self, kind: str) -> None:
        self.map = kind == "map"

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        if self.map:
            self.send_by(self.outputs[0], [_plus_one(r) for r in records], time)
        else:
            self.send_by(self.outputs[0], [r for r in records if _keep(r)], time)


class Hold(timely.Vertex):
    """Keeps a time's records until nothing more can arrive at it, then sends them on."""

    def __init__(self) -> None:
        self.held: dict[timely.Timestamp, list[int]] = {}

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        held = self.held.get(time)
        if held is None:
            self.held[time] = held = []
            self.notify_at(time)
        held.extend(records)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], self.held.pop(time), time)


def _factory(i: int) -> Callable[[], timely.Vertex]:
    kind = _kind(i)
    if kind == "hold":
        return Hold
    return lambda: Step(kind)


def _expected(stages: int, rounds: int) -> int:
    """The sum of one epoch's output: every record goes through ``rounds`` passes of ``stages``
    stages, each map stage adding one."""
    maps = sum(1 for i in range(stages) if _kind(i) == "map")
    return sum(range(RECORDS)) + RECORDS * maps * rounds


def _feed(build: Callable[[timely.Scope], timely.Input], epochs: int) -> float:
    """Seconds to feed ``epochs`` epochs of `RECORDS` numbers into the graph ``build`` makes,
    timed from when the graph is built: what follows is per epoch."""
    records = list(range(RECORDS))
    gc.collect()
    with timely.execute(build, timeout=600) as (_, source):
        started = CLOCK()
        for epoch in range(epochs):
            source.send(records)
            source.advance_to(epoch + 1)
    return CLOCK() - started


def run_pipeline(stages: int, epochs: int) -> float:
    """Seconds for ``epochs`` epochs through ``stages`` stages, one epoch ahead of the end."""
    sums: dict[int, int] = {}

    def build(scope: timely.Scope) -> timely.Input:
        source = scope.new_input("numbers")
        stream = source
        for i in range(stages):
            stream = stream.stage(f"{_kind(i)}{i}", _factory(i))
        stream.subscribe(lambda t, batch: sums.__setitem__(t.epoch, sums.get(t.epoch, 0) + sum(batch)))
        source.throttle(stream.probe(), 1)
        return source

    elapsed = _feed(build, epochs)
    _check(f"pipeline of {stages}", sums, epochs, _expected(stages, 1))
    return elapsed


def run_wide(stages: int, epochs: int) -> float:
    """Seconds for ``epochs`` epochs through ``stages`` stages side by side, one epoch ahead."""
    sums: dict[int, int] = {}

    def build(scope: timely.Scope) -> timely.Input:
        source = scope.new_input("numbers")
        branches = [source.stage(f"{_kind(i)}{i}", _factory(i)) for i in range(stages)]
        stream = scope.concat("all", branches)
        stream.subscribe(lambda t, batch: sums.__setitem__(t.epoch, sums.get(t.epoch, 0) + sum(batch)))
        source.throttle(stream.probe(), 1)
        return source

    elapsed = _feed(build, epochs)
    maps = sum(1 for i in range(stages) if _kind(i) == "map")
    _check(f"{stages} side by side", sums, epochs, stages * sum(range(RECORDS)) + RECORDS * maps)
    return elapsed


def run_plain_wide(stages: int, epochs: int) -> float:
    """The same work as `run_wide` in a plain Python loop."""
    kinds = [_kind(i) for i in range(stages)]
    held: dict[tuple[int, int], list[int]] = {}
    sums: dict[int, int] = {}
    records = list(range(RECORDS))
    gc.collect()
    started = CLOCK()
    for epoch in range(epochs):
        out: list[int] = []
        for i, kind in enumerate(kinds):
            if kind == "map":
                out.extend([_plus_one(x) for x in records])
            elif kind == "filter":
                out.extend([x for x in records if _keep(x)])
            else:
                key = (epoch, i)
                held.setdefault(key, []).extend(records)
                out.extend(held.pop(key))
        sums[epoch] = sum(out)
    elapsed = CLOCK() - started
    maps = sum(1 for i in range(stages) if _kind(i) == "map")
    _check(f"plain {stages} side by side", sums, epochs, stages * sum(range(RECORDS)) + RECORDS * maps)
    return elapsed


def run_loop(stages: int, epochs: int, iterations: int) -> float:
    """Seconds for ``epochs`` epochs, one after another, each going round a loop of
    ``stages`` stages ``iterations`` times."""
    sums: dict[int, int] = {}

    def build(scope: timely.Scope) -> timely.Input:
        source = scope.new_input("numbers")
        loop = timely.LoopContext(scope, "loop")
        feedback = loop.feedback("again", max_iterations=iterations)
        stream = loop.stage(f"{_kind(0)}0", _factory(0), [loop.ingress(source), feedback.stream])
        for i in range(1, stages):
            stream = stream.stage(f"{_kind(i)}{i}", _factory(i))
        feedback.connect(stream)
        last = stream.stage("last", Last, exchange=None)
        out = loop.egress(last)
        out.subscribe(lambda t, batch: sums.__setitem__(t.epoch, sums.get(t.epoch, 0) + sum(batch)))
        source.throttle(out.probe(), 0)
        return source

    class Last(timely.Vertex):
        def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
            if time[-1] == iterations - 1:
                self.send_by(self.outputs[0], records, time)

    elapsed = _feed(build, epochs)
    _check(f"loop of {stages}", sums, epochs, _expected(stages, iterations))
    return elapsed


def _check(what: str, sums: dict[int, int], epochs: int, expected: int) -> None:
    if sums != dict.fromkeys(range(epochs), expected):
        wrong = sorted(e for e in range(epochs) if sums.get(e) != expected)[:5]
        raise BenchmarkError(f"{what}: wrong sums at epochs {wrong} (expected {expected} each)")


def run_plain(stages: int, epochs: int, rounds: int) -> float:
    """The same work in a plain Python loop: each epoch's records through ``rounds`` passes of
    the same stage functions, holding stages keeping a dict per time."""
    kinds = [_kind(i) for i in range(stages)]
    held: dict[tuple[int, int], list[int]] = {}
    sums: dict[int, int] = {}
    records = list(range(RECORDS))
    gc.collect()
    started = CLOCK()
    for epoch in range(epochs):
        batch = records
        for r in range(rounds):
            for kind in kinds:
                if kind == "map":
                    batch = [_plus_one(x) for x in batch]
                elif kind == "filter":
                    batch = [x for x in batch if _keep(x)]
                else:
                    key = (epoch, r)
                    held.setdefault(key, []).extend(batch)
                    batch = held.pop(key)
        sums[epoch] = sum(batch)
    elapsed = CLOCK() - started
    _check(f"plain loop of {stages}", sums, epochs, _expected(stages, rounds))
    return elapsed


def _best(fn: Callable[..., float], *args: Any) -> float:
    return min(fn(*args) for _ in range(RUNS))


@benchmark("core.stages", "microseconds per stage-epoch of a pipeline and per stage-iteration of a loop")
def stages_benchmark(ctx: Context) -> None:
    epochs = EPOCHS_QUICK if ctx.quick else EPOCHS_FULL
    loop_epochs = LOOP_EPOCHS_QUICK if ctx.quick else LOOP_EPOCHS_FULL
    run_pipeline(3, 20)  # import and warm once
    run_wide(3, 20)
    run_loop(3, 2, 5)
    per: dict[tuple[str, int], tuple[float, float]] = {}
    for k in STAGES:
        ours = _best(run_pipeline, k, epochs) / (epochs * k)
        plain = _best(run_plain, k, epochs, 1) / (epochs * k)
        per["pipeline", k] = ours, plain
        ctx.progress(f"  pipeline of {k}: {ours * 1e6:.2f} us a stage-epoch (plain {plain * 1e6:.3f})")
    for k in STAGES:
        ours = _best(run_wide, k, epochs) / (epochs * k)
        plain = _best(run_plain_wide, k, epochs) / (epochs * k)
        per["wide", k] = ours, plain
        ctx.progress(f"  {k} side by side: {ours * 1e6:.2f} us a stage-epoch (plain {plain * 1e6:.3f})")
    for k in STAGES:
        steps = loop_epochs * ITERATIONS * k
        ours = _best(run_loop, k, loop_epochs, ITERATIONS) / steps
        plain = _best(run_plain, k, loop_epochs, ITERATIONS) / steps
        per["loop", k] = ours, plain
        ctx.progress(f"  loop of {k}: {ours * 1e6:.2f} us a stage-iteration (plain {plain * 1e6:.3f})")
    first, last = STAGES[0], STAGES[-1]
    for label, unit in (("pipeline", "stage-epoch"), ("wide", "stage-epoch"), ("loop", "stage-iteration")):
        for k in STAGES:
            ours, plain = per[label, k]
            ctx.record(f"core.stages.{label}.k{k}", ours * 1e6, "us", f"plain_python_per_{unit}", plain * 1e6)
        # one more stage: leaves out what an epoch costs whatever K is
        (ours_1, plain_1), (ours_n, plain_n) = per[label, first], per[label, last]
        marginal = (ours_n * last - ours_1 * first) / (last - first)
        plain_marginal = (plain_n * last - plain_1 * first) / (last - first)
        ctx.record(
            f"core.stages.{label}.marginal", marginal * 1e6, "us", f"plain_python_per_{unit}", plain_marginal * 1e6
        )
