"""`Propagate`'s step in one compiled call (`propagate._line.line_step`, through
`_operator._stepped`), and its changes' join with the edges (`_line.line_join`), against
the forms they replace and against brute force.

On random histories of a few keys (proposals and labels at times ``(epoch, outer,
iteration)``, some off ``t``'s line, spread over several batches): the changes must be those
of the column form on the rows `split_line` keeps, the labels after them exactly the least
positive proposal at every time of the line (summed from the rows in the product order), and
the keys to evaluate again those `later_keys` finds, at the join of each off-line row's time
with ``t``.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.linq.test_least import (
    KEYS,
    _accumulated,
    _le,
    _least_positive,
    _spine,
    assert_as_the_column_form,
    histories,
)
from timely_libs.linq import OperatorError
from timely_libs.linq._columns import _kernels, values_of
from timely_libs.linq._trace import Batch, Rows, Spine
from timely_libs.linq.propagate import _operator


@pytest.fixture(autouse=True)
def _eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled loops count as loaded (`linq.preload`), so the policy lets the step run."""
    monkeypatch.setattr(_kernels.POLICY, "eager", True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), cuts=st.lists(st.integers(0, 80), max_size=6))
@example(history=([(3, 4, (0, 0, 0), 1)], [(3, 0, (0, 0, 0), 1), (7, 0, (1, 1, 0), 1)], (0, 0, 0)), cuts=[1])
@example(history=([(3, 5, (0, 0, 3), 1), (3, 2, (0, 0, 5), 1)], [(3, 9, (0, 0, 1), 1)], (0, 0, 0)), cuts=[])
def test_a_step_changes_labels_as_the_column_form_and_brute_force_say(history: Any, cuts: list[int]) -> None:
    proposals, labels, t = history
    keys = np.array(KEYS, dtype=np.int64)
    p_spine, l_spine = _spine(proposals, cuts), _spine(labels, cuts[::-1])
    stepped = _operator._stepped(p_spine, l_spine, keys, t, "test")
    if stepped is None:  # nothing arranged on one side: the general forms take it
        assert not p_spine.batches() or not l_spine.batches()
        return
    changes, later, matrix = stepped
    assert matrix.tolist() == [
        changes.keys.tolist(),
        changes.vals[0].tolist(),
        changes.times[-1].tolist(),
        changes.diffs.tolist(),
    ]
    assert_in_batch_order(changes)
    assert_as_the_column_form(changes, later, p_spine, l_spine, keys, t)
    # brute force: after the changes, one label at each time of the line, the least positive proposal
    added = [
        (k, v, tuple(c[i] for c in changes.times), d)
        for i, (k, v, d) in enumerate(zip(changes.keys.tolist(), values_of(changes.vals[0]), changes.diffs.tolist()))
    ]
    assert all(time[:-1] == t[:-1] and time[-1] >= t[-1] for _, _, time, _ in added)
    after = [*labels, *added]
    line = {t[-1]} | {max(r[2][-1], t[-1]) for r in [*proposals, *labels] if _le(r[2][:-1], t[:-1])}
    for key in KEYS:
        for x in sorted(line):
            at = (*t[:-1], x)
            best = _least_positive(proposals, key, at)
            assert _accumulated(after, key, at) == ({} if best is None else {best: 1}), (key, at)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(70, 200), labels=st.integers(1, 80))
