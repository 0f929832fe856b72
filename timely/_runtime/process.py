"""One process of a computation: the parts it is made of, its progress state, and its life.

A `ProcessRuntime` is composed of collaborators that each own one concern, as trio's
``Runner`` is made of ``Deadlines``, ``EntryQueue`` and ``KIManager``:

- the `Scheduler` (scheduler.py): the workers, their routes and queues, the delivery of
  messages and notifications, ``async def`` callbacks;
- the `CheckpointFence` (fence.py): the epoch of the next checkpoint and what waits behind it;
- `Recovery` (recovery.py), with checkpoints: taking them, input logs, restoring;
- `Bindings` (bindings.py): the running side of the dataflow's inputs, probes and subscriptions;
- `Waiters` (waiters.py): the futures the computation handles wait on;
- `Diagnostics` (diagnostics.py): `explain`, `statistics` and the stall watch;
- with the live console on, a `Sampler` (sampling.py), and on process 0 the console's server;
- the `ClusterLink` (cluster.py), with other processes: frames in and out.

The runtime itself owns the process's progress state — the `ProgressTracker` and ``pending``,
the one `ChangeBatch` every callback and input adds its changes to (Naiad's per-process
accumulation) — and the time slice that ties the parts together (`step`): deliver messages,
apply and publish the accumulated progress between callbacks (never in the middle of one, so
merged batches stay atomic), tell whoever watches the frontier, deliver notifications, and
checkpoint when the fence epoch is complete. `run` drives the slices on the event loop,
returning to it every few milliseconds so that I/O and inputs keep flowing, and sleeps when
there is nothing to do.

Why over 400 lines in one module: the time slice and the life of a process (start, run,
fail, shut down) read together; each concern it composes lives in its own module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import time as _time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ..checkpoint import CheckpointInfo, Checkpoints
from ..dataflow import Dataflow
from ..errors import TimelyError
from ..graph import FrozenGraph, StageKind
from ..net.codec import Codec
from ..net.transport import Transport
from ..progress import ChangeBatch, ProgressTracker
from ..timestamp import Timestamp, _from_flat
from ..vertex import Vertex
from .bindings import INPUT_BACKLOG, Bindings, Driver
from .cluster import ClusterLink
from .config import ConsoleSettings
from .diagnostics import Diagnostics
from .fence import CheckpointFence
from .recovery import Recovery, ReplayPlan, plan_replay
from .report import record_cause
from .sampling import Sampler
from .scheduler import Scheduler
from .statistics import ComputationStatistics
from .waiters import Waiters

if TYPE_CHECKING:
    from .._console import ConsoleServer

__all__ = ["ProcessRuntime", "SHUTDOWN_SECONDS"]

log = logging.getLogger("timely")

SLICE_SECONDS = 0.002
"""How long the scheduler runs callbacks before it yields to the event loop."""
INLINE_SECONDS = 0.05
"""How long a synchronous wait may run the scheduler on its own stack before it hands over to
the event loop (`ProcessRuntime.run_inline`)."""
SHUTDOWN_SECONDS = 10.0
"""How long a finished process waits for its peers' goodbyes (or a failed one flushes its error)."""
FAILED_FLUSH_SECONDS = 1.0
"""How long a failed process tries to flush its ERROR frame to its peers before it goes."""
BYE_POLL_SECONDS = 0.25
"""How often a complete process waiting for its peers' goodbyes looks whether it has failed."""
GC_THRESHOLD = 50_000
"""The cyclic collector's first threshold while a computation runs (Python's default is 700).
Records in flight are young tuples and lists the collector scans again and again; at the
default, libs/bloom's asynchronous reachability spent a third of its time collecting."""


