"""``streaming.kexposure``: the streaming job's k-exposure analysis alone (Naiad §6.3), fed the
stream `streaming.showcase` feeds its dataflow, without Spark and without the components.

The same figure as ``streaming.showcase.kexposure`` in a fraction of the time (no Spark, no
components, no job): 10 s of generated posts at 32,000 posts/s (``--quick``: 5 s), handed to
timely a second at a time and back to back, the first two seconds untimed. The window (60 s)
never retires a post here, so the state (the mentions, the hashtags used, every exposed
``(user, hashtag)`` pair) grows with every second fed: the rate over 10 s is lower than over
5 s wherever a cost grows with the state. Records:

- ``streaming.kexposure``: posts/s (baseline: Naiad's 482,988 tweets/s on 32 machines, per
  machine; target: 50,000);
- ``streaming.kexposure.held``: values linq's interner holds once the stream is fed (its tuple
  tables included; no sweep has run since the last epoch).
"""

from __future__ import annotations

from bench._harness import Context, benchmark
from bench.streaming_showcase import WINDOW, _feed_dataflow, stream_seconds

TARGET = 50_000.0


@benchmark("streaming.kexposure", "k-exposure alone over the showcase's stream (posts/s), no Spark")
def streaming_kexposure(ctx: Context) -> None:
    from timely_jobs._stream_dataflow import DataflowOptions
    from timely_libs.linq._columns import _codes

    data = stream_seconds(ctx)
    ctx.progress(f"k-exposure over {len(data)} s of posts")
    rate = _feed_dataflow(data, DataflowOptions(window=WINDOW, analyses=("kexposure",)))["rate"][0]
    ctx.record(
        "streaming.kexposure",
        rate,
        "posts/s",
        "Naiad §6.3 per machine (482,988 on 32)",
        482_988 / 32,
        target=f">= {TARGET:,.0f} posts/s",
        met=rate >= TARGET,
    )
    ctx.record("streaming.kexposure.held", float(_codes.held_values()), "values")
