"""A from-scratch reference for `timely_libs.linq`: each operator's answer on whole multisets.

Nothing here is incremental. A collection is a plain ``dict`` record -> count (zero counts
left out); each function computes an operator's result from the complete, accumulated
inputs with ordinary Python, the way the TR (§3) defines the operator on multisets. The
tests feed the same inputs to a dataflow epoch by epoch and compare its accumulated output
with these answers after every epoch.

Also here: the Hypothesis strategies for epochs of additions and retractions, seeded random
epochs (`random_epochs`), the plain graph algorithms (transitive closure, least reaching label)
the loop tests use, and NetworkX's answers for the graph algorithms (`nx_components`,
`nx_scc_edges`, `nx_shortest_paths`).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any

import networkx as nx
from hypothesis import strategies as st

Multiset = dict[Any, int]
Change = tuple[Any, int]

__all__ = [
    "Multiset",
    "nx_components",
    "nx_scc_edges",
    "nx_shortest_paths",
    "random_epochs",
    "apply",
    "closure",
    "co_group_by",
    "concat",
    "consolidate",
    "count",
    "difference",
    "distinct",
    "except_",
    "fixed_point",
    "group_by",
    "intersect",
    "iterate",
    "join",
    "least_reaching_label",
    "two_core_degrees",
    "max_",
    "min_",
    "negate",
    "nonnegative_epochs",
    "select",
    "select_many",
    "signed_epochs",
    "subset_pairs",
    "sum_",
    "union",
    "where",
]


def _clean(counts: Iterable[tuple[Any, int]]) -> Multiset:
    out: Counter[Any] = Counter()
    for record, n in counts:
        out[record] += n
    return {record: n for record, n in out.items() if n != 0}


def apply(state: Multiset, changes: Iterable[Change]) -> Multiset:
    """``state`` with ``(record, diff)`` changes added."""
    return _clean([*state.items(), *changes])


def difference(new: Multiset, old: Multiset) -> Multiset:
    """What must be added to ``old`` to make ``new``: the changes an epoch should report."""
    return _clean([*new.items(), *((r, -n) for r, n in old.items())])


def _positive(c: Multiset, op: str) -> Multiset:
    for record, n in c.items():
        if n < 0:
            raise AssertionError(f"reference {op}: {record!r} has count {n}; the test fed a negative collection")
    return {r: n for r, n in c.items() if n > 0}


def _groups(c: Multiset, key: Callable[[Any], Any], op: str) -> dict[Any, Multiset]:
    groups: dict[Any, Multiset] = {}
    for record, n in _positive(c, op).items():
        groups.setdefault(key(record), {})[record] = n
    return groups


def _expanded(group: Multiset) -> list[Any]:
    """A group's records repeated by their count, sorted (the tests use orderable records)."""
    return sorted(r for r, n in group.items() for _ in range(n))


# Linear operators -------------------------------------------------------------------------


def select(c: Multiset, f: Callable[[Any], Any]) -> Multiset:
    return _clean((f(r), n) for r, n in c.items())


def where(c: Multiset, p: Callable[[Any], bool]) -> Multiset:
    return {r: n for r, n in c.items() if p(r)}


def select_many(c: Multiset, f: Callable[[Any], Iterable[Any]]) -> Multiset:
    return _clean((y, n) for r, n in c.items() for y in f(r))


def concat(*cs: Multiset) -> Multiset:
    return _clean(pair for c in cs for pair in c.items())


def negate(c: Multiset) -> Multiset:
    return {r: -n for r, n in c.items()}


def consolidate(c: Multiset) -> Multiset:
    return _clean(c.items())


# Keyed operators ----------------------------------------------------------------------------


def join(
    a: Multiset, b: Multiset, key1: Callable[[Any], Any], key2: Callable[[Any], Any], sel: Callable[[Any, Any], Any]
) -> Multiset:
    """Every pair with equal keys, by brute force over all pairs; counts multiply."""
    return _clean((sel(x, y), n * m) for x, n in a.items() for y, m in b.items() if key1(x) == key2(y))


def distinct(c: Multiset) -> Multiset:
    return {r: 1 for r in _positive(c, "distinct")}


def count(c: Multiset, key: Callable[[Any], Any] | None = None) -> Multiset:
    key = key or (lambda r: r)
    return {(k, sum(g.values())): 1 for k, g in _groups(c, key, "count").items()}


def sum_(c: Multiset, key: Callable[[Any], Any], value: Callable[[Any], Any]) -> Multiset:
    return {(k, sum(value(r) * n for r, n in g.items())): 1 for k, g in _groups(c, key, "sum").items()}


def min_(c: Multiset, key: Callable[[Any], Any], value: Callable[[Any], Any]) -> Multiset:
    """Per key, the record with the least value; among equal values the least record."""
    return {min(g, key=lambda r: (value(r), r)): 1 for g in _groups(c, key, "min").values()}


def max_(c: Multiset, key: Callable[[Any], Any], value: Callable[[Any], Any]) -> Multiset:
    """Per key, the record with the greatest value; among equal values the greatest record."""
    return {max(g, key=lambda r: (value(r), r)): 1 for g in _groups(c, key, "max").values()}


