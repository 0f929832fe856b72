"""The supervisor of ``timely run``: it starts the processes of a run, passes their output on,
watches them, and stops them all when one fails or the launcher is interrupted (or, with
restarts, starts them all again).

Every child's output is streamed line by line with a ``[p{i}] `` prefix (stderr to stderr).
When one fails, the others get a grace period to stop by themselves (the runtime makes peers
fail quickly), then SIGTERM, then SIGKILL; the run's status is the first failure's (128+signal
for a signal), with a one-line summary. Ctrl-C or SIGTERM to the launcher is forwarded to every
process. On Linux each child dies with the launcher, even if the launcher is SIGKILLed.

`timely.cli` parses the command line and builds the children (their environment says where
each stands in the cluster); this module only runs them.

Why over 400 lines in one module: `Supervisor` is one state machine (spawn, watch, grace,
terminate, escalate, restart, report) whose transitions read best side by side; the rest is the
output plumbing it owns (`Sink`, `pump`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ._runtime.config import ENV_CHECKPOINT_DIR, ENV_FAILURE_FILE, ENV_PROCESSES, ClusterConfigError
from .checkpoint import CheckpointError, verify_delivery

__all__ = ["Child", "Sink", "Supervisor", "DEFAULT_GRACE", "DEFAULT_KILL_AFTER"]

DEFAULT_GRACE = 10.0
"""Seconds the other processes get to exit by themselves after one fails."""
DEFAULT_KILL_AFTER = 3.0
"""Seconds between SIGTERM and SIGKILL."""
MAX_LINE = 1 << 20
"""A child's line longer than this (bytes) is passed on in pieces rather than buffered whole."""
DRAIN_TIMEOUT = 5.0
"""Seconds to wait, after every child has exited, for output still in the pipes."""
RESTART_DRAIN_TIMEOUT = 1.0
"""Before a restart, seconds to wait for the stopped children's output still in the pipes (what
comes later is still passed on, after the restart line)."""


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_code(returncode: int) -> int:
    """A shell's view of a child's status: the exit status, or 128 + the signal that killed it."""
    return returncode if returncode >= 0 else 128 - returncode


def describe(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    return f"killed by {signal_name(-returncode)}"


def seconds(value: float) -> str:
    return f"{value:g}s"


def death_signal_preexec() -> Callable[[], None] | None:
    """On Linux, a preexec_fn that makes the kernel SIGKILL the child if the launcher dies
    (even by SIGKILL), so that no process is left behind."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1
    kill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, kill, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl: nobody is left to watch us
            os._exit(1)

    return preexec


class Sink:
    """Writes whole lines to the launcher's stdout or stderr (one thread, one write per chunk,
    so lines never interleave). A closed stdout asks the supervisor to stop."""

    def __init__(self, stream: IO[str] | None, on_broken: Callable[[], None] | None = None) -> None:
        self.buffer: IO[bytes] | None = getattr(stream, "buffer", None)
        self.fileno: int | None = None
        if self.buffer is not None:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                self.fileno = self.buffer.fileno()
        self.on_broken = on_broken

    def write(self, data: bytes) -> None:
        if self.buffer is None:
            return
        try:
            # Under PYTHONUNBUFFERED the binary layer is a raw FileIO, whose write may take only
            # part of the data (a signal, a full pipe): write until all of it is out.
            view = memoryview(data)
            while view:
                written = self.buffer.write(view)
                if written is None:  # a non-blocking descriptor that is full: wait until it drains
                    select.select([], [self.buffer], [])
                    continue
                view = view[written:]
            self.buffer.flush()
        except (BrokenPipeError, ValueError):
            self._broken()

    def _broken(self) -> None:
        buffer, self.buffer = self.buffer, None
        # Point the descriptor at /dev/null so that interpreter shutdown does not fail to flush.
        if self.fileno is not None:
            with contextlib.suppress(OSError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.fileno)
                os.close(devnull)
        with contextlib.suppress(Exception):
            buffer.close()  # type: ignore[union-attr]
        if self.on_broken is not None:
            self.on_broken()


async def pump(reader: asyncio.StreamReader, prefix: bytes, sink: Sink) -> None:
    """Copy a child's output to `sink`, every line prefixed, only whole lines at a time."""
    pending = bytearray()
    glue = b"\n" + prefix
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            break
        pending += chunk
        cut = pending.rfind(b"\n", len(pending) - len(chunk))
        if cut >= 0:
            lines = bytes(pending[:cut])  # whole lines, without the last newline
            del pending[: cut + 1]
            sink.write(prefix + lines.replace(b"\n", glue) + b"\n")
        elif len(pending) >= MAX_LINE:
            sink.write(prefix + bytes(pending) + b"\n")
            pending.clear()
    if pending:  # a last line without its newline
        sink.write(prefix + bytes(pending) + b"\n")


