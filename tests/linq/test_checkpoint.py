"""Checkpoint and restore of `timely_libs.linq`'s stateful operators (Naiad §3.4), driven by hand.

Each test runs a linq dataflow over epochs ``0..at``, waits until the output has passed
``at``, and collects ``checkpoint()`` from every instance of every stage, each state through
a round trip of the checkpoint codec. A *fresh* computation of the same dataflow, on the
same or another number of workers, then gets the states back with ``restore`` (keyed pieces
dealt out as the runtime does: by ``route % workers``, a `timely.RoutedPiece` split by the
new count), its inputs advance to ``at + 1``,
and it takes the remaining epochs. Every epoch's reported changes and accumulated contents
must equal an undisturbed run's, and the final contents a from-scratch computation's and
the reference answer.

Every stateful linq operator returns a `timely.KeyedState`, so each test also checks that
no stage returns plain state (which would stop a resume on another number of workers).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, cast

import numpy as np
import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_reference import random_epochs
from timely._runtime.recovery import deal_pieces
from timely_libs import linq
from timely_libs.linq._columns import Block
from timely_libs.linq._stateful import Routed

CODEC = timely.Codec(allow_pickle=True)

Changes = list[tuple[Any, int]]
Epochs = Sequence[Sequence[Changes]]
"""Per epoch, one list of changes per input."""
Seen = list[tuple[dict[Any, int], dict[Any, int]]]
"""Per epoch, the reported changes and the accumulated contents."""
Saved = dict[str, list[Any]]
"""Per stage, per instance: None (no state) or the encoded pieces of its KeyedState."""

first = itemgetter(0)
second = itemgetter(1)


# The driver ----------------------------------------------------------------------------------------


def builder(query: Callable[..., linq.Collection], inputs: int) -> Callable[[timely.Scope], Any]:
    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        ins = [linq.new_input(scope, f"in{i}") for i in range(inputs)]
        return ins, linq.CollectionOutput(query(*(i.collection for i in ins)), name="out")

    return build


def feed(
    comp: timely.Computation,
    inputs: list[linq.CollectionInput],
    out: linq.CollectionOutput,
    epochs: Epochs,
    start: int,
    stop: int,
) -> Seen:
    """Feed epochs ``start .. stop - 1``; after each, what the output reported and holds."""
    seen: Seen = []
    for epoch in range(start, stop):
        for inp, batch in zip(inputs, epochs[epoch]):
            if inp.epoch < epoch:
                inp.advance_to(epoch)
            if batch:
                inp.update(batch)
            inp.advance_to(epoch + 1)
        comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
        reported = out.changes.get(epoch, [])
        assert len({d for d, _ in reported}) == len(reported), f"epoch {epoch}: unconsolidated {reported}"
        seen.append((dict(reported), out.contents()))
    return seen


def take_checkpoint(comp: timely.Computation) -> Saved:
    """Every instance's state, encoded as the runtime stores it; plain (unkeyed) state is refused."""
    saved: Saved = {}
    for spec in comp.graph.stages:
        states: list[Any] = []
        for vertex in comp.vertices(spec.name):
            state = vertex.checkpoint()
            if state is None:
                states.append(None)
                continue
            assert isinstance(state, timely.KeyedState), (
                f"stage {spec.name!r}: {type(vertex).__name__}.checkpoint() returned plain state, which "
                "cannot be resumed on another number of workers"
            )
            for piece in state.pieces:
                assert type(piece[0]) is int, f"stage {spec.name!r}: route {piece[0]!r} is not an int"
            states.append(CODEC.encode(list(state.pieces)))
        saved[spec.name] = states
    return saved


def decode(saved: Saved) -> dict[str, list[Any]]:
    return {name: [None if s is None else CODEC.decode(s) for s in states] for name, states in saved.items()}


def route_pieces(states: list[Any], workers: int) -> list[list[tuple[int, Any]]]:
    """The pieces of every old instance, dealt out to ``workers`` new ones as the runtime deals
    them (by route, a `timely.RoutedPiece` split by the new count)."""
    dealt = deal_pieces([list(pieces or ()) for pieces in states], workers, list(range(workers)))
    return [dealt[w] for w in range(workers)]


