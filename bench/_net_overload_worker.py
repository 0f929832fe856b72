"""The program ``net.overload`` runs in two processes (private; not a benchmark).

``python -m timely.cli run -n 2 bench/_net_overload_worker.py RECORDS``: process 0 feeds
RECORDS integers in batches of `BATCH` (a new epoch every `BATCHES_PER_EPOCH` batches)
through a cheap map, and every record is exchanged to process 1, whose consumer does about
`SLOWDOWN` times the map's work per record. Each process prints ``OVERLOAD {json}``: its
peak resident memory (``ru_maxrss``), when it finished feeding (process 0), and the records
it consumed (process 1: must be RECORDS).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

import timely

MARK = "OVERLOAD"
BATCH = 10_000
BATCHES_PER_EPOCH = 10
ROUNDS = 2
"""Steps of the producer's map per record; the consumer does `SLOWDOWN` times as many."""
SLOWDOWN = 5


def work(x: int, rounds: int) -> int:
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class Consume(timely.Vertex):
    """The slow consumer: `SLOWDOWN` times the map's work per record; keeps only a count."""

    def __init__(self) -> None:
        self.count = 0
        self.check = 0

    def on_recv(self, edge: int, records: list[Any], time_: timely.Timestamp) -> None:
        rounds = ROUNDS * SLOWDOWN
        check = self.check
        for r in records:
            check ^= work(r, rounds)
        self.check = check
        self.count += len(records)


def build(scope: timely.Scope) -> Any:
    inp = scope.new_input("numbers")
    consumer = inp.map("produce", lambda r: work(r, ROUNDS) and r).stage("consume", Consume, exchange=lambda r: 1)
    return inp, consumer


def main(records: int) -> None:
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    started = time.perf_counter()
    fed = 0.0
    with timely.execute(build, timeout=600, stall_log_after=None) as (comp, (inp, _)):
        if index == 0:
            for b, start in enumerate(range(0, records, BATCH)):
                inp.send(range(start, min(start + BATCH, records)))
                if (b + 1) % BATCHES_PER_EPOCH == 0:
                    inp.advance_to(inp.epoch + 1)
            fed = time.perf_counter() - started
        consumers = comp.vertices("consume")
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB
    consumed = sum(v.count for v in consumers)  # type: ignore[attr-defined]
    stats = comp.statistics()
    result = {
        "process": index,
        "peak_rss_mib": peak,
        "fed_seconds": fed,
        "seconds": elapsed,
        "consumed": consumed,
        "max_queued_messages": stats.max_queued_messages,
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)  # MARK, a space, the json: what bench._net.launch reads


if __name__ == "__main__":
    main(int(sys.argv[1]))
