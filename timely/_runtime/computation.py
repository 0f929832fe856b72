"""Running a dataflow: from ordinary code (`execute`) or from async code (`execute_async`).

Both build the graph by calling ``build(scope)`` once in this process (SPMD: every process
runs the same build), freeze it, start a `ProcessRuntime` and hand back a computation
handle with whatever ``build`` returned (typically its inputs and probes).

From synchronous code the event loop runs in the calling thread, but only while timely
is called: a wait, an input that is sent more than it can queue, `Computation.explain`, or
leaving the ``with`` block (which closes the inputs and runs the computation to its end).
There is no background thread and no locking; parallelism comes from processes.

Why over 400 lines in one module: the synchronous and the asynchronous handles and their two
entry points share one setup (`_Setup`, `_Execution`) and must keep the same semantics (closing,
failing, timing out); side by side, a difference between them shows.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
import time as _time
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from ..checkpoint import CheckpointError, CheckpointInfo, Checkpoints, latest_checkpoint
from ..checkpoint._store import history_lost
from ..dataflow import Dataflow, Probe, Scope
from ..errors import ComputationFailed, LibraryError, StalledError, TimelyError
from ..graph import FrozenGraph
from ..net.codec import Codec
from ..net.transport import Transport
from ..timestamp import Timestamp, _from_flat
from ..vertex import Vertex
from .config import (
    ENV_LAUNCHER,
    ENV_WORKERS,
    ClusterConfig,
    ClusterConfigError,
    ConsoleSettings,
    checkpoints_from_env,
    cluster_from_env,
    console_from,
    console_from_env,
    encryption_for,
    peer_timeout_from_env,
    pickle_from_env,
)
from .diagnostics import show_time
from .process import INLINE_SECONDS, SHUTDOWN_SECONDS, ProcessRuntime
from .recovery import ReplayPlan, plan_replay
from .report import install as install_failure_report
from .statistics import ComputationStatistics

__all__ = ["execute", "execute_async", "Computation", "AsyncComputation"]

T = TypeVar("T")

CATCH_UP_SECONDS = 1.0
"""At most how long `Computation.explain` runs the computation, to take in what happened while
the program was away from timely, before it answers."""


_main_loop: asyncio.AbstractEventLoop | None = None
"""The main thread's event loop for synchronous computations, made by the first and kept for
the next ones until the interpreter exits (`_event_loop` says why)."""
_main_loop_taken = False
"""Whether a synchronous computation runs on `_main_loop` now: one started inside another's
block gets a loop of its own, so that its failed start, which closes its loop, cannot close
the loop the outer computation still runs on."""


def _event_loop() -> asyncio.AbstractEventLoop:
    """The event loop a synchronous computation runs on: in the main thread one loop, kept open
    from one computation to the next; in another thread a fresh one, closed at the end.

    Closing a uvloop loop tears down libuv's io_uring ring, and the kernel finishes that later
    by interrupting this thread: a blocking write to a full pipe (a worker's stdout, read by a
    launcher whose own output is slow) then comes back short, and an unbuffered text stream
    drops the rest of the line (measured: 64 KiB of a 1 MiB line arrived). Keeping the loop
    open avoids the teardown, instead of replacing the program's ``sys.stdout`` with a stream
    that retries short writes (what timely once did); it also saves making a loop per run."""
    global _main_loop, _main_loop_taken
    if threading.current_thread() is not threading.main_thread() or _main_loop_taken:
        return _new_event_loop()
    if _main_loop is None or _main_loop.is_closed():
        _main_loop = _new_event_loop()
    _main_loop_taken = True
    return _main_loop


def _done_with(loop: asyncio.AbstractEventLoop) -> None:
    """A synchronous computation is over: close its loop unless it is the main thread's."""
    global _main_loop_taken
    if loop is _main_loop:
        _main_loop_taken = False
        return
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _failed_start(loop: asyncio.AbstractEventLoop) -> None:
    """A synchronous computation failed to start: close its loop, and with it what the failed
    start left on it (the main thread's next computation makes a new one)."""
    global _main_loop_taken
    loop.close()
    if loop is _main_loop:
        _main_loop_taken = False


def _close_main_loop() -> None:
    if _main_loop is not None and not _main_loop.is_closed() and not _main_loop.is_running():
        _main_loop.run_until_complete(_main_loop.shutdown_asyncgens())
        _main_loop.close()


