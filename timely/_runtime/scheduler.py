"""The scheduler: this process's workers, their routes, and the delivery of messages and
notifications to vertices.

All workers of a process run on one event loop, in one thread. `Scheduler.drain` delivers
queued messages in tight loops (plain ``def`` callbacks are called directly: no task, no
await); `deliver_notifications` runs the notifications the progress tracker allows, earliest
first, asking only the notificators of the locations whose frontier moved; what a callback
sent is routed by `flush` when it returns, with its progress changes added to the process's
``pending`` batch, so one callback makes one atomic batch. An ``async
def`` callback runs as a task; its vertex is busy (its messages wait, in order) and what it
consumed stays pending until it returns.

The scheduler owns the delivery, not the progress state: ``pending`` is the process's batch,
shared with the inputs and applied to the tracker by `ProcessRuntime.step` between callbacks.
One exception, for the loop iteration that only coordinates: while a notification's callback
leaves nothing but its own vertex's next notification to do, in a process with no peers and one
worker, `_chain` applies the batch and delivers that notification itself, as the step would
have, without its round trip. It asks the `CheckpointFence` whether a time may be delivered,
and hands it what it may not.
"""

from __future__ import annotations

import asyncio
import time as _time
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

from ..errors import CodecError, LibraryError, TimelyError, VertexError
from ..graph import FrozenGraph, StageSpec
from ..progress import ChangeBatch, Pointstamp, ProgressTracker
from ..timestamp import Timestamp
from ..vertex import TOP, Vertex
from .cluster import ClusterLink
from .fence import CheckpointFence
from .worker import NotificationRequest, Route, VertexRuntime, Worker

__all__ = ["DRAIN_LIMIT", "Scheduler"]

DRAIN_LIMIT = 512
"""Messages one worker delivers before the scheduler looks at the others."""
CHAIN_SECONDS = 0.001
"""How long a chain of lone notifications (`Scheduler._chain`) runs before the step goes on."""


