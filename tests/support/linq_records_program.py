"""Queries over non-integer records (strings, tuples, bytes, None, floats, mixed), as programs
for `Mode.run`, for tests/linq/test_records.py: `records` (the queries below) and `none_keys`.

Inputs (each a seeded random sequence of epochs of additions and retractions, the same in
every process):

- ``words``: strings; every process feeds its share.
- ``people``: ``(name, (city, country))``; fed by process 0 alone.
- ``cities``: ``((city, country), population)``; fed by the last process alone, so a join
  of people with cities matches records that were fed in different processes: keys must be
  routed (and any dictionary encoding of them must agree) across processes.
- ``mixed``: records of mixed types (ints, strings, bytes, None, floats, tuples of those);
  every process feeds its share.
- ``roads``: ``((city, country), (city, country))`` edges; every process feeds its share.

A process's result: per output, the changes it reported per epoch and its final contents, each
record as its ``repr`` so that types come back exactly (a tuple stays a tuple, bytes stay
bytes, an int stays an int).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import timely
from tests.support import linq_reference as ref
from tests.support.linq_reference import nx_components, random_epochs
from tests.support.modes import Run
from timely_libs import linq

EPOCHS = 8
first = itemgetter(0)
second = itemgetter(1)

CITIES = [(c, k) for c in ("Oslo", "Lima", "Pune", "Åbo", "Zürich", "Ōsaka") for k in ("no", "pe", "in")]
NAMES = ["ann", "bo", "cy", "dé", "eve", "fay", "gus", "hü"]
WORDS = ["", "a", "ab", "naïve", "日本", "a b", "A", "ab\x00", "🙂"]
ATOMS: list[Any] = [0, -1, 7, 2**40, "x", "y", "", b"x", b"", 0.5, -2.5, ("x", 1), (b"y", ()), ("x", (1, "z"))]
MIXED: list[Any] = ATOMS + [(a, b) for a in ATOMS[::2] for b in ATOMS[1::3]]
"""No two of these are equal (no ``1`` beside ``1.0``): mixed types, unorderable together.
None is left out here: see `none_keys`."""


def inputs() -> dict[str, list[list[tuple[Any, int]]]]:
    """Each input's epochs of changes."""
    rng = random.Random(11)
    return {
        "words": random_epochs(rng, lambda: rng.choice(WORDS), 30, EPOCHS - 1, per_epoch=6),
        "people": random_epochs(rng, lambda: (rng.choice(NAMES), rng.choice(CITIES)), 12, EPOCHS - 1),
        "cities": random_epochs(rng, lambda: (rng.choice(CITIES), rng.randrange(1, 4) * 100), 10, EPOCHS - 1),
        "mixed": _picked(random_epochs(rng, lambda: rng.randrange(len(MIXED)), 40, EPOCHS - 1, per_epoch=6)),
        "roads": random_epochs(rng, lambda: (rng.choice(CITIES), rng.choice(CITIES)), 14, EPOCHS - 1),
    }


def _picked(epochs: list[list[tuple[int, int]]]) -> list[list[tuple[Any, int]]]:
    """Epochs of changes to indices into `MIXED` as changes to its records (the records
    themselves cannot be sorted, which the epoch generator does)."""
    return [[(MIXED[i], d) for i, d in changes] for changes in epochs]


def _feeder(name: str, index: int, processes: int) -> Callable[[list[Any]], list[Any]]:
    """What of each epoch's changes to ``name`` process ``index`` feeds."""
    if name == "people":
        return lambda changes: changes if index == 0 else []
    if name == "cities":
        return lambda changes: changes if index == processes - 1 else []
    return lambda changes: changes[index::processes]


def _population(person: Any, city: Any) -> Any:
    return (person[0], person[1], city[1])


def _kind(record: Any) -> str:
    return type(record).__name__


