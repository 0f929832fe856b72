"""``core.startup``: what starting and finishing a small synchronous computation costs.

Each run is ``with timely.execute(build) as ...: send three records``, through a one-stage
dataflow: the setup, the graph, the runtime, the event loop, and the run to the end. Programs
and tests run many such computations (the suite runs thousands).

Baseline ``fresh_loop_per_run``: the same runs, each on an event loop made for it and closed
after it, as timely did before the main thread kept one loop from run to run (closing a uvloop
loop also interrupted the program's next large write to a slow pipe; docs/runtime.md). The
rounds alternate between the two so that a loaded machine affects both alike.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import timely
import timely._runtime.computation as computation
from bench._harness import Context, benchmark

RUNS_FULL = 400
RUNS_QUICK = 100
ROUNDS = 5


def _build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
    numbers = scope.new_input("numbers")
    return numbers, numbers.map("inc", lambda r: r + 1).probe("done")


def _runs(n: int) -> float:
    """Microseconds per run, over ``n`` runs."""
    began = time.perf_counter()
    for _ in range(n):
        with timely.execute(_build, timeout=30) as (_, (numbers, _probe)):
            numbers.send([1, 2, 3])
    return (time.perf_counter() - began) / n * 1e6


def _close(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@benchmark("core.startup", "microseconds to start, feed and finish a one-stage computation")
def startup(ctx: Context) -> None:
    n = RUNS_QUICK if ctx.quick else RUNS_FULL
    kept: tuple[Any, Any] = (computation._event_loop, computation._done_with)
    fresh: tuple[Any, Any] = (computation._new_event_loop, _close)
    _runs(20)  # imports, caches
    times: dict[str, list[float]] = {"kept": [], "fresh": []}
    try:
        for r in range(ROUNDS):
            for mode, (make, done) in (("kept", kept), ("fresh", fresh)):
                computation._event_loop, computation._done_with = make, done  # type: ignore[assignment]
                times[mode].append(_runs(n))
            ctx.progress(
                f"round {r + 1}/{ROUNDS}: kept loop {times['kept'][-1]:.0f} us, fresh loop {times['fresh'][-1]:.0f} us"
            )
    finally:
        computation._event_loop, computation._done_with = kept
    ctx.record(
        "core.startup.median",
        statistics.median(times["kept"]),
        "us",
        "fresh_loop_per_run",
        statistics.median(times["fresh"]),
    )