def group_by(c: Multiset, key: Callable[[Any], Any], reducer: Callable[[Any, list[Any]], Iterable[Any]]) -> Multiset:
    out: list[Change] = []
    for k, g in _groups(c, key, "group_by").items():
        out.extend((y, 1) for y in reducer(k, _expanded(g)))
    return _clean(out)


def co_group_by(
    a: Multiset,
    b: Multiset,
    key1: Callable[[Any], Any],
    key2: Callable[[Any], Any],
    reducer: Callable[[Any, list[Any], list[Any]], Iterable[Any]],
) -> Multiset:
    ga, gb = _groups(a, key1, "co_group_by"), _groups(b, key2, "co_group_by")
    out: list[Change] = []
    for k in set(ga) | set(gb):
        out.extend((y, 1) for y in reducer(k, _expanded(ga.get(k, {})), _expanded(gb.get(k, {}))))
    return _clean(out)


def union(a: Multiset, b: Multiset) -> Multiset:
    a, b = _positive(a, "union"), _positive(b, "union")
    return {r: max(a.get(r, 0), b.get(r, 0)) for r in set(a) | set(b)}


def intersect(a: Multiset, b: Multiset) -> Multiset:
    a, b = _positive(a, "intersect"), _positive(b, "intersect")
    return {r: min(a[r], b[r]) for r in set(a) & set(b)}


def except_(a: Multiset, b: Multiset) -> Multiset:
    a, b = _positive(a, "except"), _positive(b, "except")
    return {r: a[r] - b.get(r, 0) for r in a if a[r] > b.get(r, 0)}


# Loops ------------------------------------------------------------------------------------------


def iterate(c: Multiset, body: Callable[[Multiset], Multiset], times: int) -> Multiset:
    """``body`` applied ``times`` times."""
    for _ in range(times):
        c = body(c)
    return c


def fixed_point(c: Multiset, body: Callable[[Multiset], Multiset], limit: int = 10_000) -> Multiset:
    """``body`` applied until its result no longer changes."""
    for _ in range(limit):
        nxt = body(c)
        if nxt == c:
            return c
        c = nxt
    raise AssertionError("reference fixed_point: no fixed point within the limit")


def closure(edges: Iterable[tuple[Any, Any]]) -> Multiset:
    """``(a, b)`` for every path of one or more edges from a to b, by breadth-first search."""
    succ: dict[Any, set[Any]] = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    out: Multiset = {}
    for start in succ:
        seen: set[Any] = set()
        todo = deque(succ[start])
        while todo:
            n = todo.popleft()
            if n in seen:
                continue
            seen.add(n)
            todo.extend(succ.get(n, ()))
        for n in seen:
            out[(start, n)] = 1
    return out


