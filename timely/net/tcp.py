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
import socket
import struct
from typing import Any

import msgpack

from ..errors import FrameError, HandshakeError
from .framing import MAX_FRAME, FrameReader, frame_header
from .transport import Transport

__all__ = ["TcpTransport", "HANDSHAKE_SECONDS", "MIN_SECRET_BYTES", "check_secret"]

log = logging.getLogger("timely.net")

MAGIC = "timely/1"
HANDSHAKE_SECONDS = 5.0
HANDSHAKE_MAX_FRAME = 4096
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


class _Refused(Exception):
    """A connection that does not belong to this cluster."""


class _Peer:
    def __init__(self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.index = index
        self.reader = reader
        self.writer = writer
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
        self._report(exc or ConnectionError("connection closed"))
        if not self.closed.done():
            self.closed.set_result(None)

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
    ) -> TcpTransport:
        """Listen, connect to the lower-indexed processes, accept the higher ones, authenticate all."""
        weak = check_secret(secret)
        if weak is not None:
            raise HandshakeError(f"a cluster needs a strong shared secret (TIMELY_SECRET): {weak}")
        self = cls(process_index, addresses, max_frame)
        expected = set(range(process_index + 1, self.processes))
        accepted: asyncio.Queue[_Peer] = asyncio.Queue()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer_name = writer.get_extra_info("peername")
            try:
                index = await asyncio.wait_for(
                    self._listen_side(reader, writer, secret, fingerprint, expected), HANDSHAKE_SECONDS
                )
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
            expected.discard(index)
            await accepted.put(_Peer(index, reader, writer))

        host, port = addresses[process_index]
        try:
            server = await asyncio.start_server(on_connect, bind or host, port, reuse_address=True)
        except OSError as exc:
            reason = "in use by another program" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise HandshakeError(
                f"process {process_index} cannot listen on {bind or host}:{port}: {reason}; choose another port "
                f"(timely run --base-port P, or this process's line in the hosts file)"
            ) from exc
        try:
            joins = [
                asyncio.create_task(self._connect(j, secret, fingerprint, connect_timeout))
                for j in range(process_index)
            ]
            for task in asyncio.as_completed(joins):
                peer = await task
                self.peers[peer.index] = peer
            waiting = self.processes - 1 - process_index
            deadline = asyncio.get_running_loop().time() + connect_timeout
            while waiting:
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    peer = await asyncio.wait_for(accepted.get(), max(0.0, remaining))
                except TimeoutError:
                    missing = sorted(set(range(process_index + 1, self.processes)) - set(self.peers))
                    raise HandshakeError(
                        f"process {process_index}: processes {missing} did not join within {connect_timeout} s"
                    ) from None
                self.peers[peer.index] = peer
                waiting -= 1
        except BaseException:
            for t in joins:
                t.cancel()
            for peer in self.peers.values():
                peer.writer.close()
            raise
        finally:
            server.close()
        for peer in self.peers.values():
            _nodelay(peer.writer)
            self._take_over(peer)
        return self

    def _take_over(self, peer: _Peer) -> None:
        """Move the connection from the handshake's stream reader to a frame protocol,
        passing on any bytes the reader had already buffered."""
        leftover = bytes(getattr(peer.reader, "_buffer", b""))
        protocol = _FrameProtocol(self, peer.index)
        peer.protocol = protocol
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
        expected: set[int],
    ) -> int:
        nonce = os.urandom(16)
        await _send(writer, {"magic": MAGIC, "process": self.process_index, "nonce": nonce})
        hello = await _receive(reader)
        if not isinstance(hello, dict) or hello.get("magic") != MAGIC:
            raise _Refused("not a timely peer (bad greeting)")
        index = hello.get("process")
        if not isinstance(index, int) or index not in expected:
            raise _Refused(f"unexpected process index {index!r}")
        theirs = hello.get("fingerprint")
        their_nonce = hello.get("nonce")
        if not isinstance(their_nonce, bytes) or not isinstance(theirs, str):
            raise _Refused("malformed greeting")
        # Authenticate first (their MAC binds the fingerprint they claim), so that only a
        # holder of the secret learns whether a fingerprint is this cluster's.
        want = _mac(secret, b"join", nonce, their_nonce, theirs, index, self.process_index)
        if not hmac.compare_digest(want, hello.get("mac") or b""):
            await _send(writer, {"ok": False, "reason": "authentication failed"})
            raise _Refused(f"process {index} failed authentication (wrong secret)")
        if theirs != fingerprint:
            await _send(writer, {"ok": False, "reason": "different program"})
            raise _Refused(f"process {index} runs a different program (graph {theirs!r}, ours {fingerprint!r})")
        mine = _mac(secret, b"listen", their_nonce, nonce, fingerprint, self.process_index, index)
        await _send(writer, {"ok": True, "mac": mine})
        return index

    async def _connect(self, peer: int, secret: bytes, fingerprint: str, timeout: float) -> _Peer:
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
            mac = _mac(secret, b"join", their_nonce, nonce, fingerprint, self.process_index, peer)
            await _send(
                writer,
                {"magic": MAGIC, "process": self.process_index, "fingerprint": fingerprint, "nonce": nonce, "mac": mac},
            )
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
        want = _mac(secret, b"listen", nonce, their_nonce, fingerprint, peer, self.process_index)
        if not hmac.compare_digest(want, answer.get("mac") or b""):
            writer.close()
            raise HandshakeError(f"process {peer} at {host}:{port} failed authentication (wrong secret)")
        return _Peer(peer, reader, writer)

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

    async def close(self) -> None:
        """Flush, half-close (so the peer reads everything we sent, an ERROR frame included,
        before it sees the end), wait briefly for the peer to close its side, then close."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
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