atexit.register(_close_main_loop)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


def _check_workers_agree(workers: int | None, cluster: ClusterConfig | None) -> None:
    """Refuse a program whose ``execute(..., workers=)`` contradicts ``timely run --workers``:
    one of them would be silently ignored, and the user would not know which."""
    if workers is None or cluster is None or ENV_WORKERS not in os.environ or workers == cluster.workers:
        return
    raise ClusterConfigError(
        f"timely run --workers {cluster.workers} ({ENV_WORKERS}) but the program calls "
        f"execute(..., workers={workers}): give the worker count in one place (leave --workers out, "
        "or the workers= argument)"
    )


class _Setup(Generic[T]):
    """Where this process runs: alone, on a given transport, or in the cluster the environment
    describes (set by ``timely run`` or the Spark integration); builds the graph accordingly."""

    def __init__(
        self,
        build: Callable[[Scope], T],
        workers: int | None,
        transport: Transport | None,
        cluster: ClusterConfig | None,
        checkpoints: Checkpoints | Literal[False] | None = None,
    ) -> None:
        if transport is None and cluster is None:
            cluster = cluster_from_env()
            _check_workers_agree(workers, cluster)
        if workers is None:  # before a one-process cluster is dropped: its worker count stands
            workers = cluster.workers if cluster is not None else 1
        if cluster is not None and cluster.processes == 1:
            cluster = None
        self.cluster = cluster
        self.transport = transport
        self.workers = workers
        if transport is not None:
            index, processes = transport.process_index, transport.processes
        elif cluster is not None:
            index, processes = cluster.process_index, cluster.processes
        else:
            index, processes = 0, 1
        self.dataflow, self.result, self.graph = Dataflow.build(build, index, processes, workers)
        if checkpoints is None and (cluster is not None or transport is None):
            checkpoints = checkpoints_from_env()
        self.checkpoints = checkpoints or None
        self.encrypt = False
        """Whether the cluster's connections are sealed (`config.encryption_for` decides)."""
        self.resume: CheckpointInfo | None = None
        self.replay: ReplayPlan | None = None
        if self.checkpoints is not None:
            checkpoints = self.checkpoints
            # read before joining the other processes: no one writes until all have joined
            self.resume = latest_checkpoint(checkpoints.directory, self.graph.fingerprint())
            if self.resume is None and history_lost(checkpoints.path):
                raise CheckpointError(
                    f"{checkpoints.path} holds no usable checkpoint (see the log for why each was skipped), and "
                    "the input logs of the epochs before the pruned checkpoints are gone: the computation cannot "
                    "be rebuilt from this directory; keep more checkpoints (keep=) or start over in a fresh one"
                )
            start = 0 if self.resume is None else self.resume.epoch + 1
            names = [i.name for i in self.dataflow.inputs]
            self.replay = plan_replay(checkpoints, names, index, processes, start)

    def fingerprint(self) -> str:
        """The graph's fingerprint and the checkpoint resumed from: processes that would resume
        from different checkpoints refuse each other."""
        if self.replay is None:
            return self.graph.fingerprint()
        epoch = -1 if self.resume is None else self.resume.epoch
        inputs = ",".join(f"{r.resume_at}:{r.closed_at}" for r in self.replay.values())
        return f"{self.graph.fingerprint()}@{epoch}/{inputs}"

    async def join(self) -> Transport | None:
        """Connect to every peer (authenticated, with this graph's fingerprint)."""
        if self.transport is None and self.cluster is not None:
            from ..net.tcp import TcpTransport

            c = self.cluster
            self.transport = await TcpTransport.join(
                c.process_index,
                c.addresses,
                c.secret,
                self.fingerprint(),
                peer_timeout=peer_timeout_from_env(),
                encrypt=self.encrypt,
            )
        return self.transport


