"""`Propagate`'s join for a few rows in Python values (`propagate._proposals`), against brute
force and against the column form of `Propagate._join` on the same batches.

An update's join meets one or two changed rows (edges, or a node's new labels) with the rows
of their keys in the other arrangement, at several times. Whatever the rows, the proposals
must be, per joined time, every pair's ``(destination, label [+ weight], product of diffs)``,
summed: the reference is a nested loop over the rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_libs.linq._trace import Batch, Rows, Spine
from timely_libs.linq.propagate import _operator, _proposals
from timely_libs.linq.propagate._operator import Propagate

Time = tuple[int, ...]
Row = tuple[int, tuple[int, ...], Time, int]
"""``(key, values, time, diff)``."""
Proposals = dict[tuple[Time, int, int], int]
"""``(joined time, destination, label)`` to its summed diff."""

KEYS = [2, 5, 9]
NTIMES = 3


def _rows(rows: Sequence[Row], nvals: int) -> Rows:
    return Rows(
        np.array([r[0] for r in rows], dtype=np.int64),
        [np.array([r[1][i] for r in rows], dtype=np.int64) for i in range(nvals)],
        [np.array([r[2][i] for r in rows], dtype=np.int64) for i in range(NTIMES)],
        np.array([r[3] for r in rows], dtype=np.int64),
    )


def _spine(rows: Sequence[Row], nvals: int, cuts: Sequence[int]) -> Spine:
    """``rows`` as a spine of several batches (cut at ``cuts``)."""
    spine = Spine(nvals, NTIMES)
    bounds = sorted({0, len(rows), *(c % (len(rows) + 1) for c in cuts)})
    for lo, hi in pairwise(bounds):
        spine.insert(Batch(_rows(rows[lo:hi], nvals)))
    return spine


def _summed(found: Any) -> Proposals:
    out: Counter[tuple[Time, int, int]] = Counter()
    for time, parts in found.items():
        for dst, label, diffs in parts:
            for d, lab, n in zip(dst.tolist(), label.tolist(), diffs.tolist()):
                out[(time, d, lab)] += n
    return {k: n for k, n in out.items() if n}


def _brute_force(delta: Sequence[Row], arranged: Sequence[Row], edges_first: bool, weighted: bool) -> Proposals:
    out: Counter[tuple[Time, int, int]] = Counter()
    for k, mine, at, d in delta:
        for j, theirs, when, e in arranged:
            if j != k:
                continue
            edge, label = (mine, theirs[0]) if edges_first else (theirs, mine[0])
            time = tuple(max(a, b) for a, b in zip(at, when))
            out[(time, edge[0], label + edge[1] if weighted else label)] += d * e
    return {k: n for k, n in out.items() if n}


class _Sent:
    """What `Propagate._join` needs of its vertex, recording what it sends."""

    def __init__(self, weighted: bool) -> None:
        self.weighted = weighted
        self.op = "test"
        self.sent: dict[Time, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    _join_summed = Propagate._join_summed

    def _send(self, out: dict[Time, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]) -> None:
        for u, parts in out.items():
            self.sent.setdefault(u, []).extend(parts)


@st.composite
def joins(draw: st.DrawFn) -> tuple[list[Row], list[Row], bool, bool, list[int]]:
    """A delta of a few rows at one or two times, the other arrangement's rows, which side is
    the edges, whether weighted, and where the arrangement is cut into batches."""
    weighted = draw(st.booleans())
    edges_first = draw(st.booleans())
    time = st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 6))
    edge = st.tuples(st.integers(0, 30), st.integers(0, 9)) if weighted else st.tuples(st.integers(0, 30))
    label = st.tuples(st.integers(0, 50))
    diff = st.sampled_from([1, 1, -1, 2])
    times = draw(st.lists(time, min_size=1, max_size=2))
    delta_vals, arranged_vals = (edge, label) if edges_first else (label, edge)
    delta: list[Row] = draw(
        st.lists(st.tuples(st.sampled_from(KEYS), delta_vals, st.sampled_from(times), diff), min_size=1, max_size=4)
    )
    arranged: list[Row] = draw(st.lists(st.tuples(st.sampled_from(KEYS), arranged_vals, time, diff), max_size=40))
    cuts = draw(st.lists(st.integers(0, 40), max_size=4))
    return delta, arranged, edges_first, weighted, cuts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=joins())
def test_a_few_rows_propose_what_every_pair_of_rows_proposes(case: Any) -> None:
    """The Python form, the two column forms of `Propagate._join` (the Python form turned off:
    all times summed at once, and time by time) and a nested loop agree on every proposal, per
    joined time."""
    delta_rows, arranged, edges_first, weighted, cuts = case
    nvals_delta, nvals_spine = (2 if weighted else 1, 1) if edges_first else (1, 2 if weighted else 1)
    delta = Batch(_rows(delta_rows, nvals_delta))
    spine = _spine(arranged, nvals_spine, cuts)
    want = _brute_force(delta_rows, arranged, edges_first, weighted)
    few = _proposals.few_proposals(delta, spine.batches(), edges_first, weighted)
    assert few is not None
    assert _summed(few) == want
    if not len(delta):  # the rows cancelled: the operator joins no empty delta
        return
    for summed_below in (_operator.JOIN_SUMMED_BELOW, 0):  # the summed join of all times, then per time
        columns = _Sent(weighted)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_operator, "few_proposals", lambda *args: None)
            patch.setattr(_operator, "JOIN_SUMMED_BELOW", summed_below)
            Propagate._join(columns, delta, spine, edges_first)  # type: ignore[arg-type]
        assert _summed(columns.sent) == want, summed_below


def test_a_key_with_more_pairs_than_a_few_takes_the_column_form() -> None:
    hub = [(2, (i, 1), (0, 0, 0), 1) for i in range(_proposals.FEW_PAIRS + 1)]
    edges = _spine(hub, 2, [])
    labels = Batch(_rows([(2, (7,), (1, 0, 0), 1)], 1))
    assert _proposals.few_proposals(labels, edges.batches(), edges_first=False, weighted=True) is None
    assert _proposals.few_proposals(labels, _spine(hub[:-1], 2, []).batches(), False, True) is not None


def test_a_weighted_label_that_is_not_an_int_takes_the_column_form() -> None:
    from timely_libs.linq._columns._codes import codes_of_values

    code = int(codes_of_values(["far"], 1)[0])
    labels = _spine([(2, (code,), (0, 0, 0), 1)], 1, [])
    edge = Batch(_rows([(2, (3, 1), (1, 0, 0), 1)], 2))
    assert _proposals.few_proposals(edge, labels.batches(), edges_first=True, weighted=True) is None
    assert _proposals.few_proposals(edge, labels.batches(), edges_first=True, weighted=False) is not None
