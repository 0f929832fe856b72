"""`Propagate`'s compaction with one worker: at the step that finishes an epoch, with no
end-of-epoch notification of its own (`Propagate._alone`), against NetworkX.

Shortest paths and connected components (labels entering at several iterations) run epochs of
one real edge change each, waited for one at a time or all fed at once (several epochs in
flight, one step per notification, so that a later epoch's step may run while an earlier
epoch still has work staged, which must hold compaction back), with the compaction at the step
and with the compaction every other stateful operator in a loop does (`_alone` forced off): from
the input frontier, read when a later epoch's records arrive (`Stateful.catch_up`). Every
epoch's answer, accumulated from what the output reported, must be NetworkX's. Neither asks for
an end-of-epoch notification (but the frontier's with epochs in flight, where it asks for the
end of the latest epoch, once, lest nothing read the frontier after that epoch's last records),
and the arrangements must actually have been compacted: at the
step, past every epoch once the last is answered, and, when epochs are waited for, to the next
epoch as soon as each one is answered; from the frontier, to each epoch once its records came.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq
from timely_libs.linq._lattice import FAR
from timely_libs.linq.propagate import _operator

EPOCHS = 30


def _changes(rng: random.Random, new: Callable[[], Any], initial: int) -> list[list[ref.Change]]:
    """A first epoch of ``initial`` edges, then one real change an epoch: a present edge
    deleted, a new one inserted, in turn."""
    present = [new() for _ in range(initial)]
    out: list[list[ref.Change]] = [[(e, 1) for e in present]]
    for i in range(EPOCHS):
        if i % 2 == 0:
            edge = present.pop(rng.randrange(len(present)))
            out.append([(edge, -1)])
        else:
            edge = new()
            present.append(edge)
            out.append([(edge, 1)])
    return out


def _instances(patch: pytest.MonkeyPatch) -> tuple[list[_operator.Propagate], list[tuple[int, ...]]]:
    """The `Propagate` vertices made from now on, and the times of their notifications."""
    made: list[_operator.Propagate] = []
    notified: list[tuple[int, ...]] = []
    init, on_notify = _operator.Propagate.__init__, _operator.Propagate.on_notify

    def recording(self: _operator.Propagate, *args: Any) -> None:
        init(self, *args)
        made.append(self)

    def noting(self: _operator.Propagate, time: timely.Timestamp) -> None:
        notified.append(tuple(time))
        on_notify(self, time)

    patch.setattr(_operator.Propagate, "__init__", recording)
    patch.setattr(_operator.Propagate, "on_notify", noting)
    return made, notified


def _run(
    patch: pytest.MonkeyPatch,
    query: Callable[..., linq.Collection],
    reference: Callable[..., ref.Multiset],
    epochs: list[tuple[list[ref.Change], ...]],
    at_step: bool,
    in_flight: bool,
) -> None:
    made, notified = _instances(patch)
    if in_flight:  # a step per notification: a later epoch's step may then run before an earlier epoch's last
        patch.setattr(_operator, "ITERATE_SECONDS", 0.0)
    if not at_step:
        patch.setattr(_operator.Propagate, "_alone", lambda self: False)
    n = len(epochs[0])

    def build(scope: timely.Scope) -> tuple[list[linq.CollectionInput], linq.CollectionOutput]:
        inputs = [linq.new_input(scope, f"in{i}") for i in range(n)]
        return inputs, linq.CollectionOutput(query(*(i.collection for i in inputs)))

    with timely.execute(build, workers=1, timeout=TIMEOUT) as (comp, (inputs, out)):
        (vertex,) = made
        for epoch, changes in enumerate(epochs):
            for inp, batch in zip(inputs, changes):
                if batch:
                    inp.update(batch)
                inp.advance_to(epoch + 1)
            if not in_flight:
                comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
                compacted = [s.epoch for s in (vertex.edges, vertex.proposals, vertex.labels)]
                if at_step:  # the epoch's own step compacted the arrangements to the next epoch
                    assert compacted == [epoch + 1] * 3
                else:  # the epoch's first records found the one before complete
                    assert compacted == [epoch] * 3
        comp.wait_passed(out.probe, len(epochs) - 1, timeout=TIMEOUT)
        last = len(epochs)
        if at_step:
            assert [s.epoch for s in (vertex.edges, vertex.proposals, vertex.labels)] == [last] * 3
        changes_at = {e: list(c) for e, c in out.changes.items()}
    states: list[ref.Multiset] = [{} for _ in range(n)]
    got: ref.Multiset = {}
    for epoch, changes in enumerate(epochs):
        states = [ref.apply(s, c) for s, c in zip(states, changes)]
        got = ref.apply(got, changes_at.get(epoch, []))
        assert got == reference(*states), f"epoch {epoch}: {ref.difference(reference(*states), got)} missing"
    ends = sorted(t[0] for t in notified if t[1] == FAR)  # end-of-epoch notifications
    if at_step or not in_flight:
        assert ends == [], ends
    else:  # epochs overlapped: an end-of-epoch notification at most once an epoch (`Stateful.catch_up`)
        assert len(ends) == len(set(ends)) and len(ends) < len(epochs), ends


MODES = [(True, False), (True, True), (False, False), (False, True)]
IDS = ["step-waited", "step-in-flight", "frontier-waited", "frontier-in-flight"]


@pytest.mark.parametrize(("at_step", "in_flight"), MODES, ids=IDS)
def test_shortest_paths(monkeypatch: pytest.MonkeyPatch, at_step: bool, in_flight: bool) -> None:
    rng = random.Random(31)
    nodes = 40
    edges = _changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9)), 120)
    sources: list[list[ref.Change]] = [[(0, 1)]] + [[] for _ in range(EPOCHS)]
    epochs: list[tuple[list[ref.Change], ...]] = list(zip(edges, sources))
    _run(monkeypatch, linq.shortest_paths, ref.nx_shortest_paths, epochs, at_step, in_flight)


@pytest.mark.parametrize(("at_step", "in_flight"), MODES, ids=IDS)
def test_connected_components(monkeypatch: pytest.MonkeyPatch, at_step: bool, in_flight: bool) -> None:
    rng = random.Random(32)
    nodes = 60
    edges = _changes(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), 70)
    _run(monkeypatch, linq.connected_components, ref.nx_components, [(e,) for e in edges], at_step, in_flight)
