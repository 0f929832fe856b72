"""The ``timely`` command, and the cluster description every process reads from its environment.

A timely program is an ordinary Python script that every process runs (SPMD). A process learns
its place in the cluster from environment variables, which the launcher sets::

    TIMELY_PROCESSES      number of processes N
    TIMELY_PROCESS_INDEX  this process's index, 0..N-1
    TIMELY_ADDRESSES      host:port of every process, comma-separated, in index order
                          (process i listens on entry i; IPv6 hosts in brackets: [::1]:7000)
    TIMELY_WORKERS        workers per process (default 1)
    TIMELY_SECRET         the shared secret, hex (HMAC authentication between processes)
    PYTHONHASHSEED        "0" unless the user set it, so that hash(str) agrees across processes
    TIMELY_RESTART        which attempt this is: 0 at first, k after the k-th restart (--restarts)
    TIMELY_CHECKPOINT_DIR   with --checkpoint-dir: where to checkpoint and resume from (absolute)
    TIMELY_CHECKPOINT_EVERY with --checkpoint-every: checkpoint every K epochs
    TIMELY_PICKLE         "1" with --pickle: records without a codec travel pickled (trusted clusters)
    TIMELY_DEBUG          "1" with --debug: failures print with the runtime's frames too
    TIMELY_LAUNCHER       "local" (this launcher runs every process) or "hosts" (this machine's one)

`cluster_from_env` parses them (the runtime calls it); ``timely run`` sets them::

    timely run -n 4 prog.py [args...]                       # four local processes
    timely run -n 2 --workers 3 -m package.module [args...] # like python -m
    timely run --hosts hosts.txt --process 2 prog.py        # process 2 of a multi-machine cluster

The launcher streams every child's output line by line with a ``[p{i}] `` prefix (stderr to
stderr), and exits 0 only if every process did. When one fails, the others get a grace period
to stop by themselves (the runtime makes peers fail quickly), then SIGTERM, then SIGKILL; the
launcher exits with the first failure's status (128+signal for a signal) and prints a one-line
summary. Ctrl-C or SIGTERM to the launcher is forwarded to every process.

With ``--restarts R`` a failure (a process exiting non-zero or killed by a signal the launcher
did not send) instead stops the other processes at once and starts all of them again, with
fresh ports and ``TIMELY_RESTART`` counting the restarts, up to R times; a program that
checkpoints (``--checkpoint-dir``) resumes from its last complete checkpoint. In the hosts-file
mode only this machine's process restarts, at the same address; the launchers of the other
machines restart theirs.

The cluster configuration it sets up is parsed by `timely._runtime.config`, shared with the runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import secrets
import select
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from timely._runtime.config import (
    _SECRET_HINT,
    ENV_ADDRESSES,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_EVERY,
    ENV_DEBUG,
    ENV_LAUNCHER,
    ENV_PICKLE,
    ENV_PROCESS_INDEX,
    ENV_PROCESSES,
    ENV_RESTART,
    ENV_SECRET,
    ENV_WORKERS,
    LAUNCHER_HOSTS,
    LAUNCHER_LOCAL,
    SECRET_BYTES,
    ClusterConfig,
    ClusterConfigError,
    _check_distinct,
    _parse_secret,
    cluster_from_env,
    format_address,
    parse_address,
)

__all__ = [
    "ENV_ADDRESSES",
    "ENV_CHECKPOINT_DIR",
    "ENV_CHECKPOINT_EVERY",
    "ENV_PROCESSES",
    "ENV_PROCESS_INDEX",
    "ENV_RESTART",
    "ENV_SECRET",
    "ENV_WORKERS",
    "ClusterConfig",
    "ClusterConfigError",
    "cluster_from_env",
    "format_address",
    "main",
    "parse_address",
    "read_hosts_file",
    "read_secret_file",
]


DEFAULT_HASH_SEED = "0"
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


def read_hosts_file(path: str) -> list[tuple[str, int]]:
    """One ``host:port`` per line, in process order; blank lines and ``#`` comments are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ClusterConfigError(f"cannot read the hosts file: {e}") from None
    addresses = []
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            addresses.append(parse_address(entry, f"{path}:{number}"))
    if not addresses:
        raise ClusterConfigError(f"{path}: no host:port lines")
    _check_distinct(addresses, path)
    return addresses


