"""`Program.output(..., gather_to=p)`: an epoch's whole answer (facts and lattice values) on
process ``p`` alone, on 1 and 2 real processes, checked against NetworkX."""

from __future__ import annotations

import json
import random
from pathlib import Path

import networkx as nx
import pytest

from tests.support import TIMEOUT
from tests.support.launcher import lines_of, script, timely

PROGRAM = """
import json, random, sys
import timely
from timely_libs import bloom

TO = int(sys.argv[1])
rng = random.Random(3)
EDGES = [(rng.randrange(40), rng.randrange(40), rng.randrange(1, 9)) for _ in range(90)]

def build(scope):
    edges, sources = scope.new_input("edges"), scope.new_input("sources")
    with bloom.Program(scope, "paths") as p:
        link = p.table("link", edges)
        dist = p.lattice("dist", bloom.LMin)
        dist |= p.table("start", sources).select(lambda s: (s, bloom.LMin(0)))
        dist |= dist.join(link, lambda d: d[0], lambda e: e[0], lambda d, e: (e[1], bloom.LMin(d[1].value + e[2])))
        reach = p.table("reach")
        reach |= dist.select(lambda d: d[0])
    return edges, sources, p.output(dist, gather_to=TO), p.output(reach, gather_to=TO), scope.process_index, scope.processes

with timely.execute(build, timeout=60) as (comp, (edges, sources, dist, reach, me, processes)):
    edges.send([e for i, e in enumerate(EDGES) if i % processes == me])
    if me == processes - 1:
        sources.send([0])
    edges.advance_to(1); sources.advance_to(1)
    comp.wait_passed(dist.probe, 0)
    comp.wait_passed(reach.probe, 0)
    print(json.dumps(["dist", sorted([k, v.value] for k, v in dist.answer(0).items())]), flush=True)
    print(json.dumps(["reach", sorted(reach.answer(0))]), flush=True)
"""


@pytest.mark.parametrize(("processes", "to"), [(1, 0), (2, 0), (2, 1)])
def test_a_gathered_output_holds_the_whole_answer_on_one_process(tmp_path: Path, processes: int, to: int) -> None:
    rng = random.Random(3)
    graph = nx.DiGraph()
    for u, v, w in [(rng.randrange(40), rng.randrange(40), rng.randrange(1, 9)) for _ in range(90)]:
        if u != v and (not graph.has_edge(u, v) or graph[u][v]["weight"] > w):
            graph.add_edge(u, v, weight=w)
    graph.add_node(0)
    distances = nx.single_source_dijkstra_path_length(graph, 0)
    result = timely(
        "run", "-n", str(processes), "--workers", "2", script(tmp_path, PROGRAM), str(to), timeout=2 * TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    for p in range(processes):
        printed = dict(map(json.loads, lines_of(result.stdout, p)))
        if p != to:
            assert printed == {"dist": [], "reach": []}, result.stdout
            continue
        assert printed["dist"] == sorted([n, d] for n, d in distances.items())
        assert printed["reach"] == sorted(distances)
