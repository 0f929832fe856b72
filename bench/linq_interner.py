"""The interner under a stream of ever-new string keys: what it holds, and what freeing costs.

``linq.interner``: one process; each epoch inserts ``posts`` posts ``(user, tag)`` whose user
names and hashtags were never seen before and retracts the posts of ``window`` epochs ago, as a
streaming job over user names and hashtags does; the query counts posts per tag, keeps the
distinct users (counted), and joins each post with its tag's count. Each epoch is timed until the output
has reported it. The same stream runs twice in one run: as linq runs it (the interner frees
what no operator holds, at `CollectionInput.advance_to`), and with freeing switched off (the
sweep threshold out of reach), the baseline. Records: the most values the interner held, the
epoch median and the slowest epoch (where a sweep lands). Both runs' answers are compared
with a recomputation from scratch after the last epoch.

Sizes: 2,000 posts an epoch, 200 epochs, a window of 10 (``--quick``: 1,000, 80, 5): about
800,000 distinct values (160,000), many times the 65,536 that a first sweep waits for. A few
epochs run first, untimed, so that neither run pays for imports and first calls.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections import Counter
from itertools import pairwise
from operator import itemgetter
from typing import Any

import timely
from bench._harness import Context, benchmark
from timely_libs import linq
from timely_libs.linq._columns import _codes

first, second = itemgetter(0), itemgetter(1)


def _posts(epoch: int, n: int) -> list[tuple[str, str]]:
    return [(f"user-{epoch}-{i}", f"#tag-{epoch}-{i % 200}") for i in range(n)]


def _query(posts: linq.Collection) -> linq.Collection:
    per_tag = posts.count(second)
    users = posts.select(first).distinct().count_all().select(lambda n: ("users", n))
    annotated = posts.join(per_tag, second, first, lambda p, c: ("post", p[0], c[1]))
    return per_tag.select(lambda r: ("tag", r)).concat(users, annotated)


def _expected(live: list[tuple[str, str]]) -> dict[Any, int]:
    tags = Counter(t for _, t in live)
    out: dict[Any, int] = {("tag", r): 1 for r in tags.items()}
    if live:
        out[("users", len({u for u, _ in live}))] = 1
    for user, tag in live:
        out[("post", user, tags[tag])] = out.get(("post", user, tags[tag]), 0) + 1
    return out


def _run(ctx: Context, posts: int, epochs: int, window: int, sweep_min: int) -> dict[str, float]:
    gc.collect()
    _codes.release_unused(force=True)
    saved, _codes.SWEEP_MIN = _codes.SWEEP_MIN, sweep_min
    held = []
    latencies = []

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "posts")
        return inp, linq.CollectionOutput(_query(inp.collection))

    try:
        with timely.execute(build, timeout=3600) as (comp, (inp, out)):
            for epoch in range(epochs):
                start = time.perf_counter()
                inp.insert_all(_posts(epoch, posts))
                if epoch >= window:
                    inp.remove_all(_posts(epoch - window, posts))
                inp.advance_to(epoch + 1)
                comp.wait_passed(out.probe, epoch, timeout=3600)
                latencies.append(time.perf_counter() - start)
                held.append(_codes.held_values())
            live = [p for e in range(max(0, epochs - window), epochs) for p in _posts(e, posts)]
            ctx.check(dict(out.contents()) == _expected(live), "the last epoch's answer")
    finally:
        _codes.SWEEP_MIN = saved
    return {
        "held": max(held),
        "median_ms": 1e3 * statistics.median(latencies),
        "max_ms": 1e3 * max(latencies),
        "sweeps": sum(1 for a, b in pairwise(held) if b < a),
    }


@benchmark("linq.interner", "a stream of ever-new string keys: values held and epoch latency, freeing on and off")
def interner(ctx: Context) -> None:
    posts, epochs, window = (1_000, 80, 5) if ctx.quick else (2_000, 200, 10)
    _run(ctx, posts, window + 2, window, 1 << 62)  # warm-up
    on = _run(ctx, posts, epochs, window, _codes.SWEEP_MIN)
    ctx.progress(f"freeing: {on} (load {os.getloadavg()[0]:.1f})")
    off = _run(ctx, posts, epochs, window, 1 << 62)
    ctx.progress(f"never freeing: {off} (load {os.getloadavg()[0]:.1f})")
    ctx.record("linq.interner.held", on["held"], "values", "never_freeing_held", off["held"])
    ctx.record("linq.interner.epoch.median", on["median_ms"], "ms", "never_freeing_median_ms", off["median_ms"])
    ctx.record("linq.interner.epoch.max", on["max_ms"], "ms", "never_freeing_max_ms", off["max_ms"])