def read_secret_file(path: str) -> bytes:
    """The shared secret: a file holding it in hex (whitespace around it is ignored)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ClusterConfigError(f"cannot read the secret file: {e}") from None
    return _parse_secret(text, f"the secret file {path}")


# ---------------------------------------------------------------------------------------------
# Supervising the processes


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exit_code(returncode: int) -> int:
    """A shell's view of a child's status: the exit status, or 128 + the signal that killed it."""
    return returncode if returncode >= 0 else 128 - returncode


def _describe(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    return f"killed by {_signal_name(-returncode)}"


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _death_signal_preexec() -> Callable[[], None] | None:
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


class _Sink:
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


async def _pump(reader: asyncio.StreamReader, prefix: bytes, sink: _Sink) -> None:
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
class _Child:
    index: int
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    returncode: int | None = None
    stopped_with: int | None = None
    """The first signal the launcher sent (then it is not counted as a failure)."""
    escalated: str | None = None
    """How the launcher came to SIGKILL it after `stopped_with`, for the summary."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None


@dataclass
class _Stop:
    signal: int
    code: int
    reason: str


class _Supervisor:
    """Runs the children, watches them, and stops them all when one fails or on a signal.

    With ``restarts`` > 0, a failure stops the other children at once and `renew` gives the
    children of the next attempt (its argument: the attempt, 1 for the first restart), up to
    ``restarts`` times; only the last attempt's failures are reported at the end."""

    def __init__(
        self,
        argv: list[str],
        children: list[_Child],
        *,
        grace: float,
        kill_after: float,
        stdin_index: int | None,
        out: _Sink | None = None,
        err: _Sink | None = None,
        restarts: int = 0,
        renew: Callable[[int], list[_Child]] | None = None,
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
        self.out = out if out is not None else _Sink(sys.stdout, self._on_stdout_closed)
        self.err = err if err is not None else _Sink(sys.stderr)
        self.failures: list[_Child] = []
        self.stop: _Stop | None = None
        self.stop_requests = 0
        self.grace_expired = False
        self.spawn_error: str | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pumps: list[asyncio.Task[None]] = []

    # Events ------------------------------------------------------------------------------------
    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_signal(self, number: int) -> None:
        self.stop_requests += 1
        if self.stop is None:
            self.stop = _Stop(number, 128 + number, f"interrupted by {_signal_name(number)}")
        self._poke()

    def _on_stdout_closed(self) -> None:
        self.stop_requests += 1
        if self.stop is None:
            self.stop = _Stop(int(signal.SIGTERM), 128 + int(signal.SIGPIPE), "stdout was closed")
        self._poke()

    async def _watch(self, child: _Child) -> None:
        assert child.proc is not None
        returncode = await child.proc.wait()
        child.returncode = returncode
        if returncode != 0 and child.stopped_with is None:
            if not self.failures:
                self._failure_noticed = time.monotonic()
            self.failures.append(child)
        self._poke()

    # Signals to children -----------------------------------------------------------------------
    def _send(self, child: _Child, number: int) -> None:
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
        finally:
            for task in self._tasks + self._pumps:
                task.cancel()
            for number in handled:
                loop.remove_signal_handler(number)
        return self._report()

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
            f"timely: p{first.index} {_describe(first.returncode)}; restarting {who} "
            f"(restart {self.attempt} of {self.restarts}) after {seconds:.2f} s\n".encode()
        )
        self.children = children
        self.failures = []
        self.grace_expired = False
        self._failure_noticed = None

    async def _spawn_all(self) -> None:
        if self.spawn_error is not None:
            return
        preexec = _death_signal_preexec()
        for child in self.children:
            if self.stop is not None:
                return
            # Stdin goes to the first attempt only: a restarted process reads an empty one.
            reads = child.index == self.stdin_index and self.attempt == 0
            stdin: Any = None if reads else asyncio.subprocess.DEVNULL
            posix: dict[str, Any] = {"process_group": 0} if os.name == "posix" else {}
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
            self._pumps.append(asyncio.create_task(_pump(child.proc.stdout, prefix, self.out)))
            self._pumps.append(asyncio.create_task(_pump(child.proc.stderr, prefix, self.err)))
            self._tasks.append(asyncio.create_task(self._watch(child)))

    def _running(self) -> list[_Child]:
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
                how = f"then SIGKILL after {_seconds(self.kill_after)}"
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
        for k, child in enumerate(self.failures):
            assert child.returncode is not None
            first = " (first)" if k == 0 and len(self.failures) > 1 else ""
            parts.append(f"p{child.index} {_describe(child.returncode)}{first}")
        if self.failures:
            code = code or _exit_code(self.failures[0].returncode or 0)
        failed = {id(c) for c in self.failures}
        stopped = [c for c in self.children if c.stopped_with is not None and id(c) not in failed]
        if stopped:
            groups: dict[str, list[str]] = {}
            for child in stopped:
                assert child.stopped_with is not None
                how = _signal_name(child.stopped_with)
                if child.escalated and child.stopped_with != signal.SIGKILL:
                    how += f" {child.escalated}"
                groups.setdefault(how, []).append(f"p{child.index}")
            lead = tail = ""
            if self.grace_expired:
                lead = f"still running after the {_seconds(self.grace)} grace period: "
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


