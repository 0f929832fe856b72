"""``net.overload``: a fast producer and a consumer 5x slower, in two processes: is the
consumer's memory bounded, whatever the input's size?

Process 0 feeds RECORDS integers in batches of 10,000 through a cheap map; every record is
exchanged to process 1, whose consumer does five times the map's work per record and keeps
only a count (`bench/_net_overload_worker.py`, under ``timely run -n 2``). Without
backpressure the records the consumer cannot keep up with pile up in its queues, and its
peak memory grows with the input; with it, the producer is held to the consumer's pace.

The record ``net.overload`` is the consumer process's peak resident memory (``ru_maxrss``)
for 6M records, in MiB; its baseline, the same for 2M records, measured in the same run.
Target: within 1.2x. Every run checks that the consumer saw every record.
"""

from __future__ import annotations

from bench._harness import Context, benchmark
from bench._net import launch, load

WORKER = "bench._net_overload_worker"
MARK = "OVERLOAD "
SMALL, LARGE = 2_000_000, 6_000_000
SMALL_QUICK, LARGE_QUICK = 200_000, 600_000
TARGET = 1.2


@benchmark("net.overload", "consumer's peak RSS, 6M vs 2M records into a consumer 5x slower (2 processes)")
def overload(ctx: Context) -> None:
    small, large = (SMALL_QUICK, LARGE_QUICK) if ctx.quick else (SMALL, LARGE)
    peaks: dict[int, float] = {}
    for records in (small, large):
        ctx.progress(f"{records:,} records ({load()})")
        producer, consumer = launch(2, str(records), timeout=900, worker=WORKER, mark=MARK)
        ctx.check(consumer["consumed"] == records, f"the consumer saw {consumer['consumed']:,} of {records:,} records")
        peaks[records] = consumer["peak_rss_mib"]
        ctx.progress(
            f"{records:,} records: consumer peak {consumer['peak_rss_mib']:.1f} MiB, producer peak "
            f"{producer['peak_rss_mib']:.1f} MiB; fed in {producer['fed_seconds']:.1f} s of "
            f"{consumer['seconds']:.1f} s; at most {consumer['max_queued_messages']} messages queued ({load()})"
        )
    ratio = peaks[large] / peaks[small]
    ctx.record(
        "net.overload",
        peaks[large],
        "MiB",
        f"{small // 1_000_000 or small / 1_000_000}M records",
        peaks[small],
        target=f"<= {TARGET}x the baseline",
        met=ratio <= TARGET,
    )
