"""``linq.cc``, ``linq.scc``, ``linq.sssp``: libs/linq's graph algorithms against NetworkX.

Each runs the library function (TR Figures 3, 8, 19) in fresh processes started by
``timely run`` (`bench/_linq_worker.py`): the first answer on a seeded random graph, then
epochs of one edge deletion plus one insertion, each timed until the output has reported
the epoch's changes. Baseline: NetworkX on the same graph in this process, computing the
answer from scratch (for updates: recomputing after each change, which is what a user
without incremental computation would do). The answers are compared, by a digest of every
``(record, count)``, after the first epoch and after the last.

Sizes (full / ``--quick``): CC and SSSP on 100,000 nodes and 1,000,000 edges (10,000 /
100,000), SCC on 100,000 nodes and 200,000 edges (10,000 / 20,000).
"""

from __future__ import annotations

import itertools
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench._harness import Context, benchmark, percentile
from bench._net import ROOT, launch

MARK = "LINQBENCH"
SEED = 2024
TARGET_UPDATE_MS = 2.0
TARGET_INITIAL_S = 10.0
TARGET_SPEEDUP = 100.0


def _cc(edges: Any, sources: Any) -> Any:
    from libs import linq

    return linq.connected_components(edges)


def _scc(edges: Any, sources: Any) -> Any:
    from libs import linq

    return linq.strongly_connected_components(edges)


def _sssp(edges: Any, sources: Any) -> Any:
    from libs import linq

    return linq.shortest_paths(edges, sources)


ALGORITHMS: dict[str, Callable[[Any, Any], Any]] = {"cc": _cc, "scc": _scc, "sssp": _sssp}


# The workload, the same in every process -------------------------------------------------------------


def _edge(algo: str, rng: random.Random, nodes: int) -> tuple[int, ...]:
    a, b = rng.randrange(nodes), rng.randrange(nodes)
    return (a, b, rng.randint(1, 10)) if algo == "sssp" else (a, b)


def graph(algo: str, nodes: int, edges: int) -> list[tuple[int, ...]]:
    rng = random.Random(SEED)
    return [_edge(algo, rng, nodes) for _ in range(edges)]


def power_law_graph(
    seed: int, nodes: int, edges: int, hub_degree: int, exponent: float = 2.5
) -> tuple[list[tuple[int, int]], int]:
    """A seeded directed graph with power-law degrees and one hub; returns ``(edges, hub)``.

    ``edges - hub_degree`` background edges draw both ends with probability proportional to
    ``rank ** (-1 / (exponent - 1))`` (Chung and Lu's model: degrees then follow a power law
    of that exponent), over node ids shuffled so that degree and id are unrelated (a
    component's label, its least id, sits anywhere). Duplicates and self-loops stay, as in
    real data. The hub, a random node, is joined to ``hub_degree`` distinct other nodes, each
    edge pointing in or out at random; many of them reach the graph only through the hub.
    """
    if not 0 <= hub_degree < nodes or hub_degree > edges:
        raise ValueError(f"power_law_graph: need 0 <= hub_degree < nodes and hub_degree <= edges, got {hub_degree}")
    rng = random.Random(seed)
    ids = list(range(nodes))
    rng.shuffle(ids)
    cumulative = list(itertools.accumulate((rank + 1) ** (-1 / (exponent - 1)) for rank in range(nodes)))
    background = edges - hub_degree
    sources = rng.choices(ids, cum_weights=cumulative, k=background)
    targets = rng.choices(ids, cum_weights=cumulative, k=background)
    hub = rng.randrange(nodes)
    spokes = [v + (v >= hub) for v in rng.sample(range(nodes - 1), hub_degree)]
    out = list(zip(sources, targets))
    out.extend((hub, v) if rng.random() < 0.5 else (v, hub) for v in spokes)
    rng.shuffle(out)
    return out, hub


