"""Prioritized connected components (TR Figure 10) against the plain fixed point (Figure 3).

``linq.prioritize``: one process, a seeded uniform random graph; the first answer, then
single-edge rewires (one deletion plus one insertion an epoch), each timed until the output
has reported the epoch. Three programs on the same graph in the same run:

- ``.cc``: `linq.prioritized_connected_components` (labels let into one loop by priority,
  `Collection.enter_at`); baseline: `linq.connected_components_figure3` (every label at once).
- ``.figure10``: Figure 10 written literally with `Collection.prioritize` around the fixed
  point; baseline the same Figure 3. Since prioritize changes only times (its result is
  exactly its body's), each priority re-runs the fixed point's iterations as a difference
  from the previous priority's: this measures what that costs.

Beside each rewire's latency, ``.notifications`` counts the notifications delivered per
rewire (every operator's callbacks at distinct times): prioritize's extra coordinate shows as
more distinct times, each evaluated on its own, which is where Figure 10's extra time goes.

Every answer is compared with NetworkX's components after the first epoch and the last.
Sizes: 10,000 nodes, 25,000 edges, 40 rewires (``--quick``: 1,000, 2,500, 20).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import networkx as nx

import timely
from bench._harness import BenchmarkError, Context, benchmark
from timely_libs import linq

Program = Callable[[linq.Collection], linq.Collection]


def _figure10(edges: linq.Collection) -> linq.Collection:
    """TR Figure 10 as the paper writes it: `prioritize` around Figure 3's fixed point."""
    both = edges.concat(edges.select(itemgetter(1, 0)))
    nodes = both.select(itemgetter(0)).distinct().select(lambda n: (n, n))

    def local_min(x: linq.Collection, e: linq.Collection) -> linq.Collection:
        proposals = x.join(e, itemgetter(0), itemgetter(0), lambda n, f: (f[1], n[1]))
        return proposals.concat(x).min(itemgetter(0), itemgetter(1))

    def body(p: linq.Collection) -> linq.Collection:
        inner = both.enter(p.scope)
        return p.fixed_point(lambda x: local_min(x, inner.enter(x.scope)))

    return nodes.prioritize(lambda node: (node[1] + 1).bit_length(), body)


PROGRAMS: dict[str, Program] = {
    "figure3": linq.connected_components_figure3,
    "prioritized": linq.prioritized_connected_components,
    "figure10": _figure10,
}


def _graph(nodes: int, edges: int, rewires: int, seed: int) -> tuple[list[tuple[int, int]], list[Any]]:
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    while len(present) < edges:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            present.add((a, b))
    first = sorted(present)
    listed = list(first)
    changes = []
    for _ in range(rewires):
        old = listed.pop(rng.randrange(len(listed)))
        new = (rng.randrange(nodes), rng.randrange(nodes))
        while new in present or new[0] == new[1]:
            new = (rng.randrange(nodes), rng.randrange(nodes))
        present.discard(old)
        present.add(new)
        listed.append(new)
        changes.append((old, new))
    return first, changes


def _components(edges: set[tuple[int, int]]) -> dict[int, int]:
    graph = nx.Graph(list(edges))
    return {n: min(c) for c in nx.connected_components(graph) for n in c}


def _run(ctx: Context, program: Program, first: list[tuple[int, int]], changes: list[Any]) -> dict[str, Any]:
    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "edges")
        return inp, linq.CollectionOutput(program(inp.collection))

    edges = set(first)
    with timely.execute(build, timeout=3600) as (comp, (inp, out)):
        start = time.perf_counter()
        inp.insert_all(first)
        inp.advance_to(1)
        comp.wait_passed(out.probe, 0, timeout=3600)
        initial = time.perf_counter() - start
        ctx.check(dict(out.contents()) == {r: 1 for r in _components(edges).items()}, "first answer")
        latencies = []
        notified = comp.statistics().notifications_delivered
        for epoch, (old, new) in enumerate(changes, start=1):
            start = time.perf_counter()
            inp.remove(old)
            inp.insert(new)
            inp.advance_to(epoch + 1)
            comp.wait_passed(out.probe, epoch, timeout=3600)
            latencies.append(time.perf_counter() - start)
            edges.discard(old)
            edges.add(new)
        notified = comp.statistics().notifications_delivered - notified
        ctx.check(dict(out.contents()) == {r: 1 for r in _components(edges).items()}, "last answer")
    return {
        "initial": initial,
        "median_ms": 1e3 * statistics.median(latencies),
        "notifications": notified / len(changes),
    }


@benchmark("linq.prioritize", "prioritized connected components (TR Fig. 10) vs the plain fixed point (Fig. 3)")
def prioritize(ctx: Context) -> None:
    nodes, edges, rewires = (1_000, 2_500, 20) if ctx.quick else (10_000, 25_000, 40)
    first, changes = _graph(nodes, edges, rewires, seed=7)
    linq.preload()
    results = {}
    for name, program in PROGRAMS.items():
        results[name] = _run(ctx, program, first, changes)
        ctx.progress(
            f"{name}: first {results[name]['initial']:.2f} s, rewire median {results[name]['median_ms']:.1f} ms, "
            f"{results[name]['notifications']:.0f} notifications a rewire (load {os.getloadavg()[0]:.1f})"
        )
    base = results["figure3"]
    for name, label in (("prioritized", "cc"), ("figure10", "figure10")):
        r = results[name]
        ctx.record(f"linq.prioritize.{label}.initial", r["initial"], "s", "figure3_initial_s", base["initial"])
        ctx.record(
            f"linq.prioritize.{label}.update.median",
            r["median_ms"],
            "ms",
            "figure3_update_median_ms",
            base["median_ms"],
            target="faster than Figure 3" if name == "prioritized" else None,
            met=r["median_ms"] < base["median_ms"] if name == "prioritized" else None,
        )
        ctx.record(
            f"linq.prioritize.{label}.notifications",
            r["notifications"],
            "per rewire",
            "figure3_notifications",
            base["notifications"],
        )
    if not results:
        raise BenchmarkError("nothing ran")
