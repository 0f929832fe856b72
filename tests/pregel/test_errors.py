"""Misuse of `timely_libs.pregel` gets a clear error, not a hang or a silently wrong answer.

Mistakes found while the dataflow is built (a bad ``on_missing_vertex``, ``max_supersteps``
below 1, a stream of a loop scope, something that is not an aggregator) raise
`pregel.PregelError` from ``pregel.pregel`` or the program's constructor. Mistakes found
while it runs fail the computation with a `timely.VertexError` whose message repeats the
`PregelError`'s, which is its ``__cause__``: it names the vertex and the superstep where
there is one. Every run is bounded by the conftest timeout and must fail, not stall.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import timely
from tests.support.pregel_harness import failure, pregel_error, run
from timely_libs import pregel
from timely_libs.pregel import programs

RING = [(i, (i + 1) % 6) for i in range(6)]
"""Six vertices 0..5 in a ring: with three workers, each worker owns two."""


def halt(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
    vertex.vote_to_halt()


# Messages to vertices that do not exist -------------------------------------------------------------


def test_a_message_to_a_missing_vertex_fails_by_default(workers: int) -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 2 and vertex.id == 4:
            vertex.send("nowhere", 1)
        vertex.send_to_all_neighbors(0)  # stays active

    text = pregel_error(failure(compute, RING, None, workers))
    assert "'nowhere'" in text and "superstep 3" in text and "sent in superstep 2" in text
    assert "on_missing_vertex" in text  # and says how to allow it


def test_an_array_program_messaging_a_missing_vertex_fails_by_default(workers: int) -> None:
    class Sender(pregel.ArrayProgram):
        def compute(self, step: pregel.ArrayStep) -> None:
            if step.superstep == 0:
                step.send(np.array([1, 1234]), np.array([1.0, 2.0]))
            step.vote_to_halt()

    text = pregel_error(failure(Sender(), RING, None, workers))
    assert "1234" in text and "superstep 1" in text

    class Dropper(Sender):
        on_missing_vertex = "drop"

    assert set(run(Dropper(), RING, None, workers)) == set(range(6))


# A program that raises ---------------------------------------------------------------------------


def test_compute_that_raises_names_the_vertex_superstep_and_exception(workers: int) -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 2 and vertex.id == "v3":
            raise ValueError("my mistake")

    ring = [(f"v{u}", f"v{v}") for u, v in RING]
    exc = failure(compute, ring, None, workers)
    text = pregel_error(exc)
    assert "'v3'" in text and "superstep 2" in text and "ValueError" in text and "my mistake" in text
    assert isinstance(exc.__cause__.__cause__, ValueError)  # type: ignore[union-attr]


def test_an_array_program_that_raises_names_the_superstep(workers: int) -> None:
    class Failing(pregel.ArrayProgram):
        def compute(self, step: pregel.ArrayStep) -> None:
            if step.superstep == 3:
                raise IndexError("out of range")

    exc = failure(Failing(), RING, None, workers)
    text = pregel_error(exc)
    assert "superstep 3" in text and "IndexError" in text and "out of range" in text
    assert isinstance(exc.__cause__.__cause__, IndexError)  # type: ignore[union-attr]


def test_master_compute_that_raises_names_the_superstep(workers: int) -> None:
    class Failing(pregel.Program):
        def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
            pass

        def master_compute(self, master: pregel.Master) -> None:
            if master.superstep == 4:
                raise ZeroDivisionError("master's mistake")

    exc = failure(Failing(), RING, None, workers)
    text = pregel_error(exc)
    assert "master_compute" in text and "superstep 4" in text and "ZeroDivisionError" in text
    assert isinstance(exc.__cause__.__cause__, ZeroDivisionError)  # type: ignore[union-attr]


def _raising_initial_value() -> tuple[pregel.Program, list[tuple[int, int]], int]:
    class P(pregel.Program):
        def initial_value(self, vertex_id: Any, value: Any) -> Any:
            if vertex_id == 3:
                raise ValueError("no value for 3")
            return value

    return P(halt), RING, 1


def _raising_resolver() -> tuple[pregel.Program, list[tuple[int, int]], int]:
    class P(pregel.Program):
        def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
            if vertex.superstep == 0:
                vertex.add_vertex(3, "again")
            vertex.vote_to_halt()

        def resolve_add_vertex(self, vertex_id: Any, current: Any, requested: list[Any]) -> Any:
            raise ValueError("cannot decide")

    return P(), RING, 1


def _raising_combiner() -> tuple[pregel.Program, list[tuple[int, int]], int]:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0:
            vertex.send_to_all_neighbors(vertex.id)
        vertex.vote_to_halt()

    def combine(a: Any, b: Any) -> Any:
        raise ValueError("cannot combine")

    # 0 and 2 message 1; with three workers each is on its own: only the receiver combines
    return pregel.Program(compute, combine=combine), [(0, 1), (2, 1)], 3


@pytest.mark.parametrize(
    ("hook", "says"),
    [
        (_raising_initial_value, "initial_value raised ValueError for vertex 3: no value for 3"),
        (_raising_resolver, "resolve_add_vertex raised ValueError for vertex 3 before superstep 1: cannot decide"),
        (_raising_combiner, "combine raised ValueError on messages for vertex 1 in superstep 1: cannot combine"),
    ],
)
def test_a_user_hook_that_raises_names_the_hook_the_vertex_and_the_superstep(hook: Any, says: str) -> None:
    program, edges, workers = hook()
    assert says in pregel_error(failure(program, edges, None, workers))


# Messages that cannot cross the network ----------------------------------------------------------------


class Local:
    """No codec is registered for this class."""


def _unsendable() -> dict[str, Any]:
    class Inner:
        pass

    return {
        "lambda": lambda: 1,
        "local_class": Inner(),
        "module_class": Local(),
        "in_a_tuple": (1, "x", Local()),
        "in_a_list": [1, [2, lambda: 3]],
        "in_a_dict": {"k": Local()},
        "in_a_set": frozenset({object()}),
    }


@pytest.mark.parametrize("kind", sorted(_unsendable()))
@pytest.mark.parametrize("how", ["send", "send_to_all_neighbors"])
def test_an_unsendable_message_is_refused_even_on_one_process(workers: int, kind: str, how: str) -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 1 and vertex.id == 2:
            message = _unsendable()[kind]
            if how == "send":
                vertex.send(3, message)
            else:
                vertex.send_to_all_neighbors(message)
        elif vertex.superstep < 2:
            vertex.send_to_all_neighbors(("fine", vertex.id))

    text = pregel_error(failure(compute, RING, None, workers))
    assert "vertex 2" in text and "superstep 1" in text and "cannot be sent between processes" in text


Pair = namedtuple("Pair", "a b")


def test_an_unsendable_namedtuple_after_a_sendable_one_is_refused() -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0:
            vertex.send(0, Pair(1, 2))
            vertex.send(0, Pair(vertex.id, lambda: 1))
        vertex.vote_to_halt()

    text = pregel_error(failure(compute, RING, None, 1))
    assert "cannot be sent between processes" in text


@pytest.mark.parametrize("message", [2**70, (1, -(2**64))], ids=["int", "in_a_tuple"])
def test_an_int_too_big_for_the_codec_is_refused(message: Any) -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0 and vertex.id == 1:
            vertex.send(2, message)
        vertex.vote_to_halt()

    text = pregel_error(failure(compute, RING, None, 1))
    assert "vertex 1" in text and "cannot be sent between processes" in text


@pytest.mark.parametrize("what", ["aggregate", "add_vertex", "add_edge"])
def test_unsendable_aggregates_and_mutations_are_refused_even_on_one_process(what: str) -> None:
    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0 and vertex.id == 1:
            value = Local()
            if what == "aggregate":
                vertex.aggregate("any", value)
            elif what == "add_vertex":
                vertex.add_vertex(2, value)
            else:
                vertex.add_edge(2, 3, value)
        vertex.vote_to_halt()

    program = pregel.Program(compute, aggregators={"any": pregel.Aggregator(merge=lambda a, b: a)})
    text = pregel_error(failure(program, RING, None, 1))
    assert "vertex 1" in text and "cannot be sent between processes" in text


def test_a_registered_type_is_sendable(workers: int) -> None:
    """The refusal is about the codec: plain data and numpy arrays (registered by pregel) pass."""

    def compute(vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0:
            vertex.send_to_all_neighbors({"id": vertex.id, "arr": np.arange(3), "s": frozenset({1})})
        else:
            vertex.value = [int(m["arr"].sum()) + m["id"] for m in messages]
        vertex.vote_to_halt()

    assert run(compute, RING, None, workers) == {(i + 1) % 6: [3 + i] for i in range(6)}


# Bad programs and arguments, refused while the dataflow is built ------------------------------------------


def build_with(program: Any, **kwargs: Any) -> None:
    def build(scope: timely.Scope) -> None:
        pregel.pregel(program, scope.new_input("edges"), **kwargs)

    with timely.execute(build, timeout=10):
        pass


@pytest.mark.parametrize("policy", ["ignore", "", "none", "Error"])
def test_a_bad_on_missing_vertex_is_refused(policy: str) -> None:
    with pytest.raises(pregel.PregelError, match=r"on_missing_vertex must be one of .*'error'.*'drop'.*'create'"):
        pregel.Program(halt, on_missing_vertex=policy)

    class Bad(pregel.Program):
        on_missing_vertex = policy

    with pytest.raises(pregel.PregelError, match="on_missing_vertex"):
        Bad(halt)

    class BadArray(pregel.ArrayProgram):
        on_missing_vertex = policy

    with pytest.raises(pregel.PregelError, match="on_missing_vertex"):
        build_with(BadArray())


def test_an_array_program_cannot_create_vertices() -> None:
    class Creating(pregel.ArrayProgram):
        on_missing_vertex = "create"

    with pytest.raises(pregel.PregelError, match="cannot create vertices"):
        build_with(Creating())


def test_an_array_program_needs_a_ufunc_combiner() -> None:
    class Combining(pregel.ArrayProgram):
        combine = staticmethod(min)  # type: ignore[assignment]

    with pytest.raises(pregel.PregelError, match="ufunc"):
        build_with(Combining())


@pytest.mark.parametrize("limit", [0, -1])
def test_max_supersteps_below_one_is_refused(limit: int) -> None:
    with pytest.raises(pregel.PregelError, match=f"max_supersteps must be at least 1, got {limit}"):
        build_with(halt, max_supersteps=limit)


def test_an_aggregator_must_be_an_aggregator() -> None:
    with pytest.raises(pregel.PregelError, match="'total'.*not an Aggregator"):
        pregel.Program(halt, aggregators={"total": sum})  # type: ignore[dict-item]


def test_a_program_must_be_a_program_or_a_function() -> None:
    with pytest.raises(TypeError, match="compute function"):
        build_with(42)


def test_the_graph_streams_must_be_in_the_root_scope() -> None:
    def build(scope: timely.Scope) -> None:
        loop = timely.LoopContext(scope, "outer")
        pregel.pregel(halt, loop.ingress(scope.new_input("edges"), "in"))

    with pytest.raises(pregel.PregelError, match="root scope"):
        with timely.execute(build, timeout=10):
            pass


# Aggregators that do not exist ---------------------------------------------------------------------------


class UnknownAggregator(pregel.Program):
    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(aggregators={"known": pregel.Sum()})

    def compute(self, vertex: pregel.PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 1 and vertex.id == 4:
            if self.where == "aggregate":
                vertex.aggregate("nope", 1)
            elif self.where == "aggregated":
                vertex.aggregated("nope")

    def master_compute(self, master: pregel.Master) -> None:
        if master.superstep == 1:
            if self.where == "master_aggregated":
                master.aggregated("nope")
            elif self.where == "master_set_aggregated":
                master.set_aggregated("nope", 0)


class UnknownArrayAggregator(pregel.ArrayProgram):
    def __init__(self, where: str) -> None:
        self.where = where
        self.aggregators = {"known": pregel.Sum()}

    def compute(self, step: pregel.ArrayStep) -> None:
        if step.superstep == 1:
            if self.where == "array_aggregate":
                step.aggregate("nope", 1)
            else:
                step.aggregated("nope")


WHERE = ["aggregate", "aggregated", "master_aggregated", "master_set_aggregated", "array_aggregate", "array_aggregated"]


def unknown_aggregator(where: str) -> Any:
    return UnknownArrayAggregator(where) if where.startswith("array") else UnknownAggregator(where)


@pytest.mark.parametrize("where", WHERE)
def test_an_unknown_aggregator_is_named(workers: int, where: str) -> None:
    text = pregel_error(failure(unknown_aggregator(where), RING, None, workers, max_supersteps=4))
    assert "aggregator 'nope'" in text
    assert "no aggregator of that name" in text


@pytest.mark.parametrize("where", WHERE)
def test_an_unknown_aggregator_error_names_the_vertex_and_superstep(where: str) -> None:
    text = pregel_error(failure(unknown_aggregator(where), RING, None, 1, max_supersteps=4))
    assert "superstep 1" in text
    if where in ("aggregate", "aggregated"):
        assert "vertex 4" in text


# Array programs need integer ids -------------------------------------------------------------------------


class Identity(pregel.ArrayProgram):
    def compute(self, step: pregel.ArrayStep) -> None:
        step.vote_to_halt()


@pytest.mark.parametrize(
    ("edges", "vertices"),
    [
        ([("a", "b")], None),
        ([(0, 1)], [("x", 1.0)]),
        ([(0, 1, 3.0), (0, 2)], None),  # edges of both widths (one source: on one worker)
        pytest.param(
            [(0, 1), (0, 2, 3.0), (4, 5)],
            None,
            id="mixed_widths_short_first",
        ),
        ([(0, 2**70)], None),
        ([((1, 2), 3)], None),
    ],
    ids=["string_edges", "string_vertex", "mixed_widths", "mixed_widths_short_first", "too_big", "tuple"],
)
def test_an_array_program_refuses_ids_that_are_not_integers(
    workers: int, edges: list[Any], vertices: list[Any] | None
) -> None:
    text = pregel_error(failure(Identity(), edges, vertices, workers))
    widths = {len(e) for e in edges}
    assert ("all of the form (src, dst) or all (src, dst, value)" if len(widths) > 1 else "integer vertex ids") in text


@pytest.mark.parametrize(
    ("edges", "vertices"),
    [([(0.5, 1)], None), ([("12", "3")], None), ([(0, 1)], [(2.5, 1.0)]), ([(True, 2)], None)],
    ids=["float_edge", "numeric_strings", "float_vertex", "bool"],
)
def test_an_array_program_refuses_ids_that_only_look_like_integers(
    edges: list[Any], vertices: list[Any] | None
) -> None:
    text = pregel_error(failure(Identity(), edges, vertices, 1))
    assert "integer vertex ids" in text


# Contradictory graphs -------------------------------------------------------------------------------------


def test_a_vertex_loaded_twice_with_different_values_is_refused(workers: int) -> None:
    text = pregel_error(failure(halt, RING, [(3, "a"), (4, "b"), (3, "c")], workers))
    assert "vertex 3" in text and "'a'" in text and "'c'" in text
    assert run(halt, RING, [(3, "a"), (3, "a")], workers)[3] == "a"  # the same value twice is fine


def test_an_edge_loaded_twice_with_different_values_is_refused(workers: int) -> None:
    text = pregel_error(failure(halt, [(1, 2, 5), (2, 3, 1), (1, 2, 6)], None, workers))
    assert "1 -> 2" in text and "5" in text and "6" in text


def test_bipartite_matching_needs_a_side_for_every_vertex(workers: int) -> None:
    text = pregel_error(failure(programs.BipartiteMatching(), [(0, 1)], [(0, "L"), (1, "right")], workers))
    assert "vertex 1" in text and "'right'" in text


# Columns (pregel(columns=True)) ---------------------------------------------------------------------


def test_columns_need_an_array_program() -> None:
    with pytest.raises(pregel.PregelError, match="columns=True needs an ArrayProgram, got PageRank"):
        run(programs.PageRank(supersteps=3), [(np.array([0, 1]), np.array([1, 0]))], None, columns=True)


def test_column_blocks_of_float_ids_or_uneven_lengths_are_refused(workers: int) -> None:
    floats = (np.array([0.5, 1.0]), np.array([1, 0]))
    text = pregel_error(failure(programs.ArrayPageRank(supersteps=3), [floats], None, workers, columns=True))
    assert "integer ids and columns of one length" in text and "float64" in text
    uneven = (np.array([0, 1, 2]), np.array([1, 0]))
    text = pregel_error(failure(programs.ArrayPageRank(supersteps=3), [uneven], None, workers, columns=True))
    assert "shapes [(3,), (2,)]" in text
    rows = [(0, 1), (1, 0)]  # records, not blocks of arrays
    text = pregel_error(failure(programs.ArrayPageRank(supersteps=3), rows, None, workers, columns=True))
    assert "integer ids and columns of one length" in text and "shapes [(), ()]" in text
