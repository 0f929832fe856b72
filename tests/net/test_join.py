"""Joining a cluster, seen by someone without the secret: the shared secret's strength, and the
order of the listener's checks (authentication before the program's fingerprint).

In one process: a real `TcpTransport.join` listens on loopback while the test speaks the
handshake by hand, as a stranger would."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest

import timely
from tests.support import free_addresses
from timely._runtime.config import ClusterConfig, ClusterConfigError, cluster_from_env
from timely.net import tcp
from timely.net.framing import frame

SECRET = secrets.token_bytes(32)
FINGERPRINT = "the cluster's program"


# Secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 8, 15])
def test_secrets_shorter_than_16_bytes_are_refused_with_a_clear_error(length: int) -> None:
    short = secrets.token_bytes(length)
    addresses = "127.0.0.1:7000,127.0.0.1:7001"
    env = {"TIMELY_PROCESSES": "2", "TIMELY_PROCESS_INDEX": "0", "TIMELY_ADDRESSES": addresses}
    with pytest.raises(ClusterConfigError, match=rf"TIMELY_SECRET is {length} bytes; it must be at least 16 random"):
        cluster_from_env({**env, "TIMELY_SECRET": short.hex()})
    with pytest.raises(ClusterConfigError, match=rf"the shared secret is {length} bytes; it must be at least 16"):
        ClusterConfig(2, 0, [("127.0.0.1", 7000), ("127.0.0.1", 7001)], 1, short)
    with pytest.raises(timely.HandshakeError, match=rf"the shared secret is {length} bytes; it must be at least 16"):
        asyncio.run(tcp.TcpTransport.join(0, [("127.0.0.1", 7000), ("127.0.0.1", 7001)], short, FINGERPRINT))
    # 16 bytes will do.
    config = cluster_from_env({**env, "TIMELY_SECRET": secrets.token_bytes(16).hex()})
    assert config is not None and len(config.secret) == 16


def test_the_launcher_refuses_a_short_secret_before_it_starts_anything(tmp_path: Any) -> None:
    program = tmp_path / "prog.py"
    program.write_text("raise SystemExit('started')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIMELY_")}
    env["TIMELY_SECRET"] = "abcd" * 3  # 6 bytes
    done = subprocess.run(
        [sys.executable, "-m", "timely.cli", "run", "-n", "2", str(program)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "TIMELY_SECRET is 6 bytes; it must be at least 16 random bytes" in done.stderr, done.stderr
    assert "started" not in done.stderr


# Authentication before the fingerprint ----------------------------------------------------------


@pytest.fixture
async def listener() -> AsyncIterator[tuple[str, int]]:
    """Process 0 of a two-process cluster, listening (process 1 never comes)."""
    addresses = free_addresses(2)
    joining = asyncio.ensure_future(tcp.TcpTransport.join(0, addresses, SECRET, FINGERPRINT, connect_timeout=20))
    yield addresses[0]
    joining.cancel()
    await asyncio.gather(joining, return_exceptions=True)


async def connect(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the listener, retried until it listens."""
    for _ in range(500):
        try:
            return await asyncio.open_connection(*address)
        except OSError:
            await asyncio.sleep(0.01)
    return await asyncio.open_connection(*address)


async def knock(address: tuple[str, int], secret: bytes, fingerprint: str) -> dict[str, Any]:
    """Speak the joiner's side of the handshake as process 1; the listener's answer."""
    reader, writer = await connect(address)
    try:
        greeting = await tcp._receive(reader)
        nonce = os.urandom(16)
        mac = tcp._mac(secret, b"join", greeting["nonce"], nonce, fingerprint, 1, 0)
        hello = {"magic": tcp.MAGIC, "process": 1, "fingerprint": fingerprint, "nonce": nonce, "mac": mac}
        await tcp._send(writer, hello)
        return await asyncio.wait_for(tcp._receive(reader), 10)  # type: ignore[no-any-return]
    finally:
        writer.close()


