"""What the live console shows of one process, sampled about once a second.

A `Sampler` reads the counters the runtime keeps anyway (per vertex instance: records and
messages in and out, notifications; per worker: queue, callback seconds; the link's traffic)
and the progress state (the frontier, the inputs' epochs, the probes' and loops' frontiers),
and packs them into one plain dict that msgpack and JSON both carry. Nothing is traced per
record: the console's rates are differences between two samples. When the scheduler has sat
idle, the sample also says what holds progress back (`Diagnostics.holdups`).

Process 0 hands its own samples to the console server; every other process sends its samples
to process 0 as a SAMPLE frame over the connection the computation already has
(`ClusterLink.send_sample`). The sample's layout is the console's (`timely._console`), which
knows nothing of the runtime.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import threading
import time as _time
from collections.abc import Callable
from typing import Any

from ..graph import FrozenGraph, StageKind
from ..progress import ProgressTracker
from ..vertex import TOP, Vertex
from .bindings import Bindings
from .cluster import ClusterLink
from .diagnostics import Diagnostics
from .scheduler import Scheduler

__all__ = ["PROFILE_HZ", "SAMPLE_SECONDS", "STALL_AFTER", "CallbackProfiler", "Sampler"]

SAMPLE_SECONDS = 1.0
"""How often a process samples itself for the console."""
STALL_AFTER = 0.5
"""Idle this long (seconds) and a sample carries what holds progress back: with a sample a
second, the page says so within two seconds of the scheduler going idle."""
COMPLETIONS_KEPT = 50
"""Epoch completion times kept per probe (the most recent)."""
LOOP_TIMES = 8
"""The latest active times shown per loop (where its iterations have got to)."""
PROFILE_HZ = 100
"""How often the callback profiler looks at what the runtime's thread is running."""

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # pragma: no cover - not Linux
    _PAGE = 4096


