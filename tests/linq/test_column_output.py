"""`linq.ColumnOutput`: each epoch's changes as numpy columns, against a from-scratch
recomputation and against `linq.CollectionOutput` of the same collection."""

from __future__ import annotations

import random
from operator import itemgetter
from typing import Any

import numpy as np
import pytest

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from timely_libs import linq

first = itemgetter(0)


def records_of(columns: Any) -> list[Any]:
    if isinstance(columns, tuple):
        return list(zip(*(c.tolist() for c in columns)))
    return columns.tolist()  # type: ignore[no-any-return]


def as_multiset(columns: Any, diffs: np.ndarray) -> ref.Multiset:
    records = records_of(columns)
    assert len(set(records)) == len(records), "unconsolidated: a record twice"
    assert 0 not in diffs.tolist(), "a zero diff"
    return dict(zip(records, diffs.tolist()))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_column_output_reports_each_epochs_changes(workers: int, seed: int) -> None:
    """Per epoch, (node, degree) changes of a random graph: int64 columns, consolidated, equal to
    the change of a recomputation; ``contents`` the accumulation; ``on_change`` sees the same."""
    rng = random.Random(seed)
    epochs = ref.random_epochs(rng, lambda: (rng.randrange(30), rng.randrange(30)), initial=200, per_epoch=20)
    called: dict[int, ref.Multiset] = {}

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.ColumnOutput, linq.CollectionOutput]:
        edges = linq.new_input(scope, "edges")
        degrees = edges.collection.count(first)
        columns = linq.ColumnOutput(degrees, on_change=lambda e, c, d: called.__setitem__(e, as_multiset(c, d)))
        return edges, columns, linq.CollectionOutput(degrees)

    state: ref.Multiset = {}
    previous: ref.Multiset = {}
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (edges, columns, plain)):
        for epoch, changes in enumerate(epochs):
            edges.update(changes)
            edges.advance_to(epoch + 1)
            comp.wait_passed(columns.probe, epoch, timeout=TIMEOUT)
            assert columns.passed(epoch)
            state = ref.apply(state, changes)
            expected = ref.count(state, first)
            change = ref.difference(expected, previous)
            if change:
                cols, diffs = columns.changes[epoch]
                assert isinstance(cols, tuple) and [c.dtype for c in cols] == [np.int64, np.int64]
                assert as_multiset(cols, diffs) == change
                assert called[epoch] == change
            else:
                assert epoch not in columns.changes
            assert as_multiset(*columns.contents()) == expected
            comp.wait_passed(plain.probe, epoch, timeout=TIMEOUT)
            assert plain.contents() == expected
            previous = expected


def test_column_output_of_scalars_and_of_mixed_records() -> None:
    """Scalar records come out as one column (strings: an object column of the values); records
    of different shapes in one epoch as one object column of the records."""

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.ColumnOutput]:
        inp = linq.new_input(scope)
        return inp, linq.ColumnOutput(inp.collection)

    with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, out)):
        inp.insert_all(["b", "a", "b"])
        inp.advance_to(1)
        inp.update([("a", -1), (3, 1), ((1, 2), 1)])
        inp.advance_to(2)
        comp.wait_passed(out.probe, 1, timeout=TIMEOUT)
    cols, diffs = out.changes[0]
    assert isinstance(cols, np.ndarray) and cols.dtype == object
    assert as_multiset(cols, diffs) == {"a": 1, "b": 2}
    cols, diffs = out.changes[1]
    assert as_multiset(cols, diffs) == {"a": -1, 3: 1, (1, 2): 1}
    assert as_multiset(*out.contents()) == {"b": 2, 3: 1, (1, 2): 1}


def test_column_output_refuses_a_collection_inside_a_loop() -> None:
    def body(x: linq.Collection) -> linq.Collection:
        linq.ColumnOutput(x)
        return x

    def build(scope: timely.Scope) -> None:
        linq.new_input(scope).collection.fixed_point(body)

    with pytest.raises(ValueError, match="root scope"):
        with timely.execute(build, timeout=TIMEOUT):
            pass
