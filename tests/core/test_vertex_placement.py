"""What a vertex knows about where it runs: its worker, the workers of the computation
(`Vertex.peers`) and the processes they run in (`Vertex.processes`, which an operator asks to
know whether a notification costs a round of progress messages between processes), on one
process with several workers and on simulated processes."""

from __future__ import annotations

from typing import Any

import pytest

import timely
import timely.testing
from tests.support import TIMEOUT


class Where(timely.Vertex):
    """Sends what it knows of its placement, once per batch."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [(self.worker_index, self.peers, self.processes)], time)


def build(seen: list[tuple[int, int, int]]) -> Any:
    def program(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("workers")
        # one record for each worker, routed to it
        inp.stage("where", Where, exchange=lambda r: r).subscribe(lambda t, batch: seen.extend(batch))
        return inp

    return program


@pytest.mark.parametrize("workers", [1, 3])
def test_one_process(workers: int) -> None:
    seen: list[tuple[int, int, int]] = []
    with timely.execute(build(seen), workers=workers, timeout=TIMEOUT) as (_, inp):
        inp.send(range(workers))
    assert sorted(seen) == [(w, workers, 1) for w in range(workers)]


async def test_simulated_processes() -> None:
    seen: list[tuple[int, int, int]] = []
    async with timely.testing.simulated(build(seen), processes=3, workers=2, seed=1, timeout=TIMEOUT) as runs:
        (_, first), *_ = runs
        first.send(range(6))
    assert sorted(seen) == [(w, 6, 3) for w in range(6)]
