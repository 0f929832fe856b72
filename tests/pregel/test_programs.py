"""`timely_libs.pregel.programs` against NetworkX on seeded random graphs.

Every program runs with one and with three workers on graphs of several sizes: a tiny one,
sparse ones with many components and isolated vertices, denser ones; self-loops and
duplicate edges included (NetworkX sees the same graph, duplicates collapsed), and for the
undirected programs every edge fed in both directions. The answer must equal NetworkX's
(PageRank: within 1e-6 per vertex).
"""

from __future__ import annotations

import math
import random
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.pregel_harness import (
    SIZES,
    Recorder,
    both_ways,
    clustered_edges,
    digraph,
    random_edges,
    run,
    simple_graph,
)
from timely_libs import pregel
from timely_libs.pregel import programs

FAST = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
SIZE_IDS = [name for name, _, _ in SIZES]
SIZED = pytest.mark.parametrize(("nodes", "edges"), [(n, m) for _, n, m in SIZES], ids=SIZE_IDS)


def graph(seed: int, nodes: int, edges: int, **kwargs: Any) -> tuple[list[tuple[int, Any]], list[tuple[int, int]]]:
    """Every id in ``range(nodes)`` as a vertex (some only that: isolated), and random edges."""
    rng = random.Random(f"{seed}/{nodes}/{edges}")
    return [(i, None) for i in range(nodes)], random_edges(rng, nodes, edges, **kwargs)


# PageRank ---------------------------------------------------------------------------------------------


def assert_close(got: dict[Any, float], want: dict[Any, float], tol: float = 1e-6) -> None:
    assert set(got) == set(want)
    worst = max((abs(got[k] - want[k]), k) for k in want) if want else (0.0, None)
    assert worst[0] <= tol, f"vertex {worst[1]!r}: {got[worst[1]]} vs NetworkX {want[worst[1]]}"


PAGERANKS = {"PageRank": programs.PageRank, "ArrayPageRank": programs.ArrayPageRank}


@pytest.mark.parametrize("kind", sorted(PAGERANKS))
@SIZED
@pytest.mark.parametrize("seed", [1, 2])
def test_pagerank_matches_networkx(workers: int, kind: str, nodes: int, edges: int, seed: int) -> None:
    vertices, edge_list = graph(seed, nodes, edges)
    want = nx.pagerank(digraph(range(nodes), edge_list), tol=1e-13, max_iter=1000)
    got = run(PAGERANKS[kind](supersteps=150), edge_list, vertices, workers)
    assert_close(got, want)
    assert math.isclose(sum(got.values()), 1.0, rel_tol=1e-9)


@pytest.mark.parametrize("kind", sorted(PAGERANKS))
def test_pagerank_tolerance_stops_early_and_still_matches(workers: int, kind: str) -> None:
    vertices, edge_list = graph(3, 80, 240)
    reports = Recorder()
    got = run(PAGERANKS[kind](supersteps=10_000, tolerance=1e-10), edge_list, vertices, workers, progress=reports)
    assert_close(got, nx.pagerank(digraph(range(80), edge_list), tol=1e-13, max_iter=1000))
    last = reports.calls[-1]
    assert last.halting and 20 < last.superstep < 1000, f"stopped after superstep {last.superstep}"


@pytest.mark.parametrize("kind", sorted(PAGERANKS))
def test_pagerank_without_a_vertices_stream(workers: int, kind: str) -> None:
    """Without vertices, the endpoints of the edges are the graph (no isolated vertices)."""
    _, edge_list = graph(4, 50, 90)
    want = nx.pagerank(digraph([], edge_list), tol=1e-13, max_iter=1000)
    assert_close(run(PAGERANKS[kind](supersteps=150), edge_list, None, workers), want)


@pytest.mark.parametrize("kind", sorted(PAGERANKS))
def test_pagerank_edge_cases(workers: int, kind: str) -> None:
    make = PAGERANKS[kind]
    assert run(make(), [], None, workers) == {}  # nothing at all
    assert_close(run(make(), [], [(7, None)], workers), {7: 1.0})  # one dangling vertex
    only_dangling = run(make(), [], [(i, None) for i in range(5)], workers)
    assert_close(only_dangling, nx.pagerank(digraph(range(5), [])))
    loops = [(0, 0), (1, 1), (1, 2)]  # self-loops count as out-edges, as in NetworkX
    assert_close(run(make(supersteps=150), loops, None, workers), nx.pagerank(digraph([], loops), tol=1e-13))


# Shortest paths ---------------------------------------------------------------------------------------