def least_reaching_label(edges: Iterable[tuple[Any, Any]]) -> Multiset:
    """``(node, least id of a node that reaches it, itself included)`` for every edge endpoint."""
    edges = list(edges)
    nodes = {n for e in edges for n in e}
    pred: dict[Any, set[Any]] = {}
    for a, b in edges:
        pred.setdefault(b, set()).add(a)
    out: Multiset = {}
    for v in nodes:
        seen = {v}
        todo = deque([v])
        while todo:
            n = todo.popleft()
            for p in pred.get(n, ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        out[(v, min(seen))] = 1
    return out


def two_core_degrees(edges: Multiset) -> Multiset:
    """``(node, degree)`` in the 2-core of the edges taken both ways (kcore's peel): edges are
    dropped while an end has fewer than two, then each node's count of the edges left."""
    active: Counter[Any] = Counter()
    for (s, d), c in edges.items():
        active[(s, d)] += c
        active[(d, s)] += c
    active = +active
    while True:
        degree: Counter[Any] = Counter()
        for (s, _), c in active.items():
            degree[s] += c
        alive = {n for n, k in degree.items() if k >= 2}
        peeled = Counter({e: c for e, c in active.items() if e[0] in alive and e[1] in alive})
        if peeled == active:
            break
        active = peeled
    out: Counter[Any] = Counter()
    for (s, _), c in active.items():
        out[s] += c
    return {(n, k): 1 for n, k in out.items() if k}


# Strategies ---------------------------------------------------------------------------------------


def _clamped(raw: list[list[Change]]) -> list[list[Change]]:
    """Each retraction cut down to what is there, so no count goes below zero."""
    state: Multiset = {}
    out = []
    for changes in raw:
        epoch = []
        for record, diff in changes:
            have = state.get(record, 0)
            diff = max(diff, -have)
            if diff:
                state[record] = have + diff
                epoch.append((record, diff))
        out.append(epoch)
    return out


def _epochs_of(records: st.SearchStrategy[Any], max_epochs: int, max_changes: int) -> st.SearchStrategy:
    diffs = st.sampled_from([1, 1, 1, 2, -1, -1, -2])
    return st.lists(
        st.tuples(st.lists(st.tuples(records, diffs), max_size=max_changes), st.booleans()),
        min_size=1,
        max_size=max_epochs,
    )


def _reorder(raw: list[tuple[list[Change], bool]]) -> tuple[list[list[Change]], list[bool]]:
    return [changes for changes, _ in raw], [rev for _, rev in raw]


@st.composite
def nonnegative_epochs(
    draw: st.DrawFn, records: st.SearchStrategy[Any], max_epochs: int = 5, max_changes: int = 8
) -> list[list[Change]]:
    """Epochs of ``(record, diff)`` changes after which every count is at least zero: a
    retraction removes at most what is there. Some epochs list their changes backwards, so
    a retraction may come before the addition it cancels (only the epoch's sum counts)."""
    raw, reversed_ = _reorder(draw(_epochs_of(records, max_epochs, max_changes)))
    epochs = _clamped(raw)
    return [e[::-1] if rev else e for e, rev in zip(epochs, reversed_)]


@st.composite
def signed_epochs(
    draw: st.DrawFn, records: st.SearchStrategy[Any], max_epochs: int = 5, max_changes: int = 8
) -> list[list[Change]]:
    """Epochs of arbitrary ``(record, diff)`` changes: counts may go negative (fine for the
    linear operators, which never look at a whole group)."""
    raw, _ = _reorder(draw(_epochs_of(records, max_epochs, max_changes)))
    return raw


@st.composite
def subset_pairs(
    draw: st.DrawFn, records: st.SearchStrategy[Any], max_epochs: int = 5, max_changes: int = 8
) -> list[tuple[list[Change], list[Change]]]:
    """Epochs of changes to two collections ``a`` and ``b`` with ``0 <= b <= a`` after each
    change: ``a - b`` is a proper multiset."""
    raw_a, _ = _reorder(draw(_epochs_of(records, max_epochs, max_changes)))
    raw_b, _ = _reorder(draw(_epochs_of(records, max_epochs, max_changes)))
    a: Multiset = {}
    b: Multiset = {}
    out = []
    for i in range(max(len(raw_a), len(raw_b))):
        ea, eb = [], []
        for record, diff in raw_a[i] if i < len(raw_a) else []:
            have = a.get(record, 0)
            diff = max(diff, b.get(record, 0) - have)
            if diff:
                a[record] = have + diff
                ea.append((record, diff))
        for record, diff in raw_b[i] if i < len(raw_b) else []:
            have = b.get(record, 0)
            diff = max(min(diff, a.get(record, 0) - have), -have)
            if diff:
                b[record] = have + diff
                eb.append((record, diff))
        out.append((ea, eb))
    return out


# Seeded epochs and NetworkX's answers for the graph algorithms ----------------------------------------


def random_epochs(
    rng: random.Random,
    new: Callable[[], Any],
    initial: int,
    epochs: int = 25,
    per_epoch: int = 4,
    delete: float = 0.5,
) -> list[list[Change]]:
    """A first epoch of ``initial`` records from ``new()``, then ``epochs`` epochs of up to
    ``per_epoch`` changes: deletions of present records (with probability ``delete``),
    insertions of new ones or of copies of present ones, and now and then a record inserted
    and deleted again within the epoch."""
    first = [new() for _ in range(initial)]
    present = Counter(first)
    out: list[list[Change]] = [[(r, 1) for r in first]]
    for _ in range(epochs):
        changes: list[Change] = []
        for _ in range(rng.randint(1, per_epoch)):
            roll = rng.random()
            if present and roll < delete:
                record = rng.choice(sorted(present.elements()))
                present[record] -= 1
                present = +present
                changes.append((record, -1))
            elif present and roll < delete + 0.1:
                record = rng.choice(sorted(present))
                present[record] += 1
                changes.append((record, 1))
            elif roll < delete + 0.15:
                record = new()
                changes.extend([(record, 1), (record, -1)])
            else:
                record = new()
                present[record] += 1
                changes.append((record, 1))
        out.append(changes)
    return out


def nx_components(edges: Multiset) -> Multiset:
    g = nx.Graph()
    g.add_edges_from(e for e, n in edges.items() if n > 0)
    out: Multiset = {}
    for comp in nx.connected_components(g):
        least = min(comp)
        out.update(((node, least), 1) for node in comp)
    return out


def nx_scc_edges(edges: Multiset) -> Multiset:
    g = nx.DiGraph()
    g.add_edges_from(e for e, n in edges.items() if n > 0)
    component = {node: i for i, comp in enumerate(nx.strongly_connected_components(g)) for node in comp}
    return {e: n for e, n in edges.items() if n > 0 and component[e[0]] == component[e[1]]}


def nx_shortest_paths(wedges: Multiset, sources: Multiset) -> Multiset:
    g = nx.DiGraph()
    for (u, v, w), n in wedges.items():
        if n > 0 and (not g.has_edge(u, v) or g[u][v]["weight"] > w):
            g.add_edge(u, v, weight=w)
    starts = {s for s, n in sources.items() if n > 0}
    if not starts:
        return {}
    g.add_nodes_from(starts)
    return {(node, d): 1 for node, d in nx.multi_source_dijkstra_path_length(g, starts).items()}
