"""``core.throughput``: integers -> map to a key -> exchange by key -> count per key per epoch.

The dataflow is ``input -> map(x % KEYS) -> count`` where the count stage exchanges by key,
keeps a dict per epoch and emits it when notified that the epoch is complete. Records go in
``EPOCHS`` epochs; the figure is records per second for the whole run (best of several runs),
from building the dataflow to the end of the computation.

Baseline ``plain_python_loop``: the same work in plain Python, in batches of `BATCH` records
(the map applied per batch, counts per key per epoch in a dict, the counts emitted per epoch).
The two results must be equal. ``core.throughput.w2`` runs the dataflow with two workers in
this one process, so every batch is split by key and half of it crosses to the other worker.
"""

from __future__ import annotations

import gc
import random
import time
from typing import Any

import timely
from bench._harness import BenchmarkError, Context, benchmark

KEYS = 1000
EPOCHS = 10
BATCH = 1024
"""The plain loop's batch size (timely's inputs cut what they are sent into messages of 1024)."""
RECORDS_FULL, RUNS_FULL = 2_000_000, 3
RECORDS_QUICK, RUNS_QUICK = 500_000, 3
TARGET_RATE = 1_000_000
TARGET_FRACTION = 0.8  # of the plain loop's rate

Counts = dict[int, dict[int, int]]  # epoch -> key -> count


def key_of(x: int) -> int:
    return x % KEYS


def make_epochs(records: int, seed: int = 2024) -> list[list[int]]:
    rng = random.Random(seed)
    per = records // EPOCHS
    return [[rng.randrange(1 << 30) for _ in range(per)] for _ in range(EPOCHS)]


# timely ---------------------------------------------------------------------------------------


class Count(timely.Vertex):
    """Counts records per key per time; emits ``(key, count)`` pairs when the time completes."""

    def __init__(self) -> None:
        self.counts: dict[Any, dict[int, int]] = {}

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        c = self.counts.get(time)
        if c is None:
            c = self.counts[time] = {}
            self.notify_at(time)
        get = c.get
        for r in records:
            c[r] = get(r, 0) + 1

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], list(self.counts.pop(time).items()), time)


def run_timely(epochs: list[list[int]], workers: int, ctx: Context | None = None) -> tuple[float, Counts]:
    """Seconds for the whole computation, and the counts it produced."""
    result: Counts = {}
    duplicates: list[tuple[int, int]] = []

    def collect(t: timely.Timestamp, pairs: list[tuple[int, int]]) -> None:
        counts = result.setdefault(t.epoch, {})
        for k, n in pairs:
            if k in counts:
                duplicates.append((t.epoch, k))
            counts[k] = n
        if ctx is not None:
            ctx.progress(f"  workers={workers}: epoch {t.epoch} complete", force=False)

    def build(scope: timely.Scope) -> timely.Input:
        numbers = scope.new_input("numbers")
        counts = numbers.map("key", key_of).stage("count", Count, exchange=key_of)
        counts.subscribe(collect)
        return numbers

    gc.collect()
    started = time.perf_counter()
    with timely.execute(build, workers=workers, timeout=600) as (_, numbers):
        for epoch, records in enumerate(epochs):
            numbers.send(records)
            numbers.advance_to(epoch + 1)
    elapsed = time.perf_counter() - started
    if duplicates:
        raise BenchmarkError(f"workers={workers}: keys counted on two workers, e.g. (epoch, key) {duplicates[:3]}")
    return elapsed, result


# the baseline ---------------------------------------------------------------------------------


def run_plain(epochs: list[list[int]]) -> tuple[float, Counts]:
    """The same work as a plain Python loop over batches of `BATCH` records."""
    result: Counts = {}
    emitted: list[tuple[int, list[tuple[int, int]]]] = []
    gc.collect()
    started = time.perf_counter()
    for epoch, records in enumerate(epochs):
        counts: dict[int, int] = {}
        get = counts.get
        for start in range(0, len(records), BATCH):
            keys = [key_of(x) for x in records[start : start + BATCH]]
            for k in keys:
                counts[k] = get(k, 0) + 1
        emitted.append((epoch, list(counts.items())))
    elapsed = time.perf_counter() - started
    for epoch, pairs in emitted:
        result[epoch] = dict(pairs)
    return elapsed, result


# the benchmark ----------------------------------------------------------------------------------


@benchmark("core.throughput", "records/s through map -> exchange -> count per epoch, vs a plain Python loop")
def throughput(ctx: Context) -> None:
    records, runs = (RECORDS_QUICK, RUNS_QUICK) if ctx.quick else (RECORDS_FULL, RUNS_FULL)
    ctx.progress(f"generating {records:,} records in {EPOCHS} epochs ({KEYS} keys)")
    epochs = make_epochs(records)
    n = sum(len(e) for e in epochs)
    best = {"plain": float("inf"), "w1": float("inf"), "w2": float("inf")}
    expected: Counts | None = None
    for run in range(1, runs + 1):
        seconds, plain = run_plain(epochs)
        best["plain"] = min(best["plain"], seconds)
        if expected is None:
            expected = plain
        ctx.check(plain == expected, "the plain loop gave different counts on two runs")
        line = [f"plain {n / seconds / 1e6:.2f}"]
        for label, workers in (("w1", 1), ("w2", 2)):
            seconds, got = run_timely(epochs, workers, ctx)
            _verify(ctx, got, expected, workers)
            best[label] = min(best[label], seconds)
            line.append(f"timely {label} {n / seconds / 1e6:.2f}")
        ctx.progress(f"run {run}/{runs}: " + ", ".join(line) + " M records/s (results verified)")

    baseline = n / best["plain"]
    target = f">= {TARGET_RATE:,} records/s and ratio >= {TARGET_FRACTION}"
    rate = n / best["w1"]
    met = rate >= TARGET_RATE and rate >= TARGET_FRACTION * baseline
    ctx.record("core.throughput", rate, "records/s", "plain_python_loop", baseline, target=target, met=met)
    # Two workers share one thread: the exchange only adds work here. Informational; the
    # speed-up from parallelism is measured across processes by net.throughput.
    ctx.record("core.throughput.w2", n / best["w2"], "records/s", "plain_python_loop", baseline)


def _verify(ctx: Context, got: Counts, expected: Counts, workers: int) -> None:
    if got == expected:
        return
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = [e for e in expected if e in got and got[e] != expected[e]]
    ctx.check(
        False,
        f"timely (workers={workers}) counts differ from the plain loop's: epochs missing {missing}, "
        f"unexpected {extra}, different {wrong}",
    )