def length(edge: tuple[int, ...]) -> int:
    """A length fixed by the endpoints, so that a duplicated edge carries the same one."""
    return 1 + (edge[0] * 7 + edge[1] * 3) % 10


def nx_distances(g: nx.DiGraph, source: Any, weighted: bool) -> dict[Any, float]:
    if source not in g:
        return dict.fromkeys(g, math.inf)
    found = (
        nx.single_source_dijkstra_path_length(g, source)
        if weighted
        else nx.single_source_shortest_path_length(g, source)
    )
    return {n: found.get(n, math.inf) for n in g}


@SIZED
@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "lengths"])
@pytest.mark.parametrize("seed", [1, 2])
def test_shortest_paths_match_networkx(workers: int, nodes: int, edges: int, weighted: bool, seed: int) -> None:
    vertices, edge_list = graph(seed, nodes, edges)
    g = digraph(range(nodes), edge_list, length if weighted else None)
    fed = [(u, v, length((u, v))) for u, v in edge_list] if weighted else edge_list
    source = seed % nodes
    got = run(programs.ShortestPaths(source), fed, vertices, workers)
    want = nx_distances(g, source, weighted)
    assert got == want


def test_shortest_paths_from_a_source_not_in_the_graph(workers: int) -> None:
    vertices, edge_list = graph(5, 20, 30)
    assert run(programs.ShortestPaths(999), edge_list, vertices, workers) == dict.fromkeys(range(20), math.inf)


@FAST
@given(
    edges=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.floats(0, 5)), max_size=30),
    source=st.integers(0, 9),
)
def test_shortest_paths_with_float_lengths(workers: int, edges: list[tuple[int, int, float]], source: int) -> None:
    dedup = {(u, v): w for u, v, w in edges}  # one length per edge: a duplicate with another length is refused
    fed = [(u, v, w) for (u, v), w in dedup.items()]
    vertices = [(i, None) for i in range(10)]
    g = digraph(range(10), fed, lambda e: e[2])
    assert run(programs.ShortestPaths(source), fed, vertices, workers) == nx_distances(g, source, True)


@FAST
@given(edges=st.lists(st.tuples(st.sampled_from("abcdefg"), st.sampled_from("abcdefg")), max_size=20))
def test_shortest_paths_with_string_ids(workers: int, edges: list[tuple[str, str]]) -> None:
    g = digraph([], edges)
    got = run(programs.ShortestPaths("a"), edges, None, workers)
    assert got == nx_distances(g, "a", False)


# Connected components ---------------------------------------------------------------------------------


def nx_labels(g: nx.Graph) -> dict[Any, Any]:
    return {n: min(comp) for comp in nx.connected_components(g) for n in comp}


def undirected(nodes: Any, edges: list[tuple[Any, Any]]) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return g


def hash_min(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
    """HashMin as a plain compute function (the docstring's example)."""
    if vertex.superstep == 0:
        vertex.value = vertex.id
    smallest = min([vertex.value, *messages])
    if vertex.superstep == 0 or smallest < vertex.value:
        vertex.value = smallest
        vertex.send_to_all_neighbors(smallest)
    vertex.vote_to_halt()


CC_PROGRAMS = {
    "ConnectedComponents": programs.ConnectedComponents,
    "function": lambda: hash_min,
    "function_with_combiner": lambda: pregel.Program(hash_min, combine=min),
}


@pytest.mark.parametrize("kind", sorted(CC_PROGRAMS))
@SIZED
@pytest.mark.parametrize("seed", [1, 2])
def test_connected_components_match_networkx(workers: int, kind: str, nodes: int, edges: int, seed: int) -> None:
    vertices, edge_list = graph(seed, nodes, edges)
    got = run(CC_PROGRAMS[kind](), both_ways(edge_list), vertices, workers)
    assert got == nx_labels(undirected(range(nodes), edge_list))


@pytest.mark.parametrize("kind", sorted(CC_PROGRAMS))
def test_connected_components_of_a_clustered_graph(workers: int, kind: str) -> None:
    rng = random.Random(7)
    edge_list = clustered_edges(rng, 120, 6, 30)
    want = nx_labels(undirected([], edge_list))
    assert len(set(want.values())) >= 6
    assert run(CC_PROGRAMS[kind](), both_ways(edge_list), None, workers) == want


@FAST
@given(edges=st.lists(st.tuples(st.text("xyz", max_size=2), st.text("xyz", max_size=2)), max_size=20))
def test_connected_components_of_string_ids(workers: int, edges: list[tuple[str, str]]) -> None:
    got = run(programs.ConnectedComponents(), both_ways(edges), None, workers)
    assert got == nx_labels(undirected([], edges))


# k-core and core numbers ------------------------------------------------------------------------------


@SIZED
@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_kcore_matches_networkx(workers: int, nodes: int, edges: int, k: int) -> None:
    vertices, edge_list = graph(k, nodes, edges)
    program = programs.KCore(k)
    got = run(program, both_ways(edge_list), vertices, workers)
    want = set(nx.k_core(simple_graph(range(nodes), edge_list), k))
    assert set(got) == want
    assert all(value is None for value in got.values())
    assert sum(program.removed_per_superstep) == nodes - len(want)


@SIZED
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_core_numbers_match_networkx(workers: int, nodes: int, edges: int, seed: int) -> None:
    vertices, edge_list = graph(seed, nodes, edges)
    got = run(programs.CoreNumbers(), both_ways(edge_list), vertices, workers)
    assert got == nx.core_number(simple_graph(range(nodes), edge_list))


@FAST
@given(edges=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=40))
def test_core_numbers_random(workers: int, edges: list[tuple[int, int]]) -> None:
    got = run(programs.CoreNumbers(), both_ways(edges), None, workers)
    assert got == nx.core_number(simple_graph([], edges))