def restore(comp: timely.Computation, saved: Saved) -> None:
    """What the runtime does on resume: same worker count, each instance its own state;
    otherwise every instance the pieces routed to it (possibly none), from every old instance."""
    for name, states in decode(saved).items():
        vertices = comp.vertices(name)
        if len(vertices) == len(states):
            for vertex, pieces in zip(vertices, states):
                if pieces is not None:
                    vertex.restore(timely.KeyedState(list(pieces)))
        elif any(s is not None for s in states):
            for vertex, pieces in zip(vertices, route_pieces(states, len(vertices))):
                vertex.restore(timely.KeyedState(pieces))


def stateful_stages(saved: Saved) -> set[str]:
    return {name for name, states in saved.items() if any(s is not None for s in states)}


def run(query: Callable[..., linq.Collection], epochs: Epochs, workers: int) -> Seen:
    build = builder(query, len(epochs[0]))
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        return feed(comp, inputs, out, epochs, 0, len(epochs))


def run_resumed(
    query: Callable[..., linq.Collection],
    epochs: Epochs,
    workers: int,
    resume_workers: int,
    at: int,
    restore_state: bool = True,
) -> tuple[Seen, Saved]:
    """Epochs ``0..at`` on ``workers``, a checkpoint, and the rest on ``resume_workers`` in a
    fresh computation restored from it."""
    build = builder(query, len(epochs[0]))
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        before = feed(comp, inputs, out, epochs, 0, at + 1)
        saved = take_checkpoint(comp)
    with timely.execute(build, workers=resume_workers, timeout=TIMEOUT) as (comp, (inputs, out)):
        if restore_state:
            restore(comp, saved)
        for inp in inputs:
            inp.advance_to(at + 1)
        after = feed(comp, inputs, out, epochs, at + 1, len(epochs))
    return before + after, saved


def from_scratch(query: Callable[..., linq.Collection], epochs: Epochs, workers: int) -> dict[Any, int]:
    """The answer over all the epochs' changes fed as one epoch."""
    total = [[c for epoch in epochs for c in epoch[i]] for i in range(len(epochs[0]))]
    return run(query, [total], workers)[-1][1]


def accumulated(epochs: Epochs) -> list[ref.Multiset]:
    states: list[ref.Multiset] = [{} for _ in epochs[0]]
    for epoch in epochs:
        states = [ref.apply(s, batch) for s, batch in zip(states, epoch)]
    return states


def check_resume(
    query: Callable[..., linq.Collection],
    reference: Callable[..., ref.Multiset],
    epochs: Epochs,
    workers: int,
    resume_workers: int,
    at: int,
    expect_state: Sequence[str] = (),
) -> Saved:
    """The resumed run reports, epoch by epoch, what an undisturbed run reports."""
    assert 0 <= at < len(epochs) - 1
    undisturbed = run(query, epochs, workers)
    resumed, saved = run_resumed(query, epochs, workers, resume_workers, at)
    for name in expect_state:
        assert any(name in stage for stage in stateful_stages(saved)), (
            f"no state saved for {name!r}; stages with state: {sorted(stateful_stages(saved))}"
        )
    for epoch, (got, want) in enumerate(zip(resumed, undisturbed)):
        assert got[0] == want[0], f"epoch {epoch}: changes {got[0]} != {want[0]} (checkpoint after epoch {at})"
        assert got[1] == want[1], (
            f"epoch {epoch}: contents differ: missing {ref.difference(want[1], got[1])}, "
            f"extra {ref.difference(got[1], want[1])} (checkpoint after epoch {at})"
        )
    assert len(resumed) == len(epochs)
    final = resumed[-1][1]
    assert final == reference(*accumulated(epochs))
    assert final == from_scratch(query, epochs, resume_workers)
    return saved


# Workloads ------------------------------------------------------------------------------------------


SPREAD = 7919
"""Node ids are multiples of this prime (and other keys strings), far from small ints: a state cut into pieces by
``route % buckets`` for some fixed count of buckets would put rows on the wrong worker when
resumed on most worker counts (11 among them)."""


def edge_epochs(seed: int, nodes: int = 30, initial: int = 35, epochs: int = 10) -> list[tuple[Changes]]:
    rng = random.Random(seed)
    return [
        (e,)
        for e in random_epochs(
            rng,
            lambda: (rng.randrange(nodes) * SPREAD, rng.randrange(nodes) * SPREAD),
            initial,
            epochs,
            per_epoch=5,
            delete=0.45,
        )
    ]


