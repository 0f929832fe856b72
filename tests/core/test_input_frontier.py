"""`Vertex.input_frontier` in real computations: a stage in a pipeline with every epoch in flight
at once, and a stage inside a loop, on one process (one and two workers) and on two real
processes over loopback TCP.

Two checks, each against something the runtime did not compute. At every callback the frontier
equals the brute-force reference (tests/support/progress_reference.py: breadth-first search over
concrete states) applied to the pointstamps active in the process's view at that moment: the
runtime's shortcut (a cached answer, the tracker's global-frontier mode) changes nothing. And it
is safe: every callback the stage's instances in the process run afterwards is at a time at or
after some element of it (a frontier that ran ahead would let an operator compact too far).
"""

from __future__ import annotations

from typing import Any

import pytest

import timely
from tests.support.modes import Mode, Run
from tests.support.progress_reference import ReferenceModel, le

EPOCHS = 6
MODES = [Mode("one", workers=1), Mode("one", workers=2), Mode("tcp", processes=2, workers=1)]

Log = list[list[Any]]
"""Per callback of an observed stage: [stage, location, callback, time, frontier, active]."""


class Observe(timely.Vertex):
    """Logs its frontier at every callback with the process's active pointstamps, and passes
    records on; it asks for a notification (holding a capability) at every other time it sees,
    so its own capabilities are part of what it observes. In a loop, a record ``n > 0`` goes
    round again as ``n - 1`` (output 0) and ``0`` leaves (output 1)."""

    def __init__(self, log: Log, looping: bool) -> None:
        self.log = log
        self.looping = looping

    def _observe(self, callback: str, time: timely.Timestamp) -> None:
        frontier = self.input_frontier()
        tracker = self._timely.tracker  # type: ignore[attr-defined]
        active = sorted([list(t), loc] for t, loc in tracker.active)
        where = self._timely.location  # type: ignore[attr-defined]
        self.log.append([self.stage_name, where, callback, list(time), sorted(map(list, frontier.elements)), active])

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self._observe("recv", time)
        if time[-1] % 2 == 0:
            self.notify_at(time)
        if self.looping:
            self.send_by(self.outputs[0], [n - 1 for n in records if n > 0], time)
            self.send_by(self.outputs[1], [n for n in records if n == 0], time)
        else:
            self.send_by(self.outputs[0], records, time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self._observe("notify", time)


class Frontiers(Run):
    epochs = EPOCHS

    def __init__(self, scope: timely.Scope) -> None:
        self.log: Log = []
        self.index, self.processes = scope.process_index, scope.processes
        self.numbers = scope.new_input("numbers")
        log = self.log
        piped = self.numbers.stage("piped", lambda: Observe(log, False), exchange=lambda n: n)
        loop = timely.LoopContext(scope, "loop")
        back = loop.feedback("back")
        body = loop.ingress(piped).concat("merge", back.stream)
        more, done = body.stage("looped", lambda: Observe(log, True), exchange=lambda n: n, outputs=2)
        back.connect(more)
        self.probe = loop.egress(done).probe()

    def feed(self, epoch: int) -> None:
        self.numbers.send([n for n in range(epoch, epoch + 4) if n % self.processes == self.index])
        self.numbers.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.probe]

    def result(self, comp: Any) -> Any:
        return {"log": self.log, "checked": _check(comp.graph, self.log)}


def frontiers(_: int) -> Any:
    return Frontiers


def _check(graph: Any, log: Log) -> int:
    """Compare each logged frontier with the reference and with every later callback of its
    stage in this process; how many callbacks were checked."""
    ref = ReferenceModel(graph)
    for i, (stage, location, _, time, frontier, active) in enumerate(log):
        sources = [(tuple(t), loc) for t, loc in active]
        coords = [c for t, _ in sources for c in t] + [c for t in frontier for c in t] + [0]
        expected = ref.minimal_results(sources, location, cap=max(coords) + 2)
        assert {tuple(f) for f in frontier} == expected, (stage, time, frontier, sorted(expected))
        assert any(le(tuple(f), tuple(time)) for f in frontier), f"{stage} ran at {time}, before {frontier}"
        for later in log[i + 1 :]:
            if later[0] == stage:
                assert any(le(tuple(f), tuple(later[3])) for f in frontier), (stage, frontier, later[2:4])
    return len(log)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lag", [None, 0], ids=["in-flight", "lockstep"])
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_input_frontier_matches_the_reference_and_is_never_ahead(mode: Mode, lag: int | None) -> None:
    results = mode.run(frontiers, 0, lag=lag, timeout=60)
    for result in results:
        stages = {entry[0] for entry in result["log"]}
        assert stages == {"piped", "loop.looped"}
        assert result["checked"] == len(result["log"])
    # the loop's times: every (epoch, n) of its records went round, each iteration seen somewhere
    looped = {tuple(e[3]) for r in results for e in r["log"] if e[0] == "loop.looped" and e[2] == "recv"}
    assert looped == {(e, i) for e in range(EPOCHS) for i in range(e + 4)}
