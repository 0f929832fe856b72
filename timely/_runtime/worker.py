"""The data the scheduler works on: vertex instances, their routes, and the workers' queues.

The logical graph expands to one `VertexRuntime` per stage per worker. Each output port of an
instance has one `Route` per connector leaving it, which knows where records go (a local
worker's queue, or another process through the `ClusterLink`) and counts the messages it
makes in the process's progress batch. Each instance's `Notificator` holds the notifications it
asked for. A `Worker` holds its instances and its message queue. These are plain objects on the
hot path: the scheduler reads and writes their fields directly, and nothing here calls back into
the scheduler.
"""

from __future__ import annotations

import heapq
import inspect
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import TimelyError, VertexError
from ..graph import StageSpec
from ..net.codec import short_repr
from ..progress import Antichain, Pointstamp, ProgressTracker
from ..timestamp import Timestamp, product_le
from ..vertex import Vertex, VertexContext, attach

if TYPE_CHECKING:
    from .cluster import ClusterLink

__all__ = ["MERGE_LIMIT", "NotificationRequest", "Notificator", "QueuedMessage", "Route", "VertexRuntime", "Worker"]

MERGE_LIMIT = 65536
"""Records a queued message may grow to by absorbing later messages for the same input and time."""


class NotificationRequest(NamedTuple):
    """A vertex's request for ``on_notify(guarantee)``; while it waits the vertex holds
    ``capability`` (a time at or after the guarantee), or nothing when it is None."""

    guarantee: Timestamp
    capability: Timestamp | None


class Notificator:
    """One vertex instance's pending notifications, earliest guarantee first: timely-dataflow's
    ``FrontierNotificator``. `take_ready` is asked only when the frontier at the instance's
    location moved, and looks at the requests in time order: outside loops (``total``) it stops
    at the first that must still wait, since every later one waits too, so with N epochs open
    each look costs what it delivers, not N. Inside loops a later time may be ready before an
    earlier one (they are incomparable), so every request is looked at, but the tracker is
    asked only about those at no time at or after one already held back (`take_ready`): a
    loop's stage often holds requests for several later iterations, and while the earliest
    waits they all do.

    A notificator that holds one request keeps it alone, with no heap entry and no set: a loop
    iteration asks for the next while it runs the last, so one request is the common case."""

    __slots__ = ("_heap", "_lone", "_requests", "_sequence", "total")

    def __init__(self, total: bool) -> None:
        self.total = total
        self._lone: tuple[Timestamp, Timestamp | None] | None = None
        """The only pending request, when there is exactly one (the heap is then empty)."""
        self._requests: set[tuple[Timestamp, Timestamp | None]] = set()
        """The pending (guarantee, capability) pairs while there are two or more."""
        self._heap: list[tuple[Timestamp, int, tuple[Timestamp, Timestamp | None]]] = []
        """(guarantee, arrival, request): arrival keeps equal guarantees in request order."""
        self._sequence = 0

    def add(self, guarantee: Timestamp, capability: Timestamp | None) -> bool:
        """Keep a request; False if the same one is pending already (they coalesce)."""
        request = (guarantee, capability)
        lone = self._lone
        if lone is None:
            if not self._heap:
                self._lone = request
                return True
        elif lone == request:
            return False
        else:
            self._lone = None
            self._push(lone)
        if request in self._requests:
            return False
        self._push(request)
        return True

    def _push(self, request: tuple[Timestamp, Timestamp | None]) -> None:
        self._requests.add(request)
        self._sequence += 1
        heapq.heappush(self._heap, (request[0], self._sequence, request))

    def take_ready(
        self, held_back: Callable[[Pointstamp, bool], bool], location: int
    ) -> list[tuple[Timestamp, Timestamp | None]]:
        """Remove and return the (guarantee, capability) requests that nothing holds back any
        more, earliest first: those for which ``held_back((guarantee, location), True)`` (the
        tracker's `blocked`, excluding the request's own pointstamp) is false.

        A request at a time at or after (in the product order) one held back is held back
        too, without asking: whatever holds ``(t, location)`` back could result in it, so it
        could result in ``(t', location)`` for ``t <= t'`` (summaries are monotone), and it is
        not ``(t', location)`` itself, which could result in ``(t, location)`` only if ``t' <=
        t`` (no cycle leads back to a location without advancing a loop counter). The
        checkpoint fence holds back every time from an epoch on, so the same holds with it."""
        lone = self._lone
        if lone is not None:
            if held_back((lone[0], location), True):
                return []
            self._lone = None
            return [lone]
        heap = self._heap
        if not heap:
            return []
        taken: list[tuple[Timestamp, Timestamp | None]] = []
        if self.total:
            while heap and not held_back((heap[0][0], location), True):
                taken.append(heapq.heappop(heap)[2])
        else:
            first = heap[0][0]
            stuck: list[Timestamp] = []  # guarantees held back, least first
            if held_back((first, location), True):
                for entry in heap:  # the usual look that delivers nothing: later iterations wait
                    if not product_le(first, entry[0]):
                        break
                else:
                    return taken
                stuck.append(first)
            waiting = []
            answers: dict[Timestamp, bool] = {first: not stuck}
            for entry in sorted(heap):
                guarantee = entry[0]
                ok = answers.get(guarantee)
                if ok is None:
                    for earlier in stuck:
                        if product_le(earlier, guarantee):
                            ok = False
                            break
                    else:
                        ok = not held_back((guarantee, location), True)
                        if not ok:
                            stuck.append(guarantee)
                    answers[guarantee] = ok
                if ok:
                    taken.append(entry[2])
                else:
                    waiting.append(entry)
            self._heap = waiting  # sorted, hence a heap
        if taken:
            self._requests.difference_update(taken)
        return taken

    def earliest(self) -> Timestamp | None:
        """The earliest pending guarantee (lexicographically), or None."""
        if self._lone is not None:
            return self._lone[0]
        return self._heap[0][0] if self._heap else None

    def __iter__(self) -> Iterator[NotificationRequest]:
        """The pending requests, earliest guarantee first."""
        if self._lone is not None:
            return iter((NotificationRequest(*self._lone),))
        return (NotificationRequest(*entry[2]) for entry in sorted(self._heap))

    def __len__(self) -> int:
        return len(self._heap) + (self._lone is not None)