def pair_epochs(seed: int, epochs: int = 8, inputs: int = 1, keys: int = 6) -> list[tuple[Changes, ...]]:
    rng = random.Random(seed)

    per_input = [
        random_epochs(
            rng, lambda: (f"key{rng.randrange(keys)}", rng.randrange(5)), 12, epochs, per_epoch=5, delete=0.45
        )
        for _ in range(inputs)
    ]
    return [tuple(e[i] for e in per_input) for i in range(epochs + 1)]


RESUMES = pytest.mark.parametrize(
    ("workers", "resume_workers", "at"),
    [(1, 1, 3), (3, 3, 4), (2, 3, 2), (3, 1, 5), (2, 2, 0), (1, 3, 0), (2, 11, 2), (11, 4, 3)],
    ids=["w1", "w3", "w2-to-w3", "w3-to-w1", "w2-first-epoch", "w1-to-w3-first-epoch", "w2-to-w11", "w11-to-w4"],
)


# Connected components ------------------------------------------------------------------------------


@RESUMES
def test_connected_components(workers: int, resume_workers: int, at: int) -> None:
    saved = check_resume(
        linq.connected_components,
        ref.nx_components,
        edge_epochs(1),
        workers,
        resume_workers,
        at,
        expect_state=["label_propagation.labels", "nodes", "out.contents"],
    )
    assert stateful_stages(saved) <= {
        "label_propagation.labels",
        "nodes",
        "out.contents",
    }, "a Consolidate kept state between epochs"


@pytest.mark.parametrize("seed", [2, 3])
def test_connected_components_every_epoch(seed: int) -> None:
    """Checkpoint after each epoch in turn, resuming on 1, 2 or 3 workers."""
    epochs = edge_epochs(seed, nodes=25, initial=25, epochs=6)
    undisturbed = run(linq.connected_components, epochs, 2)
    for at in range(len(epochs) - 1):
        resumed, _ = run_resumed(linq.connected_components, epochs, 2, 1 + at % 3, at)
        assert resumed == undisturbed, f"checkpoint after epoch {at}"


def test_connected_components_of_a_larger_graph() -> None:
    """Hundreds of keys per worker, many loop iterations, twenty changes an epoch."""
    rng = random.Random(11)
    epochs = [
        (e,)
        for e in random_epochs(
            rng, lambda: (rng.randrange(400), rng.randrange(400)), 500, epochs=5, per_epoch=20, delete=0.5
        )
    ]
    check_resume(
        linq.connected_components, ref.nx_components, epochs, 3, 2, 2, expect_state=["label_propagation.labels"]
    )


def test_resuming_without_the_state_goes_wrong() -> None:
    """The harness can tell: a fresh computation that skips `restore` gives other answers (or
    fails, on removing an edge it never saw)."""
    epochs = edge_epochs(1)
    undisturbed = run(linq.connected_components, epochs, 2)
    try:
        resumed, _ = run_resumed(linq.connected_components, epochs, 2, 2, 3, restore_state=False)
    except (timely.VertexError, timely.ComputationFailed) as exc:
        assert "removed more often than it was added" in str(exc)
    else:
        assert resumed[-1][1] != undisturbed[-1][1]


@pytest.mark.parametrize(("workers", "resume_workers"), [(2, 3), (3, 1)], ids=["w2-to-w3", "w3-to-w1"])
def test_prioritized_connected_components(workers: int, resume_workers: int) -> None:
    """Two nested loops (a priority round around a fixed point), with `Delay` in between."""
    check_resume(
        linq.prioritized_connected_components,
        ref.nx_components,
        edge_epochs(4, nodes=25, initial=30, epochs=6),
        workers,
        resume_workers,
        2,
        expect_state=["least_label"],
    )


@pytest.mark.parametrize(("workers", "resume_workers"), [(2, 3), (3, 1)], ids=["w2-to-w3", "w3-to-w1"])
def test_strongly_connected_components(workers: int, resume_workers: int) -> None:
    def scc_edges(edges: ref.Multiset) -> ref.Multiset:
        present = [e for e, n in edges.items() if n > 0]
        reach = ref.closure(present)
        return {e: n for e, n in edges.items() if n > 0 and (e[0] == e[1] or (e[1], e[0]) in reach)}

    check_resume(
        linq.strongly_connected_components,
        scc_edges,
        edge_epochs(5, nodes=15, initial=20, epochs=5),
        workers,
        resume_workers,
        2,
        expect_state=["label_src", "label_propagation.labels"],
    )


