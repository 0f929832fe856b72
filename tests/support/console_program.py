"""A computation to watch on the console, run by ``timely run [-n N] --console ADDRESS`` in the
console tests: ``console_program.py MODE STOPFILE``.

Process 0 prints ``URL <console url>`` once the console serves. Every mode feeds numbers
through ``key (map) -> count (exchange by key, state_size) -> done (probe)``, then keeps the
event loop running with the input open (the console keeps sampling) until STOPFILE exists:

- ``steady``: epochs 0-4 of 20,000 records each (split over the processes), then each process
  prints ``STATS {json}``: its workers' records delivered and its stages' records in and out,
  for the test to compare with what the console shows;
- ``rates``: 2,000 records a second for 4 s, then 200,000 a second (the rate change);
- ``stall``: epochs 0-2, then records at epoch 3 and the input left open: 'count''s
  notification at epoch 3 waits on the open input;
- ``busy``: one epoch, whose first record holds the 'key' callback of every process but 0 until
  STOPFILE exists: processes busy from their first step (the console must hear of them all
  the same; process 0, which gathers the samples, reads them between its callbacks).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import timely

EPOCHS = 5
PER_EPOCH = 20_000


class Count(timely.Vertex):
    """Counts records per time; emits the count when the time completes."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        if time not in self.counts:
            self.counts[time] = 0
            self.notify_at(time)
        self.counts[time] += len(records)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [self.counts.pop(time)], time)

    def state_size(self) -> tuple[int, int]:
        return len(self.counts), 64 * len(self.counts)


def build(scope: timely.Scope, hold_until: str | None = None) -> tuple[timely.Input, timely.Probe]:
    numbers = scope.new_input("numbers")
    key = _held_key(hold_until) if hold_until is not None else lambda x: x % 97
    done = numbers.map("key", key).stage("count", Count, exchange=lambda k: k).probe("done")
    return numbers, done


def _held_key(stop: str) -> Any:
    """The key of a record; the first call blocks the runtime's thread until ``stop`` exists
    (at most 60 s)."""
    held = [False]

    def key(x: int) -> int:
        if not held[0]:
            held[0] = True
            until = time.monotonic() + 60
            while not os.path.exists(stop) and time.monotonic() < until:
                time.sleep(0.05)
        return x % 97

    return key


def keep_running(comp: timely.Computation, probe: timely.Probe, epoch: int, stop: str) -> None:
    """Run the event loop (the scheduler idle or not), waiting for the open ``epoch``, until
    the test says stop."""
    while not os.path.exists(stop):
        try:
            comp.wait_passed(probe, epoch, timeout=0.3)
        except timely.StalledError:
            pass


def main() -> None:
    mode, stop = sys.argv[1], sys.argv[2]
    hold_until = stop if mode == "busy" and os.environ.get("TIMELY_PROCESS_INDEX", "0") != "0" else None
    with timely.execute(lambda scope: build(scope, hold_until), timeout=100) as (comp, (numbers, done)):
        if comp.console_url is not None:
            print("URL", comp.console_url, flush=True)
        me = comp.statistics().process
        processes = int(os.environ.get("TIMELY_PROCESSES", "1"))
        if mode == "busy":
            numbers.send(range(me, 1000, processes))
            numbers.advance_to(1)
            epochs = 1
        elif mode in ("steady", "stall"):
            epochs = EPOCHS if mode == "steady" else 3
            for epoch in range(epochs):
                numbers.send(range(me, PER_EPOCH, processes))
                numbers.advance_to(epoch + 1)
            comp.wait_passed(done, epochs - 1)
            if mode == "stall":
                numbers.send(range(me, 1000, processes))
            else:
                stats = comp.statistics()
                stages = {
                    name: [
                        sum(v.statistics().records_received for v in comp.vertices(name)),
                        sum(v.statistics().records_sent for v in comp.vertices(name)),
                    ]
                    for name in ("numbers", "key", "count", "done")
                }
                workers = {w.worker: w.records_delivered for w in stats.workers}
                print("STATS", json.dumps({"process": me, "workers": workers, "stages": stages}), flush=True)
        elif mode == "rates":
            epoch = 0
            for rate in (2_000, 200_000):
                until = time.monotonic() + 4
                while time.monotonic() < until:
                    numbers.send(range(rate // 10))
                    epoch += 1
                    numbers.advance_to(epoch)
                    try:
                        comp.wait_passed(done, epoch, timeout=0.1)
                    except timely.StalledError:
                        pass
            epochs = epoch
        keep_running(comp, done, epochs, stop)  # the input is open at epoch `epochs`


if __name__ == "__main__":
    main()
