"""Your own timely vertex inside a linq loop: shortest paths within a radius.

    python -m timely_examples.linq_user_vertex [--nodes N] [--edges M] [--radius R] [--epochs E] [--workers W] [--seed S]

`linq.shortest_paths` is Bellman-Ford as a fixed point: at each iteration every node takes
the least of its distance and its in-neighbours' distances plus the edge weight. Here the
loop body is written out, and a vertex of our own sits in it, between linq's ``min`` and
the loop's feedback: it drops every distance beyond a radius, so only the ball around the
sources is ever explored, and it counts the differences it sees at each loop iteration.

The plumbing, inside the ``fixed_point`` body:

    nearest = ...min(...)                               # a linq Collection of the loop
    triples = nearest.to_stream()                       # a plain timely Stream of (record, time, diff)
    kept = triples.stage("within_radius", WithinRadius) # our vertex: on_recv / send_by
    return linq.Collection.from_stream(kept)            # a Collection again, for linq to use

A triple's ``time`` is a lattice time, ``(epoch, iteration)`` in this loop. A vertex must
send each triple on at its own time (or a later one, never an earlier one); the triples of
one message here all carry the message's time, but the vertex does not rely on that. A
triple that crossed between processes carries its time as a plain tuple (the codec sends a
`timely.Timestamp` as one), so the vertex reads times by index, ``tuple(time)``.

The vertex is linear (each difference is kept or dropped on its own), so it works
incrementally like linq's own operators: after each epoch of edge insertions and deletions
the program prints what changed, and checks the whole answer against Dijkstra's algorithm.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import timely
from timely_libs import linq

Node = int
WeightedEdge = tuple[Node, Node, int]

_first = itemgetter(0)
_second = itemgetter(1)


class WithinRadius(timely.Vertex):
    """Passes on the ``(node, distance)`` differences with ``distance <= radius``; drops the rest.

    Input 0 and output 0 carry ``(record, time, diff)`` triples (`linq.Collection.to_stream`,
    `linq.Collection.from_stream`). ``seen`` counts the triples received per time: the work
    of each ``(epoch, iteration)``, which the program prints.
    """

    def __init__(self, radius: int, seen: Counter[tuple[int, ...]] | None = None) -> None:
        self.radius = radius
        self.seen = seen if seen is not None else Counter()

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        by_time: dict[tuple[int, ...], list[Any]] = {}
        for triple in records:
            (_node, distance), at, _diff = triple
            at = tuple(at)
            self.seen[at] += 1
            if distance <= self.radius:
                by_time.setdefault(at, []).append(triple)
        for at, kept in by_time.items():
            self.send_by(self.outputs[0], kept, at)  # each triple at its own time (never before `time`)


def shortest_paths_within(
    edges: linq.Collection,
    sources: linq.Collection,
    radius: int,
    seen: Counter[tuple[int, ...]] | None = None,
) -> linq.Collection:
    """``(node, distance)`` for every node at most ``radius`` from the nearest of ``sources``,
    along ``(src, dst, weight)`` edges with non-negative weights."""
    start = sources.select(lambda s: (s, 0), name="at_source")

    def step(x: linq.Collection) -> linq.Collection:
        inner = edges.enter(x.scope)  # another collection, brought into the loop
        reached = x.join(inner, _first, _first, lambda n, e: (e[1], n[1] + e[2]), name="relax")
        nearest = reached.concat(x, name="with_current").min(_first, _second, name="nearest")
        triples = nearest.to_stream(name="distances")  # linq -> plain timely stream
        kept = triples.stage("within_radius", lambda: WithinRadius(radius, seen))  # the user's vertex
        return linq.Collection.from_stream(kept, name="kept")  # plain timely stream -> linq

    return start.fixed_point(step, name="ball")


@dataclass
class Handles:
    edges: linq.CollectionInput
    sources: linq.CollectionInput
    output: linq.CollectionOutput
    seen: Counter[tuple[int, ...]]
    """Triples the user's vertex received per ``(epoch, iteration)``, summed over this process's workers."""


def build(scope: timely.Scope, radius: int) -> Handles:
    edges = linq.new_input(scope, "edges")
    sources = linq.new_input(scope, "sources")
    seen: Counter[tuple[int, ...]] = Counter()
    ball = shortest_paths_within(edges.collection, sources.collection, radius, seen)
    return Handles(edges, sources, linq.CollectionOutput(ball, name="ball"), seen)


# Plain Python: the workload and the answer ----------------------------------------------------------
def random_edges(rng: random.Random, nodes: int, count: int, max_weight: int = 9) -> list[WeightedEdge]:
    """``count`` distinct directed edges with weights from 1 to ``max_weight``."""
    chosen: dict[tuple[Node, Node], int] = {}
    while len(chosen) < count:
        u, v = rng.randrange(nodes), rng.randrange(nodes)
        if u != v and (u, v) not in chosen:
            chosen[(u, v)] = rng.randint(1, max_weight)
    return [(u, v, w) for (u, v), w in chosen.items()]


def within_radius(edges: Iterable[WeightedEdge], sources: Iterable[Node], radius: int | None) -> dict[Node, int]:
    """Dijkstra from every source at once; node -> distance, for distances up to ``radius``."""
    out: dict[Node, list[tuple[Node, int]]] = {}
    for u, v, w in edges:
        out.setdefault(u, []).append((v, w))
    best: dict[Node, int] = {}
    heap = [(0, s) for s in set(sources)]
    while heap:
        d, n = heapq.heappop(heap)
        if n in best or (radius is not None and d > radius):
            continue
        best[n] = d
        for m, w in out.get(n, ()):
            if m not in best:
                heapq.heappush(heap, (d + w, m))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--edges", type=int, default=6_000)
    parser.add_argument("--radius", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4, help="epoch 0 loads the graph; each later one changes it")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    graph = set(random_edges(rng, args.nodes, args.edges))
    sources = [0, 1]
    print(
        f"graph: {args.nodes:,} nodes, {len(graph):,} weighted edges (seed {args.seed}); sources {sources}; "
        f"radius {args.radius}; {args.workers} worker(s)"
    )
    ok = True
    started = time.perf_counter()
    with timely.execute(lambda s: build(s, args.radius), workers=args.workers, timeout=300) as (comp, h):
        h.sources.insert_all(sources)
        for epoch in range(args.epochs):
            if epoch == 0:
                h.edges.insert_all(graph)
                what = "loaded the graph"
            else:  # delete some edges, add as many new ones
                gone = rng.sample(sorted(graph), max(1, len(graph) // 100))
                present = {(u, v) for u, v, _ in graph}
                new = [e for e in random_edges(rng, args.nodes, len(gone) * 2) if e[:2] not in present][: len(gone)]
                graph.difference_update(gone)
                graph.update(new)
                h.edges.remove_all(gone)
                h.edges.insert_all(new)
                what = f"deleted {len(gone)} edges, inserted {len(new)}"
            h.edges.advance_to(epoch + 1)
            h.sources.advance_to(epoch + 1)
            comp.wait_passed(h.output.probe, epoch, timeout=120)

            changes = h.output.changes.get(epoch, [])
            ball = dict(h.output.contents())
            iterations = [t[1] for t in h.seen if t[0] == epoch]
            work = sum(n for t, n in h.seen.items() if t[0] == epoch)
            reachable = len(within_radius(graph, sources, None))
            print(
                f"epoch {epoch}: {what}; {len(ball):,} of {reachable:,} reachable nodes within radius, "
                f"{len(changes):,} changes to the answer; "
                f"the user's vertex saw {work:,} differences over {max(iterations, default=-1) + 1} iteration(s)"
                f"  ({time.perf_counter() - started:.2f} s)"
            )
            expected = within_radius(graph, sources, args.radius)
            if ball != {(n, d): 1 for n, d in expected.items()}:
                print(f"epoch {epoch}: MISMATCH against Dijkstra", file=sys.stderr)
                ok = False
    if ok:
        print(f"checked every epoch against Dijkstra's algorithm (cut at radius {args.radius}): equal")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