# Join ------------------------------------------------------------------------------------------------


def _joined(a: Any, b: Any) -> Any:
    return (a[0], a[1], b[1])


@RESUMES
def test_join(workers: int, resume_workers: int, at: int) -> None:
    check_resume(
        lambda a, b: a.join(b, first, first, _joined),
        lambda a, b: ref.join(a, b, first, first, _joined),
        pair_epochs(6, inputs=2),
        workers,
        resume_workers,
        at,
        expect_state=["join"],
    )


def _peel(edges: linq.Collection) -> linq.Collection:
    """kcore's peel: ``alive`` joined twice by one key function inside the loop, so the two
    joins share its arrangement (each checkpoints it as it has received it; restored, the
    first brings it back for both)."""
    node = linq.columns(lambda n: n)
    edge = linq.columns(lambda s, d, n: (s, d))

    def peel(active: linq.Collection) -> linq.Collection:
        alive = active.count(first).where(linq.columns(lambda n, k: k >= 2)).select(first)
        return active.join(alive, first, node, edge, name="from_alive").join(alive, second, node, edge, name="both")

    return edges.concat(edges.select(itemgetter(1, 0))).fixed_point(peel).count(first)


@pytest.mark.parametrize(
    ("workers", "resume_workers", "at"), [(1, 1, 3), (2, 3, 2), (3, 1, 5)], ids=["w1", "w2-to-w3", "w3-to-w1"]
)
def test_joins_sharing_an_input(workers: int, resume_workers: int, at: int) -> None:
    check_resume(_peel, ref.two_core_degrees, edge_epochs(4), workers, resume_workers, at, expect_state=["both"])


# Reduce and friends -------------------------------------------------------------------------------


def _sorted_group(key: Any, records: list[Any]) -> list[Any]:
    return [(key, tuple(records))]


def _co_group(key: Any, left: list[Any], right: list[Any]) -> list[Any]:
    return [(key, len(left), len(right))]


REDUCES: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset], int, list[str]]] = {
    # name: (query, reference, inputs, stages that must have saved state)
    "count": (lambda a: a.count(first), lambda a: ref.count(a, first), 1, ["count"]),
    "count_records": (lambda a: a.count(), lambda a: ref.count(a), 1, ["count"]),
    "distinct": (lambda a: a.distinct(), ref.distinct, 1, ["distinct"]),
    "min": (lambda a: a.min(first, second), lambda a: ref.min_(a, first, second), 1, ["min"]),
    "max": (lambda a: a.max(first, second), lambda a: ref.max_(a, first, second), 1, ["max"]),
    "sum": (lambda a: a.sum(first, second), lambda a: ref.sum_(a, first, second), 1, ["sum"]),
    "group_by": (
        lambda a: a.group_by(first, _sorted_group),
        lambda a: ref.group_by(a, first, _sorted_group),
        1,
        ["group_by"],
    ),
    "co_group_by": (
        lambda a, b: a.co_group_by(b, first, first, _co_group),
        lambda a, b: ref.co_group_by(a, b, first, first, _co_group),
        2,
        ["co_group_by"],
    ),
    "union": (lambda a, b: a.union(b), ref.union, 2, ["union"]),
    "intersect": (lambda a, b: a.intersect(b), ref.intersect, 2, ["intersect"]),
    "except": (lambda a, b: a.except_(b), ref.except_, 2, ["except"]),
    "join_count_distinct": (
        lambda a, b: a.join(b, first, first, _joined).count(first).select(second).distinct(),
        lambda a, b: ref.distinct(ref.select(ref.count(ref.join(a, b, first, first, _joined), first), second)),
        2,
        ["join", "count", "distinct"],
    ),
}


