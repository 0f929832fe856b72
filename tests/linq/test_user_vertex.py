"""A user's own `timely.Vertex` between linq operators: inside a fixed_point loop
(examples/linq_user_vertex.py, shortest paths cut at a radius) and in the root scope
(connected components relabelled by a user vertex, then counted per component). Each answer
must equal a plain-Python computation after every epoch of insertions and deletions."""

from __future__ import annotations

import random
from collections import Counter
from operator import itemgetter
from typing import Any

import pytest

import timely
import timely.testing
from timely_examples import linq_user_vertex as example
from timely_libs import linq

TIMEOUT = 30.0

Epochs = list[tuple[list[Any], list[Any]]]
"""Per epoch: (edge changes, source changes), each a list of ``(record, diff)``."""


def graph_epochs(seed: int, nodes: int = 60, edges: int = 150, epochs: int = 5) -> Epochs:
    """Epoch 0 loads a random weighted graph and two sources; later epochs delete and insert
    edges, change some weights, and move a source."""
    rng = random.Random(seed)
    graph = set(example.random_edges(rng, nodes, edges))
    sources = {0, 1}
    out: Epochs = [([(e, 1) for e in sorted(graph)], [(s, 1) for s in sorted(sources)])]
    for epoch in range(1, epochs):
        gone = rng.sample(sorted(graph), 8)
        present = {(u, v) for u, v, _ in graph}
        new = [e for e in example.random_edges(rng, nodes, 16) if e[:2] not in present][:6]
        reweighted = [(u, v, w + 3) for u, v, w in rng.sample(sorted(set(graph) - set(gone)), 3)]
        old_weights = [e for e in graph if (e[0], e[1]) in {(u, v) for u, v, _ in reweighted}]
        edge_changes = [(e, -1) for e in gone + old_weights] + [(e, 1) for e in new + reweighted]
        graph.difference_update(gone + old_weights)
        graph.update(new + reweighted)
        source_changes: list[Any] = []
        if epoch == 2:  # a source moves
            source_changes = [(1, -1), (nodes - 1, 1)]
            sources = {0, nodes - 1}
        out.append((edge_changes, source_changes))
    return out


def states(epochs: Epochs) -> list[tuple[set[Any], set[Any]]]:
    """(edges, sources) after each epoch."""
    edges: Counter[Any] = Counter()
    sources: Counter[Any] = Counter()
    result = []
    for edge_changes, source_changes in epochs:
        for e, d in edge_changes:
            edges[e] += d
        for s, d in source_changes:
            sources[s] += d
        assert all(c in (0, 1) for c in (*edges.values(), *sources.values()))
        result.append(({e for e, c in edges.items() if c}, {s for s, c in sources.items() if c}))
    return result


def as_set(contents: dict[Any, int]) -> set[Any]:
    assert all(c == 1 for c in contents.values()), contents
    return set(contents)


def changes_between(before: set[Any], after: set[Any]) -> Counter[Any]:
    return Counter({**{r: 1 for r in after - before}, **{r: -1 for r in before - after}})


# Inside a loop: the example ---------------------------------------------------------------------------
def test_example_main_prints_and_checks_its_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert example.main(["--nodes", "300", "--edges", "900", "--epochs", "3", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("epoch")] == [
        "epoch 0",
        "epoch 1",
        "epoch 2",
    ]
    assert "MISMATCH" not in out
    assert out.rstrip().endswith("equal")


def _check_ball_epochs(epochs: Epochs, radius: int, ball: linq.CollectionOutput, epoch: int) -> None:
    history = states(epochs)
    edges, sources = history[epoch]
    want = {(n, d) for n, d in example.within_radius(edges, sources, radius).items()}
    assert as_set(ball.contents()) == want, f"epoch {epoch}"
    before: set[Any] = set()
    if epoch > 0:
        e0, s0 = history[epoch - 1]
        before = set(example.within_radius(e0, s0, radius).items())
    assert Counter(dict(ball.changes.get(epoch, []))) == changes_between(before, want), f"changes of epoch {epoch}"


@pytest.mark.parametrize("seed", [3, 4])
def test_distances_within_a_radius_match_dijkstra_every_epoch(workers: int, seed: int) -> None:
    radius = 14
    epochs = graph_epochs(seed)
    full = [example.within_radius(e, s, None) for e, s in states(epochs)]
    assert any(max(d.values()) > radius for d in full), "the radius should cut some nodes off"
    with timely.execute(lambda s: example.build(s, radius), workers=workers, timeout=TIMEOUT) as (comp, h):
        for epoch, (edge_changes, source_changes) in enumerate(epochs):
            h.edges.update(edge_changes)
            h.sources.update(source_changes)
            h.edges.advance_to(epoch + 1)
            h.sources.advance_to(epoch + 1)
            comp.wait_passed(h.output.probe, epoch, timeout=TIMEOUT)
            _check_ball_epochs(epochs, radius, h.output, epoch)
    # the user's vertex ran inside the loop: at (epoch, iteration) times, over several iterations
    assert h.seen and all(len(t) == 2 for t in h.seen)
    assert max(t[1] for t in h.seen) >= 3
    assert {t[0] for t in h.seen} == set(range(len(epochs)))


def test_distances_within_a_radius_agree_with_the_library_shortest_paths(workers: int) -> None:
    """In one dataflow: the loop with the user's vertex, and `linq.shortest_paths` cut afterwards."""
    radius = 12
    epochs = graph_epochs(5)

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        edges = linq.new_input(scope, "edges")
        sources = linq.new_input(scope, "sources")
        ball = example.shortest_paths_within(edges.collection, sources.collection, radius)
        library = linq.shortest_paths(edges.collection, sources.collection).where(lambda nd: nd[1] <= radius)
        return edges, sources, linq.CollectionOutput(ball), linq.CollectionOutput(library)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (edges, sources, ball, library)):
        for epoch, (edge_changes, source_changes) in enumerate(epochs):
            edges.update(edge_changes)
            sources.update(source_changes)
            edges.advance_to(epoch + 1)
            sources.advance_to(epoch + 1)
            comp.wait_passed(ball.probe, epoch, timeout=TIMEOUT)
            comp.wait_passed(library.probe, epoch, timeout=TIMEOUT)
            assert ball.contents() == library.contents(), f"epoch {epoch}"
            assert ball.contents(), f"epoch {epoch}: empty answer"
            assert Counter(dict(ball.changes.get(epoch, []))) == Counter(dict(library.changes.get(epoch, [])))


