"""Queries over non-integer records (strings, tuples, bytes, None, floats, mixed), in every
process of a cluster, for tests/test_linq_records.py.

    timely run -n 3 tests/linq_records_program.py mixed LAG
    timely run -n 2 tests/linq_records_program.py none

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

Every process prints ``RESULT <json>``: per output, the changes it reported per epoch and
its final contents, each record as its ``repr`` so that types come back exactly (a tuple
stays a tuple, bytes stay bytes, an int stays an int).
"""

from __future__ import annotations

import json
import pathlib
import random
import sys
from collections.abc import Callable
from operator import itemgetter
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import timely
from libs import linq
from tests import linq_reference as ref
from tests.test_linq_algorithms import nx_components, random_epochs

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


def build(scope: timely.Scope) -> tuple[dict[str, linq.CollectionInput], dict[str, linq.CollectionOutput], int, int]:
    ins = {name: linq.new_input(scope, name) for name in inputs()}
    collections = {name: i.collection for name, i in ins.items()}
    outs = {name: linq.CollectionOutput(query(collections), name=name) for name, (query, _) in QUERIES.items()}
    return ins, outs, scope.process_index, scope.processes


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


def run(comp: timely.Computation, built: Any, lag: int) -> dict[str, Any]:
    """Feed this process's share, ``lag`` epochs ahead of the outputs; the JSON-able result."""
    from tests.linq_in_flight import drive

    ins, outs, index, processes = built
    epochs = inputs()
    feeds = {name: _feeder(name, index, processes) for name in epochs}
    names = sorted(epochs)
    per_epoch = [[feeds[n](epochs[n][e]) for n in names] for e in range(EPOCHS)]
    probe = outs["road_components"].probe

    def passed(e: int) -> None:
        for o in outs.values():
            comp.wait_passed(o.probe, e)

    drive(comp, [ins[n] for n in names], per_epoch, probe, passed, lag=lag)
    return {
        name: {
            "changes": {str(e): [[repr(r), d] for r, d in c] for e, c in sorted(o.changes.items())},
            "final": [[repr(r), c] for r, c in o.contents().items()],
        }
        for name, o in outs.items()
    }


NONE_KEYS = [(None, i) for i in range(40)] + [((i, None), "v") for i in range(40)]


def none_keys() -> dict[str, Any]:
    """Records holding None: process 0 adds them in epoch 0, the last process removes them in
    epoch 1. The answer after epoch 1 is empty only if both processes route each record to
    the same worker."""

    def build_none(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput, int, int]:
        inp = linq.new_input(scope, "records")
        return inp, linq.CollectionOutput(inp.collection.distinct()), scope.process_index, scope.processes

    with timely.execute(build_none, timeout=60) as (comp, (inp, out, index, processes)):
        if index == 0:
            inp.insert_all(NONE_KEYS)
        inp.advance_to(1)
        if index == processes - 1:
            inp.remove_all(NONE_KEYS)
        inp.advance_to(2)
        comp.wait_passed(out.probe, 1)
        return {"after_insert": len(out.changes.get(0, [])), "after_remove": sorted(map(repr, out.contents()))}


def main(argv: list[str]) -> None:
    if argv[0] == "none":
        result = none_keys()
    else:
        with timely.execute(build, timeout=120) as (comp, built):
            result = run(comp, built, lag=int(argv[1]))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