# ---------------------------------------------------------------------------------------------
# The command line


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        return value

    return parse


_positive_int = _int_at_least(1)
_index = _int_at_least(0)


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1..65535)")
    return value


def _seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0")
    return value


_RUN_DESCRIPTION = """\
Run a timely program: N processes on this machine (-n), or one process of a
multi-machine cluster (--hosts, --process). Every process runs the same program
with `python prog.py args...` (or `python -m module args...`), learning its place
from TIMELY_PROCESSES, TIMELY_PROCESS_INDEX, TIMELY_ADDRESSES, TIMELY_WORKERS and
TIMELY_SECRET; PYTHONHASHSEED is set to 0 (and PYTHONUNBUFFERED to 1) unless
already set.

Each line a process prints is shown prefixed with [p<index>] (stderr on stderr).
The exit status is 0 only if every process exited 0. When one fails, the others
get --grace seconds to stop by themselves, then SIGTERM, then SIGKILL
--kill-after seconds later; the status is then the first failure's (128+signal
for a signal). Ctrl-C or SIGTERM is forwarded to every process. Process 0 (or
the one process with --hosts) reads the launcher's stdin unless it is a terminal;
the others read an empty stdin.

With --restarts R, a failure instead stops the others at once (SIGTERM, then
SIGKILL after --kill-after) and starts every process again, up to R times, with
fresh ports and TIMELY_RESTART=k for the k-th restart (0 at first); a restarted
process reads an empty stdin. With --hosts only this machine's process restarts,
at the same address: run every machine's launcher with the same --restarts.
A program that checkpoints (--checkpoint-dir, which sets TIMELY_CHECKPOINT_DIR,
and --checkpoint-every, TIMELY_CHECKPOINT_EVERY) resumes from its last complete
checkpoint; one that does not starts over. Ctrl-C never restarts.
"""

_RUN_EPILOG = """\
examples:
  timely run -n 4 prog.py --input data.csv
  timely run -n 2 --workers 3 -m examples.connected_components
  # on machine k of a cluster (hosts.txt: one host:port per line, the same file everywhere)
  TIMELY_SECRET=$(cat secret.hex) timely run --hosts hosts.txt --process k prog.py
  # survive up to 3 failures, resuming from a checkpoint taken every 10 epochs
  timely run -n 4 --restarts 3 --checkpoint-dir ckpt --checkpoint-every 10 prog.py

Everything after the program (or -m module) is passed to it unchanged.
"""


