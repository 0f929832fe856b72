"""TCP between real processes: one authenticated connection per pair, FIFO per pair.

Joining. Process ``i`` listens on its own address and connects to every process ``j < i``;
it accepts connections from every ``j > i``. Each new connection runs a handshake before it
may carry anything:

    listener  -> joiner    {magic, process, nonce_l}
    joiner    -> listener  {magic, process, fingerprint, nonce_j, mac_j}
    listener  -> joiner    {ok, mac_l}   or   {ok: false, reason}

``mac_j = HMAC-SHA256(secret, "join" | nonce_l | nonce_j | fingerprint | j | i)`` and
``mac_l`` likewise with "listen" and the nonces swapped: each side proves it knows the
shared secret, bound to fresh nonces (no replay), to both indices and to the graph's
fingerprint. The listener checks the joiner's MAC before it compares fingerprints, so only a
holder of the secret learns that it runs a different program (refused, with that reason); a
stranger cannot confirm a guessed fingerprint. A
connection that fails any check, sends garbage, or stays silent for `HANDSHAKE_SECONDS` is
refused and logged; until the handshake succeeds nothing it sends reaches the runtime.

Sealed connections (``encrypt=True``; docs/network.md says when that is the default): the
greeting and the hello also carry X25519 key shares (``seal``), the MACs' role says "sealed"
and their nonces take in both shares, so nothing on the path can swap the shares or strip the
encryption; each connection derives its keys from the secret and the Diffie-Hellman secret
(`_seal.session`) and every frame after the handshake, heartbeats included, is sealed and
numbered (`_seal.Sealer`, `_seal.Opener`). A frame that does not open fails the connection
with an `IntegrityError` naming the peer; nothing of it, nor after it, reaches the runtime.
Processes with different settings refuse each other, saying so.

Frames are length-prefixed (`framing`), bounded by a maximum size; TCP_NODELAY is set.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import selectors
import socket
import struct
import threading
import time
from typing import Any

import msgpack

from ..errors import FrameError, HandshakeError
from ._seal import KEY_SHARE_BYTES, TAG_BYTES, IntegrityError, KeyShare, Opener, Sealer, session
from .framing import MAX_FRAME, FrameReader, frame_header
from .transport import SilentPeerError, Transport

__all__ = [
    "TcpTransport",
    "Heartbeats",
    "HANDSHAKE_SECONDS",
    "IntegrityError",
    "MIN_SECRET_BYTES",
    "PEER_TIMEOUT",
    "check_secret",
    "off_loopback",
]

log = logging.getLogger("timely.net")

MAGIC = "timely/1"
HANDSHAKE_SECONDS = 5.0
HANDSHAKE_MAX_FRAME = 4096
PEER_TIMEOUT = 30.0
"""Seconds without a heartbeat after which a peer counts as hung, stopped or cut off."""
HEARTBEAT_SECONDS = 1.0
"""At most how long between two heartbeats (a tenth of the peer timeout when that is shorter)."""
MIN_SECRET_BYTES = 16
"""The shortest shared secret accepted: 128 bits, so that it cannot be guessed."""
BEAT_MAX_FRAME = 64
"""The largest heartbeat frame accepted on a sealed heartbeat connection (a beat is 16 bytes)."""
HIGH_WATER = 4 << 20
"""Outgoing bytes queued for one peer above which the transport reports congestion."""


def check_secret(secret: bytes, where: str = "the shared secret") -> str | None:
    """Why ``secret`` is too weak to authenticate a cluster, or None if it will do."""
    if len(secret) < MIN_SECRET_BYTES:
        return (
            f"{where} is {len(secret)} bytes; it must be at least {MIN_SECRET_BYTES} random bytes "
            f"(32 recommended), or anyone who can reach the ports can guess it"
        )
    return None


DATA_CHANNEL = "data"
"""The connection that carries a pair's frames."""
BEAT_CHANNEL = "beat"
"""The pair's second connection: heartbeats only, sent and read by a thread (see `Heartbeats`)."""
CHANNELS = (DATA_CHANNEL, BEAT_CHANNEL)
_SAME_SETTING = "run every process with the same setting (timely run --encrypt / --no-encrypt, or execute(encrypt=...))"