def resident_bytes() -> int:
    """This process's resident memory now (Linux's /proc), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _time_list(t: Any) -> list[int] | None:
    return None if t is TOP else list(t)


class CallbackProfiler:
    """Time in callbacks per stage, by looking (`PROFILE_HZ` times a second, from a thread of
    its own) at which vertex's callback the runtime's thread is in: a sampling profiler, so that
    nothing is timed on the path of a record. The innermost frame running a vertex class's
    ``on_recv`` or ``on_notify`` names the instance (its ``self``), and so the stage; each look
    charges the time since the previous one to that stage."""

    def __init__(self, instances: list[tuple[Vertex, int]], stages: int, thread: int) -> None:
        self.thread = thread
        self.stage_of = {id(v): stage for v, stage in instances}
        self.codes = {
            getattr(type(v), name).__code__
            for v, _ in instances
            for name in ("on_recv", "on_notify")
            if hasattr(getattr(type(v), name), "__code__")
        }
        self.seconds = [0.0] * stages
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._look, name="timely-profiler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _look(self) -> None:
        interval = 1.0 / PROFILE_HZ
        codes, stage_of, seconds = self.codes, self.stage_of, self.seconds
        last = _time.perf_counter()
        while not self._stop.wait(interval):
            now = _time.perf_counter()
            frame = sys._current_frames().get(self.thread)
            depth = 0
            while frame is not None and depth < 64:
                if frame.f_code in codes:
                    stage = stage_of.get(id(frame.f_locals.get("self")))
                    if stage is not None:
                        # a look that came late (this thread waited for a core) vouches for
                        # no more than two intervals
                        seconds[stage] += min(now - last, 2 * interval)
                        break
                frame = frame.f_back
                depth += 1
            last = now


class Sampler:
    """Samples one process for the console and hands each sample to ``publish``."""

    def __init__(
        self,
        graph: FrozenGraph,
        tracker: ProgressTracker,
        scheduler: Scheduler,
        bindings: Bindings,
        diagnostics: Diagnostics,
        link: ClusterLink | None,
        idle_since: Callable[[], float | None],
        publish: Callable[[dict[str, Any]], None],
    ) -> None:
        self.graph = graph
        self.tracker = tracker
        self.scheduler = scheduler
        self.bindings = bindings
        self.diagnostics = diagnostics
        self.link = link
        self.idle_since = idle_since
        self.publish = publish
        self.completions: dict[str, list[list[Any]]] = {}
        """Per probe name, [epoch, seconds since start, records] when the probe passed the epoch."""
        self._passed: dict[str, int] = {}
        self._arrived: dict[str, int] = {}
        self.profiler = CallbackProfiler(
            [(instance.vertex, instance.stage) for instance in scheduler.instances()],
            len(graph.stages),
            threading.get_ident(),
        )
        n = len(graph.stages)
        self._loops = []
        """Per loop: its name, a feedback stage (where its frontier is read), its locations."""
        for instance in graph.contexts[1:]:
            inside = {s.index for s in graph.stages if s.context == instance.index}
            feedback = next((i for i in sorted(inside) if graph.stages[i].kind == StageKind.FEEDBACK), None)
            if feedback is None:
                continue
            edges = {n + c.index for c in graph.connectors if c.target in inside}
            self._loops.append((instance.name, feedback, inside | edges))

    def frontier_changed(self) -> None:
        """The runtime's frontier moved: note which epochs the probes have passed, and when."""
        now = _time.perf_counter() - self.diagnostics.started_at
        for handle, binding in self.bindings.probes.items():
            frontier = list(binding.frontier())
            name = handle.name
            last = self._passed.get(name, 0)
            if frontier:
                upto = min(t.epoch for t in frontier)
            else:  # nothing more can arrive: every epoch the inputs opened is complete
                upto = max((b.epoch + 1 for b in self.bindings.inputs), default=last)
            if upto > last:
                # the records that reached the probe here since it last passed an epoch: the
                # changes of the epoch(s) now complete (several at once share one count)
                arrived = sum(instance.records_received for instance in self.scheduler.instances_of(binding.location))
                records = arrived - self._arrived.get(name, 0)
                self._arrived[name] = arrived
                kept = self.completions.setdefault(name, [])
                first = max(last, upto - COMPLETIONS_KEPT)
                kept.extend([epoch, now, records if epoch == upto - 1 else None] for epoch in range(first, upto))
                del kept[:-COMPLETIONS_KEPT]
                self._passed[name] = upto

    def sample(self) -> dict[str, Any]:
        """This process now, as the console's sample (plain lists and dicts)."""
        g = self.graph
        scheduler = self.scheduler
        n = len(g.stages)
        # per stage, summed over this process's workers:
        # records in, records out, messages in, notifications delivered, queued messages,
        # pending notifications, instances busy in an async callback, seconds in callbacks (profiled)
        seconds = self.profiler.seconds
        stages = [[0, 0, 0, 0, 0, 0, 0, seconds[i]] for i in range(n)]
        state: dict[int, list[int]] = {}
        for instance in scheduler.instances():
            row = stages[instance.stage]
            row[0] += instance.records_received
            row[1] += instance.records_sent
            row[2] += instance.messages_received
            row[3] += instance.notifications_delivered
            row[5] += len(instance.notificator)
            row[6] += instance.busy
            size = instance.vertex.state_size()
            if size is not None:
                rows, nbytes = size
                kept = state.setdefault(instance.stage, [0, 0])
                kept[0] += rows
                kept[1] += nbytes
        workers = []
        for w in scheduler.workers:
            for entry in w.queue:
                stages[entry.instance.stage][4] += entry.messages
            workers.append([w.index, w.callback_seconds, w.queued, w.pending_notifications(), w.records_delivered])
        tracker = self.tracker
        frontier = [[loc, _time_list(t), tracker.counts.get((t, loc), 0)] for t, loc in tracker.frontier]
        inputs = [[b.name, b.epoch, b.closed, b.backpressure_waits] for b in self.bindings.inputs]
        probes = [
            [handle.name, [list(t) for t in binding.frontier()]] for handle, binding in self.bindings.probes.items()
        ]
        loops = [
            [
                name,
                [list(t) for t in tracker.frontier_at(feedback)],
                sorted({tuple(t) for (t, loc), c in tracker.counts.items() if c > 0 and loc in where})[-LOOP_TIMES:],
            ]
            for name, feedback, where in self._loops
        ]
        idle = self.idle_since()
        now = _time.perf_counter()
        idle_for = None if idle is None else now - idle
        stall = None
        if idle_for is not None and idle_for >= STALL_AFTER and not tracker.is_empty():
            stall = {
                "text": self.diagnostics.explain(),
                "holdups": [
                    {
                        "waiter": h.waiter,
                        "stage": h.stage,
                        "time": h.time,
                        "holders": None
                        if h.holders is None
                        else [{"stage": x.stage, "time": x.time, "words": x.words} for x in h.holders],
                    }
                    for h in self.diagnostics.holdups()
                ],
            }
        usage = resource.getrusage(resource.RUSAGE_SELF)
        process: dict[str, Any] = {
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "rss_bytes": resident_bytes(),
            "backpressure_waits": sum(b.backpressure_waits for b in self.bindings.inputs),
            "max_queued_messages": scheduler.max_backlog,
            "queued_messages": scheduler.backlog(),
        }
        if self.link is not None:
            process.update(self.link.statistics())
        return {
            "process": scheduler.process_index,
            "at": _time.time(),
            "elapsed": now - self.diagnostics.started_at,
            "stages": stages,
            "state": [[stage, rows, nbytes] for stage, (rows, nbytes) in sorted(state.items())],
            "workers": workers,
            "frontier": sorted(frontier, key=lambda f: (f[0], f[1] or [])),
            "inputs": inputs,
            "probes": probes,
            "loops": loops,
            "completions": {name: list(kept) for name, kept in self.completions.items()},
            "idle_for": idle_for,
            "stall": stall,
            "complete": tracker.is_empty(),
            "process_stats": process,
        }

    def publish_now(self) -> dict[str, Any]:
        """Sample and publish at once. The runtime calls this before its first step (a long
        first callback would otherwise keep a process off the console until it returned: a
        short computation could end unseen) and once more when complete, before its goodbye,
        so that the console's last state holds every process's final counts."""
        sample = self.sample()
        self.publish(sample)
        return sample

    async def run(self, every: float = SAMPLE_SECONDS) -> None:
        """Publish a sample every ``every`` seconds, until cancelled (the runtime has published
        the first); profile the callbacks meanwhile (the runtime starts the profiler before its
        first step; this stops it). A scheduler that has sat idle for `STALL_AFTER` gets a
        sample at once (it says what holds progress back) rather than at the next second."""
        look = every / 4
        try:
            told_stall = False
            while True:
                next_at = _time.perf_counter() + every
                while True:
                    now = _time.perf_counter()
                    if now >= next_at:
                        break
                    await asyncio.sleep(min(look, next_at - now))
                    idle = self.idle_since()
                    if not told_stall and idle is not None and _time.perf_counter() - idle >= STALL_AFTER:
                        break
                told_stall = self.publish_now()["stall"] is not None
        finally:
            self.profiler.stop()