def _build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="timely",
        description="Naiad's timely dataflow for Python: run timely programs on one or many processes.",
        epilog="Run `timely run --help` for the options of a run.",
        allow_abbrev=False,
    )
    try:
        from importlib.metadata import version

        parser.add_argument("--version", action="version", version=f"timely {version('timely-dataflow')}")
    except Exception:  # pragma: no cover - not installed
        pass
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a timely program on N local processes, or as one process of a cluster",
        description=_RUN_DESCRIPTION,
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    run.prog = "timely run"
    run.usage = (
        "timely run [-n N] [--base-port P] [--hosts FILE --process I] [--workers W] [--secret-file F]\n"
        "                  [--grace S] [--kill-after S] [--restarts R] [--checkpoint-dir DIR]\n"
        "                  [--checkpoint-every K] [--pickle] [--debug] (prog.py | -m module) [args...]"
    )
    local = run.add_argument_group("on this machine")
    local.add_argument(
        "-n", "--processes", type=_positive_int, metavar="N", help="number of processes to start (default 1)"
    )
    local.add_argument(
        "--base-port",
        type=_port,
        metavar="P",
        help="give process i the port P+i on 127.0.0.1 (default: free ports chosen by the system)",
    )
    cluster = run.add_argument_group("one process of a multi-machine cluster")
    cluster.add_argument(
        "--hosts",
        metavar="FILE",
        help="the cluster: one host:port per line, process 0 first (blank lines and # comments ignored)",
    )
    cluster.add_argument("--process", type=_index, metavar="I", help="the index of the process to run here")
    both = run.add_argument_group("either way")
    both.add_argument("--workers", type=_positive_int, metavar="W", help="workers per process (default 1)")
    both.add_argument(
        "--secret-file",
        metavar="F",
        help="file holding the shared secret in hex (default: $TIMELY_SECRET; on one machine, a fresh random one)",
    )
    both.add_argument(
        "--grace",
        type=_seconds_arg,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"after a process fails, seconds the others get to exit by themselves (default {DEFAULT_GRACE:g})",
    )
    both.add_argument(
        "--kill-after",
        type=_seconds_arg,
        default=DEFAULT_KILL_AFTER,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_KILL_AFTER:g})",
    )
    both.add_argument(
        "--pickle",
        action="store_true",
        help=f"let records that have no codec (timely.register_codec) cross processes pickled (sets {ENV_PICKLE}=1); "
        "unpickling runs code the sender chooses: only on a trusted cluster",
    )
    both.add_argument(
        "--debug",
        action="store_true",
        help=f"print a failure with every frame, the runtime's too (sets {ENV_DEBUG}=1); by default a "
        "process shows only the program's own frames",
    )
    recovery = run.add_argument_group("fault tolerance")
    recovery.add_argument(
        "--restarts",
        type=_index,
        default=0,
        metavar="R",
        help="when a process fails, restart all of them (with --hosts, this one), up to R times (default 0)",
    )
    recovery.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help=f"checkpoint to DIR and resume from it after a restart (sets {ENV_CHECKPOINT_DIR}, made absolute)",
    )
    recovery.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        metavar="K",
        help=f"checkpoint every K epochs (sets {ENV_CHECKPOINT_EVERY}; default: the runtime's)",
    )
    program = run.add_argument_group("the program")
    program.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    program.add_argument("prog", nargs="?", help="the program's script")
    program.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    return parser, run


def _split_run_args(argv: list[str], parser: argparse.ArgumentParser) -> tuple[list[str], str | None, list[str]]:
    """Split ``timely run`` arguments into the launcher's options, ``-m``'s module, and the
    program with its arguments (which may look like options: they are the program's)."""
    takes_value = {
        option
        for action in parser._actions
        if action.option_strings and action.nargs != 0 and action.dest != "module"
        for option in action.option_strings
    }
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], None, argv[i + 1 :]
        if token == "-m":
            if i + 1 == len(argv):
                parser.error("argument -m: expected a module name")
            return argv[:i], argv[i + 1], argv[i + 2 :]
        if token.startswith("-m") and not token.startswith("--"):
            return argv[:i], token[2:], argv[i + 1 :]
        if token.startswith("-") and token != "-":
            i += 2 if token in takes_value else 1
            continue
        return argv[:i], None, argv[i:]
    return argv, None, []


