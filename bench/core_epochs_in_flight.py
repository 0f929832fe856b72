"""``core.epochs_in_flight``: what one epoch costs when thousands are open at once.

A user who ports Naiad's ``KeyValueLookup`` sends every epoch without waiting for any, then
leaves the ``with timely.execute(...)`` block. Every epoch is then in flight at once: its
records queued, a notification requested for it, its capability held. If the cost of retiring
one epoch grows with how many others are open, the whole run grows quadratically.

Two dataflows, each fed ``N`` epochs of `RECORDS` records with no wait between them:

- ``one``: a single vertex that asks ``notify_at`` for every epoch it sees and, when notified,
  emits how many records the epoch had;
- ``pipeline``: three such vertices in a row, each notified per epoch and forwarding its count,
  so a notification downstream waits for the one upstream.

The figure is the per-epoch time at ``N = 10,000`` divided by the per-epoch time at ``N = 100``
(the pipeline's is the record; the single vertex's is shown beside it). A cost that follows
what changed, not what is open, keeps it near 1. Every run's output is checked against the
counts the inputs imply.

Baseline: the per-epoch time at ``N = 100`` of the same dataflow, in the same run.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import timely
from bench._harness import BenchmarkError, Context, benchmark

RECORDS = 4
"""Records per epoch: few, so that the per-epoch cost is coordination, not data."""
SIZES_FULL = (100, 1_000, 10_000)
SIZES_QUICK = (100, 1_000, 4_000)
RUNS = 3
"""Runs per size; the best is kept (a loaded machine only ever adds time)."""
TARGET_RATIO = 1.5


class CountPerEpoch(timely.Vertex):
    """Sums what arrives per epoch and emits the sum when the epoch is complete."""

    def __init__(self) -> None:
        self.sums: dict[Any, int] = {}

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        total = self.sums.get(time)
        if total is None:
            total = 0
            self.notify_at(time)
        self.sums[time] = total + sum(records)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [self.sums.pop(time)], time)


def run_timely(epochs: int, stages: int) -> float:
    """Seconds to push ``epochs`` epochs through ``stages`` notifying vertices, all sent at once."""
    seen: dict[int, int] = {}

    def build(scope: timely.Scope) -> timely.Input:
        source = scope.new_input("numbers")
        stream = source
        for i in range(stages):
            stream = stream.stage(f"count{i}", CountPerEpoch)
        stream.subscribe(lambda t, batch: seen.__setitem__(t.epoch, seen.get(t.epoch, 0) + sum(batch)))
        return source

    gc.collect()
    started = time.perf_counter()
    with timely.execute(build, timeout=600) as (_, source):
        for epoch in range(epochs):
            source.send([1] * RECORDS)
            source.advance_to(epoch + 1)
    elapsed = time.perf_counter() - started
    if seen != {e: RECORDS for e in range(epochs)}:
        wrong = sorted(e for e in range(epochs) if seen.get(e) != RECORDS)[:5]
        raise BenchmarkError(f"{stages} stage(s), {epochs} epochs: wrong sums at epochs {wrong} (of {len(seen)})")
    return elapsed


def best_per_epoch(epochs: int, stages: int) -> float:
    return min(run_timely(epochs, stages) for _ in range(RUNS)) / epochs


@benchmark("core.epochs_in_flight", "per-epoch time with 10,000 epochs open at once, against 100")
def epochs_in_flight(ctx: Context) -> None:
    sizes = SIZES_QUICK if ctx.quick else SIZES_FULL
    run_timely(50, 3)  # import and warm once
    per_epoch: dict[tuple[str, int], float] = {}
    for label, stages in (("one", 1), ("pipeline", 3)):
        for n in sizes:
            per_epoch[label, n] = best_per_epoch(n, stages)
            ctx.progress(f"  {label}: {n:,} epochs in flight: {per_epoch[label, n] * 1e6:,.1f} us an epoch")
    small, large = sizes[0], sizes[-1]
    for label in ("one", "pipeline"):
        for n in sizes[1:]:
            ctx.record(
                f"core.epochs_in_flight.{label}.n{n}",
                per_epoch[label, n] * 1e6,
                "us",
                f"per_epoch_at_{small}",
                per_epoch[label, small] * 1e6,
            )
    for label, name in (("one", "core.epochs_in_flight.one"), ("pipeline", "core.epochs_in_flight")):
        ratio = per_epoch[label, large] / per_epoch[label, small]
        ctx.record(name, ratio, "x", target=f"<= {TARGET_RATIO:g}", met=ratio <= TARGET_RATIO)