def updates(algo: str, edges: list[tuple[int, ...]], nodes: int, count: int) -> list[tuple[Any, Any]]:
    """``count`` pairs (edge removed, edge added), each removal of an edge present at the time."""
    rng = random.Random(SEED + 1)
    current = list(edges)
    out = []
    for _ in range(count):
        i = rng.randrange(len(current))
        removed = current[i]
        added = _edge(algo, rng, nodes)
        current[i] = added
        out.append((removed, added))
    return out


def digest(contents: dict[Any, int]) -> list[int]:
    """How many distinct records and a sum of hashes of ``(record, count)``: sums across processes."""
    return [len(contents), sum(hash((r, c)) for r, c in contents.items()) & ((1 << 61) - 1)]


def combine(digests: list[list[int]]) -> list[int]:
    return [sum(d[0] for d in digests), sum(d[1] for d in digests) & ((1 << 61) - 1)]


# NetworkX, the baseline and the oracle ----------------------------------------------------------


class Reference:
    """The answer from scratch with NetworkX, on a graph kept up to date edge by edge."""

    def __init__(self, algo: str, edges: list[tuple[int, ...]]) -> None:
        import networkx as nx

        self.nx = nx
        self.algo = algo
        self.counts: dict[tuple[int, ...], int] = {}
        self.weights: dict[tuple[int, int], dict[int, int]] = {}
        """SSSP: per node pair, weight -> copies (NetworkX keeps one edge: the lightest)."""
        self.graph = nx.Graph() if algo == "cc" else nx.DiGraph()
        for e in edges:
            self.change(e, 1)

    def change(self, e: tuple[int, ...], diff: int) -> None:
        c = self.counts.get(e, 0) + diff
        if c:
            self.counts[e] = c
        else:
            del self.counts[e]
        a, b = e[0], e[1]
        if self.algo == "sssp":
            ws = self.weights.setdefault((a, b), {})
            ws[e[2]] = ws.get(e[2], 0) + diff
            if not ws[e[2]]:
                del ws[e[2]]
            present = bool(ws)
            if present:
                self.graph.add_edge(a, b, weight=min(ws))
        else:
            present = bool(self.counts.get((a, b)) or (self.algo == "cc" and self.counts.get((b, a))))
            if present:
                self.graph.add_edge(a, b)
        if not present and self.graph.has_edge(a, b):
            self.graph.remove_edge(a, b)

    def answer(self) -> dict[Any, int]:
        nx, g = self.nx, self.graph
        if self.algo == "cc":
            out: dict[Any, int] = {}
            for comp in nx.connected_components(g):
                least = min(comp)
                for v in comp:
                    out[(v, least)] = 1
            return out
        if self.algo == "scc":
            comp_of = {}
            for i, comp in enumerate(nx.strongly_connected_components(g)):
                for v in comp:
                    comp_of[v] = i
            return {e: c for e, c in self.counts.items() if comp_of[e[0]] == comp_of[e[1]]}
        if 0 not in g:
            return {(0, 0): 1}
        return {(v, d): 1 for v, d in nx.single_source_dijkstra_path_length(g, 0).items()}


# Running it -----------------------------------------------------------------------------------------


def _run(ctx: Context, algo: str, nodes: int, edges: int, update_count: int, processes: int) -> list[dict[str, Any]]:
    ctx.progress(
        f"{algo}: timely with {processes} process(es), {nodes:,} nodes, {edges:,} edges, {update_count} updates"
    )
    return launch(
        processes,
        algo,
        nodes,
        edges,
        update_count,
        timeout=3600,
        worker=ROOT / "bench" / "_linq_worker.py",
        mark=MARK,
    )


