"""Several simulated processes in one event loop, connected by in-memory FIFO channels.

`MemoryNetwork(processes, seed)` makes one `MemoryTransport` per simulated process. A
delivery task picks, with a seeded random generator, which non-empty channel delivers its
oldest frame next: every channel stays FIFO, but the interleaving between channels varies
with the seed, and the same seed replays the same interleaving (given the same program).
Frames are real bytes, so the codec and the protocol run exactly as over TCP.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque

from .transport import Transport

__all__ = ["MemoryNetwork", "MemoryTransport"]


class MemoryNetwork:
    def __init__(self, processes: int, seed: int = 0, high_water: int = 1 << 22) -> None:
        self.processes = processes
        self.rng = random.Random(seed)
        self.high_water = high_water
        self.channels: dict[tuple[int, int], deque[bytes]] = {
            (s, d): deque() for s in range(processes) for d in range(processes) if s != d
        }
        self.queued_bytes = dict.fromkeys(self.channels, 0)
        self.transports = [MemoryTransport(self, i) for i in range(processes)]
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._deliver())

    def _put(self, src: int, dst: int, payload: bytes) -> None:
        self.channels[(src, dst)].append(payload)
        self.queued_bytes[(src, dst)] += len(payload)
        self._ready.set()

    async def _deliver(self) -> None:
        rng = self.rng
        while True:
            ready = [key for key, q in self.channels.items() if q and not self.transports[key[1]].paused]
            if not ready:
                self._ready.clear()
                await self._ready.wait()
                continue
            src, dst = ready[rng.randrange(len(ready))]
            payload = self.channels[(src, dst)].popleft()
            self.queued_bytes[(src, dst)] -= len(payload)
            target = self.transports[dst]
            target.bytes_received += len(payload)
            target.frames_received += 1
            target._deliver(src, payload)
            # Let the receiving runtime run between deliveries, so interleavings vary.
            await asyncio.sleep(0)

    async def close(self, flush_seconds: float = 5.0) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, index: int) -> None:
        super().__init__()
        self.network = network
        self.process_index = index
        self.processes = network.processes
        self.paused = False

    def send(self, peer: int, payload: bytes) -> None:
        self.bytes_sent += len(payload)
        self.frames_sent += 1
        self.network._put(self.process_index, peer, payload)

    def congested(self) -> bool:
        q = self.network.queued_bytes
        return any(
            q[(self.process_index, d)] > self.network.high_water
            for d in range(self.processes)
            if d != self.process_index
        )

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            self.network._ready.set()

    async def close(self, flush_seconds: float = 5.0) -> None:
        self.network._closed += 1
        if self.network._closed == self.processes:
            await self.network.close()