async def test_the_fingerprint_is_checked_only_after_authentication(listener: tuple[str, int]) -> None:
    wrong = secrets.token_bytes(32)
    # Without the secret, the right and a wrong fingerprint get the same answer: a stranger
    # cannot confirm a guessed fingerprint (before, the right one got "authentication failed"
    # and a wrong one "different program").
    right_guess = await knock(listener, wrong, FINGERPRINT)
    wrong_guess = await knock(listener, wrong, "another program")
    assert right_guess == wrong_guess == {"ok": False, "reason": "authentication failed"}
    # With the secret, a different program is told so.
    assert await knock(listener, SECRET, "another program") == {"ok": False, "reason": "different program"}


async def test_a_greeting_whose_fingerprint_is_not_a_string_is_refused(listener: tuple[str, int]) -> None:
    reader, writer = await connect(listener)
    try:
        await tcp._receive(reader)
        hello = {"magic": tcp.MAGIC, "process": 1, "fingerprint": 7, "nonce": os.urandom(16), "mac": b"x"}
        writer.write(frame(msgpack.packb(hello, use_bin_type=True)))
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed without an answer
    finally:
        writer.close()


# Strangers still mid-handshake when the cluster has joined ------------------------------------


async def test_a_stranger_mid_handshake_when_the_join_completes_is_refused_and_leaves_no_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before, its handshake task was left pending inside a closed server, and a short computation
    # ending within the handshake's 5 s printed "Task was destroyed but it is pending!".
    addresses = free_addresses(2)
    zero = asyncio.ensure_future(tcp.TcpTransport.join(0, addresses, SECRET, FINGERPRINT, connect_timeout=20))
    reader, writer = await connect(addresses[0])  # a stranger that says nothing after the greeting
    await tcp._receive(reader)
    one = await tcp.TcpTransport.join(1, addresses, SECRET, FINGERPRINT, connect_timeout=20)
    transport = await asyncio.wait_for(zero, 10)
    try:
        assert await asyncio.wait_for(reader.read(), 2) == b""  # refused at once, not after 5 s
        handshakes = [t for t in asyncio.all_tasks() if "on_connect" in repr(t.get_coro())]
        assert handshakes == []
        assert "refused a connection from" in caplog.text and "the cluster had joined" in caplog.text
    finally:
        writer.close()
        await asyncio.gather(transport.close(), one.close())


# Settings ------------------------------------------------------------------------------------------


def test_the_peer_timeout_and_the_decode_budget_come_from_the_environment_and_are_checked() -> None:
    from timely._runtime.config import decode_budget_from_env, peer_timeout_from_env

    assert peer_timeout_from_env({}) == tcp.PEER_TIMEOUT == 30.0
    assert peer_timeout_from_env({"TIMELY_PEER_TIMEOUT": "2.5"}) == 2.5
    assert decode_budget_from_env({}) == 256 << 20
    assert decode_budget_from_env({"TIMELY_DECODE_BUDGET": "64"}) == 64 << 20
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ClusterConfigError, match=rf"TIMELY_PEER_TIMEOUT='{bad}': expected a positive number"):
            peer_timeout_from_env({"TIMELY_PEER_TIMEOUT": bad})
        with pytest.raises(ClusterConfigError, match=rf"TIMELY_DECODE_BUDGET='{bad}': expected a positive number"):
            decode_budget_from_env({"TIMELY_DECODE_BUDGET": bad})


def test_the_launcher_refuses_a_peer_timeout_that_is_not_positive(tmp_path: Any) -> None:
    program = tmp_path / "prog.py"
    program.write_text("raise SystemExit('started')\n")
    done = subprocess.run(
        [sys.executable, "-m", "timely.cli", "run", "-n", "2", "--peer-timeout", "0", str(program)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--peer-timeout: '0' must be a positive number of seconds" in done.stderr
