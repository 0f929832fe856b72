"""``bloom.kvs``: Bud's key-value store (`timely_libs.bloom.programs.kvs`) under a mixed stream.

The store is loaded with 1,000,000 keys (``--quick``: 100,000), then serves a seeded stream of
1,000,000 operations (``--quick``: 100,000), `BATCH` per timestep: 45% puts, 45% gets, 10%
deletes, each on a key drawn without replacement within its timestep (Bud allows one value per
key per timestep). A put or delete takes effect at the next timestep; a get reads its own
timestep. It runs in fresh processes (``timely run -n N -m bench._bloom_kvs_worker``), on 1 and
on 2 processes, the inputs held `AHEAD` epochs ahead of the answers.

Records:

* ``bloom.kvs.throughput`` (1 and 2 processes): mixed operations per second, from the first
  mixed operation fed to the end of the computation (the slowest process). Baseline: a plain
  Python dict replaying the same stream with the same timestep semantics.
* ``bloom.kvs.get.p99``: the 99th percentile, over gets, of the milliseconds from feeding a
  get's timestep to its answers being complete.
* ``bloom.kvs.small.throughput`` / ``bloom.kvs.small.get.p99`` (1 process): the same stream cut
  into timesteps of `SMALL_BATCH` operations, `SMALL_AHEAD` in flight: what the latency knob
  costs in throughput and buys in latency.
* ``bloom.kvs.paced.throughput`` / ``bloom.kvs.paced.get.p99`` (1 process): the stream offered
  at the throughput target, `TARGET_OPS` operations a second, by an open-loop client (timestep
  ``i`` due ``i * BATCH / TARGET_OPS`` s after the start; a get's latency counts from when its
  timestep was due). ``bloom.kvs.get.p99`` is the latency at saturation, where the client
  always has `AHEAD` timesteps queued; this one is the latency a client sees at the target
  rate, and is met only if the store also keeps that rate.

Correctness: the number of get answers and an order-independent checksum of them must equal
the dict's.
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench._harness import Context, benchmark, percentile
from bench._net import launch, load

MARK = "BLOOMKVS"
WORKER = "bench._bloom_kvs_worker"
BATCH = 1000
"""Operations per timestep."""
AHEAD = 2
"""Epochs the inputs may run ahead of the answers."""
SMALL_BATCH = 500
SMALL_AHEAD = 1
"""The latency configuration (``bloom.kvs.small.*``): smaller timesteps, one in flight."""
LOAD_BATCH = 50_000
TARGET_OPS = 200_000
TARGET_P99_MS = 10.0

Op = tuple[Any, ...]


def sizes(quick: bool) -> tuple[int, int]:
    """(keys, mixed operations)."""
    return (100_000, 100_000) if quick else (1_000_000, 1_000_000)


def workload(keys: int, ops: int, batch: int, seed: int) -> tuple[list[Op], list[tuple[list[Op], list[Op], list[Op]]]]:
    """The load (a put of every key) and the mixed stream, per timestep (puts, gets, deletes):
    the same in every process."""
    load_puts: list[Op] = [("c", k, k, k) for k in range(keys)]
    rng = random.Random(seed)
    mixed = []
    reqid = keys
    for _ in range(ops // batch):
        puts: list[Op] = []
        gets: list[Op] = []
        dels: list[Op] = []
        for k in rng.sample(range(keys), batch):
            reqid += 1
            r = rng.random()
            if r < 0.45:
                puts.append(("c", k, reqid, reqid))
            elif r < 0.9:
                gets.append((reqid, k))
            else:
                dels.append((k, reqid))
        mixed.append((puts, gets, dels))
    return load_puts, mixed


MASK = 0xFFFFFFFFFFFFFFFF


def checksum(answer: Any) -> int:
    """An order-independent checksum of one get answer ``(reqid, key, value)`` (summed, masked
    to 64 bits). The workload's fields are ints, whose hash does not depend on the process (no
    hash randomization), and it is cheap: the worker sums it in the subscription that also
    timestamps the answers, so a costly checksum would add to the latencies it measures."""
    return hash(tuple(answer)) & MASK


def replay(load_puts: list[Op], mixed: list[tuple[list[Op], list[Op], list[Op]]]) -> tuple[int, int, float]:
    """The baseline: a dict replays the stream (puts and deletes of timestep e visible from e + 1,
    gets read timestep e). Returns (answers, checksum, seconds for the mixed stream)."""
    state: dict[Any, Any] = {}
    for _, key, _, value in load_puts:
        state[key] = value
    got: list[tuple[Any, Any, Any]] = []
    started = time.perf_counter()
    for puts, gets, dels in mixed:
        for reqid, key in gets:
            value = state.get(key)
            if value is not None:
                got.append((reqid, key, value))
        for key, _ in dels:
            state.pop(key, None)
        for _, key, _, value in puts:
            state[key] = value
    seconds = time.perf_counter() - started  # the checksum is the check's, not the store's
    total = 0
    for answer in got:
        total = (total + checksum(answer)) & MASK
    return len(got), total, seconds


def run(
    ctx: Context,
    processes: int,
    keys: int,
    ops: int,
    want: tuple[int, int],
    batch: int = BATCH,
    ahead: int = AHEAD,
    pace: int = 0,
) -> tuple[float, list[float]]:
    """Mixed ops/s on ``processes`` processes, and every get's latency (ms); answers checked.
    ``pace``: operations a second offered by an open-loop client (0: as fast as it answers)."""
    how = f"{pace:,} ops/s offered" if pace else f"{ahead} ahead"
    ctx.progress(f"timely, {processes} process(es), {batch} a timestep, {how} ({load()})")
    results = launch(processes, "kvs", keys, ops, batch, 1, ahead, pace, worker=WORKER, mark=MARK + " ", timeout=3600)
    answers = sum(r["answers"] for r in results)
    total = sum(r["checksum"] for r in results) & MASK
    ctx.check((answers, total) == want, f"{processes} process(es): {answers} answers differ from the dict's {want[0]}")
    _, mixed = workload(keys, ops, batch, 1)
    latencies: list[float] = []
    for r in results:  # every process's view of every timestep, weighted by its gets
        for step, ms in r["latency_ms"].items():
            latencies.extend([ms] * len(mixed[int(step)][1]))
    seconds = max(r["seconds"] for r in results)
    cpu = max(r["cpu_seconds"] for r in results)
    ctx.progress(
        f"timely, {processes} process(es): {seconds:.2f} s, {ops / seconds:,.0f} ops/s, "
        f"{ops / cpu:,.0f} ops per CPU-second ({load()})"
    )
    return ops / seconds, sorted(latencies)


@benchmark("bloom.kvs", "Bud's KVS on 1M keys, mixed put/get/delete stream, 1 and 2 processes, vs a dict")
def kvs(ctx: Context) -> None:
    keys, ops = sizes(ctx.quick)
    load_puts, mixed = workload(keys, ops, BATCH, 1)
    answers, total, dict_s = replay(load_puts, mixed)
    ctx.progress(f"dict replay: {dict_s:.3f} s, {ops / dict_s:,.0f} ops/s, {answers:,} answers")
    dict_rate = ops / dict_s
    for processes in (1, 2):
        rate, latencies = run(ctx, processes, keys, ops, (answers, total))
        suffix = "" if processes == 1 else ".2p"
        ctx.record(
            f"bloom.kvs.throughput{suffix}",
            rate,
            "ops/s",
            "dict replay",
            dict_rate,
            target=f">= {TARGET_OPS:,} ops/s" if processes == 1 else None,
            met=rate >= TARGET_OPS if processes == 1 else None,
        )
        p99 = percentile(latencies, 99) if latencies else float("nan")
        ctx.record(
            f"bloom.kvs.get.p99{suffix}",
            p99,
            "ms",
            target=f"<= {TARGET_P99_MS:g} ms" if processes == 1 else None,
            met=p99 <= TARGET_P99_MS if processes == 1 else None,
        )
        ctx.progress(f"{processes} process(es): get p50 {percentile(latencies, 50):.2f} ms, p99 {p99:.2f} ms")
    # The latency knob, one process: timesteps half as large and one in flight instead of two
    # (a get queues behind less; each timestep's fixed cost is spread over fewer operations).
    load_puts, mixed = workload(keys, ops, SMALL_BATCH, 1)
    small_answers, small_total, _ = replay(load_puts, mixed)
    rate, latencies = run(ctx, 1, keys, ops, (small_answers, small_total), SMALL_BATCH, SMALL_AHEAD)
    ctx.record("bloom.kvs.small.throughput", rate, "ops/s", "dict replay", dict_rate)
    p99 = percentile(latencies, 99) if latencies else float("nan")
    ctx.record("bloom.kvs.small.get.p99", p99, "ms")
    ctx.progress(
        f"{SMALL_BATCH} a timestep, {SMALL_AHEAD} ahead: get p50 {percentile(latencies, 50):.2f} ms, p99 {p99:.2f} ms"
    )
    # Latency at the throughput target: an open-loop client offering TARGET_OPS operations a
    # second, the same stream and timesteps as bloom.kvs.throughput. Each get's latency counts
    # from when its timestep was due, so a store that falls behind the rate is charged for it.
    rate, latencies = run(ctx, 1, keys, ops, (answers, total), pace=TARGET_OPS)
    ctx.record("bloom.kvs.paced.throughput", rate, "ops/s", "dict replay", dict_rate)
    p99 = percentile(latencies, 99) if latencies else float("nan")
    ctx.record(
        "bloom.kvs.paced.get.p99",
        p99,
        "ms",
        target=f"<= {TARGET_P99_MS:g} ms at {TARGET_OPS:,} ops/s offered",
        met=p99 <= TARGET_P99_MS and rate >= 0.99 * TARGET_OPS,
    )
    ctx.progress(f"{TARGET_OPS:,} ops/s offered: get p50 {percentile(latencies, 50):.2f} ms, p99 {p99:.2f} ms")
