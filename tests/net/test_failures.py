"""Failures between real processes over loopback TCP: strangers, impostors, a different program,
malformed frames, a killed peer, a user exception, an unencodable record; and the same vertex
failure in the in-memory simulated cluster.

Every process runs ``tests/support/net_programs.py`` (see its docstring for what it prints), started
either by ``python -m timely.cli run -n N`` or by the test itself with the ``TIMELY_*``
variables set per process (to give one process a wrong secret, another program, or to place a
fake peer or a stranger beside the real ones). Every wait has a deadline and every process
the test started is killed at teardown, so a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import timely
from tests.support import free_addresses, net_programs
from tests.support.launcher import lines_of
from timely._runtime.config import ClusterConfig
from timely.dataflow import Dataflow
from timely.net.framing import MAX_FRAME
from timely.net.tcp import HANDSHAKE_SECONDS, MAGIC
from timely.testing import simulated

pytestmark = pytest.mark.skipif(os.name != "posix", reason="real processes and signals are tested on POSIX")

PROGRAM = Path(net_programs.__file__)
LAUNCHER = [sys.executable, "-m", "timely.cli", "run"]
RUN_TIMEOUT = 30.0
"""Seconds any process (or launcher) may run before the test kills it and fails."""
CONNECT_TIMEOUT = 2.5
"""What the tests that expect a process to wait in vain for a peer set TEST_CONNECT_TIMEOUT to."""
SOON = 10.0
"""Seconds within which a process must fail once the cause has happened (it is "within seconds")."""

# Processes ---------------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIMELY_", "TEST_")) and k not in ("PYTHONHASHSEED", "PYTHONUNBUFFERED")
    }
    env.update(PYTHONHASHSEED="0", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Proc:
    """A process the test started; its stdout and stderr go to files that can be read at any time."""

    def __init__(self, argv: list[str], env: dict[str, str], directory: Path, name: str) -> None:
        self.name = name
        self.out_path = directory / f"{name}.out"
        self.err_path = directory / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not end within {timeout} s (a hang)\n{self.describe()}")

    def wait_for(self, pattern: str, stream: str = "out", timeout: float = RUN_TIMEOUT, count: int = 1) -> list[Any]:
        """The first `count` matches of the regex `pattern` (multiline) in stdout or stderr, once they appear
        (as `re.findall` gives them: strings, or tuples of a pattern's groups)."""
        deadline = time.monotonic() + timeout
        while True:
            ended = self.popen.poll() is not None
            found = re.findall(pattern, self.out if stream == "out" else self.err, re.MULTILINE)
            if len(found) >= count:
                return found[:count]
            if ended:
                pytest.fail(f"{self.name} ended before {pattern!r} appeared in its std{stream}\n{self.describe()}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{self.name}: {pattern!r} did not appear in its std{stream} within {timeout} s\n{self.describe()}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait()

    def describe(self) -> str:
        return f"--- {self.name} stdout:\n{self.out}\n--- {self.name} stderr:\n{self.err}"


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(argv, env, name)``: start a process; every one is killed at teardown."""
    started: list[Proc] = []

    def start(argv: list[str], env: dict[str, str], name: str) -> Proc:
        proc = Proc(argv, env, tmp_path, name)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


class Cluster:
    """The addresses and secret of a cluster whose processes the test starts one by one."""

    def __init__(self, spawn: Callable[..., Proc], processes: int) -> None:
        self.spawn = spawn
        self.processes = processes
        self.addresses = free_addresses(processes)
        self.secret = secrets.token_bytes(32)

    def env(self, index: int, secret: bytes | None = None, **extra: str) -> dict[str, str]:
        config = ClusterConfig(self.processes, index, self.addresses, 1, self.secret if secret is None else secret)
        return clean_env(**config.to_env(), **extra)

    def start(self, index: int, *args: str, secret: bytes | None = None, **extra: str) -> Proc:
        return self.spawn([sys.executable, str(PROGRAM), *args], self.env(index, secret, **extra), f"p{index}")


@pytest.fixture
def cluster(spawn: Callable[..., Proc]) -> Callable[[int], Cluster]:
    return lambda processes: Cluster(spawn, processes)


def failure(output: str) -> dict[str, Any]:
    """The FAILED record a process printed (its only one)."""
    records = [json.loads(line[len("FAILED ") :]) for line in output.splitlines() if line.startswith("FAILED ")]
    assert len(records) == 1, f"expected one FAILED line in:\n{output}"
    return records[0]


def result(output: str) -> dict[str, Any]:
    (record,) = [json.loads(line[len("RESULT ") :]) for line in output.splitlines() if line.startswith("RESULT ")]
    return record  # type: ignore[no-any-return]


def refusals(proc: Proc, index: int) -> list[tuple[int, str]]:
    """(stranger's port, reason) for every connection process `index` refused, from the
    warnings of logger ``timely.net``."""
    pattern = rf"^timely\.net:WARNING:process {index} refused a connection from \('127\.0\.0\.1', (\d+)\): (.*)$"
    return [(int(port), reason) for port, reason in re.findall(pattern, proc.err, re.MULTILINE)]


# Raw sockets -------------------------------------------------------------------------------------


def connect(address: tuple[str, int], within: float = 10.0) -> socket.socket:
    """A plain TCP connection to `address`, retried until something listens there."""
    deadline = time.monotonic() + within
    while True:
        try:
            return socket.create_connection(address, timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def read_frame(sock: socket.socket) -> Any:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError("closed")
            data += chunk
        return data

    (length,) = struct.unpack(">I", exactly(4))
    return msgpack.unpackb(exactly(length), raw=False)


def write_frame(sock: socket.socket, message: Any) -> None:
    payload = msgpack.packb(message, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(payload)) + payload)


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the other side closed `sock` (reading and discarding what it sends), or None."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            if not sock.recv(4096):
                return time.monotonic() - start
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
        except TimeoutError:
            return None


# 1. Strangers during start-up --------------------------------------------------------------------


def test_strangers_during_startup_are_refused_and_logged_and_the_run_completes(cluster: Any) -> None:
    c = cluster(3)
    # p0 waits for p1 and p2, p1 waits for p2: both listen until p2 comes.
    p0 = c.start(0, "sum")
    p1 = c.start(1, "sum")
    strangers: dict[int, dict[str, socket.socket]] = {}
    try:
        for index in (0, 1):
            kinds: dict[str, socket.socket] = {}
            s = kinds["text"] = connect(c.addresses[index])
            greeting = read_frame(s)  # the listener speaks first
            assert greeting["magic"] == MAGIC and greeting["process"] == index
            s.sendall(b"GET / HTTP/1.1\r\nHost: timely\r\n\r\n")
            s = kinds["msgpack"] = connect(c.addresses[index])
            read_frame(s)
            write_frame(s, {"hello": "world"})
            s = kinds["wrong-magic"] = connect(c.addresses[index])
            read_frame(s)
            write_frame(s, {"magic": "timely/0", "process": 2, "fingerprint": "x", "nonce": b"n" * 16, "mac": b""})
            kinds["silent"] = connect(c.addresses[index])
            strangers[index] = kinds

        # Every stranger is cut off: at once for garbage, after the handshake limit for silence.
        for index, kinds in strangers.items():
            for kind, s in kinds.items():
                limit = HANDSHAKE_SECONDS + 3 if kind == "silent" else 3
                assert closed_within(s, limit) is not None, f"process {index} did not close the {kind} stranger"

        for index, proc in ((0, p0), (1, p1)):
            proc.wait_for(rf"process {index} refused a connection", "err", count=len(strangers[index]), timeout=5)
            refused = dict(refusals(proc, index))
            reasons = {kind: refused.get(s.getsockname()[1]) for kind, s in strangers[index].items()}
            assert reasons["text"] is not None and "exceeds" in reasons["text"], proc.err
            assert reasons["msgpack"] == "not a timely peer (bad greeting)", proc.err
            assert reasons["wrong-magic"] == "not a timely peer (bad greeting)", proc.err
            assert reasons["silent"] == "no handshake within the time limit", proc.err
            assert "JOINED" not in proc.out  # nothing a stranger did let the process start
    finally:
        for kinds in strangers.values():
            for s in kinds.values():
                s.close()

    # The real last process joins, and the computation is unaffected.
    p2 = c.start(2, "sum")
    for proc in (p0, p1, p2):
        assert proc.wait() == 0, proc.describe()
    assert result(p0.out) == {"sum": net_programs.EXPECTED_SUM, "count": net_programs.TOTAL}


@pytest.mark.parametrize("kind", ["connect-and-close", "truncated-greeting", "mac-not-bytes"])
def test_every_stranger_is_refused_with_a_warning(cluster: Any, kind: str) -> None:
    c = cluster(2)
    p0 = c.start(0, "sum")
    s = connect(c.addresses[0])
    try:
        port = s.getsockname()[1]
        read_frame(s)
        if kind == "truncated-greeting":
            s.sendall(struct.pack(">I", 50) + b"\x85")  # a header and one byte of a 50-byte frame
        elif kind == "mac-not-bytes":
            # A stranger that knows the program (the fingerprint is no secret) but not the secret.
            fingerprint = Dataflow.build(net_programs.build_sum, 1, 2, 1)[2].fingerprint()
            hello = {"magic": MAGIC, "process": 1, "fingerprint": fingerprint, "nonce": b"n" * 16, "mac": 12345}
            write_frame(s, hello)
        s.shutdown(socket.SHUT_WR)
        assert closed_within(s, 5) is not None
    finally:
        s.close()
    p1 = c.start(1, "sum")  # the run itself still completes
    for proc in (p0, p1):
        assert proc.wait() == 0, proc.describe()
    assert result(p0.out)["sum"] == net_programs.EXPECTED_SUM
    # Refused and logged like any stranger (before the fix, these escaped the handshake's except
    # clause and asyncio logged "Unhandled exception in client_connected_cb" with a traceback).
    assert "Unhandled exception" not in p0.err and "Traceback" not in p0.err, p0.err
    reason = dict(refusals(p0, 0)).get(port)
    assert reason, p0.err
    if kind == "mac-not-bytes":
        assert "TypeError" in reason or "malformed" in reason, reason
    else:
        assert "closed" in reason, reason


# 2. A wrong secret -------------------------------------------------------------------------------


def test_a_process_with_a_wrong_secret_is_refused_and_the_cluster_does_not_proceed(cluster: Any) -> None:
    c = cluster(3)
    impostor_secret = secrets.token_bytes(32)
    procs = [
        c.start(i, "sum", secret=impostor_secret if i == 2 else None, TEST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT))
        for i in range(3)
    ]
    codes = [p.wait() for p in procs]
    assert all(code != 0 for code in codes), [p.describe() for p in procs]
    for p in procs:
        assert "JOINED" not in p.out, p.describe()

    # The impostor is told why, by the first process that refused it.
    err = failure(procs[2].out)
    assert err["type"] == "HandshakeError"
    found = re.fullmatch(r"process ([01]) at 127\.0\.0\.1:\d+ refused us: authentication failed", err["message"])
    assert found, err
    assert "timely.errors.HandshakeError" in procs[2].err
    k = int(found[1])
    assert "process 2 failed authentication (wrong secret)" in [reason for _, reason in refusals(procs[k], k)]

    # The legitimate processes give up waiting, naming the missing process. (The other one may
    # have refused the impostor too, or seen its connection close as the impostor gave up.)
    for i in (0, 1):
        err = failure(procs[i].out)
        assert err["type"] == "HandshakeError"
        assert err["message"] == f"process {i}: processes [2] did not join within {CONNECT_TIMEOUT} s"


def test_a_listener_with_a_wrong_secret_refuses_everyone(cluster: Any) -> None:
    # The impostor is process 0: the others connect to it and are refused.
    c = cluster(2)
    p0 = c.start(0, "sum", secret=secrets.token_bytes(32), TEST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT))
    p1 = c.start(1, "sum", TEST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT))
    assert p1.wait() != 0 and p0.wait() != 0
    assert failure(p1.out)["message"] == f"process 0 at 127.0.0.1:{c.addresses[0][1]} refused us: authentication failed"
    # one or both of its connections (frames, heartbeats): the first refusal ends its join
    reasons = [reason for _, reason in refusals(p0, 0)]
    assert set(reasons) == {"process 1 failed authentication (wrong secret)"} and len(reasons) <= 2, reasons
    assert failure(p0.out)["message"] == f"process 0: processes [1] did not join within {CONNECT_TIMEOUT} s"


class FakeListener:
    """Plays process 0's listening side in the test process: sends a greeting, reads the hello,
    then answers as `answer` says (a thread; closes everything on `close`)."""

    def __init__(self, address: tuple[str, int], answer: Callable[[socket.socket, dict[str, Any]], None]) -> None:
        self.server = socket.create_server(address)
        self.answer = answer
        self.hellos: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(RUN_TIMEOUT)
        try:
            conn, _ = self.server.accept()
            with conn:
                conn.settimeout(RUN_TIMEOUT)
                write_frame(conn, {"magic": MAGIC, "process": 0, "nonce": os.urandom(16)})
                hello = read_frame(conn)
                self.hellos.append(hello)
                self.answer(conn, hello)
        except BaseException as exc:
            self.errors.append(exc)

    def close(self) -> None:
        self.server.close()
        self.thread.join(timeout=RUN_TIMEOUT)


def test_a_listener_without_the_secret_cannot_pass_for_a_peer(cluster: Any) -> None:
    # Mutual authentication: a fake process 0 that accepts anyone cannot prove it knows the secret.
    c = cluster(2)

    def accept_anyone(conn: socket.socket, hello: dict[str, Any]) -> None:
        write_frame(conn, {"ok": True, "mac": b"\0" * 32})
        closed_within(conn, RUN_TIMEOUT)

    fake = FakeListener(c.addresses[0], accept_anyone)
    try:
        p1 = c.start(1, "sum")
        assert p1.wait() != 0
    finally:
        fake.close()
    assert fake.hellos and fake.hellos[0]["process"] == 1 and not fake.errors
    err = failure(p1.out)
    assert err["type"] == "HandshakeError"
    assert err["message"] == f"process 0 at 127.0.0.1:{c.addresses[0][1]} failed authentication (wrong secret)"


def test_a_listener_that_hangs_up_mid_handshake_gives_a_handshake_error(cluster: Any) -> None:
    # What a real listener does to a process index it does not expect (e.g. one started twice).
    c = cluster(2)
    fake = FakeListener(c.addresses[0], lambda conn, hello: None)
    try:
        p1 = c.start(1, "sum")
        assert p1.wait() != 0
    finally:
        fake.close()
    # A HandshakeError naming the peer, not a bare asyncio.IncompleteReadError (as before the fix).
    err = failure(p1.out)
    assert err["type"] == "HandshakeError", p1.describe()
    assert f"process 0 at 127.0.0.1:{c.addresses[0][1]}" in err["message"], err


# 3. A different program --------------------------------------------------------------------------


def test_a_process_running_a_different_program_is_refused_on_both_sides(cluster: Any) -> None:
    c = cluster(2)
    p0 = c.start(0, "sum", TEST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT))
    p1 = c.start(1, "sum-variant", TEST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT))
    assert p1.wait() != 0 and p0.wait() != 0
    assert "JOINED" not in p0.out + p1.out

    ours = Dataflow.build(net_programs.build_sum, 0, 2, 1)[2].fingerprint()
    theirs = Dataflow.build(net_programs.build_sum_variant, 1, 2, 1)[2].fingerprint()
    assert ours != theirs
    err = failure(p1.out)
    assert err["type"] == "HandshakeError"
    assert err["message"] == f"process 0 at 127.0.0.1:{c.addresses[0][1]} refused us: different program"
    # One or both of its two connections: the first refused names the program; process 1 exits
    # on that refusal, so the second may close before its hello is read.
    different = f"process 1 runs a different program (graph {theirs!r}, ours {ours!r})"
    reasons = [reason for _, reason in refusals(p0, 0)]
    assert different in reasons, reasons
    assert set(reasons) <= {different, "the connection closed during the handshake"}, reasons
    assert len(reasons) <= 2
    assert failure(p0.out)["message"] == f"process 0: processes [1] did not join within {CONNECT_TIMEOUT} s"


# 4. Malformed frames after the handshake ---------------------------------------------------------

BAD_FRAMES = {
    # what the fake process 1 writes (net_programs.bad_bytes) -> the PeerError process 0 fails with
    "oversize": rf"lost the connection to process 1: refusing a frame of {MAX_FRAME + 1} bytes: "
    rf"the limit is {MAX_FRAME} bytes",
    "garbage": r"bad frame from process 1: malformed frame: \w+",
    "unknown-kind": r"bad frame from process 1: unknown frame kind 99",
    "bad-records": r"bad frame from process 1: malformed batch of records",
    "truncated": r"lost the connection to process 1: the stream ended in the middle of a frame: "
    r"10 of 100 bytes arrived",
    "expanding": r"bad frame from process 1: refusing a DATA frame of \d+ bytes: decoded, it could take more "
    r"than the decode budget of 256 MiB",
    "too-deep": r"bad frame from process 1: refusing a frozenset \(\d+ bytes\): nested more than 16 levels",
}


@pytest.mark.parametrize("kind", list(BAD_FRAMES))
def test_a_malformed_frame_after_the_handshake_fails_the_process_naming_the_peer(cluster: Any, kind: str) -> None:
    c = cluster(2)
    real = c.start(0, "wait")
    fake = c.spawn([sys.executable, str(PROGRAM), "fake-peer", kind], c.env(1), "fake1")
    fake.wait_for(r"^JOINED ")  # a genuine handshake: the real process accepted it
    joined = time.monotonic()
    assert real.wait() != 0
    assert time.monotonic() - joined < SOON, real.describe()
    err = failure(real.out)
    assert err["type"] == "PeerError", real.describe()
    assert re.search(BAD_FRAMES[kind], err["message"]), err
    assert err["info"]["process"] == 1
    assert err["info"]["kind"] in ("FrameError", "CodecError"), err
    assert "refused a connection" not in real.err  # it was a peer, not a stranger

    # The real process closed the connection, and told its peer why first (unless the peer had
    # already closed its side, as the truncating one does: then the answer is not owed).
    assert fake.wait() == 0, fake.describe()
    assert "LOST " in fake.out and "TIMEOUT" not in fake.out, fake.describe()
    if kind != "truncated":
        got = [json.loads(line[4:]) for line in fake.out.splitlines() if line.startswith("GOT ")]
        errors = [m[1] for m in got if m[0] == 3]  # ERROR frames
        assert errors, fake.describe()
        assert errors[0]["process"] == 1 and re.search(BAD_FRAMES[kind], errors[0]["message"]), errors


def test_a_peers_negative_progress_delta_never_makes_a_process_exit_0_without_its_goodbye(cluster: Any) -> None:
    # The fake process 1 sends -1 for its own input capability: process 0's view becomes
    # empty while process 1 is still in the computation. Process 0 used to say goodbye, wait
    # 10 s for process 1's, log a warning, and exit 0; it now waits for the goodbye, and fails
    # when process 1 goes without one.
    c = cluster(2)
    real = c.start(0, "quiet")
    fake = c.spawn([sys.executable, str(PROGRAM), "fake-peer", "negative-progress"], c.env(1), "fake1")
    assert fake.wait() == 0, fake.describe()
    assert "LEAVING" in fake.out
    assert real.wait() != 0, real.describe()
    err = failure(real.out)
    assert err["type"] == "PeerError" and err["info"]["process"] == 1, err
    assert "lost the connection to process 1" in err["message"], err


# Frames that arrive while a process is still joining ---------------------------------------------
# A peer that has finished joining runs and sends at once, possibly to a process that is still in
# TcpTransport.join: its frames must be kept until the runtime takes them, not dropped (which lost
# progress and hung `timely run -n 4` about once in 30 runs before the transport kept them).


async def test_a_frame_buffered_when_join_returns_reaches_the_handlers() -> None:
    from timely.net import tcp
    from timely.net.framing import frame

    addresses = free_addresses(2)
    secret, fingerprint = secrets.token_bytes(32), "fingerprint"
    listening = asyncio.ensure_future(tcp.TcpTransport.join(0, addresses, secret, fingerprint, connect_timeout=10))
    for _ in range(500):
        try:
            reader, writer = await asyncio.open_connection(*addresses[0])
            break
        except OSError:
            await asyncio.sleep(0.01)
    try:
        # A genuine process 1, which sends its first frame right behind its hello (a fast peer
        # whose frame arrives before this process's join has returned); and its heartbeats.
        greeting = await tcp._receive(reader)
        nonce = os.urandom(16)
        mac = tcp._mac(secret, b"join", greeting["nonce"], nonce, fingerprint, 1, 0)
        hello = {"magic": MAGIC, "process": 1, "fingerprint": fingerprint, "nonce": nonce, "mac": mac}
        writer.write(frame(msgpack.packb(hello, use_bin_type=True)) + frame(b"early"))
        beat_reader, beat_writer = await asyncio.open_connection(*addresses[0])
        greeting = await tcp._receive(beat_reader)
        mac = tcp._mac(secret, b"join/beat", greeting["nonce"], nonce, fingerprint, 1, 0)
        await tcp._send(beat_writer, {**hello, "channel": "beat", "mac": mac})
        transport = await asyncio.wait_for(listening, 10)
        got: list[Any] = []
        transport.set_handlers(lambda peer, payload: got.append(payload), lambda peer, exc: got.append(exc))
        assert (await tcp._receive(reader))["ok"]
        writer.write(frame(b"later"))
        for _ in range(200):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.01)
        assert got == [b"early", b"later"]  # the early frame is kept for the handlers, in order
        assert transport.frames_received == 2
    finally:
        writer.close()
        if listening.done() and not listening.cancelled() and listening.exception() is None:
            await listening.result().close()
            beat_writer.close()


def test_frames_sent_to_a_process_still_joining_are_not_lost(cluster: Any) -> None:
    # p2 joins p1 at once but p0 only a second later: p1 finishes joining and runs (sending its
    # data and progress to p0 and p2) while p0 and p2 are still joining.
    c = cluster(3)
    procs = [
        c.start(i, "sum", TEST_RUN_TIMEOUT="5", **({"TEST_DELAY_CONNECT": "0:1.0"} if i == 2 else {})) for i in range(3)
    ]
    codes = [p.wait() for p in procs]
    assert codes == [0, 0, 0], "\n".join(p.describe() for p in procs)
    assert result(procs[0].out)["sum"] == net_programs.EXPECTED_SUM


# What a failing process tells its peers --------------------------------------------------------


def test_a_process_that_times_out_tells_its_peers_why(cluster: Any) -> None:
    # Process 0's final run gives up (StalledError) while process 1 is still in its `with` block;
    # before the fix, process 0's runtime was cancelled and its peers were told only
    # "process 0 failed: " (kind CancelledError).
    c = cluster(2)
    p0 = c.start(0, "stall", TEST_RUN_TIMEOUT="1.5")
    p1 = c.start(1, "stall", TEST_LINGER="3")
    assert p0.wait() != 0 and p1.wait() != 0
    own = failure(p0.out)
    assert own["type"] == "StalledError" and "the computation did not complete within" in own["message"], own
    err = failure(p1.out)
    assert err["type"] == "PeerError" and err["info"]["process"] == 0, err
    assert err["info"]["kind"] == "StalledError", err
    assert "the computation did not complete within" in err["message"], err


def test_a_failing_peers_error_frame_survives_a_reset(cluster: Any) -> None:
    # The fake process 1 fails as a process does (an ERROR frame, then it goes) but closes with a
    # reset, as a process's socket does when it closes with bytes it has not read. Meanwhile
    # process 0 is busy in a callback, after which it sends to process 1 before reading again.
    c = cluster(2)
    real = c.start(0, "slow")
    fake = c.spawn([sys.executable, str(PROGRAM), "fake-peer", "error-then-reset"], c.env(1), "fake1")
    assert fake.wait() == 0, fake.describe()
    assert "RESET" in fake.out
    assert real.wait() != 0
    err = failure(real.out)
    assert err["type"] == "PeerError", err
    assert err["info"] == net_programs.FAKE_ERROR, err
    assert err["message"] == f"process 1 failed: {net_programs.FAKE_ERROR['message']}"


# 5. A peer killed mid-run ------------------------------------------------------------------------


def test_a_peer_killed_mid_run_fails_every_other_process(spawn: Callable[..., Proc]) -> None:
    launcher = spawn(
        [*LAUNCHER, "-n", "3", "--grace", "20", str(PROGRAM), "long", "40"],
        clean_env(),
        "launcher",
    )
    ready = launcher.wait_for(r"^\[p(\d)\] READY (\d+)$", count=3)
    pids = {int(i): int(pid) for i, pid in ready}
    os.kill(pids[1], signal.SIGKILL)
    killed = time.monotonic()
    code = launcher.wait()
    elapsed = time.monotonic() - killed
    out, err = launcher.out, launcher.err
    assert code in (1, 128 + signal.SIGKILL), launcher.describe()
    assert elapsed < SOON, f"the others took {elapsed:.1f} s to stop\n{launcher.describe()}"
    summary = err.strip().splitlines()[-1]
    assert "p1 killed by SIGKILL" in summary, summary
    assert "p0 exited with status 1" in summary and "p2 exited with status 1" in summary, summary
    assert "stopped with" not in summary  # they stopped by themselves, not by the launcher's signals
    errors = {i: failure("\n".join(lines_of(out, i))) for i in (0, 2)}
    for i, e in errors.items():
        assert e["type"] == "PeerError", e
        assert not lines_of(err, i)  # the launcher's summary reports it: the process prints nothing
        assert "lost the connection to process" in e["message"], e
    # Both name process 1, the one that was killed: the first to notice directly, the other
    # perhaps from the first one's ERROR frame (before the transport half-closed its connections
    # on the way out, that frame was often lost to a reset and the other blamed the first).
    assert all(e["info"]["process"] == 1 for e in errors.values()), errors
    assert all("lost the connection to process 1" in e["message"] for e in errors.values()), errors


# 6. A user exception in one process --------------------------------------------------------------


def test_a_user_exception_in_one_process_fails_all_naming_origin_stage_and_time(spawn: Callable[..., Proc]) -> None:
    launcher = spawn(
        [*LAUNCHER, "-n", "3", "--grace", "20", str(PROGRAM), "explode"],
        clean_env(),
        "launcher",
    )
    code = launcher.wait()
    assert code == 1, launcher.describe()
    out, err = launcher.out, launcher.err
    what = "stage 'work.explode' (worker 1) raised ValueError in on_recv at time (1, (0,)): unlucky record 13"

    origin = failure("\n".join(lines_of(out, 1)))  # record 13 goes to worker 13 % 3 = 1: process 1
    assert origin["type"] == "VertexError"
    assert origin["message"] == what
    assert origin["stage"] == "work.explode" and origin["time"] == "(1, (0,))"
    # one block: the program's frames down to the user's raise, then the VertexError's line
    block = lines_of(err, 1)
    assert block[0] == "Traceback (most recent call last):" and block[-2] == f"timely.errors.VertexError: {what}"
    assert any("unlucky record" in line and "raise ValueError" in line for line in block), block
    assert not any("timely/_runtime" in line for line in block), block

    for i in (0, 2):
        e = failure("\n".join(lines_of(out, i)))
        assert e["type"] == "PeerError"
        assert e["message"] == f"process 1 failed: {what}"
        assert e["info"] == {
            "process": 1,
            "stage": "work.explode",
            "worker": 1,
            "time": "(1, (0,))",
            "kind": "ValueError",
            "message": what,
        }
        assert not lines_of(err, i)  # process 1 said it; the launcher's summary names them all
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("timely: ") and summary.endswith("exit status 1") and "stopped with" not in summary


# 7. An unencodable record ------------------------------------------------------------------------


def test_an_unencodable_record_is_a_codec_error_naming_the_type_stage_and_time(spawn: Callable[..., Proc]) -> None:
    launcher = spawn([*LAUNCHER, "-n", "2", "--grace", "20", str(PROGRAM), "unencodable"], clean_env(), "launcher")
    assert launcher.wait() == 1, launcher.describe()
    sender = failure("\n".join(lines_of(launcher.out, 0)))
    receiver = failure("\n".join(lines_of(launcher.out, 1)))
    # The records of stage 'wrap' (an Opaque each) that go to worker 1 must be encoded: in
    # process 0, in wrap's callback, at time (0).
    assert sender["type"] == "CodecError"
    assert "cannot encode a record of type 'Opaque' (module __main__)" in sender["message"]
    assert "register_codec(Opaque, encode, decode)" in sender["message"]
    # (before the fix the error named neither the stage nor the time)
    assert sender["stage"] == "wrap" and sender["time"] == "(0)", sender
    assert "'wrap'" in sender["message"] and "(0)" in sender["message"], sender
    assert receiver["type"] == "PeerError"
    assert receiver["message"] == f"process 0 failed: {sender['message']}"
    assert receiver["info"]["process"] == 0 and receiver["info"]["kind"] == "CodecError"
    assert receiver["info"]["stage"] == "wrap" and receiver["info"]["time"] == "(0)", receiver


# The simulated cluster ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_simulated_cluster_reports_a_vertex_failure_to_every_process(seed: int) -> None:
    what = "stage 'work.explode' (worker 1) raised ValueError in on_recv at time (1, (0,)): unlucky record 13"
    with pytest.raises(timely.TimelyError) as info:
        async with simulated(net_programs.build_explode, processes=3, seed=seed, timeout=30) as runs:
            inp = runs[0][1]
            inp.send([r for r in range(20) if r != 13])
            inp.advance_to(1)
            inp.send([13])
    failures = [comp.runtime.failure for comp, _ in runs]
    origin = failures[1]
    assert isinstance(origin, timely.VertexError) and str(origin) == what
    assert isinstance(origin.__cause__, ValueError)
    for i in (0, 2):
        err = failures[i]
        assert isinstance(err, timely.PeerError), err
        assert str(err) == f"process 1 failed: {what}"
        assert err.process == 1 and err.stage == "work.explode" and err.info["time"] == "(1, (0,))"
    assert info.value is failures[0]
