"""The driver the pregel tests share, and the random graphs they run on.

`run` feeds one graph to `pregel.pregel` with N workers in this process and returns the final
values as ``{vertex_id: value}``; `run_epochs` feeds several graphs, one per epoch, and returns
one such dict per epoch; `failure` runs a graph that must fail and returns the error. Every
computation runs under the conftest timeout, and every result is checked for what any run
must satisfy: each vertex reported once, at the epoch of its graph.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import networkx as nx
import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import pregel

Edge = tuple[Any, ...]
Graph = tuple[Sequence[Edge], Sequence[tuple[Any, Any]] | None]
"""One epoch's input: edges, and vertices (None: no vertices stream at all)."""


def run_epochs(
    program: Any,
    graphs: Sequence[Graph],
    workers: int = 1,
    *,
    epochs: Sequence[int] | None = None,
    lockstep: bool = True,
    **kwargs: Any,
) -> list[dict[Any, Any]]:
    """Run ``program`` on each graph at its own epoch (``epochs``, increasing; by default 0, 1,
    ...); ``kwargs`` go to `pregel.pregel`. With ``lockstep`` each epoch is awaited before the
    next is fed, otherwise all are fed at once (epochs overlap in time). A vertices stream is
    made if any graph has vertices."""
    numbers = list(epochs) if epochs is not None else list(range(len(graphs)))
    assert len(numbers) == len(graphs)
    with_vertices = any(v is not None for _, v in graphs)
    seen: list[tuple[int, Any, Any]] = []

    def collect(time: timely.Timestamp, records: list[Any]) -> None:
        seen.extend((time.epoch, vid, value) for vid, value in records)

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Input | None, timely.Probe]:
        edges = scope.new_input("edges")
        vertices = scope.new_input("vertices") if with_vertices else None
        out = pregel.pregel(program, edges, vertices, **kwargs)
        return edges, vertices, out.subscribe(collect)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (edges, vertices, probe)):
        for number, (edge_list, vertex_list) in zip(numbers, graphs):
            for inp, records in ((edges, edge_list), (vertices, vertex_list)):
                if inp is None:
                    continue
                if inp.epoch < number:
                    inp.advance_to(number)
                if records:
                    inp.send(list(records))
                inp.advance_to(number + 1)
            if lockstep:
                comp.wait_passed(probe, number, timeout=TIMEOUT)

    results: dict[int, dict[Any, Any]] = {n: {} for n in numbers}
    for epoch, vid, value in seen:
        assert epoch in results, f"a result at epoch {epoch}, which had no graph: {(vid, value)}"
        assert vid not in results[epoch], f"epoch {epoch}: vertex {vid!r} reported twice"
        results[epoch][vid] = value
    return [results[n] for n in numbers]


def run(
    program: Any,
    edges: Sequence[Edge],
    vertices: Sequence[tuple[Any, Any]] | None = None,
    workers: int = 1,
    **kwargs: Any,
) -> dict[Any, Any]:
    """The final values of ``program`` on one graph, ``{vertex_id: value}``."""
    return run_epochs(program, [(edges, vertices)], workers, **kwargs)[0]


def failure(
    program: Any,
    edges: Sequence[Edge],
    vertices: Sequence[tuple[Any, Any]] | None = None,
    workers: int = 1,
    **kwargs: Any,
) -> timely.TimelyError:
    """The error a run of ``program`` fails with; fails the test if it succeeds or hangs."""
    with pytest.raises(timely.TimelyError) as info:
        run(program, edges, vertices, workers, **kwargs)
    assert not isinstance(info.value, timely.StalledError), f"the computation hung instead of failing: {info.value}"
    return info.value


def pregel_error(exc: BaseException) -> str:
    """The run failed because pregel raised `pregel.PregelError`: its text, which the
    `timely.VertexError` repeats; the PregelError is the ``__cause__``."""
    assert isinstance(exc, timely.VertexError), f"{type(exc).__name__}: {exc}"
    assert isinstance(exc.__cause__, pregel.PregelError), f"cause: {exc.__cause__!r}"
    text = str(exc.__cause__)
    assert text in str(exc)
    return text


class Recorder:
    """Calls made in this process (the tests run in-process, so every worker sees one object)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, item: Any) -> None:
        self.calls.append(item)


# Random graphs ------------------------------------------------------------------------------------


def random_edges(
    rng: random.Random, nodes: int, edges: int, *, self_loops: bool = True, duplicates: bool = True
) -> list[tuple[int, int]]:
    """``edges`` random directed edges on ``range(nodes)``, shuffled; some repeated (same
    value) if ``duplicates``, self-loops allowed if ``self_loops``."""
    out: list[tuple[int, int]] = []
    if nodes == 0:
        return out
    for _ in range(edges):
        u, v = rng.randrange(nodes), rng.randrange(nodes)
        if u == v and not self_loops:
            continue
        out.append((u, v))
    if duplicates and out:
        out.extend(rng.choices(out, k=max(1, len(out) // 5)))
    rng.shuffle(out)
    return out


def clustered_edges(rng: random.Random, nodes: int, clusters: int, per_cluster: int) -> list[tuple[int, int]]:
    """A disconnected graph: random edges inside each of ``clusters`` disjoint blocks of ids."""
    out: list[tuple[int, int]] = []
    block = max(1, nodes // clusters)
    for c in range(clusters):
        lo = c * block
        for _ in range(per_cluster):
            out.append((lo + rng.randrange(block), lo + rng.randrange(block)))
    return out


def both_ways(edges: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Each edge in both directions (what the undirected programs expect)."""
    return [*edges, *((v, u) for u, v in edges)]


def digraph(nodes: Sequence[Any], edges: Sequence[Edge], weight: Callable[[Edge], Any] | None = None) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for e in edges:
        if weight is None:
            g.add_edge(e[0], e[1])
        else:
            g.add_edge(e[0], e[1], weight=weight(e))
    return g


def simple_graph(nodes: Sequence[Any], edges: Sequence[tuple[Any, Any]]) -> nx.Graph:
    """The undirected graph without self-loops (NetworkX's core functions refuse them)."""
    g = nx.Graph()
    g.add_nodes_from(nodes)
    g.add_nodes_from(x for e in edges for x in e)
    g.add_edges_from((u, v) for u, v in edges if u != v)
    return g


# Size classes for the program tests: (name, nodes, edges).
SIZES = [
    ("tiny", 3, 2),
    ("sparse", 40, 25),  # many components, many isolated vertices
    ("medium", 60, 150),
    ("dense", 30, 300),
]