class ProcessRuntime:
    """Everything one process runs: built from the frozen graph and the dataflow's handles."""

    def __init__(
        self,
        graph: FrozenGraph,
        dataflow: Dataflow,
        workers: int = 1,
        process_index: int = 0,
        processes: int = 1,
        stall_log_after: float | None = 10.0,
        transport: Transport | None = None,
        codec: Codec | None = None,
        checkpoints: Checkpoints | None = None,
        resume: CheckpointInfo | None = None,
        replay: ReplayPlan | None = None,
        console: ConsoleSettings | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a process needs at least one worker")
        if transport is not None:
            process_index, processes = transport.process_index, transport.processes
        self.started_at = _time.perf_counter()
        self.graph = graph
        self.process_index = process_index
        self.processes = processes
        self.tracker = ProgressTracker(graph.reachability)
        self.pending: ChangeBatch = ChangeBatch()
        """This process's progress changes since the tracker last took them."""
        self.failure: BaseException | None = None
        self.stall_log_after = stall_log_after
        self.driver: Driver | None = None
        """Set by a synchronous computation handle: runs the event loop until a predicate holds."""
        self._seen_version = -1
        self._idle = False
        self._idle_since = 0.0
        """When the scheduler last went idle (perf_counter): what the stall watcher counts from."""
        self._wakeups = 0
        self._steps = 0
        self._wake = asyncio.Event()

        start = 0 if resume is None else resume.epoch + 1
        self.fence = CheckpointFence.for_policy(checkpoints, start)
        self.transport = transport
        self.link: ClusterLink | None = None
        if transport is not None and processes > 1:
            self.link = ClusterLink(self, self.tracker, transport, codec or Codec())
        self.scheduler = Scheduler(
            graph,
            workers,
            process_index,
            processes,
            self.pending,
            self.tracker,
            self.fence,
            self.link,
            self.record_failure,
            self.wake,
        )
        self.waiters = Waiters(self.tracker)
        self.bindings = Bindings(self, graph, self.scheduler, self.tracker, self.pending, start)
        dataflow.bind(self.bindings)
        # Every process starts from the same view: each input of each worker holds epoch 0
        # (or the epoch after the checkpoint it resumes from).
        peers = self.scheduler.peers
        initial = {(_from_flat((start,)), s.index): peers for s in graph.stages if s.kind == StageKind.INPUT}
        if initial:
            self.tracker.update(initial)
        if self.link is not None:
            self.link.start()  # only now: remote progress must land on the initial state
        self.recovery: Recovery | None = None
        if checkpoints is not None:
            if replay is None:
                names = [b.name for b in self.bindings.inputs]
                replay = plan_replay(checkpoints, names, process_index, processes, start)
            self.recovery = Recovery(checkpoints, resume, replay, self.fence, self.scheduler, self.bindings, self.link)
            self.recovery.restore()
        self.diagnostics = Diagnostics(
            graph, self.tracker, self.scheduler, self.waiters, self.link, self.recovery, self.started_at
        )
        self.console: ConsoleServer | None = None
        self.console_url: str | None = None
        self.sampler: Sampler | None = None
        self.console_linger = 0.0 if console is None else console.linger
        if console is not None:
            self._start_console(console)

    def _start_console(self, settings: ConsoleSettings) -> None:
        """Sample this process for the console; process 0 serves it, the others send it their
        samples (the one gather hook: everything else reads the parts' counters)."""
        if self.process_index == 0:
            try:
                from .._console import ConsoleServer
            except ImportError as exc:
                raise TimelyError(
                    f"the console needs aiohttp and prometheus_client ({exc}): pip install 'timely-dataflow[console]'"
                ) from exc
            server = self.console = ConsoleServer(
                self.graph, self.processes, settings.host, settings.port, settings.token
            )
            self.console_url = settings.url(server.start())
            if self.link is not None:
                self.link.on_sample = server.publish

            def publish(sample: dict[str, Any]) -> None:
                server.publish(0, sample)

        elif self.link is not None:
            publish = self.link.send_sample
        else:
            return
        self.sampler = Sampler(
            self.graph,
            self.tracker,
            self.scheduler,
            self.bindings,
            self.diagnostics,
            self.link,
            self.idle_since,
            publish,
        )

    # One time slice --------------------------------------------------------------------------------
    def step(self) -> bool:
        """Deliver messages and notifications for one time slice. True if work remains."""
        deadline = _time.perf_counter() + SLICE_SECONDS
        self._steps += 1
        tracker = self.tracker
        scheduler = self.scheduler
        fence = self.fence
        pending = self.pending
        link = self.link
        arrived = None if link is None else link.arrived
        while True:
            did = scheduler.drain(deadline)
            if pending:
                if link is not None:
                    link.publish(pending)  # this process's own changes only
                if arrived:
                    pending.merge(arrived)  # peers' batches: one tracker update for all
                tracker.update(pending)
                pending.clear()
                did = True
            elif arrived:
                tracker.update(arrived)
            if arrived:
                arrived.clear()
            if tracker.version != self._seen_version:
                self._seen_version = tracker.version
                scheduler.frontier_moved(tracker.take_changed_locations())
                self._frontier_changed()
            if scheduler.deliver_notifications():
                did = True
            if (
                fence.due
                and self.recovery is not None
                and scheduler.quiet_until(fence.epoch)  # type: ignore[arg-type]
                and self.recovery.at_fence()
            ):
                fence.observe(tracker.frontier)  # the input may already be past the next fence
                scheduler.recheck_notifications()  # those the fence held back
                did = True
            if not did:
                return False
            if _time.perf_counter() > deadline:
                # Work remains only if a further pass would find some: a slice that ran out of
                # time on its last piece of work is out of work, and says so, so that its
                # progress goes with the records it sent rather than in a frame of its own
                # after an empty step.
                return bool(pending or arrived or scheduler.has_work() or (fence.due and self.recovery is not None))

    def _frontier_changed(self) -> None:
        self.bindings.frontier_changed()
        if self.fence.epoch is not None:  # the tracker's frontier is built on demand
            self.fence.observe(self.tracker.frontier)
        self.waiters.frontier_changed()
        if self.sampler is not None:
            self.sampler.frontier_changed()

    # What the parts and the handles ask of the process ------------------------------------------------
    @property
    def complete(self) -> bool:
        """Nothing is active anywhere: every input is closed and all work is done."""
        return (
            self.tracker.is_empty()
            and not self.pending
            and not self.scheduler.in_flight
            and (self.link is None or not (self.link.pending_output() or self.link.arrived))
        )

    def wake(self) -> None:
        self._wake.set()

    def record_failure(self, err: BaseException) -> None:
        """Fail the computation with ``err``, in place of any earlier failure (a callback's own
        error, raised out of the scheduler as well)."""
        self.failure = err

    def fail(self, err: BaseException) -> None:
        """Fail the computation with ``err`` unless it has failed already, and wake the scheduler
        to stop it."""
        if self.failure is None:
            self.failure = err
            record_cause(err)
        self.wake()

    def congested(self) -> bool:
        """Some peer is not taking what this process sends as fast as it is sent."""
        return self.transport is not None and self.transport.congested()

    def backlog(self) -> int:
        """Messages waiting in this process: queued, behind busy vertices, behind the fence."""
        return self.scheduler.backlog()

    def queued_records(self) -> int:
        return self.scheduler.queued_records()

    def ready(self) -> bool:
        """Below the limits at which producers should wait: few queued messages, no congestion."""
        return self.backlog() <= INPUT_BACKLOG // 4 and not self.congested()

    def deliver_remote(self, connector: int, worker: int, time: Timestamp, records: list[Any]) -> None:
        self.scheduler.deliver_remote(connector, worker, time, records)

    def checkpoint_decided(self, epoch: int, take: bool) -> None:
        if self.recovery is not None:
            self.recovery.decided(epoch, take)

    def wait_passed(self, location: int, time: Timestamp) -> asyncio.Future[None]:
        return self.waiters.passed(location, time)

    def when(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        """A future that resolves after the first scheduler step at which ``predicate()`` holds."""
        return self.waiters.when(predicate)

    def close_inputs(self) -> None:
        self.bindings.close_inputs()

    def explain(self) -> str:
        """Which pointstamps hold back each pending notification and probe wait."""
        return self.diagnostics.explain()

    def statistics(self) -> ComputationStatistics:
        return dataclasses.replace(self.diagnostics.statistics(), scheduler_steps=self._steps, wakeups=self._wakeups)

    def vertices(self, stage_name: str) -> list[Vertex]:
        """This process's instances of a stage, by its full name."""
        return self.scheduler.vertices(stage_name)

    def idle_since(self) -> float | None:
        """When the scheduler went idle, waiting for work (perf_counter); None while it is not."""
        return self._idle_since if self._idle else None

    # Running ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until the computation completes; raise its failure if it fails.

        Async callbacks run in an anyio task group, so that a failure anywhere cancels them
        all and nothing is left running when this returns.
        """
        try:
            with _fewer_collections():
                await self._run()
            if self.recovery is not None:
                self.recovery.completed()
            if self.console is not None and self.console_linger > 0:
                # the final samples are in (each process sent its last before its goodbye)
                log.info("complete; the console stays for %g s", self.console_linger)
                await asyncio.sleep(self.console_linger)
        finally:
            if self.recovery is not None:
                self.recovery.close()
            if self.console is not None:
                self.console.stop()

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            self.scheduler.start(tg)
            if self.stall_log_after is not None:
                tg.start_soon(self.diagnostics.watch_stalls, self.stall_log_after, self.idle_since)
            if self.sampler is not None:
                # profile from the first step on: a long first callback would run before the
                # sampler's task did, and go uncounted
                self.sampler.profiler.start()
                self.sampler.publish_now()
                tg.start_soon(self.sampler.run)
            try:
                await self._schedule()
                if self.sampler is not None and self.failure is None:
                    self.sampler.publish_now()  # before the goodbye: the console's final state
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
                    await self._wait_byes(link)
                if self.failure is not None:
                    link.send_error(self.failure)
            # failed: the ERROR frame is best effort (peers also watch heartbeats and resets), so
            # a stopped peer's full socket holds this process for a second, not for five
            flush = 5.0 if self.failure is None else FAILED_FLUSH_SECONDS
            with anyio.move_on_after(SHUTDOWN_SECONDS):
                await self.transport.close(flush)

    async def _wait_byes(self, link: ClusterLink) -> None:
        """Wait for every peer's goodbye, for as long as it takes, unless the computation fails
        meanwhile (a peer lost or silent, an ERROR frame, the program's deadline). Never end as
        complete without them: a peer whose progress made this process's view empty too early
        (a negative delta it should not have sent) would otherwise let it exit 0 alone."""
        waited = 0.0
        while not await link.wait_byes(BYE_POLL_SECONDS):
            if self.failure is not None:
                return
            waited += BYE_POLL_SECONDS
            if waited % SHUTDOWN_SECONDS < BYE_POLL_SECONDS:
                missing = sorted(set(link.peers) - link.byes)
                log.warning(
                    "process %d: complete, still waiting for the goodbye of processes %s (%.0f s)",
                    self.process_index,
                    missing,
                    waited,
                )

    async def _schedule(self) -> None:
        waiters = self.waiters
        link = self.link
        polled = False  # the event loop ran once since this process ran out of work with progress held
        while True:
            if self.failure is not None:
                return
            more = self.step()
            if link is not None:
                # Busy, the progress of this slice may wait for the next. Out of work, it goes
                # with the records this flush sends, if any (the peer wakes for them anyway);
                # while records are being exchanged, it waits for one pass of the event loop,
                # which takes in what peers sent meanwhile (more records, often: then one
                # round tells them of both); otherwise it goes now (a loop that only
                # coordinates pays no extra pass). Never longer, unless it only retires what
                # something else still holds back (``settle``): a held batch may be what a
                # peer waits for, and that one is not yet. The process then sleeps until a
                # frame, or the hold's time limit, wakes it.
                link.flush(
                    hold=more or (link.records_since_release and not polled and not link.sending_data),
                    settle=not more,
                )
                link.maybe_resume_reading()
            if waiters.conditions:
                waiters.check_conditions()
            if self.complete:
                return
            if more or (link is not None and link.holding and not link.waiting):
                polled = not more
                await asyncio.sleep(0)
                continue
            polled = False
            self._wake.clear()
            if self.failure is None and not self.scheduler.has_queued() and not self.pending:
                self._idle = True
                self._idle_since = _time.perf_counter()
                await self._wake.wait()
                self._idle = False
                self._wakeups += 1

    def run_inline(self, done: Callable[[], bool], seconds: float = INLINE_SECONDS) -> bool:
        """Run the scheduler on the caller's stack, not as the event loop's task, until
        ``done()``, until it has nothing left to do, or for ``seconds``; whether ``done()``.

        A synchronous handle's wait otherwise starts and stops the event loop on every call
        (with uvloop, a socket pair for signals each time: about 100 µs of a wait that has
        nothing to run, against 5 µs here), and yields to the loop between scheduler steps.
        A process with peers or a console must not skip the loop (it carries their frames and
        samples), nor one with ``async def`` callbacks (they run as the loop's tasks). What is
        left (waiting for time or I/O) goes to the loop, whose scheduler looks again when it
        next runs. A callback's error is recorded as the computation's failure, as the loop's
        task records it, and propagates."""
        if (
            self.transport is not None
            or self.sampler is not None
            or self.failure is not None
            or not self.scheduler.synchronous
        ):
            return done()
        deadline = _time.perf_counter() + seconds
        stepped = False
        try:
            while not done():
                stepped = True
                more = self.step()
                if self.waiters.conditions:
                    self.waiters.check_conditions()
                if not more or _time.perf_counter() > deadline:
                    break
        except Exception as exc:
            if self.failure is None:  # as the loop's task records it (`_run`)
                self.failure = exc
            raise
        finally:
            if stepped:
                self.wake()
        return done()

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
