"""linq's graph algorithms against NetworkX on uniform and skewed graphs, epoch after epoch.

Connected components, strongly connected components and shortest paths run over the graphs
of `tests/support/graph_workloads.py`: uniform random graphs, and power-law graphs with one hub of
thousands of neighbours (tens of thousands in the ``slow`` cases). After the first epoch
(which loads the graph) and after each of the many epochs of changes that follow (single
and batched insertions and deletions, at the hub and elsewhere, deletions that split a
component, churn), the changes the output reported for the epoch must be exactly the change
of NetworkX's answer, and once every epoch has passed the output must hold NetworkX's final
answer.

Some runs move in lockstep; others feed several epochs, or all of them, before waiting for
any, and close each input right after its last change while the outputs are still behind;
some use two workers. Real processes: `tests/linq/test_graph_processes.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import timely
from tests.support.graph_workloads import Workload, answer, closing_early, dataflow, workload
from tests.support.linq_harness import compiled_from
from tests.support.linq_in_flight import assert_epoch, drive


@dataclass(frozen=True)
class Case:
    algorithm: str
    graph: str
    nodes: int
    edges: int
    hub_degree: int
    epochs: int
    workers: int = 1
    lag: int = 0
    """Epochs fed ahead of the output; `epochs` or more: all of them before any wait."""
    close: bool = False
    """Close each input right after its last change."""
    seed: int = 1


def run(case: Case, timeout: float) -> Workload:
    w = workload(case.algorithm, case.graph, case.seed, case.nodes, case.edges, case.epochs, case.hub_degree)
    epochs = w.epochs()
    states = w.states()
    answers = [answer(case.algorithm, *s) for s in states]
    with timely.execute(dataflow(case.algorithm), workers=case.workers, timeout=timeout) as (comp, (inputs, out)):

        def passed(e: int) -> None:
            assert_epoch(out, e, answers[e], answers[e - 1] if e else {})

        close = closing_early(epochs) if case.close else None
        drive(comp, inputs, epochs, out.probe, passed, lag=case.lag, close_after=close, timeout=timeout)
        assert out.contents() == answers[-1]
    return w


CASES = {
    "cc-uniform": Case("cc", "uniform", 1500, 1400, 0, 30),
    "cc-skewed": Case("cc", "skewed", 3000, 6000, 2000, 24),
    "cc-skewed-in-flight-w2": Case("cc", "skewed", 3000, 6000, 2000, 20, workers=2, lag=6, close=True, seed=2),
    "cc-uniform-all-at-once": Case("cc", "uniform", 1500, 1400, 0, 20, lag=20, close=True, seed=3),
    "scc-uniform": Case("scc", "uniform", 200, 300, 0, 16),
    "scc-skewed-in-flight-w2": Case("scc", "skewed", 1200, 2400, 1000, 16, workers=2, lag=3),
    "sssp-uniform": Case("sssp", "uniform", 1500, 3000, 0, 30),
    "sssp-skewed-in-flight-w2": Case("sssp", "skewed", 3000, 6000, 2000, 30, workers=2, lag=5, close=True),
}

SLOW_CASES = {
    "cc-skewed-big-hub": Case("cc", "skewed", 30_000, 60_000, 20_000, 7, lag=3, close=True),
    "scc-skewed-big-hub": Case("scc", "skewed", 10_000, 20_000, 5_000, 7, workers=2, lag=2),
    "sssp-skewed-big-hub": Case("sssp", "skewed", 30_000, 60_000, 20_000, 12, lag=3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_networkx(name: str) -> None:
    w = run(CASES[name], timeout=100)
    assert len(w.edges) == CASES[name].epochs + 1


@pytest.mark.parametrize("find", ["search", "table"])
@pytest.mark.parametrize("name", ["cc-skewed", "cc-skewed-in-flight-w2", "scc-skewed-in-flight-w2", "sssp-uniform"])
def test_against_networkx_with_compiled_loops_for_every_size(
    name: str, find: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled loops (numba) take over from many rows on; here from one row, so every
    step of these cases runs through them: a few keys, empty batches, one time or several;
    finding keys by search, or (``table``) through every batch's key table."""
    from timely_libs.linq._columns import _kernels
    from timely_libs.linq._trace import _batch

    monkeypatch.setattr(_kernels, "COMPILED_ROWS", 1)
    compiled_from(monkeypatch, 1)
    monkeypatch.setattr(_batch, "DENSE_QUERY", 1 if find == "table" else 1 << 40)
    run(CASES[name], timeout=100)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_against_networkx_with_a_big_hub(name: str) -> None:
    run(SLOW_CASES[name], timeout=850)


def test_the_workloads_change_the_answer() -> None:
    """The workloads do what the cases rely on: a skewed graph's hub has the neighbours asked
    for, every kind of epoch occurs, most epochs change the answer, and the splitting
    deletions and the hub deletions change it too (a node split off gets its own label)."""
    case = CASES["cc-skewed"]
    w = workload(case.algorithm, case.graph, case.seed, case.nodes, case.edges, case.epochs, case.hub_degree)
    neighbours = {e[1] if e[0] == w.hub else e[0] for e, _ in w.edges[0] if w.hub in e and e[0] != e[1]}
    assert len(neighbours) >= case.hub_degree
    assert set(w.kinds) == {"insert", "delete", "hub_insert", "hub_delete", "split", "batch", "churn"}
    answers = [answer("cc", *s) for s in w.states()]
    changed = {kind for e, kind in enumerate(w.kinds, start=1) if answers[e] != answers[e - 1]}
    assert {"split", "hub_delete", "batch"} <= changed
    assert sum(answers[e] != answers[e - 1] for e in range(1, len(answers))) >= case.epochs // 3
