"""Seeing inside a running process: what holds progress back (`explain`), counters
(`statistics`), and a watch that logs the explanation when the scheduler sits idle too long.

Everything here reads the other parts' state and changes none of it.
"""

from __future__ import annotations

import asyncio
import logging
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..graph import FrozenGraph, StageKind
from ..progress import Pointstamp, ProgressTracker
from ..timestamp import _from_flat
from ..vertex import TOP
from .cluster import ClusterLink
from .recovery import Recovery
from .scheduler import Scheduler
from .statistics import ComputationStatistics, WorkerStatistics
from .waiters import Waiters

__all__ = ["Diagnostics", "Holder", "Holdup", "show_time"]

log = logging.getLogger("timely")

UNREACHED_COUNTER = 1 << 62
"""A loop counter no loop reaches; libraries use it for "after every iteration of the epoch"
(linq notifies at ``(e, 2**62)`` when an epoch's loop is done). Explanations show it as ``end``."""


def show_time(time: Any) -> str:
    """A time as a user writes it: flat, ``(epoch, counter, ...)`` (`timely.dataflow.as_time`
    takes that form), with a counter no loop reaches shown as ``end``."""
    if time is None:
        return "None"
    if time is TOP:
        return "TOP"
    parts = [str(time[0])] + ["end" if c >= UNREACHED_COUNTER else str(c) for c in time[1:]]
    return f"({', '.join(parts)})"


MANY_OPEN_EPOCHS = 100
"""Epochs open with notifications pending from which `Diagnostics.explain` says the inputs run
ahead, and points at `Input.throttle`."""


@dataclass(frozen=True)
class Holder:
    """A pointstamp holding progress back: the stage it is at (or whose input it is on), its
    time, and what it is in words."""

    stage: int
    time: str
    words: str


@dataclass(frozen=True)
class Holdup:
    """Something waiting (a notification, a probe wait, an async callback) at a stage and
    time, and the pointstamps it waits on (None for a callback still running)."""

    waiter: str
    stage: int
    time: str
    holders: list[Holder] | None