def test_a_key_of_many_rows_changes_labels_as_the_column_form_says(seed: int, rows: int, labels: int) -> None:
    """Keys whose rows on the line are more than `_line.ORDER_BELOW` are ordered by numpy's
    sort, not by insertion: the same changes either way."""
    from timely_libs.linq.propagate._line import ORDER_BELOW

    rng = np.random.default_rng(seed)
    t = (1, 1, int(rng.integers(0, 4)))

    def history(n: int) -> list[Any]:
        return [
            (
                int(rng.choice(KEYS[:2])),
                int(rng.integers(0, labels)),
                (int(rng.integers(0, 2)), int(rng.integers(0, 2)), int(rng.integers(0, 12))),
                1,
            )
            for _ in range(n)
        ]

    proposals, held = history(rows), history(rows // 3)
    keys = np.array(KEYS, dtype=np.int64)
    cuts = rng.integers(0, rows, size=3).tolist()
    p_spine, l_spine = _spine(proposals, cuts), _spine(held, cuts)
    stepped = _operator._stepped(p_spine, l_spine, keys, t, "test")
    assert stepped is not None
    assert_in_batch_order(stepped[0])
    assert rows // 2 > ORDER_BELOW  # one of the two keys has more rows than the insertion order takes
    assert_as_the_column_form(*stepped[:2], p_spine, l_spine, keys, t)


def assert_in_batch_order(changes: Batch) -> None:
    """The step's batch, taken as it came, is the batch its rows make once sorted and summed."""
    again = Batch(Rows(changes.keys.copy(), [changes.vals[0].copy()], [c.copy() for c in changes.times], changes.diffs))
    for mine, theirs in zip(
        [changes.keys, changes.vals[0], *changes.times, changes.diffs, changes.ukeys, changes.starts],
        [again.keys, again.vals[0], *again.times, again.diffs, again.ukeys, again.starts],
        strict=True,
    ):
        assert mine.tolist() == theirs.tolist()
    assert changes.latest == again.latest


def test_a_negative_count_of_a_proposal_at_t_is_an_error() -> None:
    proposals = [(3, 5, (0, 0, 1), 1), (3, 5, (0, 0, 2), -2), (3, 9, (0, 0, 0), 1)]
    p_spine, l_spine = _spine(proposals, [1]), _spine([(3, 9, (0, 0, 0), 1)], [])
    with pytest.raises(OperatorError, match="label 5 of node 3 has multiplicity -1"):
        _operator._stepped(p_spine, l_spine, np.array([3], dtype=np.int64), (0, 0, 2), "test")


def test_labels_that_are_not_ints_take_the_general_forms() -> None:
    p_spine = _spine([(3, "a", (0, 0, 0), 1)], [])
    l_spine = _spine([(3, "a", (0, 0, 0), 1)], [])
    assert _operator._stepped(p_spine, l_spine, np.array([3], dtype=np.int64), (0, 0, 0), "test") is None


def test_a_hub_key_takes_the_general_forms() -> None:
    """A key with more rows on the line than `MAX_KEY_ROWS` is left to the column form."""
    from timely_libs.linq.propagate._line import MAX_KEY_ROWS

    keys = np.array([3], dtype=np.int64)
    l_spine = _spine([(3, 0, (0, 0, 0), 1)], [])
    few = [(3, label, (0, 0, 0), 1) for label in range(MAX_KEY_ROWS - 1)]
    assert _operator._stepped(_spine(few, []), l_spine, keys, (0, 0, 0), "test") is not None
    many = [(3, label, (0, 0, 0), 1) for label in range(MAX_KEY_ROWS + 1)]
    assert _operator._stepped(_spine(many, []), l_spine, keys, (0, 0, 0), "test") is None


def _edge_spine(rows: list[tuple[int, int, int, tuple[int, ...], int]], weighted: bool, cuts: list[int]) -> Spine:
    """Edges ``(src, dst, weight, time, diff)`` arranged by source in several batches."""
    spine = Spine(2 if weighted else 1, 3)
    bounds = sorted({0, len(rows), *(c % (len(rows) + 1) for c in cuts)})
    for lo, hi in pairwise(bounds):
        part = rows[lo:hi]
        cols = [np.array([r[i] for r in part], dtype=np.int64) for i in range(3)]
        times = [np.array([r[3][c] for r in part], dtype=np.int64) for c in range(3)]
        vals = cols[1:] if weighted else cols[1:2]
        spine.insert(Batch(Rows(cols[0], vals, times, np.array([r[4] for r in part], dtype=np.int64))))
    return spine


edge_rows = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.integers(0, 9),
        st.integers(0, 5),
        st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 9)),
        st.sampled_from([1, 1, -1, 2]),
    ),
    max_size=40,
)
change_rows = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(-3, 40), st.integers(0, 12), st.sampled_from([1, -1])), max_size=20
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edges=edge_rows,
    changes=change_rows,
    t=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 9)),
    weighted=st.booleans(),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_a_steps_changes_meet_the_edges_as_brute_force_says(
    edges: list[Any], changes: list[Any], t: tuple[int, int, int], weighted: bool, cuts: list[int]
) -> None:
    """Each (change, edge) pair proposes the change's label (plus the weight) to the edge's
    destination at the join of the two times, with the product of the diffs: summed, the
    pairs are the brute-force sum over every pair, whichever batches hold the edges."""
    from timely_libs.linq._columns import PAIRS
    from timely_libs.linq._trace._reader import address_table
    from timely_libs.linq.propagate._line import line_join

    changes = sorted((k, label, max(x, t[-1]), d) for k, label, x, d in changes)
    matrix = np.array(changes, dtype=np.int64).reshape(len(changes), 4).T.copy()
    spine = _edge_spine(edges, weighted, cuts)
    if not spine.batches():
        return
    pairs, status = line_join(matrix, address_table(spine.batches()), np.array(t, dtype=np.int64), spine.nvals, PAIRS)
    assert status == 0
    got: Counter[tuple[Any, ...]] = Counter()
    for *time, dst, label, d in pairs.T.tolist():
        got[(*time, dst, label)] += d
    want: Counter[tuple[Any, ...]] = Counter()
    for k, label, x, d in changes:
        for src, dst, w, te, de in edges:
            if src == k:
                at = (*map(max, te[:-1], t[:-1]), max(te[-1], x))
                want[(*at, dst, label + w if weighted else label)] += d * de
    assert +got == +want and -got == -want


def test_a_weight_that_is_not_an_int_takes_the_general_join() -> None:
    from timely_libs.linq._columns import PAIRS, codes_of
    from timely_libs.linq._trace._reader import address_table
    from timely_libs.linq.propagate._line import NOT_INTS, line_join

    spine = Spine(2, 3)
    weight = codes_of(np.array([0.5], dtype=object))
    one = np.array([1], dtype=np.int64)
    spine.insert(
        Batch(Rows(np.array([3], dtype=np.int64), [np.array([4], dtype=np.int64), weight], [one, one, one], one))
    )
    matrix = np.array([[3], [7], [1], [1]], dtype=np.int64)
    _, status = line_join(matrix, address_table(spine.batches()), np.array([1, 1, 1], dtype=np.int64), 2, PAIRS)
    assert status == NOT_INTS
