"""linq's graph algorithms on skewed graphs in real processes, against NetworkX.

Two and three OS processes over loopback TCP (`timely run`, through `tests.support.modes`)
run a workload of `tests/support/graph_workloads.py` (tests/support/linq_graph_program.py):
each feeds its share of every epoch's changes, several epochs ahead of the output, and closes
its inputs early. The union
of what the processes' outputs reported must be, epoch by epoch, the change of NetworkX's
answer, and their final contents NetworkX's final answer.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support import linq_graph_program
from tests.support.graph_workloads import answer, workload
from tests.support.linq_reference import difference
from tests.support.modes import Mode

CASES = {  # algorithm, graph, seed, nodes, edges, hub degree, epochs, lag, processes
    "cc-skewed-p2": ("cc", "skewed", 4, 1500, 3000, 1000, 10, 4, 2),
    "cc-skewed-p3-all-at-once": ("cc", "skewed", 5, 1500, 3000, 1000, 10, 10, 3),
    "sssp-skewed-p2": ("sssp", "skewed", 6, 2000, 4000, 1500, 12, 3, 2),
    "scc-uniform-p2": pytest.param(("scc", "uniform", 7, 150, 220, 0, 8, 2, 2), marks=pytest.mark.slow),
}


def _record(r: Any) -> Any:
    return tuple(r) if isinstance(r, list) else r


def merged(results: list[dict[str, Any]]) -> tuple[dict[int, dict[Any, int]], dict[Any, int]]:
    """Per epoch the summed changes of every process, and the union of their final contents
    (a record held by two processes counts twice, and fails the comparison)."""
    changes: dict[int, Counter[Any]] = {}
    final: Counter[Any] = Counter()
    for result in results:
        for epoch, items in result["changes"].items():
            for r, d in items:
                changes.setdefault(int(epoch), Counter())[_record(r)] += d
        for r, c in result["final"]:
            final[_record(r)] += c
    return {e: {r: d for r, d in c.items() if d} for e, c in changes.items()}, dict(final)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_real_processes_match_networkx(case: tuple[Any, ...]) -> None:
    algorithm, graph, seed, nodes, edges, hub, epochs, lag, processes = case
    results = Mode("tcp", processes=processes).run(
        linq_graph_program.program, algorithm, graph, seed, nodes, edges, hub, epochs, lag=lag, timeout=100
    )
    assert all(r["final"] for r in results), "every process should hold part of the answer"
    changes, final = merged(results)
    w = workload(algorithm, graph, seed, nodes, edges, epochs, hub)
    answers = [answer(algorithm, *s) for s in w.states()]
    for e, expected in enumerate(answers):
        want = difference(expected, answers[e - 1] if e else {})
        assert changes.get(e, {}) == want, f"epoch {e}: got {changes.get(e)}, want {want}"
    assert final == answers[-1]
