"""`Stream.gather`: an epoch's whole result on one process, in one process with several workers
and on 1 and 2 real processes (``timely run``), checked against counts made here in Python."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from tests.support.launcher import lines_of, script
from tests.support.launcher import timely as timely_cli

WORDS = [f"w{i % 17}" for i in range(300)]


class WhereAmI(timely.Vertex):
    """Passes each record on, tagged with the worker that saw it."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [(self.worker_index, r) for r in records], time)


def test_gather_moves_every_record_to_the_first_worker() -> None:
    def build(scope: timely.Scope) -> tuple[timely.Input, dict[int, list[Any]]]:
        seen: dict[int, list[Any]] = {}
        words = scope.new_input("words")
        spread = words.exchange("spread", hash)
        spread.gather().stage("where", WhereAmI).subscribe(lambda t, b: seen.setdefault(t.epoch, []).extend(b))
        return words, seen

    with timely.execute(build, workers=3, timeout=TIMEOUT) as (comp, (words, seen)):
        words.send(WORDS)
        words.advance_to(1)
        words.send(WORDS[:5])
    assert {w for batch in seen.values() for w, _ in batch} == {0}
    assert Counter(r for _, r in seen[0]) == Counter(WORDS)
    assert Counter(r for _, r in seen[1]) == Counter(WORDS[:5])


def test_gather_names_and_refuses_a_process_that_does_not_exist() -> None:
    def build(scope: timely.Scope) -> None:
        words = scope.new_input("words")
        assert words.gather().source_name == "words.gather"
        with pytest.raises(ValueError, match=r"to=1 names no process; this computation has 1"):
            words.gather("elsewhere", to=1)
        with pytest.raises(TypeError, match="process index"):
            words.gather("odd", to="0")  # type: ignore[arg-type]
        with pytest.raises(timely.GraphError, match="already used"):
            words.gather()

    with timely.execute(build, timeout=TIMEOUT):
        pass


PROGRAM = """
import json, sys
from collections import Counter
import timely

TO = int(sys.argv[1])

class DistinctCount(timely.Vertex):
    def __init__(self):
        self.counts = {}
    def on_recv(self, edge, records, time):
        if time not in self.counts:
            self.counts[time] = Counter()
            self.notify_at(time)
        self.counts[time].update(records)
    def on_notify(self, time):
        self.send_by(self.outputs[0], list(self.counts.pop(time).items()), time)

def build(scope):
    words = scope.new_input("words")
    counts = words.stage("count", DistinctCount, exchange=hash)
    counts.gather(to=TO).subscribe(lambda time, batch: print(json.dumps([time.epoch, sorted(batch)]), flush=True))
    return words, scope.process_index, scope.processes

with timely.execute(build, timeout=30) as (comp, (words, me, processes)):
    for epoch in range(3):
        mine = [f"w{(i * (epoch + 1)) % 11}" for i in range(100) if i % processes == me]
        words.send(mine)
        words.advance_to(epoch + 1)
"""


def expected(epoch: int) -> list[list[Any]]:
    return sorted([w, n] for w, n in Counter(f"w{(i * (epoch + 1)) % 11}" for i in range(100)).items())


@pytest.mark.parametrize(("processes", "to"), [(1, 0), (2, 0), (2, 1)])
def test_gather_on_real_processes_prints_every_epoch_whole_on_one(tmp_path: Path, processes: int, to: int) -> None:
    prog = script(tmp_path, PROGRAM)
    result = timely_cli("run", "-n", str(processes), "--workers", "2", prog, str(to), timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    for p in range(processes):
        printed = [json.loads(line) for line in lines_of(result.stdout, p)]
        if p == to:
            assert printed == [[e, expected(e)] for e in range(3)], result.stdout
        else:
            assert printed == [], result.stdout
