"""The Pregel model as `timely_libs.pregel` implements it, one rule at a time.

Small hand-made graphs and programs that record what each `compute` call saw (in this
process: the tests run in-process, so every worker appends to one list) check: combiners,
halting and reactivation, termination, ``max_supersteps``, aggregators (regular and
persistent), ``master_compute``, graph mutations and their conflicts, epochs, progress
reports and the missing-vertex policies. Each expectation is computed from the rule it
checks, not copied from a run; everything runs with one and with three workers.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.pregel_harness import Recorder, both_ways, digraph, random_edges, run, run_epochs
from timely_libs import pregel
from timely_libs._hash import stable_hash
from timely_libs.pregel import programs

FAST = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

small_graphs = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=30)


# Combiners ---------------------------------------------------------------------------------------------


def send_my_id_then_keep_mail(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
    """Superstep 0: send ``(id,)`` to every neighbour. Superstep 1: keep the mail as the value."""
    if vertex.superstep == 0:
        vertex.send_to_all_neighbors((vertex.id,))
    else:
        vertex.value = list(messages)
    vertex.vote_to_halt()


def predecessors(edges: list[tuple[int, int]]) -> dict[int, list[int]]:
    g = digraph([], edges)
    return {v: sorted(g.predecessors(v)) for v in g if g.in_degree(v)}


@FAST
@given(edges=small_graphs)
def test_without_a_combiner_compute_sees_every_message(workers: int, edges: list[tuple[int, int]]) -> None:
    got = run(send_my_id_then_keep_mail, edges, None, workers)
    preds = predecessors(edges)
    for v, value in got.items():
        if v in preds:  # one message per distinct in-edge (a repeated edge is one edge)
            assert sorted(m[0] for m in value) == preds[v], f"vertex {v}"
        else:
            assert value is None, f"vertex {v} has no in-edges, so it was never woken"


@FAST
@given(edges=small_graphs)
def test_with_a_combiner_compute_sees_one_message(workers: int, edges: list[tuple[int, int]]) -> None:
    calls = Recorder()

    def merge(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        calls((a, b))
        assert not set(a) & set(b), f"{a} and {b} overlap: a message was combined twice"
        return tuple(sorted(a + b))

    got = run(pregel.Program(send_my_id_then_keep_mail, combine=merge), edges, None, workers)
    preds = predecessors(edges)
    for v, value in got.items():
        if v in preds:
            assert len(value) == 1, f"vertex {v} saw {len(value)} messages"
            assert list(value[0]) == preds[v]
        else:
            assert value is None
    # n messages become one in n - 1 merges, whichever worker does them
    assert len(calls.calls) == sum(len(p) - 1 for p in preds.values())


def test_a_combiner_counts_in_degrees(workers: int) -> None:
    rng = random.Random(5)
    edges = random_edges(rng, 50, 400)

    def count(vertex: pregel.PregelVertex, messages: list[int]) -> None:
        assert len(messages) <= 1
        if vertex.superstep == 0:
            vertex.value = 0
            vertex.send_to_all_neighbors(1)
        else:
            vertex.value = messages[0]
        vertex.vote_to_halt()

    got = run(pregel.Program(count, combine=lambda a, b: a + b), edges, None, workers)
    g = digraph([], edges)
    assert got == {v: g.in_degree(v) for v in g}


# Halting, reactivation, termination ----------------------------------------------------------------------


class Relay(pregel.Program):
    """Vertex 0 sends a token along its edges in superstep 0; whoever receives it passes it on.
    Everybody votes to halt every time; ``seen`` records (superstep, id, messages) per call."""

    def __init__(self) -> None:
        self.seen = Recorder()
        super().__init__()

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        self.seen((vertex.superstep, vertex.id, list(messages)))
        if (vertex.superstep == 0 and vertex.id == 0) or messages:
            vertex.send_to_all_neighbors("token")
        vertex.vote_to_halt()


def test_a_halted_vertex_is_woken_by_a_message_and_the_run_ends_when_all_are_quiet(workers: int) -> None:
    n = 7
    chain = [(i, i + 1) for i in range(n - 1)]
    program, reports = Relay(), Recorder()
    got = run(program, chain, [(i, f"v{i}") for i in range(n)], workers, progress=reports)
    assert got == {i: f"v{i}" for i in range(n)}
    # superstep 0: everybody; then vertex s, woken by the token, alone in superstep s
    expected: list[tuple[int, int, list[str]]] = [(0, i, []) for i in range(n)]
    expected += [(s, s, ["token"]) for s in range(1, n)]
    assert sorted(program.seen.calls) == sorted(expected)
    assert [r.superstep for r in reports.calls] == list(range(-1, n))


def test_a_vertex_that_does_not_vote_to_halt_is_computed_every_superstep(workers: int) -> None:
    seen = Recorder()

    def stubborn(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        seen((vertex.id, vertex.superstep))
        if vertex.superstep >= vertex.id:  # vertex k halts in superstep k
            vertex.vote_to_halt()

    run(stubborn, [], [(k, None) for k in range(5)], workers)
    assert sorted(seen.calls) == sorted((k, s) for k in range(5) for s in range(k + 1))


@FAST
@given(edges=small_graphs, start=st.integers(0, 9))
def test_the_run_ends_when_the_token_can_go_no_further(workers: int, edges: list[tuple[int, int]], start: int) -> None:
    """Flooding from ``start``: each vertex forwards the first token it gets and ignores the
    rest; the run ends when nobody is active and no token is in flight, so every vertex
    reachable from ``start`` records its BFS depth, and the last superstep is the eccentricity."""

    def flood(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.value is None and (messages or (vertex.superstep == 0 and vertex.id == start)):
            vertex.value = vertex.superstep
            vertex.send_to_all_neighbors(1)
        vertex.vote_to_halt()

    reports = Recorder()
    vertices = [(i, None) for i in range(10)]
    got = run(flood, edges, vertices, workers, progress=reports)
    depth = nx.single_source_shortest_path_length(digraph(range(10), edges), start)
    assert got == {v: depth.get(v) for v in range(10)}
    last = reports.calls[-1]
    assert last.halting
    # the vertices at the greatest depth forward once more; their messages wake nobody new
    deepest = max(depth.values())
    has_out = any(depth.get(u) == deepest for u, _ in edges)
    assert last.superstep == deepest + (1 if has_out else 0)


# max_supersteps -----------------------------------------------------------------------------------------


def count_forever(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
    """Never halts, keeps messaging: counts the supersteps it was computed in."""
    vertex.value = (vertex.value or 0) + 1
    assert vertex.superstep == vertex.value - 1
    vertex.send_to_all_neighbors(vertex.value)


@pytest.mark.parametrize("limit", [1, 2, 7])
def test_max_supersteps_stops_a_program_that_never_halts(workers: int, limit: int) -> None:
    ring = [(i, (i + 1) % 6) for i in range(6)]
    reports = Recorder()
    got = run(count_forever, ring, None, workers, max_supersteps=limit, progress=reports)
    assert got == dict.fromkeys(range(6), limit)
    assert [r.superstep for r in reports.calls] == list(range(-1, limit))
    assert [r.halting for r in reports.calls] == [False] * limit + [True]


def test_max_supersteps_does_not_prolong_a_program_that_halts(workers: int) -> None:
    program, reports = Relay(), Recorder()
    run(program, [(0, 1), (1, 2)], None, workers, max_supersteps=100, progress=reports)
    assert reports.calls[-1].superstep == 2


# Aggregators ---------------------------------------------------------------------------------------


class Concat(pregel.Aggregator):
    """A user aggregator by subclassing: the sorted tuple of all contributions."""

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(a + b))


def make_aggregators() -> dict[str, pregel.Aggregator]:
    return {
        "sum": pregel.Sum(),
        "sum100": pregel.Sum(100),
        "min": pregel.Min(),
        "max": pregel.Max(-1),
        "union": pregel.Aggregator(merge=lambda a, b: a | b, initial=frozenset()),
        "concat": Concat(initial=()),
        "psum": pregel.Sum(100, persistent=True),
        "pmax": pregel.Max(-5, persistent=True),
    }


QUIET = 2
"""The superstep in which nobody contributes."""


def contribution(name: str, vid: int, superstep: int) -> Any:
    if name in ("union",):
        return frozenset({(vid, superstep)})
    if name == "concat":
        return ((superstep, vid),)
    if name == "pmax":
        return vid * 10 + superstep
    return vid * (superstep + 1)


class Aggregating(pregel.Program):
    """Every vertex contributes to every aggregator in every superstep but `QUIET`, and
    records what it read."""

    def __init__(self) -> None:
        self.seen = Recorder()
        super().__init__(aggregators=make_aggregators())

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        s = vertex.superstep
        self.seen((s, vertex.id, {name: vertex.aggregated(name) for name in self.aggregators}))
        if s != QUIET:
            for name in self.aggregators:
                vertex.aggregate(name, contribution(name, vertex.id, s))


def expected_reads(ids: list[int], supersteps: int) -> dict[int, dict[str, Any]]:
    """What everybody reads in each superstep, from the rules: the merged contributions of the
    previous superstep; ``initial`` in superstep 0 and after the quiet one; a persistent
    aggregator merges into what it had."""
    aggs = make_aggregators()
    reads: dict[int, dict[str, Any]] = {0: {name: agg.initial for name, agg in aggs.items()}}
    for s in range(1, supersteps):
        reads[s] = {}
        for name, agg in aggs.items():
            parts = [] if s - 1 == QUIET else [contribution(name, v, s - 1) for v in ids]
            if agg.persistent:
                value = reads[s - 1][name]
                for p in parts:
                    value = agg.merge(value, p)
            elif not parts:
                value = agg.initial
            else:
                value = parts[0]
                for p in parts[1:]:
                    value = agg.merge(value, p)
            reads[s][name] = value
    return reads


def test_aggregators_are_read_in_the_next_superstep(workers: int) -> None:
    ids = list(range(1, 9))
    program = Aggregating()
    run(program, [], [(i, None) for i in ids], workers, max_supersteps=5)
    want = expected_reads(ids, 5)
    assert want[1]["sum"] == sum(ids) and want[3]["sum"] == 0 and want[3]["sum100"] == 100  # the rules, spelled out
    assert want[3]["psum"] == want[2]["psum"] == 100 + sum(ids) * 3
    got: dict[int, dict[str, Any]] = {}
    for s, vid, read in program.seen.calls:
        assert got.setdefault(s, read) == read, f"superstep {s}: vertex {vid} read {read}, another {got[s]}"
    assert got == want


class Counting(pregel.Program):
    """Every vertex sends one message per out-edge and contributes 1 to ``count`` each
    superstep; the master records what it sees, rewrites ``count`` to ``1000 + superstep``
    and halts after superstep `stop`."""

    stop = 3

    def __init__(self) -> None:
        self.seen = Recorder()
        self.master = Recorder()
        super().__init__(aggregators={"count": pregel.Sum()})

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        self.seen((vertex.superstep, vertex.id, vertex.aggregated("count")))
        vertex.aggregate("count", 1)
        vertex.send_to_all_neighbors(0)

    def master_compute(self, master: pregel.Master) -> None:
        self.master(
            (
                master.superstep,
                master.num_vertices,
                master.active_vertices,
                master.messages_sent,
                master.aggregated("count"),
            )
        )
        master.set_aggregated("count", 1000 + master.superstep)
        if master.superstep == self.stop:
            master.halt()


def test_master_compute_reads_and_sets_aggregated_values_and_halts(workers: int) -> None:
    rng = random.Random(2)
    edges = random_edges(rng, 12, 30)
    n = len({x for e in edges for x in e})
    distinct = len(set(edges))
    program, reports = Counting(), Recorder()
    run(program, edges, None, workers, progress=reports)
    stop = Counting.stop
    assert program.master.calls == [(s, n, n, distinct, n) for s in range(stop + 1)]
    reads = Counter((s, c) for s, _, c in program.seen.calls)
    assert reads == Counter({(0, 0): n, **{(s, 1000 + s - 1): n for s in range(1, stop + 1)}})
    assert reports.calls[-1].superstep == stop and reports.calls[-1].halting


def test_a_persistent_aggregator_keeps_what_the_master_set(workers: int) -> None:
    class Setter(pregel.Program):
        def __init__(self) -> None:
            self.seen = Recorder()
            super().__init__(aggregators={"p": pregel.Sum(0, persistent=True)})

        def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
            self.seen((vertex.superstep, vertex.aggregated("p")))
            if vertex.superstep in (0, 2):
                vertex.aggregate("p", 1)

        def master_compute(self, master: pregel.Master) -> None:
            if master.superstep == 0:
                master.set_aggregated("p", 50)

    program = Setter()
    run(program, [], [(i, None) for i in range(4)], workers, max_supersteps=5)
    # 0 -> (master sets 50) -> 50 -> 50 (quiet) -> 54 -> 54 (quiet)
    assert sorted(set(program.seen.calls)) == [(0, 0), (1, 50), (2, 50), (3, 54), (4, 54)]


# Mutations -------------------------------------------------------------------------------------------


class Scripted(pregel.Program):
    """Vertex ``v`` in superstep ``s`` makes the requests ``script[(s, v)]`` (method name and
    arguments). Every call records (superstep, id, value, out-edges) in ``seen``, once before
    and once after its requests; every vertex stays active (bound the run with max_supersteps)."""

    def __init__(self, script: dict[tuple[int, Any], list[tuple[Any, ...]]], **kwargs: Any) -> None:
        self.script = script
        self.seen = Recorder()
        super().__init__(**kwargs)

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        s, vid = vertex.superstep, vertex.id
        self.seen((s, vid, vertex.value, dict(vertex.out_edges)))
        for method, *args in self.script.get((s, vid), ()):
            getattr(vertex, method)(*args)
        after = (s, vid, vertex.value, dict(vertex.out_edges))
        assert after == self.seen.calls[-1], "a request changed the graph within the superstep"

    def at(self, superstep: int) -> dict[Any, tuple[Any, dict[Any, Any]]]:
        """Who was computed in ``superstep``: id to (value, out-edges)."""
        out = {}
        for s, vid, value, edges in self.seen.calls:
            if s == superstep:
                assert vid not in out
                out[vid] = (value, edges)
        return out


GRAPH = [(0, 1), (0, 2), (1, 2), (2, 0), (3, 0), (4, 3)]
LABELS = [(i, f"v{i}") for i in range(5)]


def test_mutations_are_applied_before_the_next_superstep(workers: int) -> None:
    program = Scripted(
        {
            (0, 0): [
                ("remove_edge", 0, 1),
                ("add_edge", 0, 4, "new"),
                ("add_vertex", 10, "ten"),
                ("remove_vertex", 3),
                ("add_edge", 1, 0, "from-0"),  # an edge of a vertex on (maybe) another worker
            ],
            (0, 1): [("add_edge", 11, 1, "e")],  # a missing source is created
            (0, 2): [("remove_vertex",)],  # itself
            (1, 10): [("add_edge", 10, 0), ("remove_edge", 0, 2)],
        }
    )
    got = run(program, GRAPH, LABELS, workers, max_supersteps=3)
    assert program.at(0) == {i: (f"v{i}", dict.fromkeys(t for s, t in GRAPH if s == i)) for i in range(5)}
    assert program.at(1) == {
        0: ("v0", {2: None, 4: "new"}),
        1: ("v1", {2: None, 0: "from-0"}),
        4: ("v4", {3: None}),  # an edge to a removed vertex stays
        10: ("ten", {}),
        11: (None, {1: "e"}),
    }
    assert program.at(2) == {
        0: ("v0", {4: "new"}),
        1: ("v1", {2: None, 0: "from-0"}),
        4: ("v4", {3: None}),
        10: ("ten", {0: None}),
        11: (None, {1: "e"}),
    }
    assert got == {0: "v0", 1: "v1", 4: "v4", 10: "ten", 11: None}


@pytest.mark.parametrize("order", ["remover_first", "adder_first"])
def test_a_vertex_removed_and_added_in_one_superstep_comes_back_afresh(workers: int, order: str) -> None:
    remover, adder = (1, 2) if order == "remover_first" else (2, 1)
    program = Scripted(
        {
            (0, remover): [("remove_vertex", 3)],
            (0, adder): [("add_vertex", 3, "again"), ("add_edge", 3, 1, "late")],
            (0, 0): [("add_vertex", 4, "ignored")],  # an existing vertex keeps its value and edges
        }
    )
    got = run(program, GRAPH, LABELS, workers, max_supersteps=2)
    after = program.at(1)
    assert after[3] == ("again", {1: "late"})  # removed (with its edge to 0), added, then the edge added
    assert after[4] == ("v4", {3: None})
    assert got[3] == "again" and got[4] == "v4"


def test_removing_what_does_not_exist_does_nothing(workers: int) -> None:
    program = Scripted(
        {(0, 0): [("remove_vertex", 99), ("remove_edge", 0, 4), ("remove_edge", 98, 0), ("remove_edge", 1, 2)]}
    )
    got = run(program, GRAPH, LABELS, workers, max_supersteps=2)
    assert got == dict(LABELS)
    assert {v: e for v, (_, e) in program.at(1).items()} == {
        0: {1: None, 2: None},
        1: {},
        2: {0: None},
        3: {0: None},
        4: {3: None},
    }


def test_adding_an_existing_edge_replaces_its_value(workers: int) -> None:
    program = Scripted({(0, 1): [("add_edge", 0, 1, "new")], (0, 2): [("add_edge", 2, 0, 7)]})
    run(program, GRAPH, LABELS, workers, max_supersteps=2)
    assert program.at(1)[0][1] == {1: "new", 2: None}
    assert program.at(1)[2][1] == {0: 7}


REQUESTERS = ["a", "b", "c", "d", "e", "f", "g"]


class Adders(pregel.Program):
    """Superstep 0: every requester asks to add vertex ``"new"`` (twice for ``"c"``) and
    ``"x"`` (which exists). ``resolve`` decides, when given."""

    def __init__(self, resolve: bool) -> None:
        self.resolved = Recorder()
        self.custom = resolve
        super().__init__()

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0 and vertex.id in REQUESTERS:
            vertex.add_vertex("new", f"{vertex.id}1")
            vertex.add_vertex("x", f"{vertex.id}-x")
            if vertex.id == "c":
                vertex.add_vertex("new", "c2")
        vertex.vote_to_halt()

    def resolve_add_vertex(self, vertex_id: Any, current: Any, requested: list[Any]) -> Any:
        self.resolved((vertex_id, current, list(requested)))
        if self.custom:
            return ("resolved", current, tuple(requested))
        return super().resolve_add_vertex(vertex_id, current, requested)


def request_order(values: list[tuple[str, int, str]]) -> list[str]:
    """The documented order: by requesting vertex (stable_hash, then repr), then its own order."""
    return [v for _, _, v in sorted(values, key=lambda r: (stable_hash(r[0]), repr(r[0]), r[1]))]


@pytest.mark.parametrize("custom", [False, True], ids=["default", "resolver"])
def test_conflicting_add_vertex_requests_are_resolved_in_a_fixed_order(workers: int, custom: bool) -> None:
    vertices = [(r, r) for r in REQUESTERS] + [("x", "old")]
    program = Adders(custom)
    got = run(program, [], vertices, workers)
    new_order = request_order([(r, 1, f"{r}1") for r in REQUESTERS] + [("c", 2, "c2")])
    x_order = request_order([(r, 1, f"{r}-x") for r in REQUESTERS])
    assert sorted(program.resolved.calls, key=repr) == [("new", pregel.MISSING, new_order), ("x", "old", x_order)]
    assert new_order.index("c1") + 1 == new_order.index("c2")
    if custom:
        assert got["new"] == ("resolved", pregel.MISSING, tuple(new_order))
        assert got["x"] == ("resolved", "old", tuple(x_order))
    else:
        assert got["new"] == new_order[0]  # the first request
        assert got["x"] == "old"  # an existing vertex keeps its value


def test_mutations_keep_a_quiet_run_going(workers: int) -> None:
    """Everybody halts in superstep 0, but a request is in flight: superstep 1 runs, and the
    new vertex (active, as new vertices are) is computed in it."""
    seen = Recorder()

    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        seen((vertex.superstep, vertex.id))
        if vertex.superstep == 0 and vertex.id == 0:
            vertex.add_vertex(5, "five")
        vertex.vote_to_halt()

    got = run(compute, [(0, 1)], None, workers)
    assert sorted(seen.calls) == [(0, 0), (0, 1), (1, 5)]
    assert got == {0: None, 1: None, 5: "five"}


@pytest.mark.parametrize("how", ["master_halt", "max_supersteps"])
def test_the_last_supersteps_mutations_are_applied_to_the_output(workers: int, how: str) -> None:
    class Halting(Scripted):
        def master_compute(self, master: pregel.Master) -> None:
            if how == "master_halt" and master.superstep == 1:
                master.halt()

    program = Halting({(1, 0): [("add_vertex", 10, "ten"), ("remove_vertex", 1)]})
    got = run(program, GRAPH, LABELS, workers, max_supersteps=2 if how == "max_supersteps" else None)
    assert max(s for s, *_ in program.seen.calls) == 1
    assert got == {0: "v0", 2: "v2", 3: "v3", 4: "v4", 10: "ten"}


# Missing vertices --------------------------------------------------------------------------------


class Greeter(pregel.Program):
    """Vertex 0 greets 1 (which exists) and 99 (which does not) in superstep 0; a vertex that
    gets mail keeps it, after its initial value."""

    def initial_value(self, vertex_id: Any, value: Any) -> Any:
        return f"init-{vertex_id}" if value is None else value

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0 and vertex.id == 0:
            vertex.send(1, "hello")
            vertex.send(99, "hello")
        if messages:
            vertex.value = (vertex.value, *messages)
        vertex.vote_to_halt()


def test_on_missing_vertex_create(workers: int) -> None:
    got = run(Greeter(on_missing_vertex="create"), [(0, 1)], [(0, "zero"), (1, "one")], workers)
    assert got == {0: "zero", 1: ("one", "hello"), 99: ("init-99", "hello")}


def test_on_missing_vertex_drop(workers: int) -> None:
    got = run(Greeter(on_missing_vertex="drop"), [(0, 1)], [(0, "zero"), (1, "one")], workers)
    assert got == {0: "zero", 1: ("one", "hello")}


@pytest.mark.parametrize("policy", ["drop", "create"])
def test_messages_to_a_removed_vertex_meet_the_policy(workers: int, policy: str) -> None:
    """Vertex 3 removes itself in superstep 0; vertex 4 messages it along its edge in superstep 1."""

    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0 and vertex.id == 3:
            vertex.remove_vertex()
        if vertex.superstep == 1 and vertex.id == 4:
            vertex.send_to_all_neighbors("knock")
        if messages:
            vertex.value = messages
        if vertex.superstep >= 1:
            vertex.vote_to_halt()

    got = run(pregel.Program(compute, on_missing_vertex=policy), GRAPH, LABELS, workers)
    want: dict[int, Any] = {0: "v0", 1: "v1", 2: "v2", 4: "v4"}
    if policy == "create":
        want[3] = ["knock"]  # made afresh, with initial_value(3, None), then computed
    assert got == want


# Epochs --------------------------------------------------------------------------------------------------


def epoch_graphs(seed: int, count: int) -> list[tuple[list[tuple[int, int]], list[tuple[int, None]]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(5, 40)
        out.append((random_edges(rng, n, rng.randint(0, 3 * n)), [(i, None) for i in range(n)]))
    return out


@pytest.mark.parametrize("lockstep", [True, False], ids=["lockstep", "overlapping"])
def test_each_epoch_is_a_separate_run(workers: int, lockstep: bool) -> None:
    graphs = epoch_graphs(3, 4)
    numbers = [0, 2, 3, 7]
    ranks = run_epochs(programs.PageRank(supersteps=150), graphs, workers, epochs=numbers, lockstep=lockstep)
    cc = run_epochs(
        programs.ConnectedComponents(),
        [(both_ways(e), v) for e, v in graphs],
        workers,
        epochs=numbers,
        lockstep=lockstep,
    )
    for (edges, vertices), pr, labels in zip(graphs, ranks, cc):
        nodes = [v for v, _ in vertices]
        want = nx.pagerank(digraph(nodes, edges), tol=1e-13, max_iter=1000)
        assert set(pr) == set(want) and max(abs(pr[k] - want[k]) for k in want) < 1e-6
        g = nx.Graph(edges)
        g.add_nodes_from(nodes)
        assert labels == {n: min(c) for c in nx.connected_components(g) for n in c}


def test_overlapping_epochs_with_mutations(workers: int) -> None:
    graphs = epoch_graphs(4, 5)
    results = run_epochs(programs.KCore(2), [(both_ways(e), v) for e, v in graphs], workers, lockstep=False)
    for (edges, vertices), got in zip(graphs, results):
        g = nx.Graph((u, v) for u, v in edges if u != v)
        g.add_nodes_from(v for v, _ in vertices)
        assert set(got) == set(nx.k_core(g, 2))


# Progress reports ---------------------------------------------------------------------------------


def test_progress_reports_every_superstep(workers: int) -> None:
    n = 6
    chain = [(i, i + 1) for i in range(n - 1)]
    reports = Recorder()
    run_epochs(
        Relay(),
        [(chain, None), (chain[:2], None)],
        workers,
        epochs=[1, 4],
        lockstep=False,
        progress=reports,
        name="relay",
    )
    by_epoch: dict[int, list[pregel.SuperstepReport]] = {}
    for r in reports.calls:
        assert r.name == "relay"
        by_epoch.setdefault(r.epoch, []).append(r)
    assert sorted(by_epoch) == [1, 4]
    for epoch, length in ((1, n), (4, 3)):
        rs = by_epoch[epoch]
        assert [r.superstep for r in rs] == list(range(-1, length))
        assert [r.halting for r in rs] == [False] * length + [True]
        assert all(r.vertices == length for r in rs)
        assert rs[0].active == length and rs[0].messages == 0  # loaded: everybody active
        assert all(r.active == 0 for r in rs[1:])  # everybody votes to halt
        assert [r.messages for r in rs[1:]] == [1] * (length - 1) + [0]  # the token, one hop per superstep
        seconds = [r.seconds for r in rs]
        assert seconds == sorted(seconds) and seconds[0] >= 0


def test_progress_counts_active_vertices_and_messages(workers: int) -> None:
    reports = Recorder()
    ring = [(i, (i + 1) % 5) for i in range(5)] + [(0, 2)]
    run(count_forever, ring, [(9, None)], workers, max_supersteps=3, progress=reports)
    assert [(r.superstep, r.vertices, r.active, r.messages) for r in reports.calls] == [(-1, 6, 6, 0)] + [
        (s, 6, 6, len(ring)) for s in range(3)
    ]


def test_vertex_sees_the_number_of_vertices(workers: int) -> None:
    """Without a vertices stream every endpoint is a vertex; with one, the loaded vertices and
    the sources of edges are (a target that is neither is not: messages to it meet the policy)."""
    seen = Recorder()

    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        seen(vertex.num_vertices)
        vertex.vote_to_halt()

    edges = [(0, 1), (2, 2), (3, 0)]
    assert run(compute, edges, None, workers) == dict.fromkeys([0, 1, 2, 3])
    assert seen.calls == [4] * 4
    seen.calls.clear()
    assert run(compute, edges, [(7, None), (0, None)], workers) == dict.fromkeys([0, 2, 3, 7])
    assert seen.calls == [4] * 4
