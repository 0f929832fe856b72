"""The program ``bloom.kvs`` runs in every process (private; not a benchmark).

Started by `bench.bloom_kvs` as ``python -m timely.cli run -n N -m bench._bloom_kvs_worker kvs
KEYS OPS BATCH SEED [AHEAD [PACE]]``. Every process builds the same workload (`bench.bloom_kvs.workload`) and
feeds its share of every epoch (op ``i`` when ``i % processes == index``): first the load (every
key put once, 50,000 puts an epoch), waits until the load is answered and freezes it out of the
garbage collector's scans (`gc.freeze`, as a server would after loading), then feeds the mixed
stream, BATCH operations an epoch, each input held to at most `AHEAD` epochs ahead of the
answers' probe; with PACE (operations a second offered, one process), mixed epoch ``i`` is
due at ``i * BATCH / PACE`` seconds from the start (an open-loop client at that rate). Each
process prints one line
``BLOOMKVS {json}``: the seconds from its first mixed operation fed to the end of the
computation (and its CPU seconds), for each mixed epoch the milliseconds from feeding it (just
before ``advance_to`` closes it here; paced: from when it was due) to its answers being complete (the subscription's call for that timestep), and
a checksum of the get answers it received (`bench.bloom_kvs.checksum`).
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

import timely
from bench.bloom_kvs import AHEAD, LOAD_BATCH, MARK, MASK, checksum, workload
from timely_libs import bloom


def main(argv: list[str]) -> None:
    keys, ops, batch, seed = (int(a) for a in argv[1:5])
    ahead = int(argv[5]) if len(argv) > 5 else AHEAD
    pace = float(argv[6]) if len(argv) > 6 else 0.0
    load, mixed = workload(keys, ops, batch, seed)
    answered: dict[int, float] = {}
    got = [0, 0]  # answers, checksum

    def collect(at: timely.Timestamp, records: list[Any]) -> None:
        now = time.perf_counter()
        total = got[1]
        for step, answer in records:
            if step not in answered:
                answered[step] = now
            total += checksum(answer)
        got[0] += len(records)
        got[1] = total & MASK

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        puts, dels, gets = scope.new_input("puts"), scope.new_input("dels"), scope.new_input("gets")
        response, _ = bloom.programs.kvs(puts, dels, gets, keep="none")  # answers read off the stream
        response.stream.subscribe(collect, name="answered")
        for inp in (puts, dels, gets):
            inp.throttle(response.probe, ahead)
        return puts, dels, gets, response.probe, scope.process_index, scope.processes

    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, built):
        puts, dels, gets, response_probe, index, processes = built
        inputs = (puts, dels, gets)
        epoch = 0
        for chunk in range(0, len(load), LOAD_BATCH):
            puts.send(load[chunk + index : chunk + LOAD_BATCH : processes])
            epoch += 1
            for inp in inputs:
                inp.advance_to(epoch)
        # The mixed stream starts on a loaded store: its clock and its gets' latencies are its own,
        # not the load's tail (up to AHEAD load epochs of 50,000 puts each were still in flight).
        comp.wait_passed(response_probe, epoch - 1)
        # What a server does once it has loaded a large state: take it out of the collector's
        # scans (its full collections paused the mixed stream for 0.25-0.6 s at load 12).
        gc.collect()
        gc.freeze()
        first = epoch
        fed: dict[int, float] = {}
        started, cpu = time.perf_counter(), time.process_time()
        interval = batch / pace if pace else 0.0
        for i, (p, g, d) in enumerate(mixed):
            if interval:  # open loop: timestep i is due at started + i * interval, whatever came before
                due = started + i * interval
                if time.perf_counter() < due:
                    comp.wait_passed(response_probe, epoch - 1)  # early: finish what is in flight, then idle
                    idle = due - time.perf_counter()
                    if idle > 0:
                        time.sleep(idle)
            puts.send(p[index::processes])
            gets.send(g[index::processes])
            dels.send(d[index::processes])
            # Paced: from when it was due, so that a store falling behind its rate is charged for it.
            fed[epoch] = started + i * interval if interval else time.perf_counter()
            epoch += 1
            for inp in inputs:
                inp.advance_to(epoch)
        for inp in inputs:
            inp.close()
        comp.run()
        finished, cpu = time.perf_counter(), time.process_time() - cpu
    latencies = {e - first: (answered[e] - fed[e]) * 1000 for e in fed if e in answered}
    result = {
        "process": index,
        "seconds": finished - started,
        "cpu_seconds": cpu,
        "latency_ms": latencies,
        "answers": got[0],
        "checksum": got[1],
    }
    print(f"{MARK} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
