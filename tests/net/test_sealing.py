"""Sealed frames and the sealed handshake, in one process: the pure parts (`timely.net._seal`),
the policy that decides when connections are sealed, and `TcpTransport.join` over loopback with
fake peers that follow the protocol by hand (to strip the encryption, or to send their first
heartbeat right behind the handshake). The attacks through a relay between real processes are in
test_encryption.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any

import msgpack
import pytest

from tests.support import free_addresses
from timely._runtime.config import ClusterConfig, ClusterConfigError, encryption_for
from timely.errors import HandshakeError
from timely.net import tcp
from timely.net._seal import TAG_BYTES, IntegrityError, KeyShare, Opener, Sealer, session
from timely.net.framing import frame

SECRET = bytes(range(32))


# The frames ------------------------------------------------------------------------------------


def test_frames_open_only_once_in_the_order_they_were_sealed() -> None:
    key = os.urandom(32)
    payloads = [b"", b"a", os.urandom(100), os.urandom(5000)]
    sealer = Sealer(key)
    sealed = [sealer.seal(p) for p in payloads]
    assert [len(s) - len(p) for s, p in zip(sealed, payloads, strict=True)] == [TAG_BYTES] * 4
    assert all(p not in s for s, p in zip(sealed, payloads, strict=True) if len(p) > 8)  # not in clear
    for order in itertools.permutations(range(4)):
        opener = Opener(key, "the test connection")
        for position, i in enumerate(order):
            if i != position:  # replayed, reordered or a frame dropped before it: refused
                with pytest.raises(IntegrityError, match=f"frame {position} on the test connection"):
                    opener.open(sealed[i])
                break
            assert opener.open(sealed[i]) == payloads[i]


def test_a_changed_or_cut_frame_or_another_key_does_not_open() -> None:
    key = os.urandom(32)
    sealed = Sealer(key).seal(b"x" * 64)
    changes = [
        bytes([sealed[0] ^ 1]) + sealed[1:],
        sealed[:-1] + bytes([sealed[-1] ^ 0x80]),
        sealed[:-8],
        sealed + b"\0",
        os.urandom(len(sealed)),
    ]
    for bad in changes:
        with pytest.raises(IntegrityError):
            Opener(key, "c").open(bad)
    with pytest.raises(IntegrityError):
        Opener(os.urandom(32), "c").open(sealed)
    assert Opener(key, "c").open(sealed) == b"x" * 64  # the control: intact, it opens


def test_each_direction_and_each_connection_has_its_own_keys() -> None:
    a, b = KeyShare(), KeyShare()
    shared = a.shared(b.public)
    assert shared == b.shared(a.public)
    n1, n2 = os.urandom(16), os.urandom(16)
    keys = session(SECRET, shared, n1, n2, "fp", 0, 1, "data")
    assert keys == session(SECRET, shared, n1, n2, "fp", 0, 1, "data")
    assert keys[0] != keys[1]
    others = [
        session(SECRET, shared, n1, n2, "fp", 0, 1, "beat"),
        session(SECRET, shared, n2, n1, "fp", 0, 1, "data"),
        session(SECRET, shared, n1, n2, "other", 0, 1, "data"),
        session(SECRET, shared, n1, n2, "fp", 1, 0, "data"),
        session(bytes(32), shared, n1, n2, "fp", 0, 1, "data"),
        session(SECRET, KeyShare().shared(b.public), n1, n2, "fp", 0, 1, "data"),
    ]
    used = {k for pair in others for k in pair}
    assert not used & set(keys) and len(used) == 2 * len(others)
    with pytest.raises(ValueError):
        a.shared(b"\0" * 31)


# When connections are sealed -------------------------------------------------------------------


def cluster(*hosts: str) -> ClusterConfig:
    return ClusterConfig(len(hosts), 0, [(h, 7000 + i) for i, h in enumerate(hosts)], 1, SECRET)


def test_sealed_by_default_off_loopback_or_with_pickle_and_on_request(caplog: pytest.LogCaptureFixture) -> None:
    env: dict[str, str] = {}
    assert encryption_for(cluster("127.0.0.1", "127.0.0.2"), None, False, env) is False
    assert encryption_for(cluster("localhost", "::1"), None, False, env) is False
    assert encryption_for(cluster("127.0.0.1", "10.0.0.2"), None, False, env) is True
    assert encryption_for(cluster("127.0.0.1", "worker-2"), None, False, env) is True  # a name: maybe off it
    assert encryption_for(cluster("127.0.0.1", "127.0.0.2"), None, True, env) is True  # pickle
    assert encryption_for(cluster("127.0.0.1", "127.0.0.2"), True, False, env) is True
    assert encryption_for(cluster("127.0.0.1", "127.0.0.2"), None, False, {"TIMELY_ENCRYPT": "1"}) is True
    assert encryption_for(cluster("127.0.0.1"), True, True, env) is False  # one process: no connection
    assert encryption_for(None, True, True, env) is False
    with caplog.at_level(logging.WARNING, logger="timely.net"):
        assert encryption_for(cluster("127.0.0.1", "10.0.0.2"), None, False, {"TIMELY_ENCRYPT": "0"}) is False
    assert "10.0.0.2 travel in clear" in caplog.text
    for requested, env in ((False, {}), (None, {"TIMELY_ENCRYPT": "0"})):
        with pytest.raises(ClusterConfigError, match="pickle refuses to run over connections in clear"):
            encryption_for(cluster("127.0.0.1", "127.0.0.2"), requested, True, env)
    with pytest.raises(ClusterConfigError, match="TIMELY_ENCRYPT='maybe'"):
        encryption_for(cluster("127.0.0.1", "127.0.0.2"), None, False, {"TIMELY_ENCRYPT": "maybe"})


# The handshake ---------------------------------------------------------------------------------


async def test_processes_with_different_settings_refuse_each_other_saying_why() -> None:
    addresses = free_addresses(2)
    for listener, joiner in ((True, False), (False, True)):
        results = await asyncio.gather(
            tcp.TcpTransport.join(0, addresses, SECRET, "fp", encrypt=listener, connect_timeout=3),
            tcp.TcpTransport.join(1, addresses, SECRET, "fp", encrypt=joiner, connect_timeout=3),
            return_exceptions=True,
        )
        assert isinstance(results[1], HandshakeError), results
        said = "encrypts" if listener else "does not encrypt"
        assert f"process 0 at 127.0.0.1:{addresses[0][1]} {said} its connections" in str(results[1])
        assert "same setting" in str(results[1])
        for r in results:
            if isinstance(r, tcp.TcpTransport):
                await r.close(0.5)


async def sealed_listener(addresses: list[tuple[str, int]]) -> asyncio.Future[tcp.TcpTransport]:
    return asyncio.ensure_future(
        tcp.TcpTransport.join(0, addresses, SECRET, "fp", encrypt=True, connect_timeout=5, peer_timeout=5)
    )


async def connect(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    for _ in range(500):
        try:
            return await asyncio.open_connection(*address)
        except OSError:
            await asyncio.sleep(0.01)
    raise AssertionError("the listener never listened")


async def test_stripping_the_encryption_from_the_handshake_fails_authentication(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A genuine sealed joiner's hello, with its key share removed on the way: the listener takes
    # the connection for one in clear, and the joiner's MAC (over a sealed connection's role and
    # both key shares) does not match, so it is refused as unauthenticated, not downgraded.
    addresses = free_addresses(2)
    listening = await sealed_listener(addresses)
    reader, writer = await connect(addresses[0])
    try:
        greeting = await tcp._receive(reader)
        share, nonce = KeyShare(), os.urandom(16)
        theirs = greeting["nonce"] + greeting["seal"]
        mac = tcp._mac(SECRET, tcp._role(b"join", "data", True), theirs, nonce + share.public, "fp", 1, 0)
        hello = {"magic": tcp.MAGIC, "process": 1, "fingerprint": "fp", "nonce": nonce, "mac": mac}
        with caplog.at_level(logging.WARNING, logger="timely.net"):
            await tcp._send(writer, hello)  # no "seal": stripped
            answer = await tcp._receive(reader)
        assert answer == {"ok": False, "reason": "authentication failed"}
        assert "process 1 failed authentication" in caplog.text
        # The control: a clear hello that is honest about it is authenticated, then refused for
        # its setting.
        reader2, writer2 = await connect(addresses[0])
        greeting = await tcp._receive(reader2)
        mac = tcp._mac(SECRET, b"join", greeting["nonce"], nonce, "fp", 1, 0)
        await tcp._send(writer2, {**hello, "mac": mac})
        assert await tcp._receive(reader2) == {"ok": False, "reason": "different encryption setting"}
        writer2.close()
    finally:
        writer.close()
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)


async def fake_sealed_joiner(
    address: tuple[str, int], channel: str, extra: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Sealer, Opener]:
    """Join as process 1 by hand, sending ``extra`` (already sealed frames) right behind the hello."""
    reader, writer = await connect(address)
    greeting = await tcp._receive(reader)
    share, nonce = KeyShare(), os.urandom(16)
    theirs = greeting["nonce"] + greeting["seal"]
    to_joiner, to_listener = session(
        SECRET, share.shared(greeting["seal"]), greeting["nonce"], nonce, "fp", 0, 1, channel
    )
    sealer = Sealer(to_listener)
    mac = tcp._mac(SECRET, tcp._role(b"join", channel, True), theirs, nonce + share.public, "fp", 1, 0)
    hello: dict[str, Any] = {"magic": tcp.MAGIC, "process": 1, "fingerprint": "fp", "nonce": nonce}
    if channel != "data":
        hello["channel"] = channel
    hello.update(seal=share.public, mac=mac)
    writer.write(frame(msgpack.packb(hello, use_bin_type=True)) + extra)
    return reader, writer, sealer, Opener(to_joiner, "fake")


async def test_heartbeats_sent_right_behind_the_handshake_are_not_lost() -> None:
    # A regression: the handshake's reader kept a fast peer's first beats, which the heartbeat
    # thread never saw; in clear one lost byte did not matter, sealed the next beat's number was
    # off and a run of two processes failed now and then at start with "frame 0 on the heartbeat
    # connection ... failed its integrity check".
    addresses = free_addresses(2)
    listening = await sealed_listener(addresses)
    data = await fake_sealed_joiner(addresses[0], "data")
    # the beat connection's greeting must be read before we can seal: send the first beats with it
    reader, writer = await connect(addresses[0])
    greeting = await tcp._receive(reader)
    share, nonce = KeyShare(), os.urandom(16)
    to_joiner, to_listener = session(
        SECRET, share.shared(greeting["seal"]), greeting["nonce"], nonce, "fp", 0, 1, "beat"
    )
    sealer = Sealer(to_listener)
    theirs = greeting["nonce"] + greeting["seal"]
    mac = tcp._mac(SECRET, tcp._role(b"join", "beat", True), theirs, nonce + share.public, "fp", 1, 0)
    hello = {"magic": tcp.MAGIC, "process": 1, "fingerprint": "fp", "nonce": nonce, "channel": "beat"}
    beats = b"".join(frame(sealer.seal(b"")) for _ in range(3))
    writer.write(frame(msgpack.packb({**hello, "seal": share.public, "mac": mac}, use_bin_type=True)) + beats)
    transport = await asyncio.wait_for(listening, 10)
    lost: list[BaseException] = []
    got: list[bytes] = []
    transport.set_handlers(lambda peer, payload: got.append(payload), lambda peer, exc: lost.append(exc))
    try:
        assert (await tcp._receive(data[0]))["ok"] and (await tcp._receive(reader))["ok"]
        data[1].write(frame(data[2].seal(b"hello")))
        for _ in range(30):
            writer.write(frame(sealer.seal(b"")))
            await asyncio.sleep(0.02)
        assert got == [b"hello"] and lost == []
        # the control: a beat out of order is refused, naming the connection and the peer
        sealer.sent += 1
        writer.write(frame(sealer.seal(b"")))
        for _ in range(200):
            if lost:
                break
            await asyncio.sleep(0.01)
        assert len(lost) == 1 and "heartbeat connection from process 1 failed its integrity check" in str(lost[0])
    finally:
        await transport.close(0.5)
        writer.close()
        data[1].close()
