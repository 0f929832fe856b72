"""One process of a computation: its workers, its progress tracker, and the scheduler.

The logical graph expands to one vertex instance per stage per worker. All workers of a
process run on one asyncio event loop, in one thread; the scheduler (`ProcessRuntime.step`)
is plain synchronous code that delivers messages and notifications in tight loops and
returns to the event loop every few milliseconds, so that I/O and inputs keep flowing.

Progress: every callback's sends, notification requests and consumed message form one
atomic batch of ``(pointstamp, delta)`` changes. Batches accumulate in ``pending`` (one
`ChangeBatch` for the whole process: Naiad's per-process accumulation) and are applied to
the tracker between callbacks, never in the middle of one, so merged batches stay atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import time as _time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from sortedcontainers import SortedList

from ..dataflow import Input, Probe, Scope, Subscription
from ..errors import CodecError, InputError, TimelyError, VertexError
from ..graph import FrozenGraph, StageKind, StageSpec
from ..operators import Collect
from ..progress import Antichain, ChangeBatch, Pointstamp, ProgressTracker
from ..timestamp import Timestamp, _from_flat
from ..vertex import TOP, Output, Vertex, VertexContext
from .statistics import ComputationStatistics, WorkerStatistics

if TYPE_CHECKING:
    from ..checkpoint import Checkpoints
    from ..checkpoint._store import CheckpointInfo
    from ..net.codec import Codec
    from ..net.transport import Transport
    from .cluster import ClusterLink
    from .recovery import Recovery, ReplayPlan

__all__ = ["ProcessRuntime"]

log = logging.getLogger("timely")

MESSAGE_BATCH = 1024
"""Inputs split what they are sent into messages of at most this many records."""
INPUT_BACKLOG = 128
"""Queued messages (about this many thousand records) above which a synchronous `Input.send`
runs the computation until the queues are a quarter as long: memory stays bounded."""
SLICE_SECONDS = 0.002
"""How long the scheduler runs callbacks before it yields to the event loop."""
SHUTDOWN_SECONDS = 10.0
"""How long a finished process waits for its peers' goodbyes (or a failed one flushes its error)."""
DRAIN_LIMIT = 512
"""Messages one worker delivers before the scheduler looks at the others."""
GC_THRESHOLD = 50_000
"""The cyclic collector's first threshold while a computation runs (Python's default is 700).
Records in flight are young tuples and lists the collector scans again and again; at the
default, libs/bloom's asynchronous reachability spent a third of its time collecting."""
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
        self.backlog: list[list[Any]] = []
        cls = type(vertex)
        self.async_recv = inspect.iscoroutinefunction(cls.on_recv)
        self.async_notify = inspect.iscoroutinefunction(cls.on_notify)
        self.pending_notifications: set[tuple[Any, Any]] = set()
        self.recv = vertex.on_recv
        self.notify = vertex.on_notify
        vertex._timely = self
        vertex.outputs = [Output(i) for i in range(len(spec.output_summaries))]


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
        for r in records:
            appends[fn(r) % n](r)
        made = 0
        port = self.port
        targets = self.targets
        for w, part in enumerate(parts):
            if part:
                target = targets[w]
                if target is None:
                    self.link.send_records(w // self.per_process, self.connector, w, time, part)  # type: ignore[union-attr]
                else:
                    target.worker_state.enqueue(target, port, time, part)
                made += 1
        pending[key] = pending.get(key, 0) + made
        return made


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
        # (guarantee, stage, capability or TOP); sorted so the earliest are delivered first
        self.notifications: SortedList = SortedList()
        self.fenced: list[list[Any]] = []
        """Entries past the checkpoint fence, held until this process has saved its part."""
        self.messages_delivered = 0
        self.records_delivered = 0
        self.notifications_delivered = 0
        self.callback_seconds = 0.0

    def enqueue(self, ctx: VertexRuntime, port: int, time: Timestamp, records: list[Any]) -> None:
        """Queue ``records`` (a list the runtime owns) for ``ctx``'s input ``port`` at ``time``."""
        self.queued += 1
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
        """Put back, at the front and in order, entries a busy vertex could not take; the
        number of messages they hold."""
        self.queue.extendleft(reversed(entries))
        messages = sum(e[4] for e in entries)
        self.queued += messages
        return messages


@dataclass
class _Waiter:
    location: int
    time: Timestamp
    future: asyncio.Future[None]


class ProcessRuntime:
    """Everything one process runs: built from the frozen graph and the builder's scope."""

    def __init__(
        self,
        graph: FrozenGraph,
        scope: Scope,
        workers: int = 1,
        process_index: int = 0,
        processes: int = 1,
        stall_log_after: float | None = 10.0,
        transport: Transport | None = None,
        codec: Codec | None = None,
        checkpoints: Checkpoints | None = None,
        resume: CheckpointInfo | None = None,
        replay: ReplayPlan | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a process needs at least one worker")
        if transport is not None:
            process_index, processes = transport.process_index, transport.processes
        self.graph = graph
        self.workers_per_process = workers
        self.process_index = process_index
        self.processes = processes
        self.peers = workers * processes
        self.first_worker = process_index * workers
        self.tracker = ProgressTracker(graph.reachability)
        self.pending: ChangeBatch = ChangeBatch()
        self.failure: BaseException | None = None
        self.stall_log_after = stall_log_after
        self.driver: Callable[[Callable[[], bool], float | None], None] | None = None
        self.started_at = _time.perf_counter()
        self._seen_version = -1
        self._notes_dirty = False
        self._in_flight = 0  # async callbacks running
        self._held_back = 0  # messages waiting behind busy vertices
        self._idle = False
        self._idle_since = 0.0
        """When the scheduler last went idle (perf_counter): what the stall watcher counts from."""
        self._wakeups = 0
        self.max_backlog = 0
        self._wake = asyncio.Event()
        self._waiters: list[_Waiter] = []
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._task_group: Any = None
        self.fence: int | None = None
        """The epoch of the next checkpoint: nothing later is delivered until it is taken."""
        self._checkpoint_due = False
        self.recovery: Recovery | None = None

        self.transport = transport
        self.link: ClusterLink | None = None
        if transport is not None and processes > 1:
            from ..net.codec import Codec
            from .cluster import ClusterLink

            self.link = ClusterLink(self, transport, codec or Codec())
        self.workers = [Worker(self.first_worker + i) for i in range(workers)]
        for w in self.workers:
            for spec in graph.stages:
                w.vertices.append(VertexRuntime(spec, self._make_vertex(spec), w, self.peers))
        self._wire()
        start = 0 if resume is None else resume.epoch + 1
        self.inputs = [InputBinding(self, i, start) for i in scope._inputs]
        self.probes = [ProbeBinding(self, p) for p in scope._probes]
        self.subscriptions = [SubscriptionBinding(self, s) for s in scope._subscriptions]
        # Every process starts from the same view: each input of each worker holds epoch 0
        # (or the epoch after the checkpoint it resumes from).
        initial = {(_from_flat((start,)), s.index): self.peers for s in graph.stages if s.kind == StageKind.INPUT}
        if initial:
            self.tracker.update(initial)
        if self.link is not None:
            self.link.start()  # only now: remote progress must land on the initial state
        if checkpoints is not None:
            from .recovery import Recovery, plan_replay

            if replay is None:
                names = [b.name for b in self.inputs]
                replay = plan_replay(checkpoints, names, process_index, processes, start)
            self.recovery = Recovery(self, checkpoints, resume, replay)
            self.recovery.restore()

    # Construction ------------------------------------------------------------------------------
    def _make_vertex(self, spec: StageSpec) -> Vertex:
        if spec.factory is None:
            return Vertex()
        vertex = spec.factory()
        if not isinstance(vertex, Vertex):
            raise TimelyError(f"stage {spec.name!r}: the factory made {vertex!r}, which is not a timely.Vertex")
        return vertex

    def _wire(self) -> None:
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
                        route.link = self.link
                        route.per_process = self.workers_per_process
                        vr.routes[port].append(route)
                for port, conn in enumerate(g.incoming[vr.stage]):
                    assert conn is not None
                    vr.input_locations[port] = g.connector_location(conn.index)

    # The scheduler -------------------------------------------------------------------------------
    def step(self) -> bool:
        """Deliver messages and notifications for one time slice. True if work remains."""
        deadline = _time.perf_counter() + SLICE_SECONDS
        tracker = self.tracker
        while True:
            did = False
            for w in self.workers:
                if w.queue:
                    self._drain(w, deadline)
                    did = True
            if self.pending:
                if self.link is not None:
                    out = self.link.progress_out
                    for key, delta in self.pending.items():
                        out[key] = out.get(key, 0) + delta
                tracker.update(self.pending)
                self.pending.clear()
                did = True
            if tracker.version != self._seen_version:
                self._seen_version = tracker.version
                tracker.newly_minimal.clear()
                self._notes_dirty = True
                self._frontier_changed()
            if self._notes_dirty:
                self._notes_dirty = False
                if self._deliver_notifications():
                    did = True
            if self._checkpoint_due and self._checkpoint_ready() and self.recovery.at_fence():  # type: ignore[union-attr]
                self._checkpoint_due = False
                self.check_fence()
                did = True
            if not did:
                return False
            if _time.perf_counter() > deadline:
                return True

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
        while queue and limit and clock() <= deadline:
            limit -= 1
            item = queue.popleft()
            ctx, port, time, records, count = item
            w.queued -= count
            key = (ctx, port, time)
            if waiting.get(key) is item:
                del waiting[key]
            if fence is not None and time[0] > fence:
                w.fenced.append(item)
                self._held_back += count
                continue
            if ctx.busy:
                ctx.backlog.append(item)
                self._held_back += count
                continue
            ctx.held = time
            ctx.messages_received += 1
            ctx.records_received += len(records)
            if ctx.async_recv:
                self._start_async(
                    ctx, ctx.recv(port, records, time), "on_recv", time, (time, ctx.input_locations[port]), count
                )
                continue
            try:
                ctx.recv(port, records, time)
                self._flush(ctx)
            except BaseException as exc:
                raise self._callback_failed(ctx, "on_recv", time, exc)  # noqa: B904 - the cause is set inside
            ctx.held = None
            done = (time, ctx.input_locations[port])
            pending[done] = pending.get(done, 0) - count
            w.messages_delivered += 1
            w.records_delivered += len(records)
        w.callback_seconds += clock() - started

    def _flush(self, ctx: VertexRuntime) -> None:
        """Route what the callback sent and register what it asked for."""
        pending = self.pending
        fence = self.fence
        for port, buffer in enumerate(ctx.buffers):
            if buffer:
                routes = ctx.routes[port]
                for time, records in buffer.items():
                    if not records:
                        continue
                    if fence is not None and time[0] > fence:
                        self.recovery.carry(ctx, port, time, records)  # type: ignore[union-attr]
                    ctx.records_sent += len(records)
                    first = True
                    for route in routes:
                        ctx.messages_sent += route.send(records if first else list(records), time, pending)
                        first = False
                buffer.clear()
        if ctx.requests:
            self._register_notifications(ctx)

    def _register_notifications(self, ctx: VertexRuntime) -> None:
        notes = ctx.worker_state.notifications
        for guarantee, capability in ctx.requests:
            cap = TOP if capability is None else capability
            if (guarantee, cap) in ctx.pending_notifications:
                continue
            ctx.pending_notifications.add((guarantee, cap))
            ctx.notifications_requested += 1
            notes.add((guarantee, ctx.stage, cap))
            if cap is not TOP:
                key = (cap, ctx.location)
                self.pending[key] = self.pending.get(key, 0) + 1
        ctx.requests.clear()
        self._notes_dirty = True

    def _deliverable(self, guarantee: Timestamp, location: int) -> bool:
        p = (guarantee, location)
        minimal = self.tracker.precursors.get(p)
        if minimal is not None:
            return minimal == 0
        return not self.tracker.blocked(p)

    def _deliver_notifications(self) -> bool:
        delivered = False
        for w in self.workers:
            notes = w.notifications
            if not notes:
                continue
            fence = self.fence
            ready = [
                n
                for n in notes
                if not w.vertices[n[1]].busy and (fence is None or n[0][0] <= fence) and self._deliverable(n[0], n[1])
            ]
            for note in ready:
                notes.remove(note)
                guarantee, stage, cap = note
                ctx = w.vertices[stage]
                ctx.pending_notifications.discard((guarantee, cap))
                self._notify(w, ctx, guarantee, cap)
                delivered = True
        return delivered

    def _notify(self, w: Worker, ctx: VertexRuntime, guarantee: Timestamp, cap: Any) -> None:
        ctx.held = cap
        ctx.notifications_delivered += 1
        release = None if cap is TOP else (cap, ctx.location)
        if ctx.async_notify:
            self._start_async(ctx, ctx.notify(guarantee), "on_notify", guarantee, release)
            return
        started = _time.perf_counter()
        try:
            ctx.notify(guarantee)
            self._flush(ctx)
        except BaseException as exc:
            raise self._callback_failed(ctx, "on_notify", guarantee, exc)  # noqa: B904 - the cause is set inside
        ctx.held = None
        if release is not None:
            self.pending[release] = self.pending.get(release, 0) - 1
        w.notifications_delivered += 1
        w.callback_seconds += _time.perf_counter() - started

    # Async callbacks ------------------------------------------------------------------------------
    def _start_async(
        self,
        ctx: VertexRuntime,
        coro: Any,
        callback: str,
        time: Timestamp,
        release: Pointstamp | None,
        count: int = 1,
    ) -> None:
        """Run an ``async def`` callback as a task; the vertex is busy (its inputs wait) and
        what it consumed (``count`` messages, or a notification) stays pending until it returns."""
        ctx.busy = True
        self._in_flight += 1
        self._task_group.start_soon(self._finish_async, ctx, coro, callback, time, release, count)

    async def _finish_async(
        self, ctx: VertexRuntime, coro: Any, callback: str, time: Timestamp, release: Pointstamp | None, count: int
    ) -> None:
        try:
            await coro
            self._flush(ctx)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.fail(self._callback_failed(ctx, callback, time, exc))
            return
        finally:
            self._in_flight -= 1
        ctx.held = None
        ctx.busy = False
        if release is not None:
            self.pending[release] = self.pending.get(release, 0) - count
        w = ctx.worker_state
        if callback == "on_recv":
            w.messages_delivered += 1
        else:
            w.notifications_delivered += 1
        if ctx.backlog:
            self._held_back -= w.requeue(ctx.backlog)
            ctx.backlog.clear()
        self._notes_dirty = True
        self.wake()

    # Failure --------------------------------------------------------------------------------------
    def _callback_failed(self, ctx: VertexRuntime, callback: str, time: Any, exc: BaseException) -> BaseException:
        ctx.held = None
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            return exc
        shown = "TOP" if time is TOP else str(time)
        err: BaseException
        if isinstance(exc, CodecError) and getattr(exc, "stage", None) is None:
            # raised while routing what the callback sent: say who sent it, and when
            err = CodecError(f"stage {ctx.stage_name!r} (worker {ctx.worker}) at time {shown}: {exc}")
            err.stage, err.worker, err.time = ctx.stage_name, ctx.worker, shown  # type: ignore[attr-defined]
            err.__cause__ = exc
        elif isinstance(exc, TimelyError):
            err = exc
        else:
            err = VertexError(
                f"stage {ctx.stage_name!r} (worker {ctx.worker}) raised {type(exc).__name__} in {callback} "
                f"at time {shown}: {exc}",
                ctx.stage_name,
                ctx.worker,
                time,
                callback,
            )
            err.__cause__ = exc
        self.failure = err
        return err

    def fail(self, err: BaseException) -> None:
        if self.failure is None:
            self.failure = err
        self.wake()

    def deliver_remote(self, connector: int, worker: int, time: Timestamp, records: list[Any]) -> None:
        """Queue a batch that arrived from another process for one of this process's workers."""
        conn = self.graph.connectors[connector]
        ctx = self.workers[worker - self.first_worker].vertices[conn.target]
        ctx.worker_state.enqueue(ctx, conn.target_port, time, records)

    # Frontier watchers -----------------------------------------------------------------------------
    def _frontier_changed(self) -> None:
        for sub in self.subscriptions:
            sub.deliver()
        self.check_fence()
        if self._waiters:
            still = []
            for waiter in self._waiters:
                if waiter.future.done():
                    continue
                if not self.tracker.frontier_at(waiter.location).less_equal(waiter.time):
                    waiter.future.set_result(None)
                else:
                    still.append(waiter)
            self._waiters = still

    def check_fence(self) -> None:
        """Mark a checkpoint due once the frontier has passed the fence epoch (also called after
        the fence moves, since an input may already have jumped past the new fence)."""
        fence = self.fence
        if fence is not None and not self._checkpoint_due:
            frontier = self.tracker.frontier
            if frontier and all(p[0][0] > fence for p in frontier):
                self._checkpoint_due = True

    def _checkpoint_ready(self) -> bool:
        """Everything up to the fence is done here: no callback running, no notification due."""
        if self._in_flight:
            return False
        fence = self.fence
        return fence is not None and not any(n[0][0] <= fence for w in self.workers for n in w.notifications)

    def wait_passed(self, location: int, time: Timestamp) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self.tracker.frontier_at(location).less_equal(time):
            future.set_result(None)
        else:
            self._waiters.append(_Waiter(location, time, future))
        return future

    # Running ----------------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """Nothing is active anywhere: every input is closed and all work is done."""
        return (
            self.tracker.is_empty()
            and not self.pending
            and not self._in_flight
            and (self.link is None or not self.link.pending_output())
        )

    def wake(self) -> None:
        self._wake.set()

    def congested(self) -> bool:
        """Some peer is not taking what this process sends as fast as it is sent."""
        return self.transport is not None and self.transport.congested()

    def backlog(self) -> int:
        """Messages waiting in this process: in worker queues and behind busy (async) vertices."""
        n = sum(w.queued for w in self.workers) + self._held_back
        if n > self.max_backlog:
            self.max_backlog = n
        return n

    def ready(self) -> bool:
        """Below the limits at which producers should wait: few queued messages, no congestion."""
        return self.backlog() <= INPUT_BACKLOG // 4 and not self.congested()

    def when(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        """A future that resolves after the first scheduler step at which ``predicate()`` holds."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if predicate():
            future.set_result(None)
        else:
            self._conditions.append((predicate, future))
        return future

    def _check_conditions(self) -> None:
        still = []
        for predicate, future in self._conditions:
            if future.done():
                continue
            if predicate():
                future.set_result(None)
            else:
                still.append((predicate, future))
        self._conditions = still

    async def run(self) -> None:
        """Run until the computation completes; raise its failure if it fails.

        Async callbacks run in an anyio task group, so that a failure anywhere cancels them
        all and nothing is left running when this returns.
        """
        try:
            with _fewer_collections():
                await self._run()
        finally:
            if self.recovery is not None:
                self.recovery.close()

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            if self.stall_log_after is not None:
                tg.start_soon(self._watch_stalls, self.stall_log_after)
            try:
                await self._schedule()
            except BaseException as exc:
                if self.failure is None:
                    self.failure = exc
            finally:
                tg.cancel_scope.cancel()
        await self._shutdown_network()
        if self.failure is not None:
            raise self.failure

    async def _shutdown_network(self) -> None:
        """Complete: say goodbye and wait for every peer's. Failed: tell every peer, then go."""
        if self.transport is None:
            return
        link = self.link
        with anyio.CancelScope(shield=True):
            if link is not None:
                if self.failure is None:
                    link.send_bye()
                    if not await link.wait_byes(SHUTDOWN_SECONDS):
                        log.warning(
                            "process %d: not every peer said goodbye within %s s", self.process_index, SHUTDOWN_SECONDS
                        )
                else:
                    link.send_error(self.failure)
            with anyio.move_on_after(SHUTDOWN_SECONDS):
                await self.transport.close()

    async def _schedule(self) -> None:
        while True:
            if self.failure is not None:
                return
            more = self.step()
            if self.link is not None:
                self.link.flush()
                self.link.maybe_resume_reading()
            if self._conditions:
                self._check_conditions()
            if self.complete:
                return
            if more:
                await asyncio.sleep(0)
                continue
            self._wake.clear()
            if self.failure is None and not any(w.queue for w in self.workers) and not self.pending:
                self._idle = True
                self._idle_since = _time.perf_counter()
                await self._wake.wait()
                self._idle = False
                self._wakeups += 1

    async def settled(self) -> None:
        """Return once the scheduler has taken in everything that was waiting — input changes
        made while the event loop was not running, frames already in the sockets — and found
        nothing left to do: it was idle, and stayed idle across a pass of the event loop's I/O."""
        self.wake()
        while True:
            await asyncio.sleep(0)  # the scheduler's turn
            await asyncio.sleep(0)  # and one more pass: I/O polled, frame callbacks run
            if self.failure is not None or self.complete:
                return
            if self._idle and not self._wake.is_set():
                return

    async def _watch_stalls(self, every: float) -> None:
        """Log what holds progress back whenever the scheduler has sat idle for ``every`` seconds.

        One long-lived task, so that going idle costs no timer. Idle time counts from when the
        scheduler went idle (`_idle_since`), and never from before the watcher last ran: a
        callback that kept the event loop for a long time, or a synchronous program away from
        timely, is not the scheduler waiting (it was busy, or not running at all)."""
        tick = every / 4
        looked = counting_from = _time.perf_counter()
        while True:
            await asyncio.sleep(tick)
            now = _time.perf_counter()
            if now - looked > tick + every / 2:  # the event loop was held up: nothing could run
                counting_from = now
            looked = now
            if not self._idle:
                continue
            since = max(self._idle_since, counting_from)
            if now - since >= every:
                log.warning("no progress for %.0f s; what holds it back:\n%s", now - since, self.explain())
                counting_from = now

    # Seeing inside --------------------------------------------------------------------------------
    def describe(self, p: Pointstamp) -> str:
        time, loc = p
        t = _from_flat(time) if time is not TOP else "TOP"
        count = self.tracker.counts.get(p, 0)
        g = self.graph
        if loc < len(g.stages):
            spec = g.stages[loc]
            if spec.kind == StageKind.INPUT:
                return f"input {spec.name!r} is still open at epoch {time[0]} (advance_to or close it)"
            return f"stage {spec.name!r} holds {count} capability/notification(s) at {t}"
        return f"{count} message batch(es) at {t} not yet consumed on {g.describe_location(loc)}"

    def explain(self) -> str:
        """Which pointstamps hold back each pending notification and probe wait."""
        lines: list[str] = []
        for w in self.workers:
            for guarantee, stage, _cap in w.notifications:
                ctx = w.vertices[stage]
                holders = self.tracker.holds((guarantee, ctx.location), exclude_self=True)
                busy = " (vertex busy in an async callback)" if ctx.busy else ""
                lines.append(
                    f"notification at {guarantee} for stage {ctx.stage_name!r} (worker {w.index}){busy} waits on:"
                )
                if holders:
                    lines.extend(f"  - {self.describe(h)}" for h in sorted(holders, key=_order))
                else:
                    lines.append("  - nothing: it is deliverable")
        for waiter in self._waiters:
            name = self.graph.stages[waiter.location].name
            lines.append(f"probe {name!r} waiting for {waiter.time} waits on:")
            holders = self.tracker.holds((waiter.time, waiter.location))
            lines.extend(f"  - {self.describe(h)}" for h in sorted(holders, key=_order))
        for w in self.workers:
            for ctx in w.vertices:
                if ctx.busy:
                    lines.append(
                        f"stage {ctx.stage_name!r} (worker {w.index}) is running an async callback at {ctx.held}"
                    )
        if not lines:
            if self.tracker.is_empty():
                return "nothing is active: the computation is complete"
            lines.append("active pointstamps on the frontier:")
            lines.extend(f"  - {self.describe(p)}" for p in sorted(self.tracker.frontier, key=_order))
        return "\n".join(lines)

    def statistics(self) -> ComputationStatistics:
        workers = [
            WorkerStatistics(
                w.index,
                w.messages_delivered,
                w.records_delivered,
                w.notifications_delivered,
                len(w.queue),
                len(w.notifications),
                w.callback_seconds,
            )
            for w in self.workers
        ]
        return ComputationStatistics(
            process=self.process_index,
            workers=workers,
            progress_batches=self.tracker.updates_applied,
            active_pointstamps=len(self.tracker.precursors),
            frontier_size=len(self.tracker.frontier),
            elapsed_seconds=_time.perf_counter() - self.started_at,
            max_queued_messages=self.max_backlog,
            network=self.link.statistics() if self.link is not None else {},
            checkpoints=self.recovery.statistics() if self.recovery is not None else {},
        )

    def vertices(self, stage_name: str) -> list[Vertex]:
        """This process's instances of a stage, by its full name."""
        spec = self.graph.by_name.get(stage_name)
        if spec is None:
            raise KeyError(f"no stage named {stage_name!r}; stages: {sorted(self.graph.by_name)}")
        return [w.vertices[spec.index].vertex for w in self.workers]


def _order(p: Pointstamp) -> tuple[Any, ...]:
    return (p[1], tuple(p[0]))


class InputBinding:
    """The running side of an `Input`: feeds this process's instances of the input stage."""

    def __init__(self, runtime: ProcessRuntime, handle: Input, epoch: int = 0) -> None:
        self.runtime = runtime
        self.stage = handle._stage
        self.name = handle.name
        self.epoch = epoch
        self.closed = False
        self._time = _from_flat((epoch,))
        self.logging = False
        """Keep this epoch's records for the input log (the runtime turns it on with checkpoints)."""
        self._unsealed: list[Any] = []
        self._next = 0  # round-robin over local workers
        self.contexts = [w.vertices[self.stage] for w in runtime.workers]
        self.throttle: tuple[Probe, int] | None = handle._throttle
        handle._binding = self

    def send(self, records: Iterable[Any]) -> None:
        if self.closed:
            raise InputError(f"input {self.name!r} is closed; it takes no more records")
        batch = records if isinstance(records, list) else list(records)
        if not batch:
            return
        if self.logging:
            self._unsealed.extend(batch)
        rt = self.runtime
        contexts = self.contexts
        time = self._time
        pending = rt.pending
        try:
            for start in range(0, len(batch), MESSAGE_BATCH):
                chunk = batch[start : start + MESSAGE_BATCH] if len(batch) > MESSAGE_BATCH else batch
                ctx = contexts[self._next]
                self._next = (self._next + 1) % len(contexts)
                ctx.records_sent += len(chunk)
                for i, route in enumerate(ctx.routes[0]):
                    ctx.messages_sent += route.send(chunk if i == 0 else list(chunk), time, pending)
        except CodecError as exc:  # a record for another process: say which input sent it
            raise CodecError(f"input {self.name!r} at epoch {self.epoch}: {exc}") from exc
        rt.wake()
        if rt.driver is not None and (rt.backlog() > INPUT_BACKLOG or rt.congested()):
            rt.driver(rt.ready, None)

    def advance_to(self, epoch: int) -> None:
        if self.closed:
            raise InputError(f"input {self.name!r} is closed; it cannot advance")
        if not isinstance(epoch, int) or epoch < self.epoch:
            raise InputError(f"input {self.name!r} is at epoch {self.epoch}; it cannot go to {epoch!r}")
        if epoch == self.epoch:
            return
        if self.logging:
            self._seal(epoch)
        n = len(self.contexts)
        pending = self.runtime.pending
        old, new = (self._time, self.stage), (_from_flat((epoch,)), self.stage)
        pending[new] = pending.get(new, 0) + n
        pending[old] = pending.get(old, 0) - n
        self.epoch = epoch
        self._time = new[0]
        self.runtime.wake()
        if self.throttle is not None and self.runtime.driver is not None:
            probe, ahead = self.throttle
            if epoch - ahead - 1 >= 0:
                target = _from_flat((epoch - ahead - 1,))
                self.runtime.driver(lambda: not probe.frontier().less_equal(target), None)

    def _seal(self, next_epoch: int | None) -> None:
        """Log the records of the epoch that ends now (before anyone can see it end)."""
        records, self._unsealed = self._unsealed, []
        self.runtime.recovery.seal(self, self.epoch, records, next_epoch)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.closed:
            return
        if self.logging:
            self._seal(None)
        key = (self._time, self.stage)
        pending = self.runtime.pending
        pending[key] = pending.get(key, 0) - len(self.contexts)
        self.closed = True
        self.runtime.wake()


_collector_users = 0
_collector_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def _fewer_collections() -> Any:
    """Raise the collector's threshold to `GC_THRESHOLD` while any computation in this process
    runs; put back what it was when the last one ends."""
    global _collector_users, _collector_saved
    if _collector_users == 0:
        _collector_saved = gc.get_threshold()
        if 0 < _collector_saved[0] < GC_THRESHOLD:
            gc.set_threshold(GC_THRESHOLD, *_collector_saved[1:])
    _collector_users += 1
    try:
        yield
    finally:
        _collector_users -= 1
        if _collector_users == 0:
            gc.set_threshold(*_collector_saved)


class ProbeBinding:
    def __init__(self, runtime: ProcessRuntime, probe: Probe) -> None:
        self.runtime = runtime
        self.location = runtime.graph.stage_location(probe._stage)
        probe._binding = self

    def frontier(self) -> Antichain:
        return self.runtime.tracker.frontier_at(self.location)


class SubscriptionBinding(ProbeBinding):
    """Hands each completed time's records, gathered from this process's workers, to the callback."""

    def __init__(self, runtime: ProcessRuntime, sub: Subscription) -> None:
        super().__init__(runtime, sub)
        self.fn = sub.fn
        self.name = sub.name
        self.collectors: list[Collect] = [w.vertices[sub._stage].vertex for w in runtime.workers]  # type: ignore[misc]

    def deliver(self) -> None:
        if not any(c.pending for c in self.collectors):
            return
        frontier = self.frontier()
        done = sorted({t for c in self.collectors for t in c.pending if not frontier.less_equal(t)})
        recovery = self.runtime.recovery
        for t in done:
            records: list[Any] = []
            for c in self.collectors:
                part = c.pending.pop(t, None)
                if part:
                    records.extend(part)
            if recovery is not None and t[0] <= recovery.delivered.get(self.name, -1):
                continue  # delivered before a restart
            try:
                self.fn(t, records)
                if recovery is not None:
                    recovery.mark_delivered(self, t[0])
            except BaseException as exc:
                err = VertexError(
                    f"subscriber {self.name!r} raised {type(exc).__name__} at time {t}: {exc}",
                    self.name,
                    -1,
                    t,
                    "subscribe",
                )
                err.__cause__ = exc
                self.runtime.failure = err
                raise err from exc
