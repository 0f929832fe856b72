"""Every general operator, through each forced tier, as a program for `Mode.run`
(tests/linq/test_reference_in_flight.py), after differential dataflow's reference tests
(``tests/reduce_reference.rs``, ``tests/bfs.rs``, ``tests/scc.rs``): random graphs, random
changes, and the answer recomputed from scratch after every epoch.

Two inputs change over `EPOCHS` epochs (`linq_reference.random_epochs`): ``edges``, a random
directed graph on `NODES` nodes, and ``roots``, a few of its nodes. One dataflow computes every
operator under test, each result tagged by name and concatenated (`query`); `reference` is the
same on whole multisets. Every process feeds the changes ``i`` with ``i % processes ==
process_index`` and reports per epoch what its output reported.

``tier`` forces the tier of every read of more than one key, and whether consolidations are
one compiled call (the tier policy's thresholds are set in each process, since real processes
do not share the test's patches): ``python``, ``numpy`` or ``compiled``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import timely
from tests.support import linq_reference as ref
from tests.support.linq_in_flight import reported, share
from tests.support.modes import Run
from timely_libs import linq
from timely_libs.linq._columns import _kernels

EPOCHS = 8
NODES = 24
TIERS = ("python", "numpy", "compiled")
first, second = itemgetter(0), itemgetter(1)


def force_tier(tier: str) -> None:
    """Every read of more than one key takes ``tier`` (this process, from now on); with
    ``compiled``, every consolidation of more than one row is also one compiled call
    (`_kernels.FUSED_BELOW`, or `WORDS_FROM` for rows too wide for one int64), and with the
    others never."""
    _kernels.FEW_KEYS = 1 << 40 if tier == "python" else 0
    for name in ("COMPILED_KEYS", "LOADED_KEYS"):
        setattr(_kernels, name, 1 if tier == "compiled" else 1 << 40)
    _kernels.FUSED_BELOW = 1 << 40 if tier == "compiled" else 0
    _kernels.WORDS_FROM = 2 if tier == "compiled" else 1 << 40
    if tier == "compiled":
        _kernels.POLICY.eager = True


def inputs(seed: int) -> tuple[list[list[ref.Change]], list[list[ref.Change]]]:
    rng = random.Random(seed)
    edges = ref.random_epochs(
        rng, lambda: (rng.randrange(NODES), rng.randrange(NODES)), 40, EPOCHS - 1, per_epoch=8, delete=0.4
    )
    roots = ref.random_epochs(rng, lambda: rng.randrange(NODES), 3, EPOCHS - 1, per_epoch=2, delete=0.3)
    return edges, roots


def _path(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0], y[1])


def _top2(key: int, values: list[tuple[int, int]]) -> list[tuple[int, tuple[int, ...]]]:
    return [(key, tuple(sorted((v[1] for v in values), reverse=True)[:2]))]


def _reach(roots: linq.Collection, edges: linq.Collection, hops: int | None = None) -> linq.Collection:
    def body(x: linq.Collection) -> linq.Collection:
        step = x.join(edges.enter(x.scope), lambda n: n, first, lambda n, e: e[1])
        return roots.enter(x.scope).concat(step).distinct()

    return roots.fixed_point(body, max_iterations=hops)


def _bfs(roots: linq.Collection, edges: linq.Collection) -> linq.Collection:
    """differential dataflow's ``tests/bfs.rs``: each reached node's least hop count from a root."""
    start = roots.distinct().select(lambda n: (n, 0))

    def body(x: linq.Collection) -> linq.Collection:
        step = x.join(edges.enter(x.scope), first, first, lambda nd, e: (e[1], nd[1] + 1))
        return step.concat(start.enter(x.scope)).min(first, second)

    return start.fixed_point(body)


def _labels(edges: linq.Collection) -> linq.Collection:
    """Least label reaching each node along directed edges (Figure 3 on a directed graph), inside
    `prioritize` by label: the exact answer of the fixed point however the labels are let in."""
    nodes = edges.select(first).concat(edges.select(second)).distinct().select(lambda n: (n, n))

    def body(p: linq.Collection) -> linq.Collection:
        inner = edges.enter(p.scope)

        def step(x: linq.Collection) -> linq.Collection:
            proposals = x.join(inner.enter(x.scope), first, first, lambda nl, e: (e[1], nl[1]))
            return proposals.concat(x).min(first, second)

        return p.fixed_point(step)

    return nodes.prioritize(lambda nl: nl[1] % 3, body)


def _tag(name: str) -> Callable[[Any], tuple[str, Any]]:
    def tagged(record: Any) -> tuple[str, Any]:
        return (name, record)

    return tagged


def query(edges: linq.Collection, roots: linq.Collection) -> linq.Collection:
    """Every operator under test, each result tagged with its name, in one collection."""
    parts = {
        "join": edges.join(edges, second, first, _path),
        "distinct": edges.select(first).distinct(),
        "count": edges.count(first),
        "count_all": edges.count_all(),
        "sum": edges.sum(first, second),
        "min": edges.min(first, second),
        "max": edges.max(first, second),
        "top2": edges.group_by(first, _top2),
        "semijoin": edges.semijoin(roots, first),
        "antijoin": edges.antijoin(roots, second),
        "reach": _reach(roots, edges),
        "reach_3_hops": _reach(roots, edges, 3),
        "bfs": _bfs(roots, edges),
        "prioritized_count": edges.prioritize(second, lambda x: x.count(first)),
        "prioritized_labels": _labels(edges),
        "scc": linq.strongly_connected_components(edges),
    }
    tagged = [c.select(_tag(name)) for name, c in parts.items()]
    return tagged[0].concat(*tagged[1:])


def _reach_reference(edges: ref.Multiset, roots: ref.Multiset, hops: int | None = None) -> ref.Multiset:
    start = ref.distinct(roots)

    def body(x: ref.Multiset) -> ref.Multiset:
        return ref.distinct(ref.concat(start, ref.join(x, edges, lambda n: n, first, lambda n, e: e[1])))

    return ref.fixed_point(start, body) if hops is None else ref.iterate(start, body, hops)


def _bfs_reference(edges: ref.Multiset, roots: ref.Multiset) -> ref.Multiset:
    present = [e for e, n in edges.items() if n > 0]
    hops = {r: 0 for r, n in roots.items() if n > 0}
    frontier = list(hops)
    while frontier:
        nxt = []
        for a, b in present:
            if a in frontier and b not in hops:
                hops[b] = hops[a] + 1
                nxt.append(b)
        frontier = list(dict.fromkeys(nxt))
    return {(n, d): 1 for n, d in hops.items()}


def _labels_reference(edges: ref.Multiset) -> ref.Multiset:
    present = [e for e, n in edges.items() if n > 0]
    label = {n: n for e in present for n in e}
    changed = True
    while changed:
        changed = False
        for a, b in present:
            if label[a] < label[b]:
                label[b] = label[a]
                changed = True
    return {item: 1 for item in label.items()}


def reference(edges: ref.Multiset, roots: ref.Multiset) -> ref.Multiset:
    present = {r for r, n in roots.items() if n > 0}
    parts = {
        "join": ref.join(edges, edges, second, first, _path),
        "distinct": ref.distinct(ref.select(edges, first)),
        "count": ref.count(edges, first),
        "count_all": {sum(edges.values()): 1} if edges else {},
        "sum": ref.sum_(edges, first, second),
        "min": ref.min_(edges, first, second),
        "max": ref.max_(edges, first, second),
        "top2": ref.group_by(edges, first, _top2),
        "semijoin": {e: n for e, n in edges.items() if e[0] in present},
        "antijoin": {e: n for e, n in edges.items() if e[1] not in present},
        "reach": _reach_reference(edges, roots),
        "reach_3_hops": _reach_reference(edges, roots, 3),
        "bfs": _bfs_reference(edges, roots),
        "prioritized_count": ref.count(edges, first),
        "prioritized_labels": _labels_reference(edges),
        "scc": ref.nx_scc_edges(edges),
    }
    return ref.concat(*(ref.select(m, _tag(name)) for name, m in parts.items()))


@dataclass
class ReferenceRun(Run):
    seed: int
    process_index: int
    processes: int
    edges: linq.CollectionInput
    roots: linq.CollectionInput
    output: linq.CollectionOutput
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        edges, roots = inputs(self.seed)
        for inp, changes in ((self.edges, edges[epoch]), (self.roots, roots[epoch])):
            inp.update(share(changes, self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def result(self, comp: Any = None) -> dict[str, Any]:
        return {"changes": reported(self.output)}


def builder(seed: int, tier: str) -> Callable[[timely.Scope], ReferenceRun]:
    force_tier(tier)

    def build(scope: timely.Scope) -> ReferenceRun:
        edges, roots = linq.new_input(scope, "edges"), linq.new_input(scope, "roots")
        output = linq.CollectionOutput(query(edges.collection, roots.collection), name="result")
        return ReferenceRun(seed, scope.process_index, scope.processes, edges, roots, output)

    return build
