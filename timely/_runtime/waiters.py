"""What the computation's handles wait for: a probe's frontier passing a time, or a condition
holding after a scheduler step. Each wait is a future the runtime resolves; nothing here runs
the computation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..progress import ProgressTracker
from ..timestamp import Timestamp

__all__ = ["Waiters"]


@dataclass
class _ProbeWait:
    location: int
    time: Timestamp
    future: asyncio.Future[None]


class Waiters:
    """Futures waiting for the frontier at a location to pass a time (`passed`), resolved as
    the frontier moves, and for a predicate to hold (`when`), checked after each scheduler step."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self._tracker = tracker
        self._probes: list[_ProbeWait] = []
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def passed(self, location: int, time: Timestamp) -> asyncio.Future[None]:
        """A future that resolves once nothing at or before ``time`` can reach ``location``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.has_passed(location, time):
            future.set_result(None)
        else:
            self._probes = [w for w in self._probes if not w.future.done()]  # drop abandoned waits
            self._probes.append(_ProbeWait(location, time, future))
        return future

    def has_passed(self, location: int, time: Timestamp) -> bool:
        """Nothing at or before ``time`` can reach ``location`` any more."""
        return self._tracker.passed(location, time)

    def when(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        """A future that resolves after the first scheduler step at which ``predicate()`` holds."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if predicate():
            future.set_result(None)
        else:
            self._conditions.append((predicate, future))
        return future

    def probe_waits(self) -> Iterator[tuple[int, Timestamp]]:
        """The (location, time) of every probe wait not yet resolved (nor abandoned: a wait that
        timed out is cancelled, and no longer waits)."""
        for wait in self._probes:
            if not wait.future.done():
                yield wait.location, wait.time

    def frontier_changed(self) -> None:
        """Resolve the probe waits whose time the frontier has now passed."""
        if not self._probes:
            return
        still = []
        for wait in self._probes:
            if wait.future.done():
                continue
            if self.has_passed(wait.location, wait.time):
                wait.future.set_result(None)
            else:
                still.append(wait)
        self._probes = still

    @property
    def conditions(self) -> bool:
        """Some condition wait is pending."""
        return bool(self._conditions)

    def check_conditions(self) -> None:
        """Resolve the condition waits whose predicate holds now."""
        still = []
        for predicate, future in self._conditions:
            if future.done():
                continue
            if predicate():
                future.set_result(None)
            else:
                still.append((predicate, future))
        self._conditions = still