class Diagnostics:
    """Explanations and statistics of one process, from its graph, tracker, scheduler, waits,
    link and recovery."""

    def __init__(
        self,
        graph: FrozenGraph,
        tracker: ProgressTracker,
        scheduler: Scheduler,
        waiters: Waiters,
        link: ClusterLink | None,
        recovery: Recovery | None,
        started_at: float,
    ) -> None:
        self.graph = graph
        self.tracker = tracker
        self.scheduler = scheduler
        self.waiters = waiters
        self.link = link
        self.recovery = recovery
        self.started_at = started_at
        """When the process started (perf_counter): what ``elapsed_seconds`` counts from."""

    def describe(self, p: Pointstamp) -> str:
        """What a pointstamp is, in words: an open input, a stage's capability, messages in flight."""
        time, loc = p
        t = show_time(time)
        count = self.tracker.counts.get(p, 0)
        g = self.graph
        if loc < len(g.stages):
            spec = g.stages[loc]
            if spec.kind == StageKind.INPUT:
                return f"input {spec.name!r} is still open at epoch {time[0]} (advance_to or close it)"
            return f"stage {spec.name!r} holds {count} capability/notification(s) at {t}"
        return f"{count} message batch(es) at {t} not yet consumed on {g.describe_location(loc)}"

    def holder(self, p: Pointstamp) -> Holder:
        """A pointstamp that holds progress back, with the stage to point at: the stage itself,
        or the stage a connector's unconsumed messages are for."""
        time, loc = p
        g = self.graph
        stage = loc if loc < len(g.stages) else g.connectors[loc - len(g.stages)].target
        return Holder(stage, _shown(time), self.describe(p))

    def holdups(self) -> list[Holdup]:
        """What waits and on what: each pending notification and probe wait with the pointstamps
        that hold it back, and each vertex busy in an async callback. `explain` says these in
        words; the console points at their stages."""
        found: list[Holdup] = []
        for instance, (guarantee, _) in self.scheduler.notification_requests():
            holders = self.tracker.holds((guarantee, instance.location), exclude_self=True)
            busy = " (vertex busy in an async callback)" if instance.busy else ""
            found.append(
                Holdup(
                    f"notification at {show_time(guarantee)} for stage {instance.stage_name!r} (worker {instance.worker}){busy}",
                    instance.location,
                    _shown(guarantee),
                    [self.holder(h) for h in sorted(holders, key=_order)],
                )
            )
        for location, time in self.waiters.probe_waits():
            name = self.graph.stages[location].name
            holders = self.tracker.holds((time, location))
            found.append(
                Holdup(
                    f"probe {name!r} waiting for {show_time(time)}",
                    location,
                    _shown(time),
                    [self.holder(h) for h in sorted(holders, key=_order)],
                )
            )
        for instance in self.scheduler.instances():
            if instance.busy:
                found.append(
                    Holdup(
                        f"stage {instance.stage_name!r} (worker {instance.worker}) is running an async callback at "
                        f"{show_time(instance.held)}",
                        instance.location,
                        _shown(instance.held),
                        None,
                    )
                )
        return found

    def open_epochs(self) -> list[int]:
        """The distinct epochs at which notifications are pending here, in order."""
        return sorted({request.guarantee[0] for _, request in self.scheduler.notification_requests()})

    def explain(self) -> str:
        """Which pointstamps hold back each pending notification and probe wait (and, with many
        epochs open, that the inputs run ahead)."""
        lines: list[str] = []
        epochs = self.open_epochs()
        ahead = None
        if len(epochs) >= MANY_OPEN_EPOCHS:
            ahead = (
                f"{len(epochs)} epochs are open with notifications pending (epochs {epochs[0]} to {epochs[-1]}): "
                "the inputs run ahead of the computation, and each epoch's answer waits behind every epoch "
                "sent before it; Input.throttle(probe, k) keeps an input at most k epochs ahead of a probe"
            )
        for holdup in self.holdups():
            if holdup.holders is None:
                lines.append(holdup.waiter)
                continue
            lines.append(f"{holdup.waiter} waits on:")
            lines.extend(f"  - {h.words}" for h in holdup.holders)
            if not holdup.holders and holdup.waiter.startswith("notification"):
                lines.append("  - nothing: it is deliverable")
        if not lines:
            if self.tracker.is_empty():
                return "nothing is active: the computation is complete"
            lines.append("active pointstamps on the frontier:")
            lines.extend(f"  - {self.describe(p)}" for p in sorted(self.tracker.frontier, key=_order))
        if ahead is not None:
            lines.insert(0, ahead)
        return "\n".join(lines)

    def statistics(self) -> ComputationStatistics:
        scheduler = self.scheduler
        workers = [
            WorkerStatistics(
                w.index,
                w.messages_delivered,
                w.records_delivered,
                w.notifications_delivered,
                len(w.queue),
                w.pending_notifications(),
                w.callback_seconds,
            )
            for w in scheduler.workers
        ]
        return ComputationStatistics(
            process=scheduler.process_index,
            workers=workers,
            progress_batches=self.tracker.updates_applied,
            active_pointstamps=self.tracker.active_count,
            frontier_size=len(self.tracker.frontier),
            elapsed_seconds=_time.perf_counter() - self.started_at,
            max_queued_messages=scheduler.max_backlog,
            max_queued_records=scheduler.max_queued_records,
            network=self.link.statistics() if self.link is not None else {},
            checkpoints=self.recovery.statistics() if self.recovery is not None else {},
            open_epochs=len(self.open_epochs()),
        )

    async def watch_stalls(self, every: float, idle_since: Callable[[], float | None]) -> None:
        """Log what holds progress back whenever the scheduler has sat idle for ``every`` seconds.

        One long-lived task, so that going idle costs no timer. Idle time counts from when the
        scheduler went idle (``idle_since()``, None while it is not idle), and never from before
        the watcher last ran: a callback that kept the event loop for a long time, or a
        synchronous program away from timely, is not the scheduler waiting (it was busy, or not
        running at all)."""
        tick = every / 4
        looked = counting_from = _time.perf_counter()
        while True:
            await asyncio.sleep(tick)
            now = _time.perf_counter()
            if now - looked > tick + every / 2:  # the event loop was held up: nothing could run
                counting_from = now
            looked = now
            idle = idle_since()
            if idle is None:
                continue
            since = max(idle, counting_from)
            if now - since >= every:
                log.warning("no progress for %.0f s; what holds it back:\n%s", now - since, self.explain())
                counting_from = now


def _shown(time: Any) -> str:
    """A time in the console's fields, as its frontiers and loops show times (`Timestamp`'s
    form); the words of an explanation use `show_time`."""
    return "TOP" if time is TOP else str(time if time is None else _from_flat(tuple(time)))


def _order(p: Pointstamp) -> tuple[Any, ...]:
    return (p[1], tuple(p[0]))