class _Handle:
    """What the sync and async computation handles share."""

    runtime: ProcessRuntime
    _deadline: float | None

    @property
    def graph(self) -> FrozenGraph:
        """The frozen logical graph; ``graph.to_dot()`` and ``graph.to_mermaid()`` draw it."""
        return self.runtime.graph

    @property
    def complete(self) -> bool:
        return self.runtime.complete

    @property
    def process_index(self) -> int:
        """Which process this is (0 alone; under ``timely run -n N``, 0 to N - 1)."""
        return self.runtime.process_index

    @property
    def processes(self) -> int:
        """How many processes run this computation (every one runs the same program)."""
        return self.runtime.processes

    def explain(self) -> str:
        """Which pointstamps hold back each pending notification and probe wait."""
        return self.runtime.explain()

    @property
    def console_url(self) -> str | None:
        """Where the live console of this computation is served (with its token, if it needs
        one); None without a console, and in every process but 0."""
        return self.runtime.console_url

    def statistics(self) -> ComputationStatistics:
        return self.runtime.statistics()

    def vertices(self, stage: str) -> list[Vertex]:
        """This process's vertex instances of the stage with that full name."""
        return self.runtime.vertices(stage)

    def _remaining(self, timeout: float | None) -> float | None:
        limits = [
            x
            for x in (timeout, None if self._deadline is None else self._deadline - _time.monotonic())
            if x is not None
        ]
        return max(0.0, min(limits)) if limits else None

    def _check_failed(self) -> None:
        if self.runtime.failure is not None:
            raise ComputationFailed("the computation has failed") from self.runtime.failure


