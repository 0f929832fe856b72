"""semijoin, antijoin, count_all, enter_at, fixed_point and prioritize over seeded random changes, as a
program for `Mode.run` (tests/linq/test_more_operators_processes.py).

Two inputs change over `EPOCHS` epochs (`linq_reference.random_epochs`): ``a``, pairs of small
ints, and ``b``, small ints. Every process builds the same dataflow, feeds the changes ``i``
with ``i % processes == process_index``, and reports per epoch what its output reported, from a
`linq.CollectionOutput` and from a `linq.ColumnOutput` of the same collection.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

import timely
from tests.support import linq_reference as ref
from tests.support.linq_in_flight import reported, share
from tests.support.modes import Run
from timely_libs import linq

EPOCHS = 8
first, second = itemgetter(0), itemgetter(1)


def inputs(seed: int) -> tuple[list[list[ref.Change]], list[list[ref.Change]]]:
    rng = random.Random(seed)
    a = ref.random_epochs(rng, lambda: (rng.randrange(8), rng.randrange(8)), initial=20, epochs=EPOCHS - 1)
    b = ref.random_epochs(rng, lambda: rng.randrange(8), initial=4, epochs=EPOCHS - 1)
    return a, b


def _self(r: Any) -> Any:
    return r


def _reach(roots: linq.Collection, graph: linq.Collection) -> linq.Collection:
    def body(x: linq.Collection) -> linq.Collection:
        late = roots.enter_at(x.scope, lambda n: 2 * n)
        return x.join(graph.enter(x.scope), _self, first, lambda n, e: e[1]).concat(late).distinct()

    return roots.where(lambda r: False).fixed_point(body)


def query(a: linq.Collection, b: linq.Collection) -> linq.Collection:
    """Every operator under test, tagged, in one collection."""
    semi = a.semijoin(b, first).select(lambda r: ("semi", r))
    anti = a.antijoin(b, second).select(lambda r: ("anti", r))
    total = a.count_all().select(lambda n: ("total", n))
    reach = _reach(b, a).select(lambda n: ("reach", n))
    counted = a.prioritize(second, lambda x: x.count(first)).select(lambda r: ("prioritized_count", r))
    closure = a.fixed_point(lambda y: y.concat(y.join(a.enter(y.scope), second, first, _path)).distinct())
    paths = closure.count(first).select(lambda r: ("paths", r))
    return semi.concat(anti, total, reach, counted, paths)


def _path(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0], y[1])


def reference(a: ref.Multiset, b: ref.Multiset) -> ref.Multiset:
    present = {r for r, n in b.items() if n > 0}
    seen = set(present)
    todo = list(seen)
    while todo:
        n = todo.pop()
        for (x, y), c in a.items():
            if x == n and c > 0 and y not in seen:
                seen.add(y)
                todo.append(y)
    total = sum(a.values())
    return ref.concat(
        {("semi", r): n for r, n in a.items() if r[0] in present},
        {("anti", r): n for r, n in a.items() if r[1] not in present},
        {("total", total): 1} if a else {},
        {("reach", n): 1 for n in seen},
        ref.select(ref.count(a, first), lambda r: ("prioritized_count", r)),
        ref.select(ref.count(ref.closure(r for r, n in a.items() if n > 0), first), lambda r: ("paths", r)),
    )


@dataclass
class OperatorsRun(Run):
    seed: int
    process_index: int
    processes: int
    a: linq.CollectionInput
    b: linq.CollectionInput
    output: linq.CollectionOutput
    columns: linq.ColumnOutput
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        a, b = inputs(self.seed)
        for inp, changes in ((self.a, a[epoch]), (self.b, b[epoch])):
            inp.update(share(changes, self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe, self.columns.probe]

    def result(self, comp: Any = None) -> dict[str, Any]:
        columnar: dict[str, list[Any]] = {}
        for epoch, (cols, diffs) in self.columns.changes.items():
            assert diffs.dtype == np.int64 and all(
                len(c) == len(diffs) for c in (cols if isinstance(cols, tuple) else [cols])
            )
            records = list(zip(*(c.tolist() for c in cols))) if isinstance(cols, tuple) else cols.tolist()
            columnar[str(epoch)] = [[r, d] for r, d in zip(records, diffs.tolist())]
        return {
            "changes": reported(self.output),
            "columns": columnar,
        }


def builder(seed: int) -> Callable[[timely.Scope], OperatorsRun]:
    def build(scope: timely.Scope) -> OperatorsRun:
        a, b = linq.new_input(scope, "a"), linq.new_input(scope, "b")
        result = query(a.collection, b.collection)
        output = linq.CollectionOutput(result, name="result")
        columns = linq.ColumnOutput(result, name="columns")
        return OperatorsRun(seed, scope.process_index, scope.processes, a, b, output, columns)

    return build