def _free_ports(host: str, count: int) -> list[int]:
    """`count` distinct ports that are free now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _check_listenable(addresses: list[tuple[str, int]], indices: list[int], advice: str) -> None:
    """Fail now, naming the port, if a process started here could not listen on its address
    because another program holds the port: better than one process failing to start while the
    others wait for it. Binds as the runtime does (address reuse on: ports in TIME_WAIT pass)."""
    if len(addresses) < 2:
        return  # a single process listens on nothing
    for i in indices:
        host, port = addresses[i]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in infos:
                with socket.socket(family, kind, proto) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ClusterConfigError(
                    f"p{i} cannot listen on {format_address(host, port)}: it is in use by another program; {advice}"
                ) from None
            # Anything else (a host name this machine cannot resolve or bind): the process itself
            # reports it, if it runs a computation at all.


def _resolve_secret(args: argparse.Namespace, env: Mapping[str, str], required: bool) -> bytes:
    if args.secret_file is not None:
        secret = read_secret_file(args.secret_file)
        with contextlib.suppress(OSError):
            if os.stat(args.secret_file).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                print(
                    f"timely: warning: the secret file {args.secret_file} is readable by others (chmod 600 it)",
                    file=sys.stderr,
                )
        return secret
    if ENV_SECRET in env:
        return _parse_secret(env[ENV_SECRET], ENV_SECRET)
    if required:
        raise ClusterConfigError(
            "a multi-machine cluster needs a shared secret, the same on every machine: "
            f"set {ENV_SECRET} (hex) or pass --secret-file FILE ({_SECRET_HINT})"
        )
    return secrets.token_bytes(SECRET_BYTES)


def _settings_env(args: argparse.Namespace, env: Mapping[str, str], parser: argparse.ArgumentParser) -> dict[str, str]:
    """The run's settings for the children: what --checkpoint-dir and --checkpoint-every say
    (the directory made absolute, since a child may change directory), --pickle, --debug, and
    whether this launcher runs every process (and so reports each one's exit) or one."""
    extra = {ENV_LAUNCHER: LAUNCHER_HOSTS if args.hosts is not None else LAUNCHER_LOCAL}
    if args.pickle:
        extra[ENV_PICKLE] = "1"
    if args.debug:
        extra[ENV_DEBUG] = "1"
    if args.checkpoint_dir is not None:
        if not args.checkpoint_dir:
            parser.error("argument --checkpoint-dir: expected a directory")
        directory = os.path.abspath(args.checkpoint_dir)
        if os.path.exists(directory) and not os.path.isdir(directory):
            parser.error(f"--checkpoint-dir {args.checkpoint_dir}: not a directory")
        extra[ENV_CHECKPOINT_DIR] = directory
    elif args.checkpoint_every is not None and not env.get(ENV_CHECKPOINT_DIR):
        parser.error("--checkpoint-every needs --checkpoint-dir (where to checkpoint)")
    if args.checkpoint_every is not None:
        extra[ENV_CHECKPOINT_EVERY] = str(args.checkpoint_every)
    return extra


def _child_env(
    base: Mapping[str, str], config: ClusterConfig, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = dict(base)
    env.update(config.to_env())
    if extra:
        env.update(extra)
    env.setdefault("PYTHONHASHSEED", DEFAULT_HASH_SEED)
    env.setdefault("PYTHONUNBUFFERED", "1")  # so that output streams live
    return env


def _run(argv: list[str], parser: argparse.ArgumentParser) -> int:
    options, module, rest = _split_run_args(argv, parser)
    args = parser.parse_args(options)
    if module is None and not rest:
        parser.error("give the program to run: prog.py [args...] or -m module [args...]")
    if module is not None:
        if not module:
            parser.error("argument -m: expected a module name")
        command = [sys.executable, "-m", module, *rest]
    else:
        prog = rest[0]
        if not os.path.exists(prog):
            parser.error(f"cannot find the program {prog!r}")
        command = [sys.executable, *rest]

    env = os.environ
    workers = args.workers if args.workers is not None else 1
    try:
        if args.hosts is not None:
            if args.base_port is not None:
                parser.error("--base-port is for processes on this machine; the hosts file gives the ports")
            if args.process is None:
                parser.error("--hosts needs --process I: the index of the process to run on this machine")
            addresses = read_hosts_file(args.hosts)
            if args.processes is not None and args.processes != len(addresses):
                parser.error(f"-n {args.processes} but {args.hosts} lists {len(addresses)} processes")
            if args.process >= len(addresses):
                parser.error(
                    f"--process {args.process}, but {args.hosts} lists {len(addresses)} processes "
                    f"(valid: 0..{len(addresses) - 1})"
                )
            secret = _resolve_secret(args, env, required=True)
            indices = [args.process]
            _check_listenable(
                addresses,
                indices,
                f"free the port, or give process {args.process} another in {args.hosts} (everywhere)",
            )
        else:
            if args.process is not None:
                parser.error("--process is for a multi-machine cluster; give --hosts too")
            processes = args.processes if args.processes is not None else 1
            if args.base_port is not None:
                if args.base_port + processes - 1 > 65535:
                    parser.error(f"--base-port {args.base_port} leaves no room for {processes} ports")
                ports = list(range(args.base_port, args.base_port + processes))
            else:
                ports = _free_ports("127.0.0.1", processes)
            addresses = [("127.0.0.1", port) for port in ports]
            secret = _resolve_secret(args, env, required=False)
            indices = list(range(processes))
            _check_listenable(addresses, indices, "choose other ports with --base-port, or leave it out for free ones")
        settings_env = _settings_env(args, env, parser)

        def children_of(attempt: int, addresses: list[tuple[str, int]], secret: bytes) -> list[_Child]:
            extra = {ENV_RESTART: str(attempt), **settings_env}
            config = [ClusterConfig(len(addresses), i, addresses, workers, secret) for i in indices]
            return [_Child(i, _child_env(env, c, extra)) for i, c in zip(indices, config, strict=True)]

        children = children_of(0, addresses, secret)
    except ClusterConfigError as e:
        print(f"timely run: error: {e}", file=sys.stderr)
        return 2
    # A restart on this machine gets fresh ports (the old ones may linger in TIME_WAIT) unless
    # they were given, and a fresh secret unless one was given; a cluster keeps both.
    fresh_ports = args.hosts is None and args.base_port is None
    fresh_secret = args.hosts is None and args.secret_file is None and ENV_SECRET not in env

    def renew(attempt: int) -> list[_Child]:
        again = [("127.0.0.1", port) for port in _free_ports("127.0.0.1", len(addresses))] if fresh_ports else addresses
        return children_of(attempt, again, secrets.token_bytes(SECRET_BYTES) if fresh_secret else secret)

    if env.get("PYTHONHASHSEED") == "random":
        print(
            "timely: warning: PYTHONHASHSEED=random makes hash(str) differ between processes; "
            "exchange functions that use hash() will send records to the wrong workers",
            file=sys.stderr,
        )
    stdin_index = None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if not os.isatty(sys.stdin.fileno()):
            stdin_index = indices[0]
    supervisor = _Supervisor(
        command,
        children,
        grace=args.grace,
        kill_after=args.kill_after,
        stdin_index=stdin_index,
        restarts=args.restarts,
        renew=renew,
    )
    try:
        return asyncio.run(supervisor.run())
    except BaseException:
        supervisor.kill_all_now()  # whatever went wrong, no process is left behind
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """The ``timely`` command; returns the exit status."""
    parser, run = _build_parsers()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] == "run":
        return _run(arguments[1:], run)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return 0  # pragma: no cover - every command is handled above


if __name__ == "__main__":
    sys.exit(main())