class Computation(_Handle):
    """A running computation driven from synchronous code."""

    def __init__(self, runtime: ProcessRuntime, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        self.runtime = runtime
        self._loop = loop
        self._deadline = deadline
        self._task: asyncio.Task[None] = loop.create_task(runtime.run())
        runtime.driver = self._drive

    def wait_passed(self, probe: Probe, time: Timestamp | int, timeout: float | None = None) -> None:
        """Run the computation until nothing at or before ``time`` can reach ``probe`` (refused at
        once, without a ``timeout``, when an input this program holds open keeps it back: see `run`)."""
        binding = self.runtime.bindings.probe(probe)
        t = binding.time(time)
        has_passed, location = self.runtime.waiters.has_passed, binding.location
        if self._inline(lambda: has_passed(location, t), timeout):
            return
        if timeout is None:
            self._refuse_a_wait_on_own_inputs(f"probe {probe.name!r} cannot pass {show_time(t)}", (t, location))

        async def wait() -> None:
            await self.runtime.wait_passed(location, t)

        self._run(wait(), timeout, f"probe {probe.name!r} did not pass {show_time(t)}")

    def run(self, timeout: float | None = None) -> None:
        """Run until the computation is complete (close the inputs first).

        Without a ``timeout`` of its own, a wait (`run`, `wait_passed`) that an input this
        program holds open keeps from ever ending raises `StalledError` at once: only the
        program can advance or close the input, and it is blocked in the wait. With one, the
        wait runs the computation that long (a way to let it work while inputs stay open)."""
        self._check_failed()
        if not self._task.done() and timeout is None:
            self._refuse_a_wait_on_own_inputs("the computation cannot complete", None)
        self._run(None, timeout, "the computation did not complete")

    def _refuse_a_wait_on_own_inputs(self, what: str, target: tuple[Timestamp, int] | None) -> None:
        """Raise `StalledError` at once when an input this process holds open keeps the wait
        from ever ending: only this program advances or closes it, and it is blocked in the wait.
        ``target``: the pointstamp a probe waits to pass (None: completion, which needs every
        input closed)."""
        graph = self.runtime.graph
        held = []
        for b in self.runtime.bindings.inputs:
            if b.closed:
                continue
            at = (_from_flat((b.epoch,)), graph.stage_location(b.stage))
            if target is None or graph.reachability.could_result_in(at, target):
                held.append(f"input {b.name!r} (at epoch {b.epoch})")
        if held:
            raise StalledError(
                f"{what}: this program holds {', '.join(held)} open, and only it can advance or close "
                "it, which it cannot do while it waits (advance_to past the time or close the input "
                "first; leaving the with block closes every input)",
                self.runtime.explain(),
            )

    def explain(self) -> str:
        """What holds progress back now.

        The event loop runs only inside timely calls, so after the program slept, did I/O, or
        advanced and closed inputs, the runtime has not yet taken that in (nor frames other
        processes sent meanwhile). This first runs the computation until its scheduler is idle,
        for at most `CATCH_UP_SECONDS`, and then answers about the present.
        """
        if not self._task.done() and not self._loop.is_running():
            settled = self._loop.create_task(self.runtime.settled())
            self._loop.run_until_complete(
                asyncio.wait({self._task, settled}, timeout=CATCH_UP_SECONDS, return_when="FIRST_COMPLETED")
            )
            if not settled.done():
                settled.cancel()
                self._loop.run_until_complete(asyncio.wait({settled}))
        failure = self.runtime.failure
        explanation = self.runtime.explain()
        return explanation if failure is None else f"the computation failed: {failure}\n{explanation}"

    def _drive(
        self, predicate: Callable[[], bool], timeout: float | None, passing: tuple[Probe, Timestamp] | None
    ) -> None:
        if self._inline(predicate, timeout):
            return
        if passing is not None and timeout is None:
            probe, t = passing
            location = self.runtime.bindings.probe(probe).location
            self._refuse_a_wait_on_own_inputs(
                f"a throttled input waits for probe {probe.name!r} to pass {show_time(t)}", (t, location)
            )

        async def wait() -> None:
            await self.runtime.when(predicate)

        self._run(wait(), timeout, "the computation did not drain its inputs")

    def _inline(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Whether ``done()`` holds after the scheduler ran on this stack
        (`ProcessRuntime.run_inline`), for no longer than the wait's ``timeout`` allows; a
        callback's error ends the runtime's task as it would have ended inside the loop, and
        is raised as `_run` raises it."""
        self._check_failed()
        if self._loop.is_running() or self._task.done():
            return False
        remaining = self._remaining(timeout)
        try:
            return self.runtime.run_inline(
                done, INLINE_SECONDS if remaining is None else min(INLINE_SECONDS, remaining)
            )
        except Exception as exc:
            failed = exc
        self._loop.run_until_complete(asyncio.wait({self._task}))  # it ends on the recorded failure
        raise self._task.exception() or failed

    def _run(self, coro: Any, timeout: float | None, what: str) -> None:
        self._check_failed()
        if self._loop.is_running():
            raise TimelyError("a synchronous timely call was made inside a running event loop; use execute_async")
        waits: set[asyncio.Future[Any]] = {self._task}
        target = None
        if coro is not None:
            target = self._loop.create_task(coro)
            waits.add(target)
        remaining = self._remaining(timeout)
        done, _ = self._loop.run_until_complete(asyncio.wait(waits, timeout=remaining, return_when="FIRST_COMPLETED"))
        if self._task in done:
            if target is not None:
                target.cancel()
            exc = self._task.exception()
            if exc is not None:
                raise exc
            return
        if target is None or target not in done:
            explanation = self.runtime.explain()  # before the abandoned wait is cancelled
            if target is not None:
                target.cancel()
            raise StalledError(f"{what} within {remaining:.1f} s", explanation)
        self._check_failed()  # what was awaited happened, but in the step that failed

    def _close(self, error: BaseException | None) -> None:
        loop = self._loop
        try:
            if error is None and not self._task.done():
                self.runtime.close_inputs()
                try:
                    self._run(None, None, "the computation did not complete")
                except StalledError as stalled:
                    # Abandoned: stop, and let the runtime tell the other processes why.
                    self.runtime.fail(stalled)
                    loop.run_until_complete(asyncio.wait({self._task}, timeout=SHUTDOWN_SECONDS))
                    raise
            elif error is not None and not self._task.done():
                # Stop, and let the runtime tell the other processes why before it goes.
                self.runtime.fail(_body_failed(self.runtime, error))
                loop.run_until_complete(asyncio.wait({self._task}, timeout=SHUTDOWN_SECONDS))
            elif error is None and not self._task.cancelled() and self._task.exception() is not None:
                raise self._task.exception()  # type: ignore[misc]  # failed while the program was away
        finally:
            if not self._task.done():
                self._task.cancel()
                try:
                    loop.run_until_complete(self._task)
                except BaseException:
                    pass
            elif not self._task.cancelled():
                self._task.exception()  # retrieved: the caller has its own error to see
            _done_with(loop)


def _raise_the_failure(runtime: ProcessRuntime, exc: BaseException | None) -> None:
    """Raise the computation's failure itself when the block ended in a `ComputationFailed`
    (an input used after the failure): which of the two a program saw depended on whether the
    failure landed during a wait or between two sends, so processes of one failed computation
    reported different errors."""
    failure = runtime.failure
    if isinstance(exc, ComputationFailed) and failure is not None and exc.__cause__ is failure:
        raise failure


def _body_failed(runtime: ProcessRuntime, error: BaseException) -> TimelyError:
    if isinstance(error, TimelyError) and not isinstance(error, LibraryError):
        return error
    err = TimelyError(
        f"process {runtime.process_index}: the program raised {type(error).__name__} while the computation ran: {error}"
    )
    err.__cause__ = error
    return err


class _Execution(Generic[T]):
    """What `execute` and `execute_async` share: their settings, and building the runtime.

    ``workers`` per process (default: the cluster's setting, else 1); ``timeout`` bounds the
    whole run; ``stall_log_after`` seconds without progress log what holds it back;
    ``transport`` or ``cluster`` place this process in a computation of several (by default
    the environment set by ``timely run`` decides). ``checkpoints`` (a `timely.Checkpoints`)
    makes it fault tolerant: it checkpoints, logs its inputs, and resumes from the newest
    complete checkpoint in the directory (by default ``timely run --checkpoint-dir`` decides;
    ``False``: never, whatever the environment says). ``pickle=True`` lets records that the
    codec cannot otherwise encode (types without `timely.register_codec`) cross processes
    pickled; unpickling runs code chosen by the sender, so enable it only on a trusted cluster,
    in every process (by default ``timely run --pickle`` decides). ``encrypt=True`` seals every
    connection to the other processes (confidential, tamper-proof: docs/network.md); by default
    ``timely run --encrypt``/``--no-encrypt`` decides, else connections are sealed when any
    process is off loopback or ``pickle`` is on (pickle with ``encrypt=False`` is refused).
    ``console`` serves a live
    page of the running computation from process 0 (docs/console.md): a port on loopback, or
    ``"host:port"`` (any other address than loopback asks for a token in the URL, which
    ``console_url`` and the launcher give); 0 for any free port; by default ``timely run
    --console`` decides; ``False``: never.
    """

    def __init__(
        self,
        build: Callable[[Scope], T],
        *,
        workers: int | None = None,
        timeout: float | None = None,
        stall_log_after: float | None = 10.0,
        transport: Transport | None = None,
        cluster: ClusterConfig | None = None,
        checkpoints: Checkpoints | Literal[False] | None = None,
        pickle: bool | None = None,
        console: int | str | Literal[False] | None = None,
        encrypt: bool | None = None,
    ) -> None:
        self._console = console
        self._encrypt = encrypt
        self._build = build
        self._pickle = pickle_from_env() if pickle is None else pickle
        self._checkpoints = checkpoints
        self._workers = workers
        self._timeout = timeout
        self._stall = stall_log_after
        self._transport = transport
        self._cluster = cluster

    def _prepare(self) -> tuple[_Setup[T], float | None]:
        """Build the graph (deadline counted from here). A failure that escapes the program
        will print as one block of the user's frames (`timely._runtime.report`)."""
        install_failure_report()
        deadline = None if self._timeout is None else _time.monotonic() + self._timeout
        setup = _Setup(self._build, self._workers, self._transport, self._cluster, self._checkpoints)
        setup.encrypt = encryption_for(setup.cluster, self._encrypt, self._pickle)
        return setup, deadline

    def _console_settings(self, setup: _Setup[T]) -> ConsoleSettings | None:
        secret = setup.cluster.secret if setup.cluster is not None else None
        if self._console is None:
            return console_from_env(secret)
        if self._console is False:
            return None
        return console_from(self._console, secret)

    def _runtime(self, setup: _Setup[T], transport: Transport | None) -> ProcessRuntime:
        console = self._console_settings(setup)
        runtime = ProcessRuntime(
            setup.graph,
            setup.dataflow,
            workers=setup.workers,
            stall_log_after=self._stall,
            transport=transport,
            codec=Codec(allow_pickle=self._pickle),
            checkpoints=setup.checkpoints,
            resume=setup.resume,
            replay=setup.replay,
            console=console,
        )
        # `timely run --console` prints the address itself, unless it left the port to process 0
        if runtime.console_url is not None and (os.environ.get(ENV_LAUNCHER) is None or console.port == 0):  # type: ignore[union-attr]
            print(f"timely: console at {runtime.console_url}", file=sys.stderr, flush=True)
        return runtime


class execute(_Execution[T]):
    """Run ``build`` as a computation in this process, from synchronous code::

        with timely.execute(build, workers=2) as (comp, handles):
            ...

    Leaving the block closes every input and runs the computation to completion; if the
    block raises, the computation is cancelled. ``timeout`` bounds the whole run: past it a
    wait raises `StalledError` saying what holds progress back. After ``stall_log_after``
    seconds without progress the same explanation is logged as a warning.
    """

    _comp: Computation | None = None

    def __enter__(self) -> tuple[Computation, T]:
        setup, deadline = self._prepare()
        loop = _event_loop()
        try:
            asyncio.set_event_loop(loop)
            runtime = self._runtime(setup, loop.run_until_complete(setup.join()))
            self._comp = Computation(runtime, loop, deadline)
        except BaseException:
            _failed_start(loop)
            raise
        if runtime.recovery is not None:
            try:
                runtime.recovery.replay()
            except BaseException as exc:
                self._comp._close(exc)
                raise
        return self._comp, setup.result

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._comp is not None
        self._comp._close(exc if exc_type is not None else None)
        _raise_the_failure(self._comp.runtime, exc)


class AsyncComputation(_Handle):
    """A running computation driven from async code."""

    def __init__(self, runtime: ProcessRuntime, deadline: float | None) -> None:
        self.runtime = runtime
        self._deadline = deadline
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(runtime.run())

    async def wait_passed(self, probe: Probe, time: Timestamp | int, timeout: float | None = None) -> None:
        """Wait until nothing at or before ``time`` can reach ``probe``."""
        binding = self.runtime.bindings.probe(probe)
        t = binding.time(time)
        future = self.runtime.wait_passed(binding.location, t)
        await self._wait(future, timeout, f"probe {probe.name!r} did not pass {show_time(t)}")

    async def run(self, timeout: float | None = None) -> None:
        """Wait until the computation is complete (close the inputs first)."""
        await self._wait(None, timeout, "the computation did not complete")

    async def _wait(self, future: asyncio.Future[Any] | None, timeout: float | None, what: str) -> None:
        self._check_failed()
        waits: set[asyncio.Future[Any]] = {self._task} if future is None else {self._task, future}
        remaining = self._remaining(timeout)
        done, _ = await asyncio.wait(waits, timeout=remaining, return_when="FIRST_COMPLETED")
        if self._task in done:
            exc = self._task.exception()
            if exc is not None:
                raise exc
            return
        if future is None or future not in done:
            explanation = self.explain()
            if future is not None:
                future.cancel()  # abandoned: it no longer holds anyone up in explain()
            raise StalledError(f"{what} within {remaining:.1f} s", explanation)
        self._check_failed()  # what was awaited happened, but in the step that failed

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until this process's queues and outgoing buffers are below their limits: the
        backpressure point for async producers (synchronous `Input.send` waits by itself)."""
        future = self.runtime.when(self.runtime.ready)
        await self._wait(future, timeout, "the computation did not drain its queues")

    def close_inputs(self) -> None:
        """Close every input of this process (leaving ``async with`` does this too)."""
        self.runtime.close_inputs()

    async def _close(self, error: BaseException | None) -> None:
        try:
            if error is None and not self._task.done():
                self.close_inputs()
                try:
                    await self._wait(None, None, "the computation did not complete")
                except StalledError as stalled:
                    self.runtime.fail(stalled)
                    await asyncio.wait({self._task}, timeout=SHUTDOWN_SECONDS)
                    raise
            elif error is not None and not self._task.done():
                self.runtime.fail(_body_failed(self.runtime, error))
                await asyncio.wait({self._task}, timeout=SHUTDOWN_SECONDS)
            elif error is None and not self._task.cancelled() and self._task.exception() is not None:
                raise self._task.exception()  # type: ignore[misc]  # failed while the program was away
        finally:
            if not self._task.done():
                self._task.cancel()
                try:
                    await self._task
                except BaseException:
                    pass
            elif not self._task.cancelled():
                self._task.exception()


class execute_async(_Execution[T]):
    """Run ``build`` as a computation on the running event loop::

    async with timely.execute_async(build) as (comp, handles):
        ...
        await comp.wait_passed(probe, 3)
    """

    _comp: AsyncComputation | None = None

    async def __aenter__(self) -> tuple[AsyncComputation, T]:
        setup, deadline = self._prepare()
        self._comp = AsyncComputation(self._runtime(setup, await setup.join()), deadline)
        if self._comp.runtime.recovery is not None:
            try:
                self._comp.runtime.recovery.replay()
            except BaseException as exc:
                await self._comp._close(exc)
                raise
        return self._comp, setup.result

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._comp is not None
        await self._comp._close(exc if exc_type is not None else None)
        _raise_the_failure(self._comp.runtime, exc)
