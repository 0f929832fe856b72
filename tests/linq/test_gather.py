"""`linq.CollectionOutput(..., gather_to=p)`: the whole collection and every epoch's changes on
process ``p`` alone, on 1 and 2 real processes, checked against NetworkX's components."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from tests.support import TIMEOUT
from tests.support.launcher import lines_of, script, timely

PROGRAM = """
import json, random, sys
import timely
from timely_libs import linq

TO = int(sys.argv[1])
rng = random.Random(7)
EDGES = [(rng.randrange(60), rng.randrange(60)) for _ in range(50)]
REMOVED = EDGES[:15]

def build(scope):
    edges = linq.new_input(scope, "edges")
    labels = linq.connected_components(edges.collection)
    return edges, linq.CollectionOutput(labels, gather_to=TO), scope.process_index, scope.processes

def show(what, value):
    print(json.dumps([what, sorted(value)]), flush=True)

with timely.execute(build, timeout=60) as (comp, (edges, out, me, processes)):
    edges.insert_all(e for i, e in enumerate(EDGES) if i % processes == me)
    edges.advance_to(1)
    comp.wait_passed(out.probe, 0)
    show("contents", ([r, c] for r, c in out.contents().items()))
    edges.remove_all(e for i, e in enumerate(REMOVED) if i % processes == me)
    edges.advance_to(2)
    comp.wait_passed(out.probe, 1)
    show("changes", ([r, c] for r, c in out.changes.get(1, [])))
    show("final", ([r, c] for r, c in out.contents().items()))
"""


def labels_of(edges: list[tuple[int, int]]) -> set[tuple[int, int]]:
    graph = nx.Graph(edges)
    return {(n, min(component)) for component in nx.connected_components(graph) for n in component}


@pytest.mark.parametrize(("processes", "to"), [(1, 0), (2, 0), (2, 1)])
def test_a_gathered_output_holds_the_whole_answer_on_one_process(tmp_path: Path, processes: int, to: int) -> None:
    rng = random.Random(7)
    edges = [(rng.randrange(60), rng.randrange(60)) for _ in range(50)]
    before, after = labels_of(edges), labels_of(edges[15:])
    prog = script(tmp_path, PROGRAM)
    result = timely("run", "-n", str(processes), "--workers", "2", prog, str(to), timeout=2 * TIMEOUT)
    assert result.returncode == 0, result.stderr
    for p in range(processes):
        printed = {
            what: [(tuple(r), c) for r, c in value] for what, value in map(json.loads, lines_of(result.stdout, p))
        }
        if p != to:
            assert printed == {"contents": [], "changes": [], "final": []}, result.stdout
            continue
        assert printed["contents"] == sorted((label, 1) for label in before)
        changes: list[Any] = sorted([(r, -1) for r in before - after] + [(r, 1) for r in after - before])
        assert printed["changes"] == changes
        assert printed["final"] == sorted((label, 1) for label in after)


@pytest.mark.parametrize(("workers", "resume_workers"), [(3, 3), (2, 3), (3, 1)])
def test_a_gathered_outputs_contents_stay_on_the_gathering_worker_across_a_resume(
    workers: int, resume_workers: int
) -> None:
    """Checkpointed after epoch 2 and restored (on the same or another worker count) as the
    runtime deals pieces: every epoch's contents equal an undisturbed run's, all held by worker 0."""
    import timely
    from tests.linq.test_checkpoint import edge_epochs, feed, restore, take_checkpoint
    from timely_libs import linq

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        edges = linq.new_input(scope, "edges")
        return [edges], linq.CollectionOutput(linq.connected_components(edges.collection), name="out", gather_to=0)

    def held(comp: timely.Computation) -> list[int]:
        return [len(v.contents) for v in comp.vertices("out.contents")]  # type: ignore[attr-defined]

    epochs = edge_epochs(5)
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        undisturbed = feed(comp, inputs, out, epochs, 0, len(epochs))
        assert held(comp)[1:] == [0] * (workers - 1)
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        before = feed(comp, inputs, out, epochs, 0, 3)
        saved = take_checkpoint(comp)
    with timely.execute(build, workers=resume_workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        restore(comp, saved)
        assert held(comp)[0] == len(before[-1][1]) and held(comp)[1:] == [0] * (resume_workers - 1)
        for inp in inputs:
            inp.advance_to(3)
        after = feed(comp, inputs, out, epochs, 3, len(epochs))
        assert held(comp)[1:] == [0] * (resume_workers - 1)
    assert before + after == undisturbed
    graph: dict[tuple[int, int], int] = {}
    for (changes,) in epochs:
        for edge, diff in changes:
            graph[edge] = graph.get(edge, 0) + diff
    final = labels_of([e for e, n in graph.items() if n > 0])
    assert undisturbed[-1][1] == dict.fromkeys(final, 1)