@pytest.mark.parametrize("op", sorted(REDUCES))
@pytest.mark.parametrize(
    ("workers", "resume_workers", "at"), [(2, 3, 3), (3, 1, 0)], ids=["w2-to-w3", "w3-to-w1-first-epoch"]
)
def test_reduce(op: str, workers: int, resume_workers: int, at: int) -> None:
    query, reference, inputs, stages = REDUCES[op]
    check_resume(query, reference, pair_epochs(7, inputs=inputs), workers, resume_workers, at, expect_state=stages)


@RESUMES
def test_min(workers: int, resume_workers: int, at: int) -> None:
    query, reference, _, stages = REDUCES["min"]
    check_resume(query, reference, pair_epochs(8, keys=4), workers, resume_workers, at, expect_state=stages)


def test_consolidate_and_linear_operators_keep_nothing_between_epochs() -> None:
    def query(a: linq.Collection) -> linq.Collection:
        return a.select(second).where(lambda x: x > 0).consolidate().negate()

    def reference(a: ref.Multiset) -> ref.Multiset:
        return ref.negate(ref.select(ref.where(a, lambda r: r[1] > 0), second))

    saved = check_resume(query, reference, pair_epochs(9), 2, 3, 2)
    assert stateful_stages(saved) == {"out.contents"}


# State held for a time that is not complete ------------------------------------------------------------