# Bipartite matching -----------------------------------------------------------------------------------


def bipartite(seed: int, left: int, right: int, edges: int) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
    """Left vertices ``0..left-1``, right ones after them; random left-to-right edges (duplicates too)."""
    rng = random.Random(f"bipartite/{seed}")
    vertices = [(i, "L") for i in range(left)] + [(left + j, "R") for j in range(right)]
    edge_list = [(rng.randrange(left), left + rng.randrange(right)) for _ in range(edges)]
    edge_list += edge_list[: edges // 10]
    return vertices, edge_list


def assert_maximal_matching(
    result: dict[Any, Any], vertices: list[tuple[Any, str]], edges: list[tuple[Any, Any]]
) -> None:
    sides = dict(vertices)
    assert set(result) == set(sides)
    edge_set = set(edges)
    for v, (side, partner) in result.items():
        assert side == sides[v]
        if partner is None:
            continue
        assert result[partner] == (sides[partner], v), f"{v} -> {partner} is not mutual: {result[partner]}"
        left, right = (v, partner) if side == "L" else (partner, v)
        assert sides[left] == "L" and sides[right] == "R"
        assert (left, right) in edge_set, f"{left} and {right} are matched but not adjacent"
    for u, v in edges:
        assert result[u][1] is not None or result[v][1] is not None, f"edge {u} -> {v}: both ends unmatched"


@pytest.mark.parametrize(("left", "right", "edges"), [(1, 1, 1), (10, 12, 20), (30, 20, 80), (25, 25, 300)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bipartite_matching_is_maximal(workers: int, left: int, right: int, edges: int, seed: int) -> None:
    vertices, edge_list = bipartite(seed + 10 * left, left, right, edges)
    got = run(programs.BipartiteMatching(seed), edge_list, vertices, workers)
    assert_maximal_matching(got, vertices, edge_list)
    g = nx.Graph(edge_list)
    g.add_nodes_from(v for v, _ in vertices)
    maximum = len(nx.bipartite.maximum_matching(g, top_nodes=[v for v, s in vertices if s == "L"])) // 2
    matched = sum(1 for _, partner in got.values() if partner is not None) // 2
    assert 2 * matched >= maximum, "a maximal matching has at least half as many edges as a maximum one"


def test_bipartite_matching_is_the_same_for_a_seed_whatever_the_workers() -> None:
    vertices, edge_list = bipartite(5, 40, 30, 150)
    runs = {
        seed: [run(programs.BipartiteMatching(seed), edge_list, vertices, w) for w in (1, 2, 3)] for seed in (0, 1, 2)
    }
    for results in runs.values():
        assert results[0] == results[1] == results[2]
    assert len({str(sorted(r[0].items())) for r in runs.values()}) > 1, "different seeds should match differently"


def test_bipartite_matching_with_isolated_vertices(workers: int) -> None:
    vertices = [(0, "L"), (1, "L"), (2, "R"), (3, "R"), (4, "L")]
    edge_list = [(0, 2), (1, 2)]
    got = run(programs.BipartiteMatching(), edge_list, vertices, workers)
    assert_maximal_matching(got, vertices, edge_list)
    assert got[3] == ("R", None) and got[4] == ("L", None)
