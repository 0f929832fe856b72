"""Shared arrangements (`Collection.arrange`): one arrangement, several joins reading it.

Each join against an `Arranged` must give what a plain join gives (the brute-force reference
of tests/support/linq_reference.py), epoch after epoch, however many joins read the arrangement and
whatever the interleaving of their inputs with the arrangement's batches; inside a loop too.
The arrangement is built once: the dataflow has one arrange stage, not one per join.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import timely
from tests.support import TIMEOUT
from tests.support import linq_reference as ref
from tests.support.linq_harness import Epochs, check, together
from timely_libs import linq

WORKERS = pytest.mark.parametrize("workers", [1, 3], ids=["w1", "w3"])
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pairs = st.tuples(st.integers(0, 3), st.integers(0, 5))
first = itemgetter(0)
second = itemgetter(1)


def _tagged(tag: str) -> Callable[[Any, Any], Any]:
    return lambda a, b: (tag, a, b)


@WORKERS
@FAST
@given(a=ref.signed_epochs(pairs), b=ref.signed_epochs(pairs))
def test_two_joins_read_one_arrangement(workers: int, a: Epochs, b: Epochs) -> None:
    def query(x: linq.Collection, y: linq.Collection) -> linq.Collection:
        arranged = y.arrange(first)
        by_first = x.join(arranged, first, None, _tagged("first"))
        by_second = x.join(arranged, second, None, _tagged("second"))
        return by_first.concat(by_second)

    def reference(x: ref.Multiset, y: ref.Multiset) -> ref.Multiset:
        return ref.concat(
            ref.join(x, y, first, first, _tagged("first")), ref.join(x, y, second, first, _tagged("second"))
        )

    check(query, reference, together(a, b), workers)


@WORKERS
@FAST
@given(a=ref.signed_epochs(pairs), b=ref.signed_epochs(pairs))
def test_join_against_an_arrangement_equals_a_plain_join(workers: int, a: Epochs, b: Epochs) -> None:
    check(
        lambda x, y: x.join(y.arrange(second), first, None, linq.columns(lambda p, q, r, s: (p, q, r))),
        lambda x, y: ref.join(x, y, first, second, lambda p, q: (p[0], p[1], q[0])),
        together(a, b),
        workers,
    )


@WORKERS
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=ref.nonnegative_epochs(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_epochs=4, max_changes=6))
def test_an_arrangement_inside_a_loop(workers: int, e: Epochs) -> None:
    """Transitive closure, the edges arranged once inside the loop and joined twice."""

    def step(x: linq.Collection, edges: linq.Collection) -> linq.Collection:
        arranged = edges.arrange(first)
        forward = x.join(arranged, second, None, lambda p, f: (p[0], f[1]))
        again = forward.join(arranged, second, None, lambda p, f: (p[0], f[1]))
        return forward.concat(again, edges).distinct()

    def ref_step(x: ref.Multiset, edges: ref.Multiset) -> ref.Multiset:
        forward = ref.join(x, edges, second, first, lambda p, f: (p[0], f[1]))
        again = ref.join(forward, edges, second, first, lambda p, f: (p[0], f[1]))
        return ref.distinct(ref.concat(forward, again, edges))

    check(
        lambda c: c.fixed_point(lambda x: step(x, c.enter(x.scope))),
        lambda c: ref.fixed_point(c, lambda x: ref_step(x, c)),
        together(e),
        workers,
    )


def test_the_arrangement_is_built_once() -> None:
    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        a = linq.new_input(scope, "a")
        arranged = a.collection.arrange(first, name="shared")
        joins = [a.collection.join(arranged, first, None, _tagged(str(i))) for i in range(3)]
        return a, linq.CollectionOutput(joins[0].concat(*joins[1:]))

    with timely.execute(build, workers=2, timeout=TIMEOUT) as (comp, (a, out)):
        a.insert_all([(1, 2), (1, 3)])
        a.advance_to(1)
        comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
        assert len(out.contents()) == 3 * 4
        names = [s.name for s in comp.graph.stages]
        assert names.count("shared") == 1
        shared = [cast(Any, v).shared for v in comp.vertices("shared")]
        assert all(s.received == [s.seq] * 3 and not s.pending for s in shared), "a batch not settled"


def test_a_join_against_an_arrangement_takes_no_second_key() -> None:
    def build(scope: timely.Scope) -> None:
        a = linq.new_input(scope, "a")
        arranged = a.collection.arrange(first)
        a.collection.join(arranged, first, second, _tagged("x"))

    with pytest.raises(ValueError, match="key2=None"):
        with timely.execute(build, timeout=TIMEOUT):
            pass