def canonical(value: Any) -> Any:
    """A value with lists as tuples and dicts and the orders of pieces made comparable; a
    block of columns as its records and diffs."""
    if isinstance(value, Block):
        return ("block", value.arity, tuple(value.records()), tuple(value.diffs.tolist()))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((canonical(k), canonical(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list | tuple):
        return tuple(canonical(v) for v in value)
    return value


def block_row(block: Block, i: int) -> tuple[Any, ...]:
    """Row ``i`` of a block as Python values (its diff, if the block has diffs)."""
    diff = block.diffs[i : i + 1].tolist() if len(block.diffs) else []
    return (*(c[i : i + 1].tolist()[0] for c in block.cols), *diff)


def piece_multiset(states: list[Any]) -> Counter[Any]:
    """The saved state as a multiset: a `Routed` piece as its rows (each with its head and
    route), which stay the same however the pieces are split and merged."""
    out: Counter[Any] = Counter()
    for pieces in states:
        for route, piece in pieces or ():
            if isinstance(piece, Routed):
                for i, r in enumerate(piece.routes.tolist()):
                    row = tuple(None if p is None else block_row(p, i) for p in piece.parts)
                    out[(canonical(piece.head), r, row)] += 1
                continue
            piece = canonical(piece)
            if piece[0] == 1 and len(piece) == 3:  # a reduce's pending times: in no particular order
                piece = (1, piece[1], tuple(sorted(piece[2])))
            out[(route, piece)] += 1
    return out


def run_a_while(comp: timely.Computation, until: Callable[[], bool]) -> None:
    """Run a computation whose inputs are open until ``until()`` holds (or give up)."""
    for _ in range(200):
        if until():
            return
        try:
            comp.run(timeout=0.02)
        except timely.StalledError:
            pass
    raise AssertionError("the condition did not come true")


@pytest.mark.parametrize("resume_workers", [1, 2, 3])
def test_records_of_an_open_epoch_survive_a_rescale(resume_workers: int) -> None:
    """Records of epoch 3 reach a reduce and a consolidate while epoch 3 is still open (the
    runtime's fence keeps this from happening at its checkpoints, but a vertex must not lose
    them if it does): their checkpoints hold them, and restored on any number of workers the
    instances together checkpoint the same pieces again."""

    def query(a: linq.Collection) -> linq.Collection:
        return a.count(first, name="tally").concat(a.consolidate(name="staged"))

    epochs = pair_epochs(10, epochs=3)
    build = builder(query, 1)
    with timely.execute(build, workers=2, timeout=TIMEOUT) as (comp, ([inp], out)):
        feed(comp, [inp], out, epochs, 0, 3)
        present = min(accumulated(epochs[:3])[0])
        inp.update([((k, 1), 1) for k in range(8)] + [(present, -1), ((9, 9), 2)])  # epoch 3, still open
        run_a_while(
            comp,
            lambda: (
                sum(len(cast(Any, v).staged) for v in comp.vertices("tally")) == 2
                and sum(len(cast(Any, v).staged) for v in comp.vertices("staged")) == 2
            ),
        )
        saved = take_checkpoint(comp)
    states = decode(saved)
    assert any(p.head[0] == 2 for pieces in states["tally"] for _, p in pieces), "no staged records saved"
    assert all(states["staged"]), "the consolidate saved nothing"
    with timely.execute(build, workers=resume_workers, timeout=TIMEOUT) as (comp, _):
        restore(comp, saved)
        again = decode(take_checkpoint(comp))
        for name in stateful_stages(saved):
            assert piece_multiset(again[name]) == piece_multiset(states[name]), name


def test_reduce_pending_keys_survive_a_rescale() -> None:
    """A reduce's keys scheduled at later times (TR §4.3) are saved per key and come back to
    whichever instance owns the key; so do records staged for a time that is not complete.
    (Pending keys are held as arrays of key codes, staged records as blocks: see _reduce.)"""
    from timely_libs.linq._columns import Block, code_of, values_of
    from timely_libs.linq._lattice import Lattice
    from timely_libs.linq._reduce import Reduce

    def make() -> Reduce:
        return Reduce("r", Lattice(1), [first], lambda k, g: {(k, sum(g.values())): 1})

    def codes(*keys: Any) -> Any:
        return np.array([code_of(k) for k in keys], dtype=np.int64)

    old = [make(), make()]
    old[0].pending = {(4, 2): [codes(0, 2)], (5, 0): [codes(2), codes(4)]}
    old[0].staged = {(5, 0): [(0, Block.of_pairs([((2, 7), 1), ((4, 1), -1)]))]}
    old[1].pending = {(4, 2): [codes(1, "a")]}
    states = [CODEC.decode(CODEC.encode(list(cast(timely.KeyedState, o.checkpoint()).pieces))) for o in old]
    new = [make() for _ in range(3)]
    for vertex, pieces in zip(new, route_pieces(states, 3)):
        vertex.restore(timely.KeyedState(pieces))
    merged: dict[Any, set[Any]] = {}
    for vertex in new:
        for t, due in vertex.pending.items():
            keys = set(values_of(np.concatenate(due))) if due else set()
            assert all(linq.stable_hash(k) % 3 == new.index(vertex) for k in keys), (t, keys)
            merged.setdefault(t, set()).update(keys)
    assert merged == {(4, 2): {0, 1, 2, "a"}, (5, 0): {2, 4}}
    staged = [(t, edge, sorted(b.pairs())) for v in new for t, batches in v.staged.items() for edge, b in batches]
    for v in new:
        for batches in v.staged.values():
            for _, b in batches:
                assert all(linq.stable_hash(k) % 3 == new.index(v) for k, _ in b.records()), b
    assert sorted(staged) == [((5, 0), 0, [((2, 7), 1)]), ((5, 0), 0, [((4, 1), -1)])]


def test_a_piece_of_int_keys_writes_its_routes_once() -> None:
    """Int keys route by themselves, so a piece of them does not write its routes beside them
    (an arrangement's keys were written twice); it reads them back from the keys. Other keys
    (strings: routed by a hash) keep their routes written, and every piece splits as before."""
    keys = [5, 7919 * 3, 2**40, 7919 * 3]
    block = Block.of_records(keys)
    same = Routed(("t",), np.array(keys, dtype=np.int64), (block, None))
    other = Routed(("t",), np.array(keys, dtype=np.int64) + 1, (block, None))
    words = Block.of_records(["a", "bb", "a"])
    hashed = Routed(("w",), np.array([11, 2**50, 11], dtype=np.int64), (words,))
    sizes = {}
    for name, piece in (("same", same), ("other", other), ("hashed", hashed)):
        data = CODEC.encode(piece)
        sizes[name] = len(data)
        back = CODEC.decode(data)
        assert isinstance(back, Routed) and back.head == piece.head
        assert back.routes.tolist() == piece.routes.tolist(), name
        assert [p is None or p.records() for p in back.parts] == [p is None or p.records() for p in piece.parts]
        # split as the runtime deals pieces to 3 workers: each row where its route says
        dealt = {w: p for w, p in back.split(3, [0, 1, 2])}
        for w, p in dealt.items():
            assert all(r % 3 == w for r in p.routes.tolist())
        assert sum(len(p) for p in dealt.values()) == len(piece)
    assert sizes["other"] - sizes["same"] >= 8 * len(keys)
