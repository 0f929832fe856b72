"""The transport interface: whole frames between this process and each peer, FIFO per peer.

A transport moves opaque payloads (bytes). It knows nothing of progress or graphs; the
runtime decides what a payload means. Two implementations share this interface:
`MemoryTransport` (several simulated processes in one event loop, with seeded
interleavings) and `TcpTransport` (real processes, one authenticated connection per pair).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["Transport", "FrameHandler", "LossHandler", "SilentPeerError"]

FrameHandler = Callable[[int, bytes], None]
"""Called with (peer index, payload) for every frame, in the order the peer sent them."""
LossHandler = Callable[[int, BaseException], None]
"""Called with (peer index, reason) when a peer's connection ends without a goodbye."""


class SilentPeerError(ConnectionError):
    """The reason a transport gives for a peer that fell silent (hung, stopped, or cut off):
    its connection may still be open, but nothing has come from it for the peer timeout."""

    def __init__(self, message: str, peer: int) -> None:
        super().__init__(message)
        self.peer = peer


class Transport(ABC):
    process_index: int
    processes: int

    def __init__(self) -> None:
        self.on_frame: FrameHandler | None = None
        self.on_lost: LossHandler | None = None
        self._early: list[tuple[int, bytes | BaseException]] = []
        self.bytes_sent = 0
        self.frames_sent = 0
        self.bytes_received = 0
        self.frames_received = 0

    def set_handlers(self, on_frame: FrameHandler, on_lost: LossHandler) -> None:
        """Start handing frames to the runtime, first those that arrived before it was ready."""
        self.on_frame = on_frame
        self.on_lost = on_lost
        early, self._early = self._early, []
        for peer, item in early:
            if isinstance(item, BaseException):
                on_lost(peer, item)
            else:
                on_frame(peer, item)

    def _deliver(self, peer: int, payload: bytes) -> None:
        """Hand a frame to the runtime; keep it (in order) if the runtime is not ready yet."""
        if self.on_frame is None:
            self._early.append((peer, payload))
        else:
            self.on_frame(peer, payload)

    def _lost(self, peer: int, reason: BaseException) -> None:
        if self.on_lost is None:
            self._early.append((peer, reason))
        else:
            self.on_lost(peer, reason)

    @abstractmethod
    def send(self, peer: int, payload: bytes) -> None:
        """Queue one frame for ``peer`` (never to oneself); returns at once."""

    @abstractmethod
    def congested(self) -> bool:
        """True while some peer's outgoing queue is above its high-water mark."""

    @abstractmethod
    def pause_reading(self) -> None:
        """Stop taking frames from peers (the runtime's queues are full): TCP slows the senders."""

    @abstractmethod
    def resume_reading(self) -> None: ...

    @abstractmethod
    async def close(self, flush_seconds: float = 5.0) -> None:
        """Flush what was sent (for at most ``flush_seconds``) and close every connection."""