class VertexRuntime(VertexContext):
    """A vertex instance with what the runtime needs to drive it.

    ``progress`` is the process's progress batch, ``due`` the scheduler's set of locations
    whose notifications to look at, and ``waiting`` its count of pending notifications per
    stage: a request is registered when the vertex makes it."""

    __slots__ = (
        "async_notify",
        "async_recv",
        "backlog",
        "busy",
        "due",
        "frontier",
        "frontier_version",
        "input_locations",
        "location",
        "notificator",
        "progress",
        "routes",
        "stage",
        "tracker",
        "urgent",
        "vertex",
        "waiting",
        "worker_state",
    )

    def __init__(
        self,
        spec: StageSpec,
        vertex: Vertex,
        worker: Worker,
        peers: int,
        progress: dict[Pointstamp, int],
        due: set[int],
        waiting: dict[int, int],
        processes: int = 1,
        tracker: ProgressTracker | None = None,
    ) -> None:
        super().__init__(spec.name, worker.index, peers, spec.depth, len(spec.output_summaries), processes)
        self.vertex = vertex
        self.stage = spec.index
        self.location = spec.index
        self.routes: list[list[Route]] = [[] for _ in spec.output_summaries]
        self.input_locations: list[int] = [0] * spec.inputs
        self.worker_state = worker
        self.busy = False
        """Running an ``async def`` callback: messages for it wait in `backlog`, in order."""
        self.backlog: list[QueuedMessage] = []
        cls = type(vertex)
        self.async_recv = inspect.iscoroutinefunction(cls.on_recv)
        self.async_notify = inspect.iscoroutinefunction(cls.on_notify)
        self.urgent = bool(vertex.urgent)
        """`Vertex.urgent`: its messages join the front of the worker's queue."""
        self.notificator = Notificator(total=spec.depth == 0)
        self.progress = progress
        self.due = due
        self.waiting = waiting
        self.tracker = tracker
        """The process's view of progress, read by `input_frontier` (None: a bare instance)."""
        self.frontier = Antichain()
        self.frontier_version = -1
        """`input_frontier`'s last answer and the tracker's version it was computed at."""
        attach(vertex, self, len(spec.output_summaries))

    def input_frontier(self) -> Antichain:
        """The tracker's frontier at this location, recomputed only when the tracker's view has
        changed since the last call: a vertex may ask at the start of every callback."""
        tracker = self.tracker
        if tracker is None:
            raise TimelyError(f"stage {self.stage_name!r}: input_frontier() of an instance that runs in no computation")
        if self.frontier_version != tracker.version:
            self.frontier = tracker.frontier_at(self.location)
            self.frontier_version = tracker.version
        return self.frontier

    def request_notification(self, time: Timestamp, capability: Timestamp | None) -> None:
        """Keep the request (a repeat coalesces), count the capability it holds in the process's
        progress batch, and have the scheduler look at this location's notifications."""
        if not self.notificator.add(time, capability):
            return
        self.notifications_requested += 1
        location = self.location
        if capability is not None:
            key = (capability, location)
            progress = self.progress
            progress[key] = progress.get(key, 0) + 1
        waiting = self.waiting
        stage = self.stage
        waiting[stage] = waiting.get(stage, 0) + 1
        self.due.add(location)


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
    """A worker: one instance of every stage and a message queue.

    The queue is first-in first-out, except that a message for an urgent vertex
    (`Vertex.urgent`) goes to its front, and a message for a (vertex, input, time) that already
    has one waiting joins it (up to `MERGE_LIMIT` records), like timely-dataflow's operators
    taking all their pending input at once: when the worker is busy its callbacks see larger
    batches, so per-message costs (callbacks, routing, encoding, progress) shrink just when
    they matter. An entry is a `QueuedMessage`.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.vertices: list[VertexRuntime] = []
        self.queue: deque[QueuedMessage] = deque()
        self.waiting: dict[tuple[VertexRuntime, int, Timestamp], QueuedMessage] = {}
        """The queue's entries that can still absorb messages, by (vertex, port, time)."""
        self.queued = 0
        """Messages in the queue, counting merged ones (what backpressure limits)."""
        self.queued_records = 0
        """Records in the queue: what backpressure from other processes limits, since a merged
        message, or one a busy stage sent, may hold tens of thousands."""
        self.messages_delivered = 0
        self.records_delivered = 0
        self.notifications_delivered = 0
        self.callback_seconds = 0.0

    def pending_notifications(self) -> int:
        """Notifications its instances asked for and have not had yet."""
        return sum(len(v.notificator) for v in self.vertices)

    def enqueue(self, instance: VertexRuntime, port: int, time: Timestamp, records: list[Any]) -> None:
        """Queue ``records`` for ``instance``'s input ``port`` at ``time``. The list is not
        changed: it may be its sender's (a short batch an input was given is queued as it is),
        so the first merge into an entry makes the entry a list of its own."""
        self.queued += 1
        self.queued_records += len(records)
        key = (instance, port, time)
        entry = self.waiting.get(key)
        if entry is not None and len(entry.records) < MERGE_LIMIT:
            if entry.messages == 1:
                entry.records = entry.records + records
            else:
                entry.records.extend(records)
            entry.messages += 1
            return
        entry = QueuedMessage(instance, port, time, records, key)
        self.waiting[key] = entry
        if instance.urgent:
            self.queue.appendleft(entry)
        else:
            self.queue.append(entry)

    def requeue(self, entries: list[QueuedMessage]) -> int:
        """Put back, at the front and in order, entries a busy vertex or the checkpoint fence held
        back; the number of messages they hold."""
        self.queue.extendleft(reversed(entries))
        messages = sum(e.messages for e in entries)
        self.queued += messages
        self.queued_records += sum(len(e.records) for e in entries)
        return messages


class QueuedMessage:
    """A message waiting in a worker's queue: ``records`` for ``instance``'s input ``port`` at
    ``time``, which may have absorbed later ones (``messages`` counts them all). ``key`` is
    its key in `Worker.waiting`, kept so that taking it off the queue builds no tuple."""

    __slots__ = ("instance", "key", "messages", "port", "records", "time")

    def __init__(
        self, instance: VertexRuntime, port: int, time: Timestamp, records: list[Any], key: tuple[Any, ...]
    ) -> None:
        self.instance = instance
        self.key = key
        self.port = port
        self.time = time
        self.records = records
        self.messages = 1
