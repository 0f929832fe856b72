"""Connected components of a generated graph, by min-label propagation in a timely loop.

    python -m timely_examples.connected_components [--nodes N] [--edges M] [--workers W] [--seed S]
    timely run -n 2 --workers 3 -m timely_examples.connected_components [--nodes N] ...

Each node starts labelled with its own id; at every iteration of the loop, nodes whose label
improved tell their neighbours. The loop ends by itself when no label improves: a fixed point
found by the data, not by a fixed iteration count. Progress is printed per iteration, and
the answer is checked against a plain breadth-first search.

Written for any number of processes: every process generates the same graph (same seed) but
sends only its share of the edges, and the labels, which end up spread over the workers by
node, are gathered on process 0 (an exchange that sends every record to worker 0), which
alone holds the whole answer and checks it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import timely


class MinLabel(timely.Vertex):
    """Keeps each node's smallest label; at each iteration's notification, tells neighbours of improvements.

    Input 0: edges ``(u, v)`` (at iteration 0); input 1: label proposals ``(node, label)``.
    Output 0: proposals ``(neighbour, label)`` from improved nodes, at the same time (fed back).
    Output 1: ``(node, label)`` for every improved node (the changes of the answer).
    """

    def __init__(self, on_iteration: Callable[[timely.Timestamp, int], None] | None = None) -> None:
        self.adjacency: defaultdict[int, list[int]] = defaultdict(list)
        self.label: dict[int, int] = {}
        self.improved: dict[timely.Timestamp, dict[int, int]] = {}
        self.on_iteration = on_iteration

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        todo = self.improved.get(time)
        if todo is None:
            todo = self.improved[time] = {}
            self.notify_at(time)
        label = self.label
        if edge == 0:
            for u, v in records:
                self.adjacency[u].append(v)
                if u not in label:
                    label[u] = u
                    todo[u] = u
        else:
            for node, proposed in records:
                if proposed < label.get(node, node):
                    label[node] = proposed
                    todo[node] = proposed

    def on_notify(self, time: timely.Timestamp) -> None:
        improved = self.improved.pop(time)
        adjacency, label = self.adjacency, self.label
        changes = [(node, best) for node, best in improved.items() if label[node] == best]
        self.send_by(self.outputs[0], [(n, best) for node, best in changes for n in adjacency[node]], time)
        self.send_by(self.outputs[1], changes, time)
        if self.on_iteration is not None:
            self.on_iteration(time, len(changes))


def components(
    scope: timely.Scope, on_iteration: Callable[[timely.Timestamp, int], None] | None = None, gather: bool = False
) -> tuple[timely.Input, dict[int, int]]:
    """Build the dataflow; returns the edge input and the dict that will hold node -> label:
    the labels of this process's workers' nodes, or with ``gather`` every node's on process 0
    and none elsewhere."""
    edges = scope.new_input("edges")
    loop = timely.LoopContext(scope, "cc")
    both = edges.flat_map("symmetric", lambda e: [e, (e[1], e[0])])
    inner_edges = loop.ingress(both, name="edges_in")
    proposals = loop.feedback("proposals")
    to_neighbours, changes = loop.stage(
        "propagate",
        lambda: MinLabel(on_iteration),
        [inner_edges, proposals.stream],
        exchange=[lambda e: e[0], lambda p: p[0]],
        outputs=2,
    )
    proposals.connect(to_neighbours)
    best: dict[int, int] = {}

    def keep(t: timely.Timestamp, batch: list[tuple[int, int]]) -> None:
        for node, label in batch:
            if label < best.get(node, label + 1):
                best[node] = label

    labels = loop.egress(changes, name="labels_out")
    if gather:  # worker 0 lives on process 0: every label change sent there gathers the whole answer
        labels = labels.exchange("gather", lambda change: 0)
    labels.subscribe(keep)
    return edges, best


def reference_components(edge_list: list[tuple[int, int]]) -> dict[int, int]:
    """Breadth-first search: node -> smallest node id in its component."""
    adj: defaultdict[int, list[int]] = defaultdict(list)
    for u, v in edge_list:
        adj[u].append(v)
        adj[v].append(u)
    label: dict[int, int] = {}
    for start in sorted(adj):
        if start in label:
            continue
        label[start] = start
        queue = deque([start])
        while queue:
            for n in adj[queue.popleft()]:
                if n not in label:
                    label[n] = start
                    queue.append(n)
    return label


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=300_000)
    parser.add_argument(
        "--workers", type=int, default=None, help="workers per process (default: timely run's --workers, or 1)"
    )
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    edge_list = [(rng.randrange(args.nodes), rng.randrange(args.nodes)) for _ in range(args.edges)]
    started = time.perf_counter()
    last_line = [started]
    pending: list[int] = [-1, 0]  # the iteration process 0's workers are reporting, its labels improved so far

    def say(iteration: int, improved: int, last: bool = False) -> None:
        now = time.perf_counter()
        if now - last_line[0] > 0.5 or last:
            print(f"  iteration {iteration:>3}: {improved:>8,} labels improved on process 0  ({now - started:5.1f} s)")
            last_line[0] = now

    def progress(t: timely.Timestamp, improved: int) -> None:
        """Iterations are notified in order (the next needs the last one's proposals), so an
        iteration's line is printed, at most two a second, when the next one begins."""
        if t.counters[0] != pending[0]:
            if pending[0] >= 0:
                say(pending[0], pending[1])
            pending[:] = [t.counters[0], 0]
        pending[1] += improved

    def build(scope: timely.Scope) -> tuple[timely.Input, dict[int, int], int, int, int]:
        edges, best = components(scope, progress if scope.process_index == 0 else None, gather=True)
        return edges, best, scope.process_index, scope.processes, scope.peers

    with timely.execute(build, workers=args.workers) as (comp, (edges, best, index, processes, peers)):
        if index == 0:
            print(
                f"graph: {args.nodes:,} nodes, {args.edges:,} edges (seed {args.seed}); "
                f"{processes} process(es), {peers} worker(s) in all"
            )
        edges.send(edge_list[index::processes])  # this process's share of the edges
    elapsed = time.perf_counter() - started
    if pending[0] >= 0:
        say(pending[0], pending[1], last=True)
    stats = comp.statistics()
    print(
        f"done in {elapsed:.2f} s: {stats.records_delivered:,} records and "
        f"{stats.notifications_delivered:,} notifications delivered on this process"
    )
    if index != 0:
        return 0  # the labels were gathered on process 0, which checks them
    print(f"{len(set(best.values())):,} components over {len(best):,} nodes")
    expected = reference_components(edge_list)
    if best != expected:
        print("MISMATCH against breadth-first search", file=sys.stderr)
        return 1
    print("checked against a breadth-first search: equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
