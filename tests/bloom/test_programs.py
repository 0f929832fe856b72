"""libs/bloom's programs give the answers of independent oracles: a naive fixed-point evaluator
(plain Python, rules applied until nothing changes) and NetworkX, epoch by epoch on seeded
random graphs, with 1 and 3 workers; the coordination-free loops request no notification at
all (`Vertex.statistics`), and the coordinated form of the same query does and agrees."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import bloom
from timely_libs.bloom import LMin

EPOCHS = 3


# Oracles ---------------------------------------------------------------------------------------------
def naive_fixpoint(facts: set[Any], step: Callable[[set[Any]], set[Any]]) -> set[Any]:
    """Apply ``step`` to the whole set until it derives nothing new (semi-naive it is not)."""
    while True:
        more = step(facts) - facts
        if not more:
            return facts
        facts = facts | more


def closure_naive(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return naive_fixpoint(set(edges), lambda path: {(a, d) for a, b in edges for c, d in path if b == c})


def closure_nx(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return set(nx.transitive_closure(nx.DiGraph(list(edges)), reflexive=False).edges)


def reach_naive(edges: set[tuple[int, int]], sources: set[int]) -> set[tuple[int, int]]:
    return naive_fixpoint({(s, s) for s in sources}, lambda r: {(s, d) for s, n in r for a, d in edges if a == n})


def reach_nx(edges: set[tuple[int, int]], sources: set[int]) -> set[tuple[int, int]]:
    g = nx.DiGraph(list(edges))
    g.add_nodes_from(sources)
    return {(s, n) for s in sources for n in nx.descendants(g, s) | {s}}


def sssp_naive(edges: set[tuple[int, int, int]], sources: set[int]) -> dict[int, int]:
    """Bellman-Ford as a fixed point of the rule dist(v) <= dist(u) + w."""
    dist = {s: 0 for s in sources}
    changed = True
    while changed:
        changed = False
        for u, v, w in edges:
            if u in dist and dist[u] + w < dist.get(v, float("inf")):
                dist[v] = dist[u] + w
                changed = True
    return dist


def sssp_nx(edges: set[tuple[int, int, int]], sources: set[int]) -> dict[int, int]:
    g = nx.DiGraph()
    g.add_nodes_from(sources)
    for u, v, w in edges:
        if not g.has_edge(u, v) or g[u][v]["weight"] > w:
            g.add_edge(u, v, weight=w)
    return dict(nx.multi_source_dijkstra_path_length(g, sources)) if sources else {}


# Workloads: what arrives in each epoch -------------------------------------------------------------
def graph_epochs(seed: int, nodes: int = 30, per_epoch: int = 25, weighted: bool = False) -> list[list[Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(EPOCHS):
        batch = []
        for _ in range(per_epoch):
            a, b = rng.randrange(nodes), rng.randrange(nodes)
            batch.append((a, b, rng.randint(0, 9)) if weighted else (a, b))
        out.append(batch)
    return out


def source_epochs(seed: int, nodes: int = 30) -> list[list[int]]:
    rng = random.Random(seed + 100)
    return [rng.sample(range(nodes), 2) for _ in range(EPOCHS)]


def cumulative(epochs: list[list[Any]]) -> list[set[Any]]:
    seen: set[Any] = set()
    out = []
    for batch in epochs:
        seen |= set(batch)
        out.append(set(seen))
    return out


def run_epochs(
    build: Callable[[timely.Scope], Any], feeds: list[list[list[Any]]], workers: int
) -> tuple[list[Any], timely.Computation]:
    """Feed epoch e of every input, wait for the output to pass it, read its answer."""
    answers = []
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, output)):
        for epoch in range(EPOCHS):
            for inp, feed in zip(inputs, feeds, strict=True):
                inp.send(feed[epoch])
                inp.advance_to(epoch + 1)
            comp.wait_passed(output.probe, epoch)
            answers.append(output.answer(epoch))
    return answers, comp


def notifications_requested(comp: timely.Computation, prefix: str) -> dict[str, int]:
    """Per stage of the loop ``prefix``: the notifications its vertices requested."""
    out = {}
    for spec in comp.graph.stages:
        if spec.name.startswith(prefix + "."):
            out[spec.name] = sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
    return out


# Transitive closure and reachability -------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2])
def test_transitive_closure_equals_naive_fixpoint_and_networkx(workers: int, seed: int) -> None:
    def build(scope: timely.Scope) -> Any:
        edges = scope.new_input("edges")
        return [edges], bloom.programs.transitive_closure(edges)

    feeds = graph_epochs(seed, nodes=15, per_epoch=8)
    answers, comp = run_epochs(build, [feeds], workers)
    for epoch, edges in enumerate(cumulative(feeds)):
        expected = closure_naive(edges)
        assert answers[epoch] == expected, f"epoch {epoch}"
        assert expected == closure_nx(edges)
    assert set(notifications_requested(comp, "tc").values()) == {0}


def _reach_build(coordinated: bool) -> Callable[[timely.Scope], Any]:
    def build(scope: timely.Scope) -> Any:
        edges = scope.new_input("edges")
        sources = scope.new_input("sources")
        return [edges, sources], bloom.programs.reachability(edges, sources, coordinated=coordinated)

    return build


@pytest.mark.parametrize("seed", [3, 4])
def test_reachability_is_coordination_free_and_agrees_with_its_coordinated_form(workers: int, seed: int) -> None:
    edges, sources = graph_epochs(seed), source_epochs(seed)
    fast, comp = run_epochs(_reach_build(False), [edges, sources], workers)
    slow, comp_slow = run_epochs(_reach_build(True), [edges, sources], workers)
    for epoch, (g, s) in enumerate(zip(cumulative(edges), cumulative(sources), strict=True)):
        expected = reach_nx(g, s)
        assert expected == reach_naive(g, s)
        assert fast[epoch] == expected == slow[epoch], f"epoch {epoch}"
    asked = notifications_requested(comp, "reach")
    assert "reach.reach" in asked and set(asked.values()) == {0}, asked
    assert notifications_requested(comp_slow, "reach")["reach.reach"] > 0


@pytest.mark.parametrize("seed", [5, 6])
def test_shortest_paths_with_lmin_equal_dijkstra_and_bellman_ford(workers: int, seed: int) -> None:
    def build(scope: timely.Scope) -> Any:
        edges = scope.new_input("edges")
        sources = scope.new_input("sources")
        return [edges, sources], bloom.programs.shortest_paths(edges, sources)

    edges, sources = graph_epochs(seed, weighted=True), source_epochs(seed)
    answers, comp = run_epochs(build, [edges, sources], workers)
    for epoch, (g, s) in enumerate(zip(cumulative(edges), cumulative(sources), strict=True)):
        expected = sssp_nx(g, s)
        assert expected == sssp_naive(g, s)
        assert {k: v.reveal() for k, v in answers[epoch].items()} == expected, f"epoch {epoch}"
        assert all(type(v) is LMin for v in answers[epoch].values())
    assert set(notifications_requested(comp, "sssp").values()) == {0}


# Quorum and cart ------------------------------------------------------------------------------------
def vote_epochs(seed: int) -> list[list[tuple[str, int]]]:
    rng = random.Random(seed)
    return [[(f"req{rng.randrange(6)}", rng.randrange(5)) for _ in range(8)] for _ in range(EPOCHS)]


@pytest.mark.parametrize("seed", [7, 8])
def test_quorum_commits_exactly_the_requests_with_enough_distinct_voters(workers: int, seed: int) -> None:
    tallies: list[dict[str, Any]] = []

    def build(scope: timely.Scope) -> Any:
        votes = scope.new_input("votes")
        committed, tally = bloom.programs.quorum(votes, 3)
        tallies.append(tally)  # type: ignore[arg-type]
        return [votes], committed

    feeds = vote_epochs(seed)
    answers, comp = run_epochs(build, [feeds], workers)
    tally = tallies[0]
    for epoch, votes in enumerate(cumulative(feeds)):
        voters: dict[str, set[int]] = {}
        for req, voter in votes:
            voters.setdefault(req, set()).add(voter)
        assert answers[epoch] == {r for r, v in voters.items() if len(v) >= 3}, f"epoch {epoch}"
        assert {r: v.reveal() for r, v in tally.answer(epoch).items()} == voters  # type: ignore[attr-defined]
    assert set(notifications_requested(comp, "quorum").values()) == {0}


def test_shopping_cart_checkout_waits_for_the_epoch_and_sums_each_session(workers: int) -> None:
    rng = random.Random(9)
    feeds = [
        [(f"s{rng.randrange(3)}", (epoch, i), rng.choice("abc"), rng.choice([1, 1, 2, -1])) for i in range(10)]
        for epoch in range(EPOCHS)
    ]
    seen: dict[int, list[Any]] = {}

    def build(scope: timely.Scope) -> Any:
        actions = scope.new_input("actions")
        out = bloom.programs.shopping_cart(actions)
        out.subscribe(lambda t, records: seen.setdefault(t.epoch, []).extend(records))
        return [actions], _Probe(out.probe())

    _, comp = run_epochs(build, [feeds], workers)
    for epoch, actions in enumerate(cumulative(feeds)):
        totals: dict[str, dict[str, int]] = {}
        for session, _, item, delta in actions:
            totals.setdefault(session, {}).setdefault(item, 0)
            totals[session][item] += delta
        changed = {a[0] for a in feeds[epoch]}
        expected = {(s, tuple(sorted((i, q) for i, q in totals[s].items() if q))) for s in changed}
        assert sorted(seen[epoch]) == sorted(expected), f"epoch {epoch}"  # once per session, final
    asked = notifications_requested(comp, "cart")
    assert set(asked.values()) == {0}, asked  # accumulating is coordination-free
    checkout = sum(v.statistics().notifications_requested for v in comp.vertices("cart_checkout.wait"))
    assert checkout > 0  # the summary is not monotone: it waits


class _Probe:
    """Adapts a timely probe to run_epochs (which reads ``answer``)."""

    def __init__(self, probe: timely.Probe) -> None:
        self.probe = probe

    def answer(self, epoch: int) -> None:
        return None
