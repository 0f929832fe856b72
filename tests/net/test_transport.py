"""Transports: FIFO per channel, nothing dropped before the runtime is ready (a regression:
frames that arrived before the runtime set its handlers were silently dropped, and a
cluster stalled with one process's view missing a peer's progress)."""

from __future__ import annotations

import asyncio

from timely.net.memory import MemoryNetwork


async def test_frames_that_arrive_before_the_runtime_is_ready_are_kept_in_order() -> None:
    net = MemoryNetwork(3, seed=5)
    net.start()
    a, b, c = net.transports
    for i in range(20):
        a.send(1, b"a%d" % i)
        c.send(1, b"c%d" % i)
    await asyncio.sleep(0.05)  # delivered while transport 1 has no handler yet
    got: list[tuple[int, bytes]] = []
    b.set_handlers(lambda peer, payload: got.append((peer, payload)), lambda peer, exc: None)
    for i in range(20, 30):
        a.send(1, b"a%d" % i)
    await asyncio.sleep(0.05)
    assert [p for peer, p in got if peer == 0] == [b"a%d" % i for i in range(30)]
    assert [p for peer, p in got if peer == 2] == [b"c%d" % i for i in range(20)]
    await net.close()


async def test_the_seed_decides_the_interleaving_and_replays_it() -> None:
    async def order(seed: int) -> list[int]:
        net = MemoryNetwork(4, seed=seed)
        got: list[int] = []
        net.transports[0].set_handlers(lambda peer, payload: got.append(peer), lambda peer, exc: None)
        for src in (1, 2, 3):
            for _ in range(10):
                net.transports[src].send(0, b"x")
        net.start()
        await asyncio.sleep(0.05)
        await net.close()
        return got

    first, again, other = await order(1), await order(1), await order(2)
    assert first == again and first != other and sorted(first) == sorted(other)
