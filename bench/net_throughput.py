"""``net.throughput``: the core pipeline with a CPU-heavy map, in 1, 2 and 4 OS processes.

The dataflow is ``core.throughput``'s (integers -> map to a key -> exchange by key -> count
per key per epoch, emitted at the epoch's notification; `EPOCHS` epochs), but the map does
about a microsecond of pure-Python arithmetic per record (`bench._net_worker.heavy_key`), so
that running it in more processes can pay off. Every process runs the program
(`bench/_net_worker.py`, started by ``timely run -n N``) and feeds its share of the input:
records ``i`` with ``i % N == index``. With N > 1, records whose key belongs to another
process cross loopback TCP.

Each process starts its clock when ``execute()`` has returned (every peer is connected: the
start signal; process start-up and the handshake are not timed; the progress line shows how
far apart the processes started) and stops it when the computation is complete (leaving the
``with`` block, goodbyes included: a few ms). The figure is records per second over the
slowest process's time, best of several runs. Baseline ``p1``: the same program in one
process, measured in the same run. The counts of all processes together must equal those of
a plain computation (a process counting a key another one counts is an error too).

``.cpu_bound`` records divide by the largest CPU time a process used instead of wall time:
the rate with a core per process, which shows whether a shortfall is the runtime's or the
machine's (with two cores and other work on them, wall time also counts waiting for a core).

``p2.encrypted``: the 2-process run again with ``timely run --encrypt`` (every frame sealed
with AES-256-GCM, docs/network.md), right after the clear one in every round, so both
see the same machine; its baseline is the clear ``p2`` of the same run (target >= 0.8x).
"""

from __future__ import annotations

from collections import Counter

from bench._harness import Context, benchmark
from bench._net import launch, load
from bench._net_worker import KEYS, epoch_of, heavy_key

EPOCHS = 10
PROCESSES = (1, 2, 4)
RECORDS_FULL, RUNS_FULL = 2_000_000, 3
RECORDS_QUICK, RUNS_QUICK = 400_000, 2
TARGET_SPEEDUP = 1.6  # p2 >= 1.6x p1
TARGET_ENCRYPTED = 0.8  # p2 sealed >= 0.8x p2 in clear
ENCRYPTED = "p2.encrypted"


def expected_counts(records: int) -> Counter[tuple[int, int]]:
    """(epoch, key) -> count, by a plain loop over all the records."""
    return Counter((epoch_of(i, records, EPOCHS), heavy_key(i)) for i in range(records))


def _merge(ctx: Context, results: list[dict], processes: int) -> Counter[tuple[int, int]]:
    got: Counter[tuple[int, int]] = Counter()
    for result in results:
        for epoch, key, n in result["counts"]:
            ctx.check((epoch, key) not in got, f"p{processes}: (epoch, key) {(epoch, key)} counted by two processes")
            got[epoch, key] = n
    return got


@benchmark("net.throughput", "records/s of map(CPU-heavy) -> exchange -> count in 1, 2 and 4 processes over TCP")
def throughput(ctx: Context) -> None:
    records, runs = (RECORDS_QUICK, RUNS_QUICK) if ctx.quick else (RECORDS_FULL, RUNS_FULL)
    ctx.progress(f"plain computation of the expected counts ({records:,} records, {EPOCHS} epochs, {KEYS} keys)")
    expected = expected_counts(records)
    variants: list[tuple[str, int, list[str]]] = [(f"p{n}", n, []) for n in PROCESSES]
    variants.insert(2, (ENCRYPTED, 2, ["--encrypt"]))  # right after p2 in clear
    best = {name: 0.0 for name, _, _ in variants}
    best_cpu = {name: 0.0 for name, _, _ in variants}
    for run in range(1, runs + 1):
        line = []
        for name, n, options in variants:
            before = load()
            results = launch(n, "throughput", "--records", records, "--epochs", EPOCHS, options=options)
            got = _merge(ctx, results, n)
            ctx.check(got == expected, f"p{n}: the counts differ from the plain computation's")
            fed = sum(r["records_fed"] for r in results)
            ctx.check(fed == records, f"p{n}: the processes fed {fed:,} records, not {records:,}")
            seconds = max(r["seconds"] for r in results)
            cpu = max(r["cpu_seconds"] for r in results)
            best[name] = max(best[name], records / seconds)
            best_cpu[name] = max(best_cpu[name], records / cpu)
            note = f"cpu-bound {records / cpu / 1e6:.3f}; {before}"
            if n > 1:
                skew = max(r["started"] for r in results) - min(r["started"] for r in results)
                net = [r["network"] for r in results]
                sent = sum(x["data_bytes_sent"] for x in net)
                progress = sum(x["progress_bytes_sent"] for x in net)
                note += (
                    f"; starts {skew * 1e3:.0f} ms apart; {sent / 1e6:.1f} MB data, {progress / 1e3:.1f} kB progress"
                )
            line.append(f"{name} {records / seconds / 1e6:.3f} ({note})")
        ctx.progress(f"run {run}/{runs}: " + ", ".join(line) + " M records/s (counts verified)")

    base, base_cpu = best["p1"], best_cpu["p1"]
    for n in PROCESSES:
        target = met = None
        if n == 2:
            target, met = f">= {TARGET_SPEEDUP}x p1", best["p2"] >= TARGET_SPEEDUP * base
        ctx.record(f"net.throughput.p{n}", best[f"p{n}"], "records/s", "p1", base, target=target, met=met)
    ctx.record(
        f"net.throughput.{ENCRYPTED}",
        best[ENCRYPTED],
        "records/s",
        "p2",
        best["p2"],
        target=f">= {TARGET_ENCRYPTED}x p2 in clear (same run)",
        met=best[ENCRYPTED] >= TARGET_ENCRYPTED * best["p2"],
    )
    for n in PROCESSES:
        ctx.record(f"net.throughput.p{n}.cpu_bound", best_cpu[f"p{n}"], "records/s", "p1.cpu_bound", base_cpu)
    ctx.record(
        f"net.throughput.{ENCRYPTED}.cpu_bound", best_cpu[ENCRYPTED], "records/s", "p2.cpu_bound", best_cpu["p2"]
    )
