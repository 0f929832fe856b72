"""Helpers for testing dataflows: several simulated processes in one event loop.

    async with timely.testing.simulated(build, processes=3, seed=7) as runs:
        for comp, handles in runs:        # one (computation, build result) per process
            handles.send(...)
    # leaving the block closes every process's inputs and waits for all of them

The processes talk through `timely.net.memory.MemoryNetwork`: real frames, real codec,
real progress protocol, but channels in memory, and a seeded choice of which channel
delivers next, so a failing interleaving replays with the same seed. ``pickle=True`` is
`timely.execute`'s option: records without a codec cross the simulated processes pickled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from ._runtime.computation import AsyncComputation, execute_async
from .dataflow import Scope
from .net.memory import MemoryNetwork

__all__ = ["simulated"]

T = TypeVar("T")


@asynccontextmanager
async def simulated(
    build: Callable[[Scope], T],
    *,
    processes: int = 3,
    workers: int = 1,
    seed: int = 0,
    timeout: float | None = 60.0,
    pickle: bool = False,
) -> AsyncIterator[list[tuple[AsyncComputation, T]]]:
    network = MemoryNetwork(processes, seed)
    network.start()
    contexts = [
        execute_async(build, workers=workers, transport=network.transports[i], timeout=timeout, pickle=pickle)
        for i in range(processes)
    ]
    runs: list[tuple[AsyncComputation, T]] = []
    try:
        for ctx in contexts:
            runs.append(await ctx.__aenter__())
    except BaseException:
        for ctx in contexts[: len(runs)]:
            await ctx.__aexit__(None, None, None)
        await network.close()
        raise
    failed: BaseException | None = None
    try:
        yield runs
        for comp, _ in runs:
            comp.close_inputs()
        results = await asyncio.gather(*(comp.run() for comp, _ in runs), return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
    except BaseException as exc:
        failed = exc
        raise
    finally:
        for ctx in contexts:
            await ctx.__aexit__(type(failed) if failed else None, failed, None)  # type: ignore[arg-type]
        await network.close()
    if failed is not None:
        raise failed