def _measure(ctx: Context, algo: str, nodes: int, edges: int, update_count: int, two: bool) -> dict[str, Any]:
    graph_edges = graph(algo, nodes, edges)
    changes = updates(algo, graph_edges, nodes, update_count)

    ctx.progress(f"{algo}: NetworkX from scratch on the initial graph")
    ref = Reference(algo, graph_edges)
    started = time.perf_counter()
    first = ref.answer()
    nx_initial = time.perf_counter() - started
    nx_updates = []
    for i, (removed, added) in enumerate(changes):
        ref.change(removed, -1)
        ref.change(added, 1)
        started = time.perf_counter()
        final = ref.answer()
        nx_updates.append((time.perf_counter() - started) * 1000)
        ctx.progress(f"{algo}: NetworkX recomputed after update {i + 1}/{len(changes)}", force=False)
    if not changes:
        final = first

    one = _run(ctx, algo, nodes, edges, update_count, 1)[0]
    ctx.check(one["first"] == digest(first), f"{algo}: timely's first answer differs from NetworkX's")
    ctx.check(one["final"] == digest(final), f"{algo}: timely's answer after the updates differs from NetworkX's")
    ctx.progress(f"{algo}: 1 process: first answer in {one['initial_seconds']:.2f} s (verified)")
    result = {"one": one, "nx_initial": nx_initial, "nx_updates": sorted(nx_updates)}
    if two:
        both = _run(ctx, algo, nodes, edges, 0, 2)
        ctx.check(combine([p["first"] for p in both]) == digest(first), f"{algo}: 2 processes differ from NetworkX")
        result["two"] = max(p["initial_seconds"] for p in both)
        ctx.progress(f"{algo}: 2 processes: first answer in {result['two']:.2f} s (verified)")
    return result


def _update_records(ctx: Context, name: str, m: dict[str, Any], p99: bool) -> None:
    lat = sorted(m["one"]["update_ms"])
    nx_median = statistics.median(m["nx_updates"])
    median = statistics.median(lat)
    target = f"<= {TARGET_UPDATE_MS} ms and >= {TARGET_SPEEDUP:.0f}x faster than NetworkX"
    met = median <= TARGET_UPDATE_MS and nx_median / median >= TARGET_SPEEDUP
    ctx.record(f"{name}.update.median", median, "ms", "networkx_recompute_ms", nx_median, target=target, met=met)
    if p99:
        ctx.record(f"{name}.update.p99", percentile(lat, 99), "ms", "networkx_recompute_ms", nx_median)


@benchmark("linq.cc", "connected components (TR Fig. 3): first answer and incremental updates, vs NetworkX")
def cc(ctx: Context) -> None:
    nodes, edges, count = (10_000, 100_000, 20) if ctx.quick else (100_000, 1_000_000, 100)
    m = _measure(ctx, "cc", nodes, edges, count, two=True)
    initial = m["one"]["initial_seconds"]
    ctx.record(
        "linq.cc.initial",
        initial,
        "s",
        "networkx_from_scratch_s",
        m["nx_initial"],
        target=f"<= {TARGET_INITIAL_S:.0f} s",
        met=initial <= TARGET_INITIAL_S,
    )
    ctx.record(
        "linq.cc.initial.p2",
        m["two"],
        "s",
        "networkx_from_scratch_s",
        m["nx_initial"],
        target="faster than linq.cc.initial",
        met=m["two"] < initial,
    )
    ctx.record("linq.cc.memory", m["one"]["peak_mib"], "MiB")
    _update_records(ctx, "linq.cc", m, p99=True)


@benchmark("linq.scc", "strongly connected components (TR Fig. 8, doubly nested loop), vs NetworkX")
def scc(ctx: Context) -> None:
    nodes, edges, count = (10_000, 20_000, 5) if ctx.quick else (100_000, 200_000, 20)
    m = _measure(ctx, "scc", nodes, edges, count, two=False)
    ctx.record("linq.scc.initial", m["one"]["initial_seconds"], "s", "networkx_from_scratch_s", m["nx_initial"])
    _update_records(ctx, "linq.scc", m, p99=False)


@benchmark("linq.sssp", "single-source shortest paths (TR Fig. 19): incremental updates, vs NetworkX")
def sssp(ctx: Context) -> None:
    nodes, edges, count = (10_000, 100_000, 20) if ctx.quick else (100_000, 1_000_000, 100)
    m = _measure(ctx, "sssp", nodes, edges, count, two=False)
    ctx.record("linq.sssp.initial", m["one"]["initial_seconds"], "s", "networkx_from_scratch_s", m["nx_initial"])
    _update_records(ctx, "linq.sssp", m, p99=True)
