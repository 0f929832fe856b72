"""The data the scheduler works on: vertex instances, their routes, and the workers' queues.

The logical graph expands to one `VertexRuntime` per stage per worker. Each output port of an
instance has one `Route` per connector leaving it, which knows where records go (a local
worker's queue, or another process through the `ClusterLink`) and counts the messages it
makes in the process's progress batch. A `Worker` holds its instances, its message queue and
its pending notifications. These are plain objects on the hot path: the scheduler reads and
writes their fields directly, and nothing here calls back into the scheduler.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedList

from ..errors import VertexError
from ..graph import StageSpec
from ..net.codec import short_repr
from ..progress import Pointstamp
from ..timestamp import Timestamp
from ..vertex import Vertex, VertexContext, attach

if TYPE_CHECKING:
    from .cluster import ClusterLink

__all__ = ["MERGE_LIMIT", "Route", "VertexRuntime", "Worker"]

MERGE_LIMIT = 65536
"""Records a queued message may grow to by absorbing later messages for the same input and time."""


class VertexRuntime(VertexContext):
    """A vertex instance with what the runtime needs to drive it."""

    __slots__ = (
        "async_notify",
        "async_recv",
        "backlog",
        "busy",
        "input_locations",
        "location",
        "notify",
        "pending_notifications",
        "recv",
        "routes",
        "stage",
        "vertex",
        "worker_state",
    )

    def __init__(self, spec: StageSpec, vertex: Vertex, worker: Worker, peers: int) -> None:
        super().__init__(spec.name, worker.index, peers, spec.depth, len(spec.output_summaries))
        self.vertex = vertex
        self.stage = spec.index
        self.location = spec.index
        self.routes: list[list[Route]] = [[] for _ in spec.output_summaries]
        self.input_locations: list[int] = [0] * spec.inputs
        self.worker_state = worker
        self.busy = False
        """Running an ``async def`` callback: messages for it wait in `backlog`, in order."""
        self.backlog: list[list[Any]] = []
        cls = type(vertex)
        self.async_recv = inspect.iscoroutinefunction(cls.on_recv)
        self.async_notify = inspect.iscoroutinefunction(cls.on_notify)
        self.pending_notifications: set[tuple[Any, Any]] = set()
        self.recv = vertex.on_recv
        self.notify = vertex.on_notify
        attach(vertex, self, len(spec.output_summaries))


class Route:
    """One connector as seen from one vertex instance: where its records go and how counted."""

    __slots__ = (
        "connector",
        "link",
        "local",
        "location",
        "partition",
        "peers",
        "per_process",
        "port",
        "stage",
        "targets",
    )

    def __init__(self, location: int, port: int, partition: Callable[[Any], int] | None, peers: int) -> None:
        self.location = location
        self.port = port
        self.partition = partition
        self.targets: list[VertexRuntime | None] = []  # by global worker index; None: in another process
        self.local: VertexRuntime | None = None  # the target on the sender's own worker
        self.peers = peers
        self.connector = 0
        self.link: ClusterLink | None = None
        self.per_process = 1  # workers per process
        self.stage = ""  # the target stage's name, for errors

    def send(self, records: list[Any], time: Timestamp, pending: dict[Pointstamp, int]) -> int:
        """Enqueue ``records`` for the target(s); count them in ``pending``; return messages made."""
        key = (time, self.location)
        if self.partition is None or self.peers == 1:
            target = self.local
            assert target is not None
            target.worker_state.enqueue(target, self.port, time, records)
            pending[key] = pending.get(key, 0) + 1
            return 1
        n = self.peers
        parts: list[list[Any]] = [[] for _ in range(n)]
        appends = [p.append for p in parts]
        fn = self.partition
        try:
            for r in records:
                appends[fn(r) % n](r)
        except Exception as exc:
            raise self._exchange_failed(exc, r, time) from exc
        made = 0
        port = self.port
        targets = self.targets
        for w, part in enumerate(parts):
            if part:
                target = targets[w]
                if target is None:
                    made += self.link.send_records(w // self.per_process, self.connector, w, time, part)  # type: ignore[union-attr]
                else:
                    target.worker_state.enqueue(target, port, time, part)
                    made += 1
        pending[key] = pending.get(key, 0) + made
        return made

    def _exchange_failed(self, exc: Exception, record: Any, time: Timestamp) -> VertexError:
        """The user's exchange function raised on ``record``, or returned something that is not an int."""
        what = f"raised {type(exc).__name__}"
        try:
            value = self.partition(record)  # type: ignore[misc]
        except Exception:
            pass
        else:
            if not isinstance(value, int):
                what = f"returned {type(value).__name__} {short_repr(value)}, not an int,"
        return VertexError(
            f"stage {self.stage!r}: the exchange function of its input {self.port} {what} on the record "
            f"{short_repr(record)} at time {time}: {exc}",
            self.stage,
            -1,
            time,
            "exchange",
        )


class Worker:
    """A worker: one instance of every stage, a message queue, pending notifications.

    The queue is first-in first-out, but a message for a (vertex, input, time) that already
    has one waiting joins it (up to `MERGE_LIMIT` records), like timely-dataflow's operators
    taking all their pending input at once: when the worker is busy its callbacks see larger
    batches, so per-message costs (callbacks, routing, encoding, progress) shrink just when
    they matter. An entry is ``[vertex, port, time, records, messages merged]``.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.vertices: list[VertexRuntime] = []
        self.queue: deque[list[Any]] = deque()
        self.waiting: dict[tuple[VertexRuntime, int, Timestamp], list[Any]] = {}
        """The queue's entries that can still absorb messages, by (vertex, port, time)."""
        self.queued = 0
        """Messages in the queue, counting merged ones (what backpressure limits)."""
        self.queued_records = 0
        """Records in the queue: what backpressure from other processes limits, since a merged
        message, or one a busy stage sent, may hold tens of thousands."""
        # (guarantee, stage, capability or TOP); sorted so the earliest are delivered first
        self.notifications: SortedList = SortedList()
        self.messages_delivered = 0
        self.records_delivered = 0
        self.notifications_delivered = 0
        self.callback_seconds = 0.0

    def enqueue(self, ctx: VertexRuntime, port: int, time: Timestamp, records: list[Any]) -> None:
        """Queue ``records`` (a list the runtime owns) for ``ctx``'s input ``port`` at ``time``."""
        self.queued += 1
        self.queued_records += len(records)
        key = (ctx, port, time)
        entry = self.waiting.get(key)
        if entry is not None and len(entry[3]) < MERGE_LIMIT:
            entry[3].extend(records)
            entry[4] += 1
            return
        entry = [ctx, port, time, records, 1]
        self.waiting[key] = entry
        self.queue.append(entry)

    def requeue(self, entries: list[list[Any]]) -> int:
        """Put back, at the front and in order, entries a busy vertex or the checkpoint fence held
        back; the number of messages they hold."""
        self.queue.extendleft(reversed(entries))
        messages = sum(e[4] for e in entries)
        self.queued += messages
        self.queued_records += sum(len(e[3]) for e in entries)
        return messages
