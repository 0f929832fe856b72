"""``core.loop_latency``: the time one iteration of an empty loop takes (Naiad's Figure 6b).

A single vertex sits in a `timely.LoopContext`. Given one record, it asks to be notified at
iteration 0; each ``on_notify(t)`` asks for ``t.advance()`` (the next iteration) until
`ITERATIONS_FULL` iterations. The vertex never sends anything, so each iteration is pure
coordination: a notification request, a progress update, the frontier moving, and the
notification delivered. Each ``on_notify`` records ``perf_counter()``; the latency of an
iteration is the difference between consecutive calls.

Baseline ``plain_python_callback``: the same number of calls of a trivial method from a plain
Python loop, timed the same way: the floor of any Python callback. With two workers
(``w2``) both instances of the vertex advance in lockstep, each notification waiting for
the other worker's capability at the same iteration.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import timely
from bench._harness import Context, benchmark, percentile

ITERATIONS_FULL = 100_000
ITERATIONS_QUICK = 20_000
WARMUP_ITERATIONS = 2_000
PROGRESS_EVERY = 5_000
"""Iterations between two looks at the clock for a progress line (the iteration that prints
is left out of the statistics)."""
TARGET_MEDIAN_US = 20.0
TARGET_RATIO = 35.0
"""The median at most this many times the plain callback's, in the same run: a ratio rather
than microseconds alone, since a busy machine slows both."""


class Spin(timely.Vertex):
    """Asks for a notification at the next iteration, from each notification, ``iterations`` times."""

    def __init__(
        self, iterations: int, tick: Callable[[int], bool] | None = None, skipped: set[int] | None = None
    ) -> None:
        self.iterations = iterations
        self.tick = tick
        self.stamps: list[float] = []
        self.skipped = set() if skipped is None else skipped
        """Iterations ``i`` whose ``stamps[i + 1] - stamps[i]`` includes a progress print (shared
        by the instances of all workers, which advance in lockstep)."""
        self._stamp = self.stamps.append

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time)

    def on_notify(self, t: timely.Timestamp) -> None:
        self._stamp(time.perf_counter())
        i = t[-1]
        if i + 1 < self.iterations:
            self.notify_at(t.advance())
        if i % PROGRESS_EVERY == 0 and self.tick is not None and self.tick(i):
            self.skipped.add(i)

    def latencies(self) -> list[float]:
        """Seconds between consecutive notifications (without those a progress print delayed)."""
        s = self.stamps
        return [s[i + 1] - s[i] for i in range(len(s) - 1) if i not in self.skipped]


def run_timely(iterations: int, workers: int, ctx: Context | None = None) -> tuple[list[float], float]:
    """Per-iteration latencies (seconds; all workers' pooled) and the wall time of the run."""
    spins: list[Spin] = []
    skipped: set[int] = set()

    def tick(i: int) -> bool:
        return ctx is not None and ctx.progress(f"  workers={workers}: iteration {i:,}/{iterations:,}", force=False)

    def make() -> Spin:
        spin = Spin(iterations, tick if not spins else None, skipped)  # the first instance reports progress
        spins.append(spin)
        return spin

    def build(scope: timely.Scope) -> timely.Input:
        start = scope.new_input("start")
        loop = timely.LoopContext(scope, "loop")
        entered = loop.ingress(start)
        feedback = loop.feedback("feedback")
        spun = loop.stage("spin", make, [entered, feedback.stream], exchange=[lambda r: r, None])
        feedback.connect(spun)
        return start

    gc.collect()
    started = time.perf_counter()
    with timely.execute(build, workers=workers, timeout=600) as (_, start):
        start.send(list(range(workers)))  # one record, hence one spinning vertex, per worker
    wall = time.perf_counter() - started
    for spin in spins:
        if len(spin.stamps) != iterations:
            raise RuntimeError(f"workers={workers}: a vertex was notified {len(spin.stamps)} times, not {iterations}")
    return [d for spin in spins for d in spin.latencies()], wall


class _Callback:
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_notify(self, i: int) -> None:
        self.stamps.append(time.perf_counter())


def run_plain(iterations: int) -> list[float]:
    """The same number of calls of a trivial method, timed the same way."""
    callback = _Callback()
    gc.collect()
    for i in range(iterations):
        callback.on_notify(i)
    s = callback.stamps
    return [s[i + 1] - s[i] for i in range(len(s) - 1)]


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median": statistics.median(ordered) * 1e6,
        "p90": percentile(ordered, 90) * 1e6,
        "p99": percentile(ordered, 99) * 1e6,
        "max": ordered[-1] * 1e6,
        "mean": statistics.fmean(ordered) * 1e6,
    }


def _show(label: str, s: dict[str, float], n: int) -> str:
    return (
        f"{label}: {n:,} iterations, median {s['median']:.2f} us, p90 {s['p90']:.2f}, p99 {s['p99']:.2f}, "
        f"max {s['max']:.0f}, mean {s['mean']:.2f} us"
    )


@benchmark("core.loop_latency", "microseconds per iteration of an empty notify-at-next-iteration loop")
def loop_latency(ctx: Context) -> None:
    iterations = ITERATIONS_QUICK if ctx.quick else ITERATIONS_FULL
    run_timely(WARMUP_ITERATIONS, 1)  # import, allocate and warm the caches once
    base = _summary(run_plain(iterations))
    ctx.progress(_show("plain callback", base, iterations))

    lat, wall = run_timely(iterations, 1, ctx)
    w1 = _summary(lat)
    ctx.progress(_show("timely w1", w1, iterations) + f"; wall {wall:.2f} s")
    lat, wall = run_timely(iterations, 2, ctx)
    w2 = _summary(lat)
    ctx.progress(_show("timely w2", w2, iterations) + f"; wall {wall:.2f} s")

    baseline = "plain_python_callback"
    ctx.record(
        "core.loop_latency.median",
        w1["median"],
        "us",
        baseline,
        base["median"],
        target=f"<= {TARGET_MEDIAN_US:g} us and <= {TARGET_RATIO:g}x",
        met=w1["median"] <= TARGET_MEDIAN_US and w1["median"] <= TARGET_RATIO * base["median"],
    )
    ctx.record("core.loop_latency.p99", w1["p99"], "us", baseline, base["p99"])
    ctx.record("core.loop_latency.w2.median", w2["median"], "us", baseline, base["median"])
    ctx.record("core.loop_latency.w2.p99", w2["p99"], "us", baseline, base["p99"])
