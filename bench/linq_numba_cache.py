"""``linq.numba_cache``: seconds a fresh process spends making linq's compiled loops ready, on a
machine that compiled them once before (they come from the per-user cache), against the first
time (a cold cache: every loop compiles). Target: under 1 s once cached.

Each measurement is a new interpreter with its own ``NUMBA_CACHE_DIR`` (a temporary directory,
so the developer's cache is neither used nor touched); numba, numpy and linq are imported
first, so the figure is only the loops': compiling them, or loading them from the cache
(which includes numba's own one-time loading of its implementations, paid by any first use).
Cold: one run. Warm: the median of several, each a new process on the cache the cold run made;
``warm_without_scipy`` as in an install without scipy (the ``spark`` extra has none), where
numba skips importing it for its BLAS check (about half the warm figure where scipy is present).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._harness import Context, benchmark

PROBE = """
import json, sys, time
if "--without-scipy" in sys.argv:
    sys.modules["scipy"] = None  # as an install without scipy: numba then skips its BLAS check
import numba, numpy, timely_libs.linq
from numba.core.dispatcher import Dispatcher
started = time.perf_counter()
import timely_libs.linq._columns._compiled as compiled
seconds = time.perf_counter() - started
loops = [v for v in vars(compiled).values() if isinstance(v, Dispatcher)]
print(json.dumps({"seconds": seconds, "compiled": sum(bool(f.stats.cache_misses) for f in loops), "loops": len(loops)}))
"""
ROOT = Path(__file__).resolve().parent.parent


def _probe(cache: Path, *flags: str) -> dict[str, float]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@benchmark("linq.numba_cache", "seconds to make linq's compiled loops ready in a new process: cached vs first compile")
def numba_cache(ctx: Context) -> None:
    with tempfile.TemporaryDirectory(prefix="timely-numba-bench-") as cache:
        ctx.progress("cold: a new process compiles every loop into an empty cache")
        cold = _probe(Path(cache))
        if cold["compiled"] != cold["loops"]:
            raise RuntimeError(f"the cold run compiled {cold['compiled']} of {cold['loops']} loops")
        warm: dict[str, list[float]] = {"": [], "--without-scipy": []}
        for i in range(2 if ctx.quick else 5):
            for flag, runs in warm.items():
                ctx.progress(f"warm run {i + 1} {flag}: a new process on the same cache")
                run = _probe(Path(cache), *filter(None, [flag]))
                if run["compiled"]:
                    raise RuntimeError(f"a warm run compiled {run['compiled']} loops: the cache was not used")
                runs.append(run["seconds"])
    for flag, suffix in (("", "warm"), ("--without-scipy", "warm_without_scipy")):
        runs = sorted(warm[flag])
        median = runs[len(runs) // 2]
        ctx.record(
            f"linq.numba_cache.{suffix}",
            median,
            "s",
            "first compile (cold cache)",
            cold["seconds"],
            target="< 1 s",
            met=median < 1.0,
        )
