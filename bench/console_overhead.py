"""``console.overhead``: what the live console costs a computation that is busy.

The workloads of ``core.throughput`` (one process: map -> exchange -> count per epoch) and of
``net.throughput`` (two processes over TCP, a CPU-heavy map), each run with the console off
and on, alternately, best of several runs. With it on, a page client is connected throughout:
a separate process (as a browser would be) that loads the page and the graph and then follows
the server-sent events, reconnecting until the computation is gone; it must have received
events, or the run does not count. The figure is records per second with the console on;
the baseline the same with it off. Target: within 5%.

The runs are longer than those of ``core.throughput`` (a few seconds each), and the console's
modules are imported before the clock starts: importing the web server (aiohttp) takes a
process about 0.2 s once, when its first console starts; that is start-up, which the
progress lines report, not throughput. Everything else the console does is inside the clock:
starting its server, drawing the graph with ``dot`` for the page, a sample a second,
serving the events.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from bench._harness import Context, benchmark
from bench._net import launch, load
from bench.core_throughput import make_epochs, run_timely
from bench.net_throughput import expected_counts

RECORDS_FULL, RUNS_FULL = 6_000_000, 5
RECORDS_QUICK, RUNS_QUICK = 1_000_000, 2
NET_RECORDS_FULL, NET_RECORDS_QUICK = 2_000_000, 400_000
NET_EPOCHS = 10
TARGET = 0.95

CLIENT = r"""
import sys, time, urllib.request
base = sys.argv[1]
events = 0
while True:
    try:
        urllib.request.urlopen(base + "/", timeout=5).read()
        urllib.request.urlopen(base + "/api/graph", timeout=5).read()
        with urllib.request.urlopen(base + "/api/events", timeout=30) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    events += 1
                    print("EVENT", events, flush=True)
    except OSError:
        time.sleep(0.02)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _page_client(port: int) -> Iterator[list[int]]:
    """A page client following the console on ``port``; yields a list that holds, afterwards,
    how many events it received."""
    received: list[int] = []
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True
    )
    try:
        yield received
    finally:
        client.terminate()
        out, _ = client.communicate(timeout=10)
        received.append(sum(1 for line in out.splitlines() if line.startswith("EVENT")))


@contextlib.contextmanager
def _console_env(port: int) -> Iterator[None]:
    os.environ["TIMELY_CONSOLE"] = f"127.0.0.1:{port}"
    try:
        yield
    finally:
        del os.environ["TIMELY_CONSOLE"]


@benchmark(
    "console.overhead", "core.throughput and net.throughput workloads with the console on (a page following) vs off"
)
def overhead(ctx: Context) -> None:
    quick = ctx.quick
    started = time.perf_counter()
    import timely._console  # noqa: F401 - start-up, outside the clock (see above)

    ctx.progress(f"importing the console's modules took {time.perf_counter() - started:.2f} s (once per process)")
    records, runs = (RECORDS_QUICK, RUNS_QUICK) if quick else (RECORDS_FULL, RUNS_FULL)
    epochs = make_epochs(records)
    n = sum(len(e) for e in epochs)
    best = {"off": float("inf"), "on": float("inf")}
    expected = None
    for run in range(1, runs + 1):
        seconds, counts = run_timely(epochs, 1)
        best["off"] = min(best["off"], seconds)
        expected = expected or counts
        port = _free_port()
        with _page_client(port) as events, _console_env(port):
            seconds, counts = run_timely(epochs, 1)
        ctx.check(counts == expected, "the counts with the console on differ from those with it off")
        ctx.check(events[0] > 0, "the page client received no event from the console")
        best["on"] = min(best["on"], seconds)
        ctx.progress(
            f"core run {run}/{runs}: off {n / best['off'] / 1e6:.3f}, on {n / seconds / 1e6:.3f} M records/s "
            f"({events[0]} events to the page; {load()})"
        )
    on, off = n / best["on"], n / best["off"]
    ctx.record(
        "console.overhead",
        on,
        "records/s",
        "console_off",
        off,
        target=f">= {TARGET:.0%} of off",
        met=on >= TARGET * off,
    )

    net_records = NET_RECORDS_QUICK if quick else NET_RECORDS_FULL
    want = expected_counts(net_records)
    net_best = {"off": 0.0, "on": 0.0}
    for run in range(1, runs + 1):
        for label in ("off", "on"):
            port = _free_port()
            options = ("--console", f"127.0.0.1:{port}") if label == "on" else ()
            with _page_client(port) if label == "on" else contextlib.nullcontext([1]) as events:
                results = launch(2, "throughput", "--records", net_records, "--epochs", NET_EPOCHS, options=options)
            got = sum(len(r["counts"]) for r in results)
            ctx.check(got == len(want), f"net {label}: {got} (epoch, key) counts, expected {len(want)}")
            ctx.check(events[0] > 0, "the page client received no event from the console")
            rate = net_records / max(r["seconds"] for r in results)
            net_best[label] = max(net_best[label], rate)
        ctx.progress(
            f"net run {run}/{runs}: off {net_best['off'] / 1e6:.3f}, on {net_best['on'] / 1e6:.3f} M records/s "
            f"(best so far; {load()})"
        )
    ctx.record(
        "console.overhead.net",
        net_best["on"],
        "records/s",
        "console_off",
        net_best["off"],
        target=f">= {TARGET:.0%} of off",
        met=net_best["on"] >= TARGET * net_best["off"],
    )


@benchmark(
    "console.stall_latency", "seconds from the scheduler going idle to the console's events saying what holds it"
)
def stall_latency(ctx: Context) -> None:
    import json
    import tempfile
    import urllib.request
    from pathlib import Path

    from tests.support.console import watched

    runs = 2 if ctx.quick else 5
    for processes in (1, 4):
        seen: list[float] = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp, watched("stall", Path(tmp), processes) as run:
                with urllib.request.urlopen(run.url.rstrip("/") + "/api/events", timeout=30) as events:
                    for line in events:
                        if not line.startswith(b"data: "):
                            continue
                        stall = json.loads(line[6:])["stall"]
                        # (on a busy machine, processes that wait for a slower one while it is
                        # still feeding the first epochs stall too: not the one measured)
                        if stall is not None and any(
                            (w["stage_name"], w["time"]) == ("count", "(3)") for w in stall["waiting"]
                        ):
                            seen.append(time.time() - stall["idle_since"])
                            break
        worst = max(seen)
        ctx.progress(f"p{processes}: " + ", ".join(f"{s:.2f}" for s in seen) + f" s ({load()})")
        ctx.record(
            f"console.stall_latency.p{processes}",
            worst,
            "s",
            "target",
            2.0,
            target="<= 2 s (worst of the runs)",
            met=worst <= 2.0,
        )
