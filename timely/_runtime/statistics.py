"""Frozen snapshots of what the runtime has done, returned by ``statistics()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["WorkerStatistics", "ComputationStatistics"]


@dataclass(frozen=True)
class WorkerStatistics:
    worker: int
    messages_delivered: int
    records_delivered: int
    notifications_delivered: int
    queued_messages: int
    pending_notifications: int
    callback_seconds: float


@dataclass(frozen=True)
class ComputationStatistics:
    process: int
    workers: list[WorkerStatistics]
    progress_batches: int
    active_pointstamps: int
    frontier_size: int
    elapsed_seconds: float
    max_queued_messages: int = 0
    """The most messages this process held queued at once (bounded by backpressure)."""
    max_queued_records: int = 0
    """The most records this process held queued at once, as seen when frames from other
    processes arrived (bounded by backpressure)."""
    network: dict[str, int] = field(default_factory=dict)
    """Bytes and frames of data and of progress this process sent and received."""
    checkpoints: dict[str, Any] = field(default_factory=dict)
    """Checkpoints taken (count, seconds, the last one's epoch and size) and what a resume restored."""
    open_epochs: int = 0
    """Distinct epochs at which notifications are pending in this process. Hundreds mean the
    inputs run far ahead of the computation: each epoch's answer waits behind every epoch sent
    before it (`Input.throttle` bounds how far)."""
    scheduler_steps: int = 0
    """Time slices the scheduler ran (`ProcessRuntime.step`). With peers, most steps follow a
    frame: steps per loop iteration say how many handoffs an iteration costs this process."""
    wakeups: int = 0
    """Times the scheduler, idle with nothing to do, was woken (by a frame, an input, a timer)."""

    @property
    def pending_notifications(self) -> int:
        return sum(w.pending_notifications for w in self.workers)

    @property
    def messages_delivered(self) -> int:
        return sum(w.messages_delivered for w in self.workers)

    @property
    def records_delivered(self) -> int:
        return sum(w.records_delivered for w in self.workers)

    @property
    def notifications_delivered(self) -> int:
        return sum(w.notifications_delivered for w in self.workers)