def off_loopback(hosts: list[str]) -> list[str]:
    """The hosts of ``hosts`` that may be off this machine: every one but a loopback address
    or ``localhost`` (a name is not resolved: it counts as off loopback)."""
    found = []
    for host in hosts:
        if host.lower() == "localhost":
            continue
        try:
            if ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass
        found.append(host)
    return found


class _Refused(Exception):
    """A connection that does not belong to this cluster."""


Keys = tuple[bytes, bytes]
"""A sealed connection's keys, as this side uses them: (sending, receiving)."""


class _Peer:
    def __init__(
        self,
        index: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        channel: str = DATA_CHANNEL,
        keys: Keys | None = None,
    ) -> None:
        self.index = index
        self.reader = reader
        self.writer = writer
        self.channel = channel
        self.keys = keys
        self.protocol: _FrameProtocol | None = None


class _FrameProtocol(asyncio.Protocol):
    """An established connection: cuts the byte stream into frames and hands each to the
    runtime from ``data_received`` itself (no reader task, no extra event-loop hop)."""

    def __init__(self, owner: TcpTransport, peer: int, opener: Opener | None = None) -> None:
        self.owner = owner
        self.peer = peer
        self.opener = opener
        """Opens sealed frames; None on a connection in clear."""
        self.frames = FrameReader(owner.max_frame + (TAG_BYTES if opener is not None else 0))
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reported = False
        self.spare: socket.socket | None = None
        """A duplicate of the connection's socket, to read what is left when it breaks (`_rescue`)."""

    def data_received(self, data: bytes) -> None:
        if self.reported:
            return  # the connection failed (a bad frame): nothing after it is used either
        owner = self.owner
        owner.bytes_received += len(data)
        try:
            payloads = self.frames.feed(data)
        except FrameError as exc:
            self._report(exc)
            return
        opener = self.opener
        for payload in payloads:
            if opener is not None:
                try:
                    payload = opener.open(payload)
                except IntegrityError as exc:
                    self._report(exc)
                    return
            owner.frames_received += 1
            owner._deliver(self.peer, payload)

    def eof_received(self) -> bool:
        if self.owner._closing:
            return False  # the peer has finished too: close
        try:
            self.frames.eof()
        except FrameError as exc:
            self._report(exc)
        else:
            self._report(ConnectionError("connection closed"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.reported:
            self._rescue()
        if self.spare is not None:
            self.spare.close()
            self.spare = None
        self._report(exc or ConnectionError("connection closed"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _rescue(self) -> None:
        """Read what the peer sent before its connection broke, before reporting the loss.

        A failing peer sends ERROR and goes; if it closes with bytes of ours unread, its
        kernel resets the connection, and if this process writes before it reads again, the
        write fails and the event loop closes the connection with our peer's ERROR frame still
        unread in the socket: the origin of the failure would be lost. The kernel keeps that
        data readable after a reset, so it is read here through a duplicate of the socket."""
        spare = self.spare
        if spare is None:
            return
        while True:
            try:
                data = spare.recv(1 << 16)
            except OSError:
                return
            if not data:
                try:
                    self.frames.eof()  # a frame cut short says more than the broken connection
                except FrameError as exc:
                    self._report(exc)
                return
            self.data_received(data)
            if self.reported:
                return

    def _report(self, reason: BaseException) -> None:
        if not self.reported:
            self.reported = True
            if not self.owner._closing:
                self.owner._lost(self.peer, reason)


class TcpTransport(Transport):
    """Use `TcpTransport.join` to build one; it returns once every peer is connected."""

    def __init__(
        self, process_index: int, addresses: list[tuple[str, int]], max_frame: int, encrypt: bool = False
    ) -> None:
        super().__init__()
        self.process_index = process_index
        self.processes = len(addresses)
        self.addresses = addresses
        self.max_frame = max_frame
        self.encrypt = encrypt
        """Whether every connection is sealed (`_seal`): confidential, authenticated, in order."""
        self.peers: dict[int, _Peer] = {}
        self._sealers: dict[int, Sealer] = {}
        self.refused = 0
        self._closing = False
        self.heartbeats: Heartbeats | None = None

    # Joining ----------------------------------------------------------------------------------
    @classmethod
    async def join(
        cls,
        process_index: int,
        addresses: list[tuple[str, int]],
        secret: bytes,
        fingerprint: str,
        *,
        bind: str | None = None,
        connect_timeout: float = 30.0,
        max_frame: int = MAX_FRAME,
        peer_timeout: float | None = PEER_TIMEOUT,
        encrypt: bool = False,
    ) -> TcpTransport:
        """Listen, connect to the lower-indexed processes, accept the higher ones, authenticate all
        (two connections per pair: frames, and heartbeats). A peer from which nothing is heard
        on its heartbeat connection for ``peer_timeout`` seconds is reported lost (None: never).
        ``encrypt`` seals every frame after the handshake, on both connections; every process
        must say the same (a peer that does not is refused, saying so)."""
        weak = check_secret(secret)
        if weak is not None:
            raise HandshakeError(f"a cluster needs a strong shared secret (TIMELY_SECRET): {weak}")
        self = cls(process_index, addresses, max_frame, encrypt)
        expected = {(j, channel) for j in range(process_index + 1, self.processes) for channel in CHANNELS}
        accepted: asyncio.Queue[_Peer] = asyncio.Queue()
        handshaking: set[asyncio.Task[Any]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer_name = writer.get_extra_info("peername")
            task = asyncio.current_task()
            if task is not None:
                handshaking.add(task)
            try:
                index, channel, keys = await asyncio.wait_for(
                    self._listen_side(reader, writer, secret, fingerprint, expected), HANDSHAKE_SECONDS
                )
            except asyncio.CancelledError:  # the cluster joined meanwhile: no one else is expected
                log.warning("process %d refused a connection from %s: the cluster had joined", process_index, peer_name)
                writer.close()
                raise
            except Exception as exc:
                if isinstance(exc, TimeoutError):
                    reason = "no handshake within the time limit"
                elif isinstance(exc, asyncio.IncompleteReadError):
                    reason = "the connection closed during the handshake"
                elif isinstance(exc, _Refused):
                    reason = str(exc)
                else:
                    reason = f"malformed handshake ({type(exc).__name__}: {exc})"
                self.refused += 1
                log.warning("process %d refused a connection from %s: %s", process_index, peer_name, reason)
                writer.close()
                return
            finally:
                handshaking.discard(task)  # type: ignore[arg-type]
            expected.discard((index, channel))
            await accepted.put(_Peer(index, reader, writer, channel, keys))

        host, port = addresses[process_index]
        try:
            server = await asyncio.start_server(on_connect, bind or host, port, reuse_address=True)
        except OSError as exc:
            reason = "in use by another program" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise HandshakeError(
                f"process {process_index} cannot listen on {bind or host}:{port}: {reason}; choose another port "
                f"(timely run --base-port P, or this process's line in the hosts file)"
            ) from exc
        beats: dict[int, _Peer] = {}

        def keep(peer: _Peer) -> None:
            (self.peers if peer.channel == DATA_CHANNEL else beats)[peer.index] = peer

        joins: list[asyncio.Task[_Peer]] = []
        try:
            joins = [
                asyncio.create_task(self._connect(j, secret, fingerprint, connect_timeout, channel))
                for j in range(process_index)
                for channel in CHANNELS
            ]
            for task in asyncio.as_completed(joins):
                keep(await task)
            waiting = len(CHANNELS) * (self.processes - 1 - process_index)
            deadline = asyncio.get_running_loop().time() + connect_timeout
            while waiting:
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    peer = await asyncio.wait_for(accepted.get(), max(0.0, remaining))
                except TimeoutError:
                    missing = sorted({j for j, _ in expected})
                    raise HandshakeError(
                        f"process {process_index}: processes {missing} did not join within {connect_timeout} s"
                    ) from None
                keep(peer)
                waiting -= 1
        except BaseException:
            for t in joins:
                t.cancel()
            for peer in [*self.peers.values(), *beats.values()]:
                peer.writer.close()
            raise
        finally:
            server.close()
            for t in list(handshaking):  # strangers still mid-handshake: refused, and waited for
                t.cancel()
            await asyncio.gather(*handshaking, return_exceptions=True)
        for peer in self.peers.values():
            _nodelay(peer.writer)
            self._take_over(peer)
        self.heartbeats = Heartbeats(
            self,
            {j: _detach(peer.writer) for j, peer in beats.items()},
            peer_timeout,
            {j: peer.keys for j, peer in beats.items() if peer.keys is not None},
            # what the handshake's reader took in beyond the handshake: the peer's first beats
            {j: bytes(getattr(peer.reader, "_buffer", b"")) for j, peer in beats.items()},
        )
        self.heartbeats.start()
        return self

    def _silent(self, peer: int, reason: Exception) -> None:
        """The heartbeats found ``peer`` silent, or its heartbeat connection tampered with: report
        it lost, and drop its connection (a stopped process would hold our goodbye for as long as
        it is stopped)."""
        connection = self.peers[peer]
        if connection.protocol is not None:
            connection.protocol._report(reason)
        connection.writer.transport.abort()

    def _take_over(self, peer: _Peer) -> None:
        """Move the connection from the handshake's stream reader to a frame protocol,
        passing on any bytes the reader had already buffered."""
        leftover = bytes(getattr(peer.reader, "_buffer", b""))
        opener = None
        if peer.keys is not None:
            sending, receiving = peer.keys
            self._sealers[peer.index] = Sealer(sending)
            opener = Opener(receiving, f"the data connection from process {peer.index}")
        protocol = _FrameProtocol(self, peer.index, opener)
        peer.protocol = protocol
        protocol.spare = _duplicate(peer.writer)
        peer.writer.transport.set_protocol(protocol)
        if leftover:
            protocol.data_received(leftover)
        if peer.reader.at_eof():
            protocol.eof_received()

    async def _listen_side(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        secret: bytes,
        fingerprint: str,
        expected: set[tuple[int, str]],
    ) -> tuple[int, str, Keys | None]:
        nonce = os.urandom(16)
        share = KeyShare() if self.encrypt else None
        greeting: dict[str, Any] = {"magic": MAGIC, "process": self.process_index, "nonce": nonce}
        if share is not None:
            greeting["seal"] = share.public
        await _send(writer, greeting)
        hello = await _receive(reader)
        if not isinstance(hello, dict) or hello.get("magic") != MAGIC:
            raise _Refused("not a timely peer (bad greeting)")
        index = hello.get("process")
        channel = hello.get("channel", DATA_CHANNEL)
        if not isinstance(index, int) or (index, channel) not in expected:
            raise _Refused(f"unexpected process index {index!r} (connection {channel!r})")
        theirs = hello.get("fingerprint")
        their_nonce = hello.get("nonce")
        their_share = hello.get("seal")  # present when the joiner seals its connections
        if not isinstance(their_nonce, bytes) or not isinstance(theirs, str):
            raise _Refused("malformed greeting")
        if their_share is not None and (not isinstance(their_share, bytes) or len(their_share) != KEY_SHARE_BYTES):
            raise _Refused("malformed greeting (key share)")
        sealed = their_share is not None
        ours = nonce + (share.public if sealed and share is not None else b"")
        their_part = their_nonce + (their_share or b"")
        # Authenticate first (their MAC binds the fingerprint they claim, whether they seal, and
        # both key shares), so that only a holder of the secret learns whether a fingerprint is
        # this cluster's, and no one on the path can strip or swap the key shares.
        want = _mac(secret, _role(b"join", channel, sealed), ours, their_part, theirs, index, self.process_index)
        if not hmac.compare_digest(want, hello.get("mac") or b""):
            await _send(writer, {"ok": False, "reason": "authentication failed"})
            raise _Refused(f"process {index} failed authentication (wrong secret)")
        if theirs != fingerprint:
            await _send(writer, {"ok": False, "reason": "different program"})
            raise _Refused(f"process {index} runs a different program (graph {theirs!r}, ours {fingerprint!r})")
        if sealed != self.encrypt:
            await _send(writer, {"ok": False, "reason": "different encryption setting"})
            raise _Refused(
                f"process {index} {'encrypts' if sealed else 'does not encrypt'} its connections and process "
                f"{self.process_index} {'does' if self.encrypt else 'does not'}: {_SAME_SETTING}"
            )
        keys = None
        if share is not None and their_share is not None:
            to_joiner, to_listener = session(
                secret, share.shared(their_share), nonce, their_nonce, fingerprint, self.process_index, index, channel
            )
            keys = (to_joiner, to_listener)
        mine = _mac(secret, _role(b"listen", channel, sealed), their_part, ours, fingerprint, self.process_index, index)
        await _send(writer, {"ok": True, "mac": mine})
        return index, channel, keys

    async def _connect(
        self, peer: int, secret: bytes, fingerprint: str, timeout: float, channel: str = DATA_CHANNEL
    ) -> _Peer:
        host, port = self.addresses[peer]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.02
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                break
            except OSError as exc:
                if loop.time() + delay > deadline:
                    raise HandshakeError(
                        f"process {self.process_index} could not reach process {peer} at {host}:{port}: {exc}"
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
        keys = None
        try:
            greeting = await asyncio.wait_for(_receive(reader), HANDSHAKE_SECONDS)
            if not isinstance(greeting, dict) or greeting.get("magic") != MAGIC or greeting.get("process") != peer:
                raise HandshakeError(f"{host}:{port} is not process {peer} of this cluster")
            their_nonce = greeting["nonce"]
            their_share = greeting.get("seal")
            if (their_share is not None) != self.encrypt:
                raise HandshakeError(
                    f"process {peer} at {host}:{port} {'encrypts' if their_share is not None else 'does not encrypt'} "
                    f"its connections and process {self.process_index} "
                    f"{'does' if self.encrypt else 'does not'}: {_SAME_SETTING}"
                )
            nonce = os.urandom(16)
            share = KeyShare() if self.encrypt else None
            ours = nonce + (share.public if share is not None else b"")
            their_part = their_nonce + (their_share or b"")
            if share is not None and their_share is not None:
                to_joiner, to_listener = session(
                    secret,
                    share.shared(their_share),
                    their_nonce,
                    nonce,
                    fingerprint,
                    peer,
                    self.process_index,
                    channel,
                )
                keys = (to_listener, to_joiner)
            mac = _mac(
                secret, _role(b"join", channel, self.encrypt), their_part, ours, fingerprint, self.process_index, peer
            )
            hello = {"magic": MAGIC, "process": self.process_index, "fingerprint": fingerprint, "nonce": nonce}
            if channel != DATA_CHANNEL:
                hello["channel"] = channel
            if share is not None:
                hello["seal"] = share.public
            await _send(writer, {**hello, "mac": mac})
            answer = await asyncio.wait_for(_receive(reader), HANDSHAKE_SECONDS)
        except HandshakeError:
            writer.close()
            raise
        except Exception as exc:
            writer.close()
            if isinstance(exc, asyncio.IncompleteReadError):
                raise HandshakeError(
                    f"process {peer} at {host}:{port} closed the connection during the handshake"
                ) from exc
            raise HandshakeError(f"handshake with process {peer} at {host}:{port} failed: {exc!r}") from exc
        if not isinstance(answer, dict) or not answer.get("ok"):
            writer.close()
            reason = answer.get("reason") if isinstance(answer, dict) else "no answer"
            raise HandshakeError(f"process {peer} at {host}:{port} refused us: {reason}")
        want = _mac(
            secret, _role(b"listen", channel, self.encrypt), ours, their_part, fingerprint, peer, self.process_index
        )
        if not hmac.compare_digest(want, answer.get("mac") or b""):
            writer.close()
            raise HandshakeError(f"process {peer} at {host}:{port} failed authentication (wrong secret)")
        return _Peer(peer, reader, writer, channel, keys)

    # Moving frames ----------------------------------------------------------------------------
    def send(self, peer: int, payload: bytes) -> None:
        transport = self.peers[peer].writer.transport  # not the stream's Python wrapper: a call less a frame
        length = len(payload)
        if length > self.max_frame:  # the limit is on what the runtime sends
            frame_header(length, self.max_frame)  # raises, saying so
        if self.encrypt:
            payload = self._sealers[peer].seal(payload)
            length += TAG_BYTES
        transport.writelines((_pack_length(length), payload))
        self.bytes_sent += length + 4
        self.frames_sent += 1

    def congested(self) -> bool:
        for peer in self.peers.values():
            transport = peer.writer.transport
            if transport.get_write_buffer_size() > HIGH_WATER:
                return True
        return False

    def pause_reading(self) -> None:
        for peer in self.peers.values():
            peer.writer.transport.pause_reading()  # type: ignore[attr-defined]

    def resume_reading(self) -> None:
        for peer in self.peers.values():
            peer.writer.transport.resume_reading()  # type: ignore[attr-defined]

    async def close(self, flush_seconds: float = 5.0) -> None:
        """Flush, half-close (so the peer reads everything we sent, an ERROR frame included,
        before it sees the end), wait briefly for the peer to close its side, then close. All of
        it within about ``flush_seconds``: a stopped peer's full socket must not hold us longer."""
        self._closing = True
        if self.heartbeats is not None:
            self.heartbeats.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + flush_seconds
        for peer in self.peers.values():
            transport = peer.writer.transport
            while transport.get_write_buffer_size() and loop.time() < deadline and not transport.is_closing():
                await asyncio.sleep(0.001)
            if not transport.is_closing() and transport.can_write_eof():
                try:
                    transport.write_eof()
                except OSError:
                    pass
        for peer in self.peers.values():
            if peer.protocol is not None:
                try:
                    await asyncio.wait_for(
                        asyncio.shield(peer.protocol.closed), max(0.1, min(2.0, deadline - loop.time()))
                    )
                except (TimeoutError, OSError):
                    pass
            peer.writer.transport.close()
            if peer.protocol is not None and peer.protocol.spare is not None:
                peer.protocol.spare.close()
                peer.protocol.spare = None


class Heartbeats:
    """Proves this process alive to its peers and watches that they are, from a thread of its own.

    Every pair of processes has a second connection for this: each side writes a byte to it
    at least every `HEARTBEAT_SECONDS` and reads whatever the other writes; a peer from which
    nothing arrives for the peer timeout (less one interval, so that it is reported within the
    timeout) is reported to the transport as lost with a `SilentPeerError`. A peer that closes
    its heartbeat connection is finishing (or died, which its data connection reports).

    Why a thread, and why a connection of its own: the event loop does not run while a
    callback computes, nor while a synchronous program is away from timely, for as long as
    they take; so heartbeats written by the loop would stop exactly then, and a silent peer
    could not be told from a busy one. The thread runs whatever the loop does (a Python
    callback gives up the GIL every few milliseconds), and on a connection of its own it never
    writes into the middle of a frame that the loop left half written. A process stopped with
    SIGSTOP, or cut off by the network, falls silent on both. One thing can starve the thread:
    a C extension that holds the GIL for longer than the peer timeout.
    """

    def __init__(
        self,
        owner: TcpTransport,
        sockets: dict[int, socket.socket],
        timeout: float | None,
        keys: dict[int, Keys] | None = None,
        early: dict[int, bytes] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"the peer timeout must be a positive number of seconds, not {timeout!r}")
        self.owner = owner
        self.sockets = sockets
        self.timeout = timeout
        self.interval = HEARTBEAT_SECONDS if timeout is None else min(HEARTBEAT_SECONDS, timeout / 10)
        self.loop = asyncio.get_running_loop()
        # Sealed connections (keys given): each beat is a sealed empty frame, so a beat that was
        # altered, replayed, injected or cut fails the run like a data frame would; in clear, a byte.
        self._sealers = {peer: Sealer(sending) for peer, (sending, _) in (keys or {}).items()}
        self._openers = {
            peer: Opener(receiving, f"the heartbeat connection from process {peer}")
            for peer, (_, receiving) in (keys or {}).items()
        }
        self._frames = {peer: FrameReader(BEAT_MAX_FRAME) for peer in self._openers}
        self._early = {peer: data for peer, data in (early or {}).items() if data}
        self._wakeup_r, self._wakeup_w = socket.socketpair()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"timely-heartbeats-p{owner.process_index}", daemon=True)

    def start(self) -> None:
        if self.sockets:
            self._thread.start()

    def stop(self) -> None:
        """Stop beating and watching (at once: the thread is woken), and close the connections."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._wakeup_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        for sock in (*self.sockets.values(), self._wakeup_r, self._wakeup_w):
            sock.close()

    def _beat(self, peer: int) -> bytes:
        sealer = self._sealers.get(peer)
        if sealer is None:
            return b"\0"
        sealed = sealer.seal(b"")
        return frame_header(len(sealed)) + sealed

    def _beats(self, peer: int, data: bytes) -> int:
        """How many heartbeats ``data`` from ``peer`` completes; `FrameError` (an `IntegrityError`
        when sealed) if it is not heartbeats intact."""
        frames = self._frames.get(peer)
        if frames is None:
            return len(data)  # in clear: every byte is a beat
        try:
            beats = frames.feed(data)
        except FrameError as exc:
            raise FrameError(f"the heartbeat connection from process {peer} carried something else: {exc}") from None
        opener = self._openers[peer]
        for beat in beats:
            if opener.open(beat):
                raise IntegrityError(f"a heartbeat from process {peer} carried data")
        return len(beats)

    def _run(self) -> None:
        live = dict(self.sockets)
        unsent = {peer: bytearray() for peer in live}  # a beat the socket took only part of
        selector = selectors.DefaultSelector()
        try:
            for peer, sock in live.items():
                selector.register(sock, selectors.EVENT_READ, peer)
            selector.register(self._wakeup_r, selectors.EVENT_READ, None)
            heard = dict.fromkeys(live, time.monotonic())
            for peer, data in self._early.items():
                self._received(selector, live, heard, peer, data)
            next_beat = 0.0
            while live and not self._stopped:
                now = time.monotonic()
                if now >= next_beat:
                    for peer, sock in list(live.items()):
                        pending = unsent[peer]
                        if len(pending) < BEAT_MAX_FRAME:  # else it does not read: its own silence will tell
                            pending += self._beat(peer)
                        try:
                            del pending[: sock.send(pending)]
                        except BlockingIOError:
                            pass
                        except OSError:
                            self._forget(selector, live, peer)  # gone: its data connection says how
                    next_beat = now + self.interval
                for key, _ in selector.select(max(0.0, min(next_beat - now, self.interval / 2))):
                    peer = key.data
                    if peer is None:
                        return  # woken by stop()
                    try:
                        data = key.fileobj.recv(4096)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    self._received(selector, live, heard, peer, data)
                if self.timeout is not None:
                    now = time.monotonic()
                    for peer in list(live):
                        silent = now - heard[peer]
                        if silent >= self.timeout - self.interval:
                            self._forget(selector, live, peer)
                            self._report(peer, silent)
        finally:
            selector.close()

    def _received(
        self,
        selector: selectors.BaseSelector,
        live: dict[int, socket.socket],
        heard: dict[int, float],
        peer: int,
        data: bytes,
    ) -> None:
        """Take what ``peer`` sent (nothing: it closed): a sign of life, or of an attack."""
        if not data:
            self._forget(selector, live, peer)
            frames = self._frames.get(peer)
            if frames is not None and frames.buffered:  # a sealed beat cut short: an attack
                self._fail(
                    peer,
                    FrameError(
                        f"the heartbeat connection from process {peer} ended in "
                        f"the middle of a frame ({frames.buffered} bytes of it)"
                    ),
                )
            return
        try:
            beats = self._beats(peer, data)
        except FrameError as exc:
            self._forget(selector, live, peer)
            self._fail(peer, exc)
            return
        if beats:
            heard[peer] = time.monotonic()

    @staticmethod
    def _forget(selector: selectors.BaseSelector, live: dict[int, socket.socket], peer: int) -> None:
        selector.unregister(live.pop(peer))

    def _report(self, peer: int, silent: float) -> None:
        self._fail(
            peer,
            SilentPeerError(
                f"nothing heard from process {peer} for {silent:.1f} s (the peer timeout is {self.timeout:g} s): "
                f"it is hung, stopped, or cut off by the network",
                peer,
            ),
        )

    def _fail(self, peer: int, reason: Exception) -> None:
        try:
            self.loop.call_soon_threadsafe(self.owner._silent, peer, reason)
        except RuntimeError:
            pass  # the event loop is closed: the computation is over


def _duplicate(writer: asyncio.StreamWriter) -> socket.socket:
    """A non-blocking socket on a duplicate of the connection's descriptor."""
    sock = writer.get_extra_info("socket")
    mine = socket.socket(fileno=os.dup(sock.fileno()))
    mine.setblocking(False)
    return mine


def _detach(writer: asyncio.StreamWriter) -> socket.socket:
    """The socket of a connection the handshake made, taken from the event loop for the
    heartbeat thread: a duplicate of its descriptor; the loop's side is closed."""
    mine = _duplicate(writer)
    writer.transport.abort()
    return mine


_pack_length = struct.Struct(">I").pack
"""A frame header (lengths are checked against the limit before)."""


def _role(role: bytes, channel: str, sealed: bool = False) -> bytes:
    """The role a MAC is bound to: a heartbeat connection's MAC cannot pass for a data one's,
    nor a connection in clear for a sealed one (so no one can strip the encryption)."""
    if channel != DATA_CHANNEL:
        role += b"/" + channel.encode()
    return role + b"/sealed" if sealed else role


def _mac(secret: bytes, role: bytes, a: bytes, b: bytes, fingerprint: str, x: int, y: int) -> bytes:
    msg = role + b"|" + a + b"|" + b + b"|" + fingerprint.encode() + struct.pack(">II", x, y)
    return hmac.new(secret, msg, hashlib.sha256).digest()


async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    payload = msgpack.packb(message, use_bin_type=True)
    writer.write(frame_header(len(payload)) + payload)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> Any:
    header = await reader.readexactly(4)
    (length,) = struct.unpack(">I", header)
    if length > HANDSHAKE_MAX_FRAME:
        raise FrameError(f"handshake frame of {length} bytes exceeds {HANDSHAKE_MAX_FRAME}")
    return msgpack.unpackb(await reader.readexactly(length), raw=False)


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