class Scheduler:
    """Delivers messages and notifications to this process's vertex instances.

    ``record_failure`` is told the error a failed callback fails the computation with (a
    synchronous callback's is also raised out of `drain` or `deliver_notifications`); ``wake``
    tells the runtime that work appeared.
    """

    def __init__(
        self,
        graph: FrozenGraph,
        workers: int,
        process_index: int,
        processes: int,
        pending: ChangeBatch,
        tracker: ProgressTracker,
        fence: CheckpointFence,
        link: ClusterLink | None,
        record_failure: Callable[[BaseException], None],
        wake: Callable[[], None],
    ) -> None:
        self.graph = graph
        self.process_index = process_index
        self.processes = processes
        self.workers_per_process = workers
        self.peers = workers * processes
        self.first_worker = process_index * workers
        self.pending = pending
        self.tracker = tracker
        self.fence = fence
        self._record_failure = record_failure
        self._wake = wake
        self.in_flight = 0
        """``async def`` callbacks running."""
        self.held_by_busy = 0
        self.held_records_by_busy = 0
        """Messages waiting behind vertices busy in an async callback."""
        self.max_backlog = 0
        self.max_queued_records = 0
        self._due: set[int] = set()
        """Locations whose instances' notifications may have become deliverable."""
        self._waiting: dict[int, int] = {}
        """Pending notifications per stage (over this process's workers); no entry when none."""
        self._task_group: Any = None
        self.workers = [Worker(self.first_worker + i) for i in range(workers)]
        for w in self.workers:
            for spec in graph.stages:
                w.vertices.append(
                    VertexRuntime(
                        spec, _make_vertex(spec), w, self.peers, pending, self._due, self._waiting, processes, tracker
                    )
                )
        self.link = link
        self._wire(link)
        self._may_chain = link is None and workers == 1
        """Lone notifications may run as a chain (`_chain`): no peers, one worker."""

    def _wire(self, link: ClusterLink | None) -> None:
        g = self.graph
        for w in self.workers:
            for vr in w.vertices:
                for port, connectors in enumerate(g.outgoing[vr.stage]):
                    for c in connectors:
                        route = Route(g.connector_location(c.index), c.target_port, c.partition, self.peers)
                        local = {wk.index: wk.vertices[c.target] for wk in self.workers}
                        route.targets = [local.get(i) for i in range(self.peers)]
                        route.local = w.vertices[c.target]
                        route.connector = c.index
                        route.link = link
                        route.per_process = self.workers_per_process
                        route.stage = g.stages[c.target].name
                        vr.routes[port].append(route)
                for port, conn in enumerate(g.incoming[vr.stage]):
                    assert conn is not None
                    vr.input_locations[port] = g.connector_location(conn.index)

    @cached_property
    def synchronous(self) -> bool:
        """Every callback is a plain function (none is ``async def``): steps need no task group."""
        return not any(v.async_recv or v.async_notify for v in self.instances())

    def start(self, task_group: Any) -> None:
        """Run ``async def`` callbacks in ``task_group`` from now on (the runtime's, while it runs)."""
        self._task_group = task_group

    # Looking up instances -----------------------------------------------------------------------
    def instances(self) -> Iterator[VertexRuntime]:
        """Every vertex instance of this process, worker by worker."""
        for w in self.workers:
            yield from w.vertices

    def instances_of(self, stage: int) -> list[VertexRuntime]:
        """This process's instances of a stage, in worker order."""
        return [w.vertices[stage] for w in self.workers]

    def instance(self, stage: int, worker: int) -> VertexRuntime | None:
        """The instance of a stage on a worker (a global index); None if the worker is elsewhere."""
        local = worker - self.first_worker
        if not 0 <= local < len(self.workers):
            return None
        return self.workers[local].vertices[stage]

    def vertices(self, stage_name: str) -> list[Vertex]:
        """This process's vertices of a stage, by its full name."""
        spec = self.graph.by_name.get(stage_name)
        if spec is None:
            raise KeyError(f"no stage named {stage_name!r}; stages: {sorted(self.graph.by_name)}")
        return [instance.vertex for instance in self.instances_of(spec.index)]

    def notification_requests(self) -> Iterator[tuple[VertexRuntime, NotificationRequest]]:
        """Every pending notification with its instance, earliest first per instance."""
        for instance in self.instances():
            for request in instance.notificator:
                yield instance, request

    # Queues ----------------------------------------------------------------------------------------
    def has_queued(self) -> bool:
        return any(w.queue for w in self.workers)

    def has_work(self) -> bool:
        """A message is queued, or some notification may have become deliverable."""
        return bool(self._due) or any(w.queue for w in self.workers)

    def backlog(self) -> int:
        """Messages waiting in this process: queued, behind busy vertices, behind the fence."""
        n = sum(w.queued for w in self.workers) + self.held_by_busy + self.fence.held_back
        if n > self.max_backlog:
            self.max_backlog = n
        return n

    def queued_records(self) -> int:
        """Records in this process's queues and behind busy vertices (not those behind the fence)."""
        n = sum(w.queued_records for w in self.workers) + self.held_records_by_busy
        if n > self.max_queued_records:
            self.max_queued_records = n
        return n

    def deliver_remote(self, connector: int, worker: int, time: Timestamp, records: list[Any]) -> None:
        """Queue a batch that arrived from another process for one of this process's workers."""
        conn = self.graph.connectors[connector]
        instance = self.workers[worker - self.first_worker].vertices[conn.target]
        instance.worker_state.enqueue(instance, conn.target_port, time, records)

    def quiet_until(self, epoch: int) -> bool:
        """Nothing up to ``epoch`` is left to do here: no callback running, no notification due."""
        if self.in_flight:
            return False
        for instance in self.instances():
            earliest = instance.notificator.earliest()
            if earliest is not None and earliest[0] <= epoch:
                return False
        return True

    # Messages ---------------------------------------------------------------------------------------
    def drain(self, deadline: float) -> bool:
        """Deliver queued messages on every worker until ``deadline``; whether any were queued."""
        did = False
        for w in self.workers:
            if w.queue:
                self._drain(w, deadline)
                did = True
        return did

    def _drain(self, w: Worker, deadline: float) -> None:
        """Deliver ``w``'s queued messages: at most `DRAIN_LIMIT`, and none once ``deadline`` has
        passed, so that what the callbacks sent is flushed to other processes every time slice
        (they wait for it) rather than after a long run of large batches."""
        queue = w.queue
        waiting = w.waiting
        pending = self.pending
        limit = DRAIN_LIMIT
        clock = _time.perf_counter
        started = clock()
        fence = self.fence
        fenced = fence.epoch is not None
        delivered = delivered_records = 0  # added to the worker's counters once, at the end
        try:
            while queue and limit and clock() <= deadline:
                limit -= 1
                message = queue.popleft()
                instance = message.instance
                port = message.port
                time = message.time
                records = message.records
                count = message.messages
                size = len(records)
                w.queued -= count
                w.queued_records -= size
                key = message.key
                if waiting.get(key) is message:
                    del waiting[key]
                if fenced and not fence.admits(time):
                    fence.hold(w, message)
                    continue
                if instance.busy:
                    instance.backlog.append(message)
                    self.held_by_busy += count
                    self.held_records_by_busy += size
                    continue
                instance.held = time
                instance.messages_received += 1
                instance.records_received += size
                consumed = (time, instance.input_locations[port])
                if instance.async_recv:
                    coro = instance.vertex.on_recv(port, records, time)
                    self._start_async(instance, coro, "on_recv", time, consumed, count)
                    continue
                try:
                    instance.vertex.on_recv(port, records, time)
                    self.flush(instance)
                except BaseException as exc:
                    raise self._callback_failed(instance, "on_recv", time, exc)  # noqa: B904 - the cause is set inside
                instance.held = None
                pending[consumed] = pending.get(consumed, 0) - count
                delivered += 1
                delivered_records += size
        finally:
            w.messages_delivered += delivered
            w.records_delivered += delivered_records
            w.callback_seconds += clock() - started

    def flush(self, instance: VertexRuntime) -> None:
        """Route what ``instance``'s callback sent, emptying its buffers (its notification
        requests are registered as it makes them). Called after every callback, most of which
        send one batch on one output: a plain loop over the buffers, no generator."""
        pending = self.pending
        fence = self.fence
        fenced = fence.epoch is not None
        port = -1
        for outgoing in instance.sent:
            port += 1
            if not outgoing:
                continue
            routes = instance.routes[port]
            for time, records in outgoing.items():
                if not records:
                    continue
                if fenced and not fence.admits(time):
                    fence.carry(instance.stage, instance.worker, port, time, records)
                instance.records_sent += len(records)
                first = True
                for route in routes:
                    instance.messages_sent += route.send(records if first else list(records), time, pending)
                    first = False
            outgoing.clear()

    def send(self, instance: VertexRuntime, port: int, time: Timestamp, records: list[Any]) -> None:
        """Send ``records`` from ``instance``'s output ``port`` at ``time`` as if its callback had."""
        instance.send(port, records, time)
        self.flush(instance)

    # Notifications ----------------------------------------------------------------------------------
    def request_notification(self, instance: VertexRuntime, time: Timestamp, capability: Timestamp | None) -> None:
        """Ask for ``on_notify(time)`` of ``instance`` as if its callback had called `Vertex.notify_at`."""
        instance.request_notification(time, capability)

    def frontier_moved(self, locations: set[int] | None) -> None:
        """The frontier moved at ``locations`` (None: anywhere): their pending notifications may
        have become deliverable; None: those the tracker says a pointstamp that left its
        global frontier leads to)."""
        if locations is None:
            self._due.update(self.tracker.notifications_may_run(self._waiting))
        else:
            self._due.update(locations)

    def recheck_notifications(self) -> None:
        """Something other than the frontier may let notifications run (the checkpoint fence
        lifted): look at every instance's next time."""
        self._due.update(range(len(self.graph.stages)))

    def _held_back(self, p: Pointstamp, exclude_self: bool) -> bool:
        """The tracker's `ProgressTracker.blocked`, or the checkpoint fence does not admit ``p``'s
        time yet: what a notificator asks while the fence is up."""
        return not self.fence.admits(p[0]) or self.tracker.blocked(p, exclude_self)

    def deliver_notifications(self) -> bool:
        """Run the notifications that are deliverable now, at the locations whose frontier moved
        since the last look, earliest first per worker; whether any ran."""
        due = self._due
        if not due:
            return False
        waiting = self._waiting
        if len(due) == 1:
            locations = [due.pop()]
            if locations[0] not in waiting:
                return False
        else:
            locations = [loc for loc in due if loc in waiting]  # stages with notifications pending
            due.clear()
            if not locations:
                return False
        held_back = self.tracker.blocked if self.fence.epoch is None else self._held_back
        delivered = False
        for w in self.workers:
            vertices = w.vertices
            ready: list[tuple[Timestamp, int, Timestamp | None]] = []
            for stage in locations:
                instance = vertices[stage]
                if instance.busy:
                    continue
                taken = instance.notificator.take_ready(held_back, stage)
                if taken:
                    left = waiting[stage] - len(taken)
                    if left:
                        waiting[stage] = left
                    else:
                        del waiting[stage]
                    for guarantee, capability in taken:
                        ready.append((guarantee, stage, capability))
            if not ready:
                continue
            if not delivered and self.link is not None:
                # what this process has told nobody yet (the messages it consumed, the data it
                # sent) goes before a notification, often the long callback: the peers must not
                # wait for it to learn that their messages were consumed (unless what it
                # retires is still held back by something else: then it unblocks nothing yet)
                self.link.flush(settle=True)
            if len(ready) > 1:
                ready.sort(key=_time_and_stage)
            started = _time.perf_counter()
            try:
                for guarantee, stage, capability in ready:
                    self._notify(w, vertices[stage], guarantee, capability)
                if self._may_chain and len(ready) == 1 and self.fence.epoch is None:
                    self._chain(w, vertices[stage])
            finally:
                w.callback_seconds += _time.perf_counter() - started
            delivered = True
        return delivered

    def _chain(self, w: Worker, instance: VertexRuntime) -> None:
        """Run ``instance``'s next notification at once, again and again, while it is the only
        work of the process: a loop iteration that only coordinates (Naiad's Figure 6b).

        Here the step would find nothing queued, apply the callback's progress batch, find only
        this stage's notification pending and ask the tracker about it; the chain does the same
        without the step's round trip (one process and one worker, so no peer to tell first,
        and no checkpoint fence). Whoever watches the frontier hears of it when the chain ends,
        at its latest position, as after any step. At most `CHAIN_SECONDS`."""
        pending = self.pending
        tracker = self.tracker
        blocked = tracker.blocked
        waiting = self._waiting
        stage = instance.stage
        notificator = instance.notificator
        queue = w.queue
        alone = {stage: 1}  # what `waiting` holds while this request is the only one pending
        clock = _time.perf_counter
        until = clock() + CHAIN_SECONDS
        while not queue and waiting == alone and not instance.busy and clock() < until:
            if pending:
                tracker.update(pending)
                pending.clear()
            taken = notificator.take_ready(blocked, stage)
            if not taken:
                return
            del waiting[stage]
            guarantee, capability = taken[0]
            self._notify(w, instance, guarantee, capability)

    def _notify(self, w: Worker, instance: VertexRuntime, guarantee: Timestamp, cap: Timestamp | None) -> None:
        """Run ``instance``'s ``on_notify(guarantee)`` holding ``cap``, then release ``cap``. The
        caller times a run of these into ``w.callback_seconds``, as `_drain` does a run of
        messages: two clock reads a notification would be a tenth of a loop iteration."""
        instance.held = TOP if cap is None else cap
        instance.notifications_delivered += 1
        if instance.async_notify:
            release = None if cap is None else (cap, instance.location)
            self._start_async(instance, instance.vertex.on_notify(guarantee), "on_notify", guarantee, release)
            return
        try:
            instance.vertex.on_notify(guarantee)
            for outgoing in instance.sent:
                if outgoing:
                    self.flush(instance)
                    break
        except BaseException as exc:
            raise self._callback_failed(instance, "on_notify", guarantee, exc)  # noqa: B904 - the cause is set inside
        instance.held = None
        if cap is not None:
            release = (cap, instance.location)
            pending = self.pending
            pending[release] = pending.get(release, 0) - 1
        w.notifications_delivered += 1

    # Async callbacks --------------------------------------------------------------------------------
    def _start_async(
        self,
        instance: VertexRuntime,
        coro: Any,
        callback: str,
        time: Timestamp,
        release: Pointstamp | None,
        count: int = 1,
    ) -> None:
        """Run an ``async def`` callback as a task; the vertex is busy (its inputs wait) and
        what it consumed (``count`` messages, or a notification) stays pending until it returns."""
        instance.busy = True
        self.in_flight += 1
        self._task_group.start_soon(self._finish_async, instance, coro, callback, time, release, count)

    async def _finish_async(
        self, instance: VertexRuntime, coro: Any, callback: str, time: Timestamp, release: Pointstamp | None, count: int
    ) -> None:
        try:
            await coro
            self.flush(instance)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._callback_failed(instance, callback, time, exc)
            self._wake()
            return
        finally:
            self.in_flight -= 1
        instance.held = None
        instance.busy = False
        if release is not None:
            self.pending[release] = self.pending.get(release, 0) - count
        w = instance.worker_state
        if callback == "on_recv":
            w.messages_delivered += 1
        else:
            w.notifications_delivered += 1
        if instance.backlog:
            self.held_records_by_busy -= sum(len(e.records) for e in instance.backlog)
            self.held_by_busy -= w.requeue(instance.backlog)
            instance.backlog.clear()
        self._due.add(instance.location)
        self._wake()

    # Failure ----------------------------------------------------------------------------------------
    def _callback_failed(self, instance: VertexRuntime, callback: str, time: Any, exc: BaseException) -> BaseException:
        """The error a callback's exception fails the computation with: a `VertexError` naming the
        stage, worker, callback and time, with the user's exception as its cause."""
        instance.held = None
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            return exc
        shown = "TOP" if time is TOP else str(time)
        err: BaseException
        if isinstance(exc, CodecError) and getattr(exc, "stage", None) is None:
            # raised while routing what the callback sent: say who sent it, and when
            err = CodecError(f"stage {instance.stage_name!r} (worker {instance.worker}) at time {shown}: {exc}")
            err.stage, err.worker, err.time = instance.stage_name, instance.worker, shown  # type: ignore[attr-defined]
            err.__cause__ = exc
        elif isinstance(exc, TimelyError) and not isinstance(exc, LibraryError):
            err = exc  # timely's own, raised by send_by or notify_at: it names the stage already
        else:
            err = VertexError(
                f"stage {instance.stage_name!r} (worker {instance.worker}) raised {type(exc).__name__} in {callback} "
                f"at time {shown}: {exc}",
                instance.stage_name,
                instance.worker,
                time,
                callback,
            )
            err.__cause__ = exc
        self._record_failure(err)
        return err


def _time_and_stage(ready: tuple[Timestamp, int, Timestamp | None]) -> tuple[Timestamp, int]:
    """Notifications of one worker run earliest first, then by stage (the sort is stable: one
    stage's equal times keep their request order)."""
    return ready[0], ready[1]


def _make_vertex(spec: StageSpec) -> Vertex:
    if spec.factory is None:
        return Vertex()
    vertex = spec.factory()
    if not isinstance(vertex, Vertex):
        raise TimelyError(f"stage {spec.name!r}: the factory made {vertex!r}, which is not a timely.Vertex")
    return vertex
