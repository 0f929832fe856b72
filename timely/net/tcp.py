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

Frames are length-prefixed (`framing`), bounded by a maximum size; TCP_NODELAY is set.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
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
from .framing import MAX_FRAME, FrameReader, frame_header
from .transport import SilentPeerError, Transport

__all__ = ["TcpTransport", "Heartbeats", "HANDSHAKE_SECONDS", "MIN_SECRET_BYTES", "PEER_TIMEOUT", "check_secret"]

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


class _Refused(Exception):
    """A connection that does not belong to this cluster."""


class _Peer:
    def __init__(
        self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, channel: str = DATA_CHANNEL
    ) -> None:
        self.index = index
        self.reader = reader
        self.writer = writer
        self.channel = channel
        self.protocol: _FrameProtocol | None = None


class _FrameProtocol(asyncio.Protocol):
    """An established connection: cuts the byte stream into frames and hands each to the
    runtime from ``data_received`` itself (no reader task, no extra event-loop hop)."""

    def __init__(self, owner: TcpTransport, peer: int) -> None:
        self.owner = owner
        self.peer = peer
        self.frames = FrameReader(owner.max_frame)
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reported = False
        self.spare: socket.socket | None = None
        """A duplicate of the connection's socket, to read what is left when it breaks (`_rescue`)."""

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        owner.bytes_received += len(data)
        try:
            payloads = self.frames.feed(data)
        except FrameError as exc:
            self._report(exc)
            return
        for payload in payloads:
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

    def __init__(self, process_index: int, addresses: list[tuple[str, int]], max_frame: int) -> None:
        super().__init__()
        self.process_index = process_index
        self.processes = len(addresses)
        self.addresses = addresses
        self.max_frame = max_frame
        self.peers: dict[int, _Peer] = {}
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
    ) -> TcpTransport:
        """Listen, connect to the lower-indexed processes, accept the higher ones, authenticate all
        (two connections per pair: frames, and heartbeats). A peer from which nothing is heard
        on its heartbeat connection for ``peer_timeout`` seconds is reported lost (None: never)."""
        weak = check_secret(secret)
        if weak is not None:
            raise HandshakeError(f"a cluster needs a strong shared secret (TIMELY_SECRET): {weak}")
        self = cls(process_index, addresses, max_frame)
        expected = {(j, channel) for j in range(process_index + 1, self.processes) for channel in CHANNELS}
        accepted: asyncio.Queue[_Peer] = asyncio.Queue()
        handshaking: set[asyncio.Task[Any]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer_name = writer.get_extra_info("peername")
            task = asyncio.current_task()
            if task is not None:
                handshaking.add(task)
            try:
                index, channel = await asyncio.wait_for(
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
            await accepted.put(_Peer(index, reader, writer, channel))

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
        self.heartbeats = Heartbeats(self, {j: _detach(peer.writer) for j, peer in beats.items()}, peer_timeout)
        self.heartbeats.start()
        return self

    def _silent(self, peer: int, reason: SilentPeerError) -> None:
        """The heartbeats found ``peer`` silent: report it lost, and drop its connection (a stopped
        process would hold our goodbye for as long as it is stopped)."""
        connection = self.peers[peer]
        if connection.protocol is not None:
            connection.protocol._report(reason)
        connection.writer.transport.abort()

    def _take_over(self, peer: _Peer) -> None:
        """Move the connection from the handshake's stream reader to a frame protocol,
        passing on any bytes the reader had already buffered."""
        leftover = bytes(getattr(peer.reader, "_buffer", b""))
        protocol = _FrameProtocol(self, peer.index)
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
    ) -> tuple[int, str]:
        nonce = os.urandom(16)
        await _send(writer, {"magic": MAGIC, "process": self.process_index, "nonce": nonce})
        hello = await _receive(reader)
        if not isinstance(hello, dict) or hello.get("magic") != MAGIC:
            raise _Refused("not a timely peer (bad greeting)")
        index = hello.get("process")
        channel = hello.get("channel", DATA_CHANNEL)
        if not isinstance(index, int) or (index, channel) not in expected:
            raise _Refused(f"unexpected process index {index!r} (connection {channel!r})")
        theirs = hello.get("fingerprint")
        their_nonce = hello.get("nonce")
        if not isinstance(their_nonce, bytes) or not isinstance(theirs, str):
            raise _Refused("malformed greeting")
        # Authenticate first (their MAC binds the fingerprint they claim), so that only a
        # holder of the secret learns whether a fingerprint is this cluster's.
        want = _mac(secret, _role(b"join", channel), nonce, their_nonce, theirs, index, self.process_index)
        if not hmac.compare_digest(want, hello.get("mac") or b""):
            await _send(writer, {"ok": False, "reason": "authentication failed"})
            raise _Refused(f"process {index} failed authentication (wrong secret)")
        if theirs != fingerprint:
            await _send(writer, {"ok": False, "reason": "different program"})
            raise _Refused(f"process {index} runs a different program (graph {theirs!r}, ours {fingerprint!r})")
        mine = _mac(secret, _role(b"listen", channel), their_nonce, nonce, fingerprint, self.process_index, index)
        await _send(writer, {"ok": True, "mac": mine})
        return index, channel

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
        try:
            greeting = await asyncio.wait_for(_receive(reader), HANDSHAKE_SECONDS)
            if not isinstance(greeting, dict) or greeting.get("magic") != MAGIC or greeting.get("process") != peer:
                raise HandshakeError(f"{host}:{port} is not process {peer} of this cluster")
            their_nonce = greeting["nonce"]
            nonce = os.urandom(16)
            mac = _mac(secret, _role(b"join", channel), their_nonce, nonce, fingerprint, self.process_index, peer)
            hello = {"magic": MAGIC, "process": self.process_index, "fingerprint": fingerprint, "nonce": nonce}
            if channel != DATA_CHANNEL:
                hello["channel"] = channel
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
        want = _mac(secret, _role(b"listen", channel), nonce, their_nonce, fingerprint, peer, self.process_index)
        if not hmac.compare_digest(want, answer.get("mac") or b""):
            writer.close()
            raise HandshakeError(f"process {peer} at {host}:{port} failed authentication (wrong secret)")
        return _Peer(peer, reader, writer, channel)

    # Moving frames ----------------------------------------------------------------------------
    def send(self, peer: int, payload: bytes) -> None:
        writer = self.peers[peer].writer
        writer.writelines((frame_header(len(payload), self.max_frame), payload))
        self.bytes_sent += len(payload) + 4
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

    def __init__(self, owner: TcpTransport, sockets: dict[int, socket.socket], timeout: float | None) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"the peer timeout must be a positive number of seconds, not {timeout!r}")
        self.owner = owner
        self.sockets = sockets
        self.timeout = timeout
        self.interval = HEARTBEAT_SECONDS if timeout is None else min(HEARTBEAT_SECONDS, timeout / 10)
        self.loop = asyncio.get_running_loop()
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

    def _run(self) -> None:
        live = dict(self.sockets)
        selector = selectors.DefaultSelector()
        try:
            for peer, sock in live.items():
                selector.register(sock, selectors.EVENT_READ, peer)
            selector.register(self._wakeup_r, selectors.EVENT_READ, None)
            heard = dict.fromkeys(live, time.monotonic())
            next_beat = 0.0
            while live and not self._stopped:
                now = time.monotonic()
                if now >= next_beat:
                    for peer, sock in list(live.items()):
                        try:
                            sock.send(b"\0")
                        except BlockingIOError:
                            pass  # it does not read what we send: its own silence will tell
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
                    if data:
                        heard[peer] = time.monotonic()
                    else:
                        self._forget(selector, live, peer)
                if self.timeout is not None:
                    now = time.monotonic()
                    for peer in list(live):
                        silent = now - heard[peer]
                        if silent >= self.timeout - self.interval:
                            self._forget(selector, live, peer)
                            self._report(peer, silent)
        finally:
            selector.close()

    @staticmethod
    def _forget(selector: selectors.BaseSelector, live: dict[int, socket.socket], peer: int) -> None:
        selector.unregister(live.pop(peer))

    def _report(self, peer: int, silent: float) -> None:
        reason = SilentPeerError(
            f"nothing heard from process {peer} for {silent:.1f} s (the peer timeout is {self.timeout:g} s): "
            f"it is hung, stopped, or cut off by the network",
            peer,
        )
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


def _role(role: bytes, channel: str) -> bytes:
    """The role a MAC is bound to: a heartbeat connection's MAC cannot pass for a data one's."""
    return role if channel == DATA_CHANNEL else role + b"/" + channel.encode()


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