async def test_distances_within_a_radius_in_simulated_processes() -> None:
    radius = 14
    epochs = graph_epochs(6)
    async with timely.testing.simulated(
        lambda s: example.build(s, radius), processes=2, workers=2, seed=6, timeout=TIMEOUT
    ) as runs:
        for epoch, (edge_changes, source_changes) in enumerate(epochs):
            for i, (_, h) in enumerate(runs):  # process i feeds its share
                n = len(runs)
                h.edges.update(edge_changes[i::n])
                h.sources.update(source_changes[i::n])
                h.edges.advance_to(epoch + 1)
                h.sources.advance_to(epoch + 1)
            for comp, h in runs:
                await comp.wait_passed(h.output.probe, epoch, timeout=TIMEOUT)
            edges, sources = states(epochs)[epoch]
            want = set(example.within_radius(edges, sources, radius).items())
            shares = [as_set(h.output.contents()) for _, h in runs]
            assert all(shares), "each process should hold part of the answer"
            assert set.union(*shares) == want, f"epoch {epoch}"
            assert sum(map(len, shares)) == len(want), f"epoch {epoch}: a record held by two processes"


# In the root scope: between connected_components and count ---------------------------------------------
class ComponentOf(timely.Vertex):
    """``((node, label), time, diff)`` becomes ``((label, node), time, diff)``, sent at its own time."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        by_time: dict[tuple[int, ...], list[Any]] = {}
        for (node, label), at, diff in records:
            by_time.setdefault(tuple(at), []).append(((label, node), at, diff))
        for at, batch in by_time.items():
            self.send_by(self.outputs[0], batch, at)


def build_sizes(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
    edges = linq.new_input(scope, "edges")
    labels = linq.connected_components(edges.collection)
    relabelled = labels.to_stream().stage("component_of", ComponentOf)
    sizes = linq.Collection.from_stream(relabelled).count(itemgetter(0))  # (label, size)
    return edges, linq.CollectionOutput(sizes)


def component_sizes(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for u, v in edges:
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return set(Counter(find(n) for n in list(parent)).items())


def test_component_sizes_through_a_user_vertex_in_the_root_scope(workers: int) -> None:
    rng = random.Random(11)
    present: set[tuple[int, int]] = set()
    with timely.execute(build_sizes, workers=workers, timeout=TIMEOUT) as (comp, (edges, sizes)):
        previous: set[tuple[int, int]] = set()
        for epoch in range(6):
            gone = rng.sample(sorted(present), min(len(present), 6))
            new = {(rng.randrange(50), rng.randrange(50)) for _ in range(30 if epoch == 0 else 6)} - present
            present.difference_update(gone)
            present.update(new)
            edges.remove_all(gone)
            edges.insert_all(new)
            edges.advance_to(epoch + 1)
            comp.wait_passed(sizes.probe, epoch, timeout=TIMEOUT)
            want = component_sizes(present)
            assert as_set(sizes.contents()) == want, f"epoch {epoch}"
            assert Counter(dict(sizes.changes.get(epoch, []))) == changes_between(previous, want), f"epoch {epoch}"
            assert any(size > 2 for _, size in want)
            previous = want
