"""The checkpoint fence (Naiad §3.4): the epoch of the next checkpoint, and what waits behind it.

While the fence stands at epoch F the scheduler delivers nothing later than F; it asks the
fence one question, `CheckpointFence.admits`, of each message and notification. A message
that is not admitted is *held* here, per worker and in arrival order, and counted in
`held_back` (backpressure counts it as queued). What a callback sends past the fence is
*carried*: the checkpoint at F must save it, since those messages are in flight and no replay
of the inputs would make them again. Progress tracking still tells when F is complete, since
nothing later can result in an earlier time: `observe` marks the checkpoint *due* once the
frontier has passed F. Recovery then takes the checkpoint (or, under a time policy, skips it)
and calls `lift`, which moves the fence to the next checkpoint epoch and gives the held
messages back to their workers' queues.

Without checkpoints, or with a policy that never takes one, the fence is absent (``epoch`` is
None): it admits everything and is never due.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..checkpoint import Checkpoints
from ..progress import Pointstamp
from .worker import QueuedMessage, Worker

__all__ = ["Carried", "CheckpointFence"]

Carried = tuple[int, int, int, tuple[int, ...], list[Any]]
"""A batch a callback sent past the fence: (stage, worker, output port, time, records)."""


class CheckpointFence:
    """The epoch of the next checkpoint, the messages held behind it and the batches carried
    past it. The scheduler asks `admits`, `hold`s and `carry`s; recovery reads `carried`,
    and `lift`s the fence once the checkpoint is taken."""

    __slots__ = ("_carried", "_held", "due", "epoch", "held_back", "step")

    def __init__(self, epoch: int | None = None, step: int = 1) -> None:
        self.epoch = epoch
        """The epoch of the next checkpoint; None: no fence."""
        self.step = step
        """How far `lift` moves the fence."""
        self.due = False
        """The frontier has passed the fence: the checkpoint can be taken once this process is quiet."""
        self.held_back = 0
        """Messages held behind the fence (counting merged ones)."""
        self._held: dict[Worker, list[QueuedMessage]] = {}
        self._carried: list[Carried] = []

    @classmethod
    def for_policy(cls, policy: Checkpoints | None, start: int) -> CheckpointFence:
        """The fence of a computation whose inputs start at epoch ``start``: at ``start + k - 1``
        for a checkpoint every k epochs; at every epoch under a time policy (process 0 decides
        at each one whether to take it); none without checkpoints."""
        if policy is None:
            return cls()
        if policy.every_seconds is not None:
            return cls(start, 1)
        k = policy.every_epochs
        return cls() if k is None else cls(start + k - 1, k)

    def admits(self, time: tuple[int, ...]) -> bool:
        """Whether something at ``time`` may be delivered (or sent without being carried) now."""
        epoch = self.epoch
        return epoch is None or time[0] <= epoch

    def hold(self, worker: Worker, entry: QueuedMessage) -> None:
        """Keep a queue entry of ``worker`` that the fence does not admit, until it lifts."""
        held = self._held.get(worker)
        if held is None:
            held = self._held[worker] = []
        held.append(entry)
        self.held_back += entry.messages

    def carry(self, stage: int, worker: int, port: int, time: tuple[int, ...], records: list[Any]) -> None:
        """Remember a batch a callback sent past the fence (a copy: the routes may reuse the list)."""
        self._carried.append((stage, worker, port, tuple(time), list(records)))

    def carried(self) -> list[Carried]:
        """The batches sent past the fence and not yet past a lifted one, oldest first."""
        return list(self._carried)

    def observe(self, frontier: Collection[Pointstamp]) -> None:
        """Mark the checkpoint due once every pointstamp of ``frontier`` (the tracker's) is past
        the fence epoch: nothing at or before it can happen any more."""
        epoch = self.epoch
        if epoch is None or self.due:
            return
        if frontier and all(p[0][0] > epoch for p in frontier):
            self.due = True

    def lift(self) -> None:
        """Move the fence past the epoch it stood at and put what it held back in the queues."""
        assert self.epoch is not None, "lifting an absent fence"
        self.epoch += self.step
        self.due = False
        epoch = self.epoch
        self._carried = [c for c in self._carried if c[3][0] > epoch]
        for worker, entries in self._held.items():
            if entries:
                self.held_back -= worker.requeue(entries)
                entries.clear()
