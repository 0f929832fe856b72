"""On several processes a join inside a loop whose other input changes only at an epoch's
first iteration (a collection entered into the loop) meets a time's first messages (one per
worker) on arrival and asks for no notification at their time (`_join.Join.on_recv`): the
notification would cost a round of progress messages between the processes every iteration
and, for a join that hears once a time from each upstream worker, save nothing. On one
process it stages from the first message.

Checked with reach (DDIR's program: the reached nodes joined with the edges, then `distinct`,
to a fixed point) over a long path and random edges changing for a few epochs, on one process
and on two real processes over TCP: the union of the processes' answers after every epoch
against a breadth-first search, and the join's notifications against the iterations (a
notification an iteration is at least `PATH` in the first epoch: the path's wave lives on one
worker at a time)."""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path

import pytest

from tests.support import TIMEOUT
from tests.support.launcher import lines_of, script, timely

PATH = 100
"""A path of this many edges from the root: reach takes at least as many iterations."""
EPOCHS = 5

PROGRAM = """
import json, sys
from operator import itemgetter
import timely
from timely_libs import linq

EPOCHS = json.loads(sys.argv[1])
current = {}

def reach(edges, roots):
    def step(reached):
        inner_edges, inner_roots = edges.enter(reached.scope), roots.enter(reached.scope)
        proposals = reached.join(inner_edges, lambda n: n, itemgetter(0), lambda n, e: e[1], name="proposals")
        return inner_roots.concat(proposals, name="with_roots").distinct(name="reached")
    return roots.fixed_point(step, name="reach")

def gather(time, batch):
    for node, diff in batch:
        current[node] = current.get(node, 0) + diff

def build(scope):
    edges, roots = linq.new_input(scope, "edges"), linq.new_input(scope, "roots")
    probe = reach(edges.collection, roots.collection).stream.subscribe(gather, name="out")
    return edges, roots, probe, scope.process_index, scope.processes

with timely.execute(build, timeout=60) as (comp, (edges, roots, probe, me, processes)):
    answers = []
    for epoch, changes in enumerate(EPOCHS):
        edges.update([(tuple(e), d) for i, (e, d) in enumerate(changes) if i % processes == me])
        if epoch == 0 and me == 0:
            roots.insert(0)
        edges.advance_to(epoch + 1)
        roots.advance_to(epoch + 1)
        comp.wait_passed(probe, epoch)
        answers.append(sorted(n for n, c in current.items() if c))
    (join,) = [name for name in comp.graph.by_name if name.endswith("proposals")]
    notified = sum(v.statistics().notifications_delivered for v in comp.vertices(join))
print(json.dumps({"answers": answers, "notified": notified, "workers": len(comp.vertices(join))}), flush=True)
"""


def reachable(edges: set[tuple[int, int]], root: int) -> set[int]:
    """Breadth-first search from ``root``: the oracle."""
    out: dict[int, list[int]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
    seen, todo = {root}, deque([root])
    while todo:
        for b in out.get(todo.popleft(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def epochs(seed: int) -> list[list[tuple[tuple[int, int], int]]]:
    """A long path from node 0 with random edges into nodes off it (no shortcut: the first
    epoch takes `PATH` iterations), then epochs that each cut a path edge (mending the one cut
    before) and add a random edge off the path."""
    rng = random.Random(seed)
    nodes = PATH + 20

    def off_path() -> tuple[int, int]:
        return rng.randrange(nodes), rng.randrange(PATH + 1, nodes)

    path = [(i, i + 1) for i in range(PATH)]
    out = [[(e, 1) for e in path + sorted({off_path() for _ in range(30)})]]
    cut: tuple[int, int] | None = None
    for _ in range(EPOCHS - 1):
        changes = [] if cut is None else [(cut, 1)]
        cut = path[rng.randrange(PATH // 2, PATH)]
        changes += [(cut, -1), (off_path(), 1)]
        out.append(changes)
    return out


@pytest.mark.parametrize("processes", [1, 2])
def test_reach_on_processes_meets_once_a_time_without_notifications(tmp_path: Path, processes: int) -> None:
    changes = epochs(seed=processes)
    present: set[tuple[int, int]] = set()
    expected = []
    for epoch in changes:
        for e, d in epoch:
            (present.add if d > 0 else present.discard)(e)
        expected.append(sorted(reachable(present, 0)))

    program = script(tmp_path, PROGRAM)
    result = timely("run", "-n", str(processes), "--workers", "2", program, json.dumps(changes), timeout=2 * TIMEOUT)
    assert result.returncode == 0, result.stderr
    printed = [json.loads(lines_of(result.stdout, p)[-1]) for p in range(processes)]
    answers = [sorted(set().union(*(p["answers"][e] for p in printed))) for e in range(EPOCHS)]
    assert answers == expected
    notified = sum(p["notified"] for p in printed)
    workers = sum(p["workers"] for p in printed)
    if processes == 1:
        # staged from the first message: a notification an iteration
        assert notified >= PATH
    else:
        # only at an epoch's first iteration (edges and roots both come) and at its end
        assert notified <= 2 * EPOCHS * workers < PATH