@dataclass
class Child:
    index: int
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    returncode: int | None = None
    stopped_with: int | None = None
    """The first signal the launcher sent (then it is not counted as a failure)."""
    escalated: str | None = None
    """How the launcher came to SIGKILL it after `stopped_with`, for the summary."""
    exited_at: float | None = None
    """When it ended (monotonic), seen as early as the platform allows: `Process.wait` returns
    only once the pipes are drained too, so two failures could be noticed out of order."""
    because_of_peer: bool = False
    """It failed because another process failed or was lost (its runtime said so in its
    `ENV_FAILURE_FILE`): a consequence, never the first failure while a cause is known."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None


@dataclass
class Stop:
    signal: int
    code: int
    reason: str


class Supervisor:
    """Runs the children, watches them, and stops them all when one fails or on a signal.

    With ``restarts`` > 0, a failure stops the other children at once and `renew` gives the
    children of the next attempt (its argument: the attempt, 1 for the first restart), up to
    ``restarts`` times; only the last attempt's failures are reported at the end."""

    def __init__(
        self,
        argv: list[str],
        children: list[Child],
        *,
        grace: float,
        kill_after: float,
        stdin_index: int | None,
        out: Sink | None = None,
        err: Sink | None = None,
        restarts: int = 0,
        renew: Callable[[int], list[Child]] | None = None,
    ) -> None:
        if restarts and renew is None:
            raise ValueError("restarts need `renew`, to make the children of the next attempt")
        self.argv = argv
        self.children = children
        self.grace = grace
        self.kill_after = kill_after
        self.stdin_index = stdin_index
        self.restarts = restarts
        self.renew = renew
        self.attempt = 0
        """0 for the first attempt; k after the k-th restart."""
        self.restart_seconds: list[float] = []
        """For each restart, the seconds from the failure being noticed to the respawn."""
        self._failure_noticed: float | None = None
        self.out = out if out is not None else Sink(sys.stdout, self._on_stdout_closed)
        self.err = err if err is not None else Sink(sys.stderr)
        self.failures: list[Child] = []
        self.undelivered: str | None = None
        """Every process exited 0, but the checkpoint directory says an epoch's output is missing."""
        self.stop: Stop | None = None
        self.stop_requests = 0
        self.grace_expired = False
        self.spawn_error: str | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pumps: list[asyncio.Task[None]] = []
        self._causes: tempfile.TemporaryDirectory[str] | None = None

    # Events ------------------------------------------------------------------------------------
    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_signal(self, number: int) -> None:
        self.stop_requests += 1
        if self.stop is None:
            self.stop = Stop(number, 128 + number, f"interrupted by {signal_name(number)}")
        self._poke()

    def _on_stdout_closed(self) -> None:
        self.stop_requests += 1
        if self.stop is None:
            self.stop = Stop(int(signal.SIGTERM), 128 + int(signal.SIGPIPE), "stdout was closed")
        self._poke()

    async def _watch(self, child: Child) -> None:
        assert child.proc is not None
        returncode = await child.proc.wait()
        child.returncode = returncode
        if child.exited_at is None:
            child.exited_at = time.monotonic()
        if returncode != 0 and child.stopped_with is None:
            with contextlib.suppress(OSError):
                child.because_of_peer = self._cause_file(child).read_text() == "peer"
            if not self.failures:
                self._failure_noticed = time.monotonic()
            self.failures.append(child)
            # the first to end first: a peer's failure is a consequence of it
            self.failures.sort(key=_failure_order)
        self._poke()

    def _watch_exit(self, child: Child) -> None:
        """Note the moment ``child`` ends, from a pidfd (Linux): before its pipes are drained."""
        assert child.proc is not None
        try:
            fd = os.pidfd_open(child.proc.pid)
        except (AttributeError, OSError):
            return
        loop = asyncio.get_running_loop()

        def ended() -> None:
            if child.exited_at is None:
                child.exited_at = time.monotonic()
            loop.remove_reader(fd)
            os.close(fd)

        loop.add_reader(fd, ended)

    # Signals to children -----------------------------------------------------------------------
    def _send(self, child: Child, number: int) -> None:
        if not child.running:
            return
        assert child.proc is not None
        if child.stopped_with is None:
            child.stopped_with = number
        try:
            if hasattr(os, "killpg"):
                os.killpg(child.proc.pid, number)  # its process group: the program and what it started
            else:  # pragma: no cover - not POSIX
                child.proc.send_signal(number)
        except ProcessLookupError:
            pass
        except PermissionError:  # pragma: no cover
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(number)

    def kill_all_now(self) -> None:
        """SIGKILL every child that may still run, and anything left in their process groups."""
        for child in self.children:
            if child.proc is None:
                continue
            if child.returncode is None:
                child.escalated = child.escalated or "then SIGKILL"
                if child.stopped_with is None:
                    child.stopped_with = int(signal.SIGKILL)
            if hasattr(os, "killpg"):
                with contextlib.suppress(OSError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
            elif child.returncode is None:  # pragma: no cover
                with contextlib.suppress(OSError):
                    child.proc.kill()

    # The run -----------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        handled = []
        for number in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if number is None:
                continue
            try:
                loop.add_signal_handler(number, self._on_signal, int(number))
                handled.append(number)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                pass
        try:
            try:
                await self._spawn_all()
                await self._supervise()
                while self._restart_due():
                    await self._restart()
                    await self._spawn_all()
                    await self._supervise()
            finally:
                self.kill_all_now()
                if self._tasks:
                    await asyncio.wait(self._tasks)
            if self._pumps:
                _, late = await asyncio.wait(self._pumps, timeout=DRAIN_TIMEOUT)
                for task in late:
                    task.cancel()
            self._verify_delivery()
        finally:
            for task in self._tasks + self._pumps:
                task.cancel()
            for number in handled:
                loop.remove_signal_handler(number)
            if self._causes is not None:
                self._causes.cleanup()
        return self._report()

    def _verify_delivery(self) -> None:
        """After a run in which every process exited 0 over a checkpoint directory: check that
        no epoch its inputs logged went undelivered (`timely.checkpoint.verify_delivery`)."""
        if self.failures or self.stop is not None or self.spawn_error is not None or not self.children:
            return
        if any(c.returncode != 0 for c in self.children):
            return
        env = self.children[0].env
        directory = env.get(ENV_CHECKPOINT_DIR)
        if not directory:
            return
        try:
            verify_delivery(directory, int(env.get(ENV_PROCESSES, "1")), [c.index for c in self.children])
        except (CheckpointError, OSError) as e:
            self.undelivered = str(e)

    def _restart_due(self) -> bool:
        """Whether this attempt's failure calls for a restart: one left, and no stop asked for."""
        return bool(self.failures) and self.attempt < self.restarts and self.stop is None and self.spawn_error is None

    async def _restart(self) -> None:
        """Between two attempts (every child of this one has exited): sweep their process groups,
        let their last output through, make the next attempt's children and say so."""
        assert self.renew is not None and self.failures and self._failure_noticed is not None
        first = self.failures[0]
        assert first.returncode is not None
        self.kill_all_now()  # whatever the children started and left behind
        pending = [task for task in self._pumps if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=RESTART_DRAIN_TIMEOUT)
        if self.stop is not None:  # interrupted meanwhile: no restart (_spawn_all starts nothing)
            return
        self.attempt += 1
        try:
            children = self.renew(self.attempt)
        except (OSError, ClusterConfigError) as e:
            self.spawn_error = f"cannot restart: {e}"
            self.attempt -= 1
            return
        seconds = time.monotonic() - self._failure_noticed
        self.restart_seconds.append(seconds)
        who = f"p{children[0].index}" if len(children) == 1 else f"all {len(children)} processes"
        self.err.write(
            f"timely: p{first.index} {describe(first.returncode)}; restarting {who} "
            f"(restart {self.attempt} of {self.restarts}) after {seconds:.2f} s\n".encode()
        )
        self.children = children
        self.failures = []
        self.grace_expired = False
        self._failure_noticed = None

    async def _spawn_all(self) -> None:
        if self.spawn_error is not None:
            return
        preexec = death_signal_preexec()
        for child in self.children:
            if self.stop is not None:
                return
            # Stdin goes to the first attempt only: a restarted process reads an empty one.
            reads = child.index == self.stdin_index and self.attempt == 0
            stdin: Any = None if reads else asyncio.subprocess.DEVNULL
            posix: dict[str, Any] = {"process_group": 0} if os.name == "posix" else {}
            child.env = {**child.env, ENV_FAILURE_FILE: str(self._cause_file(child))}
            try:
                child.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    env=child.env,
                    stdin=stdin,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    preexec_fn=preexec,
                    **posix,
                )
            except OSError as e:
                self.spawn_error = f"cannot start p{child.index} ({self.argv[0]}): {e}"
                return
            assert child.proc.stdout is not None and child.proc.stderr is not None
            prefix = f"[p{child.index}] ".encode()
            self._pumps.append(asyncio.create_task(pump(child.proc.stdout, prefix, self.out)))
            self._pumps.append(asyncio.create_task(pump(child.proc.stderr, prefix, self.err)))
            self._watch_exit(child)
            self._tasks.append(asyncio.create_task(self._watch(child)))

    def _cause_file(self, child: Child) -> Path:
        """Where ``child`` says why it failed (a fresh name per attempt)."""
        if self._causes is None:
            self._causes = tempfile.TemporaryDirectory(prefix="timely-run-")
        return Path(self._causes.name) / f"p{child.index}-a{self.attempt}"

    def _running(self) -> list[Child]:
        return [c for c in self.children if c.running]

    async def _wait(self, timeout: float | None) -> None:
        assert self._wake is not None
        if timeout is None:
            await self._wake.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(timeout, 0.0))

    async def _supervise(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        grace_deadline: float | None = None
        while True:
            self._wake.clear()
            if not self._running():
                return
            if self.stop is not None or self.spawn_error is not None:
                await self._terminate(self.stop.signal if self.stop is not None else int(signal.SIGTERM))
                return
            timeout = None
            if self.failures:
                if self._restart_due():  # no grace: stop the others now, and start again
                    await self._terminate(int(signal.SIGTERM))
                    return
                if grace_deadline is None:
                    grace_deadline = loop.time() + self.grace
                timeout = grace_deadline - loop.time()
                if timeout <= 0:
                    self.grace_expired = True
                    await self._terminate(int(signal.SIGTERM))
                    return
            await self._wait(timeout)

    async def _terminate(self, number: int) -> None:
        """Send `number` to every running child; SIGKILL what still runs `kill_after` seconds
        later, or at once on another stop request (a second Ctrl-C)."""
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        requests = self.stop_requests
        for child in self._running():
            self._send(child, number)
        deadline = loop.time() + self.kill_after
        while True:
            self._wake.clear()
            if not self._running():
                return
            if self.stop_requests > requests:
                how = "then SIGKILL on a second interrupt"
                break
            if loop.time() >= deadline:
                how = f"then SIGKILL after {seconds(self.kill_after)}"
                break
            await self._wait(deadline - loop.time())
        for child in self._running():
            child.escalated = how
            self._send(child, int(signal.SIGKILL))
        while self._running():
            self._wake.clear()
            await self._wait(None)

    # The verdict -------------------------------------------------------------------------------
    def _report(self) -> int:
        parts = []
        code = 0
        if self.spawn_error is not None:
            parts.append(self.spawn_error)
            code = 127
        if self.stop is not None and not self.failures:
            parts.append(self.stop.reason)
            code = code or self.stop.code
        if self.undelivered is not None:
            parts.append(f"every process exited 0, but an output is missing: {self.undelivered}")
            code = code or 1
        for k, child in enumerate(self.failures):
            assert child.returncode is not None
            first = " (first)" if k == 0 and len(self.failures) > 1 else ""
            parts.append(f"p{child.index} {describe(child.returncode)}{first}")
        if self.failures:
            code = code or exit_code(self.failures[0].returncode or 0)
        failed = {id(c) for c in self.failures}
        stopped = [c for c in self.children if c.stopped_with is not None and id(c) not in failed]
        if stopped:
            groups: dict[str, list[str]] = {}
            for child in stopped:
                assert child.stopped_with is not None
                how = signal_name(child.stopped_with)
                if child.escalated and child.stopped_with != signal.SIGKILL:
                    how += f" {child.escalated}"
                groups.setdefault(how, []).append(f"p{child.index}")
            lead = tail = ""
            if self.grace_expired:
                lead = f"still running after the {seconds(self.grace)} grace period: "
            elif self.stop is not None and self.failures:
                tail = f" (the launcher was {self.stop.reason})"
            stops = ", ".join(f"{', '.join(names)} stopped with {how}" for how, names in groups.items())
            parts.append(f"{lead}{stops}{tail}")
        if code == 0 and not parts:
            return 0
        if self.attempt:
            parts.append(f"restarts used: {self.attempt} of {self.restarts}")
        code = code or 1
        self.err.write(f"timely: {'; '.join(parts)}; exit status {code}\n".encode())
        return code


def _failure_order(child: Child) -> tuple[bool, float, bool]:
    """Causes before consequences (a process that failed because of a peer comes after every
    other), then the earliest end; of two that ended at the same moment, one killed by a signal
    (a peer's error is the consequence of a loss, not its cause)."""
    ended = child.exited_at if child.exited_at is not None else math.inf
    return (child.because_of_peer, ended, (child.returncode or 0) >= 0)