# output name -> (query over the collections, reference over the multisets)
QUERIES: dict[str, tuple[Callable[..., linq.Collection], Callable[..., ref.Multiset]]] = {
    "word_counts": (lambda c: c["words"].count(), lambda s: ref.count(s["words"])),
    "populations": (
        lambda c: c["people"].join(c["cities"], second, first, _population),
        lambda s: ref.join(s["people"], s["cities"], second, first, _population),
    ),
    "mixed_distinct": (lambda c: c["mixed"].distinct(), lambda s: ref.distinct(s["mixed"])),
    "mixed_by_type": (lambda c: c["mixed"].count(_kind), lambda s: ref.count(s["mixed"], _kind)),
    "mixed_self_join": (
        lambda c: c["mixed"].join(c["mixed"], repr, repr, lambda a, b: (a, b)),
        lambda s: ref.join(s["mixed"], s["mixed"], repr, repr, lambda a, b: (a, b)),
    ),
    "road_components": (lambda c: linq.connected_components(c["roads"]), lambda s: nx_components(s["roads"])),
}


class RecordsRun(Run):
    """Feeds this process's share of every input, epoch by epoch; reports every output."""

    epochs = EPOCHS

    def __init__(self, scope: timely.Scope) -> None:
        self.inputs = {name: linq.new_input(scope, name) for name in inputs()}
        collections = {name: i.collection for name, i in self.inputs.items()}
        self.outputs = {
            name: linq.CollectionOutput(query(collections), name=name) for name, (query, _) in QUERIES.items()
        }
        self.data = inputs()
        self.feeds = {name: _feeder(name, scope.process_index, scope.processes) for name in self.data}

    def feed(self, epoch: int) -> None:
        for name in sorted(self.data):
            changes = self.feeds[name](self.data[name][epoch])
            if changes:
                self.inputs[name].update(changes)
            self.inputs[name].advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [o.probe for o in self.outputs.values()]

    def result(self, comp: Any) -> dict[str, Any]:
        return {
            name: {
                "changes": {str(e): [[repr(r), d] for r, d in c] for e, c in sorted(o.changes.items())},
                "final": [[repr(r), c] for r, c in o.contents().items()],
            }
            for name, o in self.outputs.items()
        }


def records() -> Callable[[timely.Scope], RecordsRun]:
    """The queries over the mixed records (for `Mode.run`)."""
    return RecordsRun


def expected() -> dict[str, list[ref.Multiset]]:
    """Per output, the reference answer after each epoch."""
    epochs = inputs()
    states: dict[str, ref.Multiset] = {name: {} for name in epochs}
    out: dict[str, list[ref.Multiset]] = {name: [] for name in QUERIES}
    for e in range(EPOCHS):
        for name, changes in epochs.items():
            states[name] = ref.apply(states[name], changes[e])
        for name, (_, reference) in QUERIES.items():
            out[name].append(reference(states))
    return out


NONE_KEYS = [(None, i) for i in range(40)] + [((i, None), "v") for i in range(40)]


class NoneRun(Run):
    """Records holding None: process 0 adds them in epoch 0, the last process removes them in
    epoch 1. The answer after epoch 1 is empty only if both processes route each record to the
    same worker."""

    epochs = 2

    def __init__(self, scope: timely.Scope) -> None:
        self.input = linq.new_input(scope, "records")
        self.output = linq.CollectionOutput(self.input.collection.distinct())
        self.index, self.processes = scope.process_index, scope.processes
        self.after_remove: list[str] = []

    def feed(self, epoch: int) -> None:
        if epoch == 0 and self.index == 0:
            self.input.insert_all(NONE_KEYS)
        if epoch == 1 and self.index == self.processes - 1:
            self.input.remove_all(NONE_KEYS)
        self.input.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def observe(self, epoch: int) -> None:
        if epoch == 1:
            self.after_remove = sorted(map(repr, self.output.contents()))

    def result(self, comp: Any) -> dict[str, Any]:
        return {"after_insert": len(self.output.changes.get(0, [])), "after_remove": self.after_remove}


def none_keys() -> Callable[[timely.Scope], NoneRun]:
    """Records holding None, added by one process and removed by another (for `Mode.run`)."""
    return NoneRun
