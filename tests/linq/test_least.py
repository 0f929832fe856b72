"""`propagate`'s evaluation along a line of times (`timely_libs.linq.propagate._least`), against brute force.

At a notification at ``t``, `Propagate` evaluates the touched keys at ``t`` and at every later
time of ``t``'s line (``(t[:-1], x)``, ``x > t[-1]``) in one pass. Whatever the history, after
its changes are added, the labels accumulated at each such time must be exactly the least
label whose proposals accumulated there have a positive count; the reference sums the rows
at times ``<= (t[:-1], x)`` in the product order, one time at a time. Both forms (columns,
and Python for a few rows or labels that are not ints) are checked, on the same histories.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.linq_harness import compiled_from
from timely_libs.linq import OperatorError
from timely_libs.linq._columns import _kernels, codes_of, values_of
from timely_libs.linq._columns._codes import codes_of_values
from timely_libs.linq._trace import Batch, Rows, Spine, _batch
from timely_libs.linq.propagate import _least

Time = tuple[int, ...]
Row = tuple[int, Any, Time, int]
"""``(key, label, time, diff)``."""

KEYS = [3, 7, 11, 20]


def _rows(rows: Sequence[Row], ntimes: int) -> Rows:
    if not rows:
        return Rows.empty(1, ntimes)
    labels = [r[1] for r in rows]
    codes = codes_of(np.array(labels, dtype=np.int64)) if all(type(x) is int for x in labels) else None
    if codes is None:
        codes = codes_of_values(labels, len(labels))
    return Rows(
        np.array([r[0] for r in rows], dtype=np.int64),
        [codes],
        [np.array([r[2][i] for r in rows], dtype=np.int64) for i in range(ntimes)],
        np.array([r[3] for r in rows], dtype=np.int64),
    )


def _le(a: Time, b: Time) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def _least_positive(rows: Sequence[Row], key: int, at: Time) -> Any:
    acc: Counter[Any] = Counter()
    for k, label, time, d in rows:
        if k == key and _le(time, at):
            acc[label] += d
    present = [label for label, c in acc.items() if c > 0]
    return min(present) if present else None


def _accumulated(rows: Sequence[Row], key: int, at: Time) -> dict[Any, int]:
    acc: Counter[Any] = Counter()
    for k, label, time, d in rows:
        if k == key and _le(time, at):
            acc[label] += d
    return {label: c for label, c in acc.items() if c}


@st.composite
def histories(draw: st.DrawFn, strings: bool = False) -> tuple[list[Row], list[Row], Time]:
    """Proposals and labels of a few keys at times ``(epoch, outer, iteration)``, and ``t``.
    Proposals accumulate to no negative count at ``t`` (a negative one is an error there)."""
    label = st.sampled_from(["a", "b", "c", "d"]) if strings else st.integers(-3, 40)
    time = st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 9))
    t = draw(time)
    row = st.tuples(st.sampled_from(KEYS), label, time, st.sampled_from([1, 1, 2, -1]))
    proposals: list[Row] = draw(st.lists(row, max_size=60))
    for key in KEYS:  # make every count at t non-negative
        for lab, c in _accumulated(proposals, key, t).items():
            if c < 0:
                proposals.append((key, lab, (0, 0, 0), -c))
    labels: list[Row] = draw(st.lists(row, max_size=20))
    return proposals, labels, t


def _check(proposals: Sequence[Row], labels: Sequence[Row], t: Time, few: int) -> None:
    on_p, _ = _least.split_line(_rows(proposals, 3), t)
    on_l, _ = _least.split_line(_rows(labels, 3), t)
    keys = np.array(KEYS, dtype=np.int64)
    old = _least.FEW_ROWS
    _least.FEW_ROWS = few
    try:
        changes = _least.line_changes(on_p, on_l, keys, t, "test")
    finally:
        _least.FEW_ROWS = old
    values = values_of(changes.vals[0])
    added = [
        (k, v, tuple(c[i] for c in changes.times), d)
        for i, (k, v, d) in enumerate(zip(changes.keys.tolist(), values, changes.diffs.tolist()))
    ]
    assert all(time[:-1] == t[:-1] and time[-1] >= t[-1] for _, _, time, _ in added)
    after = [*labels, *added]
    line = {t[-1]} | {max(r[2][-1], t[-1]) for r in [*proposals, *labels] if _le(r[2][:-1], t[:-1])}
    for key in KEYS:
        for x in sorted(line):
            at = (*t[:-1], x)
            want = _least_positive(proposals, key, at)
            assert _accumulated(after, key, at) == ({} if want is None else {want: 1}), (key, at)


@pytest.mark.parametrize("form", ["columns", "sparse", "python"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_labels_are_the_least_proposal_at_every_time_of_the_line(form: str, history: Any) -> None:
    """``sparse``: the column form with more (key, position) cells than it marks (a first
    answer over a million keys), which sorts the cells the rows mark instead."""
    proposals, labels, t = history
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_least, "CELLS", 0 if form == "sparse" else _least.CELLS)
        if form != "python":
            _check_columns_answer(proposals, labels, t)
        _check(proposals, labels, t, few=0 if form != "python" else 10**9)


def _check_columns_answer(proposals: Sequence[Row], labels: Sequence[Row], t: Time) -> None:
    """The column form answers itself (no fallback to Python) for a history with int labels."""
    on_p, _ = _least.split_line(_rows(proposals, 3), t)
    on_l, _ = _least.split_line(_rows(labels, 3), t)
    pos_p = np.maximum(on_p.times[-1], t[-1])
    pos_l = np.maximum(on_l.times[-1], t[-1])
    keys = np.array(KEYS, dtype=np.int64)
    assert _least._line_columns(on_p, pos_p, on_l, pos_l, keys, t, "test") is not None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(strings=True))
def test_labels_that_are_not_ints_are_ordered_by_value(history: Any) -> None:
    proposals, labels, t = history
    _check(proposals, labels, t, few=0)


@pytest.mark.parametrize("few", [0, 10**9], ids=["columns", "python"])
def test_a_negative_count_of_a_proposal_at_t_is_an_error(few: int) -> None:
    proposals = [(3, 5, (0, 0, 1), 1), (3, 5, (0, 0, 2), -2), (3, 9, (0, 0, 0), 1)]
    with pytest.raises(OperatorError, match="label 5 of node 3 has multiplicity -1"):
        _check(proposals, [], (0, 0, 2), few)


def _spine(rows: Sequence[Row], cuts: Sequence[int]) -> Spine:
    """``rows`` arranged as a spine of several batches (cut at ``cuts``)."""
    spine = Spine(1, 3)
    bounds = sorted({0, len(rows), *(c % (len(rows) + 1) for c in cuts)})
    for lo, hi in pairwise(bounds):
        spine.insert(Batch(_rows(rows[lo:hi], 3)))
    return spine


def _consolidated(rows: Rows) -> list[tuple[int, ...]]:
    return sorted(
        Counter(zip(rows.keys.tolist(), *(c.tolist() for c in (*rows.vals, *rows.times)), rows.diffs.tolist()))
    )


def assert_as_the_column_form(
    changes: Any, later: dict[Time, np.ndarray], p_spine: Spine, l_spine: Spine, keys: np.ndarray, t: Time
) -> None:
    """A faster form's label ``changes`` and keys scheduled ``later`` are those of the column
    form (`line_changes` on the rows `split_line` keeps, `later_keys` on the rows it leaves)."""
    on_p, off_p = _least.split_line(_least.rows_of(p_spine, keys), t)
    on_l, off_l = _least.split_line(_least.rows_of(l_spine, keys), t)
    want = Batch(_least.line_changes(on_p, on_l, keys, t, "test"))
    assert _consolidated(Batch(changes)) == _consolidated(want)
    want_later = _least.later_keys([off_p, off_l], t)
    assert {u: ks.tolist() for u, ks in later.items()} == {u: ks.tolist() for u, ks in want_later.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), cuts=st.lists(st.integers(0, 80), max_size=6))
@example(history=([], [(3, 0, (0, 0, 0), 1), (7, 0, (1, 1, 0), 1), (7, 0, (1, 1, 0), -1)], (0, 0, 0)), cuts=[])
@example(history=([], [(3, 0, (0, 0, 0), 1), (7, 1, (1, 0, 0), 1), (7, 1, (1, 0, 0), -1)], (0, 0, 0)), cuts=[2])
def test_a_few_keys_read_from_the_spines_change_as_the_column_form_says(history: Any, cuts: list[int]) -> None:
    """`few_line_changes` (an update's path: Python values straight from each batch) gives the
    changes `line_changes` gives on the rows `split_line` keeps, and schedules the keys of the
    rows it leaves where `later_keys` does: at the join of each such row's time with ``t``."""
    proposals, labels, t = history
    keys = np.array(KEYS, dtype=np.int64)
    p_spine, l_spine = _spine(proposals, cuts), _spine(labels, cuts[::-1])
    few = _least.few_line_changes(p_spine, l_spine, KEYS, t, "test")
    if len(proposals) + len(labels) > _least.FEW_ROWS:
        assert few is None
        return
    assert few is not None
    changes, later = few
    assert_as_the_column_form(changes, later, p_spine, l_spine, keys, t)
    # what is scheduled: each off-line row's key at the join of its time with t, for the rows
    # the spines hold (a batch sums rows that cancel; rows in two batches stay two rows)
    held = [
        (k, v, tuple(time), d)
        for spine in (p_spine, l_spine)
        for k, v, *time, d in zip(*(c.tolist() for c in spine.rows().columns()), spine.rows().diffs.tolist())
    ]
    rows = [r for r in held if not _le(r[2][:-1], t[:-1])]
    joined: dict[Time, set[int]] = {}
    for k, _, time, _ in rows:
        joined.setdefault(tuple(max(a, b) for a, b in zip(time, t)), set()).add(k)
    assert {u: sorted(ks) for u, ks in joined.items()} == {u: ks.tolist() for u, ks in later.items()}


def test_a_few_keys_with_labels_that_are_not_ints_take_the_general_path() -> None:
    labels = Spine(1, 3)
    labels.insert(Batch(_rows([(3, "a", (0, 0, 0), 1)], 3)))
    assert _least.few_line_changes(Spine(1, 3), labels, [3], (0, 0, 0), "test") is None


# Changes that cannot move a label ----------------------------------------------------------------


@st.composite
def consistent(draw: st.DrawFn) -> tuple[list[Row], list[Row], list[Row], Time]:
    """A proposals history on one line, the labels evaluation would keep for it (the least
    proposal at every line time), and changes to the proposals at ``t``."""
    t = (1, 0, draw(st.integers(0, 6)))
    row = st.tuples(
        st.sampled_from(KEYS),
        st.integers(0, 12),
        st.tuples(st.just(1), st.just(0), st.integers(0, 9)),
        st.sampled_from([1, 1, -1]),
    )
    proposals: list[Row] = []
    for k, lab, time, d in sorted(draw(st.lists(row, max_size=30)), key=lambda r: r[2]):
        if d > 0 or _accumulated(proposals, k, time).get(lab, 0) > 0:  # a count never negative
            proposals.append((k, lab, time, d))
    labels: list[Row] = []
    for key in KEYS:
        before: Any = None
        for x in range(10):
            now = _least_positive(proposals, key, (1, 0, x))
            if now != before:
                if before is not None:
                    labels.append((key, before, (1, 0, x), -1))
                if now is not None:
                    labels.append((key, now, (1, 0, x), 1))
                before = now
    change = st.tuples(st.sampled_from(KEYS), st.integers(0, 12), st.sampled_from([1, -1]))
    delta: list[Row] = []
    for key, lab, d in draw(st.lists(change, max_size=6)):
        if d < 0 and _accumulated([*proposals, *delta], key, t).get(lab, 0) <= 0:
            continue  # remove only what is there
        delta.append((key, lab, t, d))
    return proposals, labels, delta, t


@pytest.mark.parametrize(
    "form",
    ["columns", "python", "arrangement", "compiled", "compiled-table", "many", "many-table", "few", "few-spine"],
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=consistent(), cut=st.integers(0, 30))
def test_a_key_said_unchanged_keeps_its_least_proposal_at_every_later_time(form: str, case: Any, cut: int) -> None:
    """Also with the proposals' arrangement (in batches cut at ``cut``, and the changes' own),
    which lets a removal of a key's label pass while the label keeps a positive count (its
    count read by numpy passes, or, ``compiled``, by the compiled walk of many keys), and with
    the label rows given with their keys' ranks (as `Propagate` reads them), or (``many``)
    read from the labels' arrangement by `unchanged_many`; ``-table``: the compiled loops find
    keys through each batch's key table, not by search; ``few``: both arrangements (the
    labels also in two batches) read span by span by `unchanged_few`, or (``few-spine``)
    each whole in one compiled call."""
    proposals, labels, delta, t = case
    if not delta:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_least, "FEW_ROWS", 10**9 if form == "python" else 0)
        compiled_from(patch, 1 if form.startswith("compiled") else 1 << 40)
        patch.setattr(_batch, "DENSE_QUERY", 1 if form.endswith("-table") else 1 << 40)
        if form.startswith("few"):
            _spine_tier(patch, form.endswith("-spine"))
        form = form.removesuffix("-table").removesuffix("-spine")
        changes = Batch(_rows(delta, 3))
        if form == "few":
            spine = Spine(1, 3)
            label_spine = Spine(1, 3)
            for part in (proposals[:cut], proposals[cut:], delta):
                if part:
                    spine.insert(Batch(_rows(part, 3)))
            for part in (labels[: cut // 2], labels[cut // 2 :]):
                if part:
                    label_spine.insert(Batch(_rows(part, 3)))
            found = _least.unchanged_few(changes, label_spine, t, spine)
            assert found is not None  # int labels
            said = found
        elif form == "many":
            spine = Spine(1, 3)
            for part in (proposals[:cut], proposals[cut:], delta):
                if part:
                    spine.insert(Batch(_rows(part, 3)))
            said = _least.unchanged_many(changes, _spine_of(labels), t, spine)
        elif form in ("arrangement", "compiled"):
            spine = Spine(1, 3)
            for part in (proposals[:cut], proposals[cut:], delta):
                if part:
                    spine.insert(Batch(_rows(part, 3)))
            rows, ranks = _least.ranked_rows_of(_spine_of(labels), changes.ukeys)
            said = _least.unchanged(changes, rows, t, spine, ranks)
        else:
            said = _least.unchanged(changes, _rows(labels, 3), t)
    keys = changes.ukeys.tolist()
    for key, same in zip(keys, said.tolist(), strict=True):
        if same:
            for x in range(t[-1], 12):
                at = (1, 0, x)
                assert _least_positive(proposals + delta, key, at) == _least_positive(proposals, key, at), (key, x)


def _spine_tier(patch: pytest.MonkeyPatch, on: bool) -> None:
    """Whether a few keys' reads take each spine whole in one compiled call (`Policy.spine_read`)."""
    patch.setattr(_kernels, "SPINE_KEYS", 1)
    patch.setattr(_kernels, "SPINE_BELOW", 1 << 40 if on else 0)
    patch.setattr(_kernels.POLICY, "eager", on or _kernels.POLICY.eager)


def _spine_of(rows: Sequence[Row]) -> Spine:
    spine = Spine(1, 3)
    if rows:
        spine.insert(Batch(_rows(rows, 3)))
    return spine


@pytest.mark.parametrize("form", ["columns", "compiled", "few", "few-spine"])
def test_removing_a_copy_of_the_label_while_another_stays_proposed_leaves_the_key_alone(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 3's label 4 is proposed twice from time 2 on; one copy goes at t: still label 4. The
    other copy goes later, at 6: the label would move there, so then the key is evaluated."""
    compiled_from(monkeypatch, 1 if form == "compiled" else 1 << 40)
    if form.startswith("few"):
        _spine_tier(monkeypatch, form == "few-spine")
    labels: list[Row] = [(3, 4, (1, 0, 2), 1)]
    t = (1, 0, 3)
    change: list[Row] = [(3, 4, t, -1)]
    for later, same in (([], True), ([(3, 4, (1, 0, 6), -1)], False), ([(3, 4, (1, 0, 5), 1)], True)):
        proposals = [(3, 4, (1, 0, 2), 2), *later, *change]
        spine = _spine_of(proposals)
        if form.startswith("few"):
            found = _least.unchanged_few(Batch(_rows(change, 3)), _spine_of(labels), t, spine)
            assert found is not None
            assert found.tolist() == [same], later
            continue
        rows, ranks = _least.ranked_rows_of(_spine_of(labels), np.array([3]))
        _least.FEW_ROWS, old = 0, _least.FEW_ROWS
        try:
            said = _least.unchanged(Batch(_rows(change, 3)), rows, t, spine, ranks)
        finally:
            _least.FEW_ROWS = old
        assert said.tolist() == [same], later


def test_adding_a_proposal_no_better_than_the_label_leaves_the_key_alone() -> None:
    labels = [(3, 4, (1, 0, 2), 1), (3, 4, (1, 0, 5), -1), (3, 2, (1, 0, 5), 1)]
    t = (1, 0, 3)
    for change, same in (((3, 4, t, 1), True), ((3, 3, t, 1), False), ((3, 9, t, -1), True), ((3, 4, t, -1), False)):
        for few in (0, 10**9):
            _least.FEW_ROWS, old = few, _least.FEW_ROWS
            try:
                said = _least.unchanged(Batch(_rows([change], 3)), _rows(labels, 3), t)
            finally:
                _least.FEW_ROWS = old
            assert said.tolist() == [same], (change, few)


@settings(max_examples=500, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 5), st.sampled_from([1, -1, 1, -1, 2])),
        max_size=16,
    ),
    td=st.integers(0, 2),
)
def test_the_compiled_check_of_label_slots_says_what_the_column_form_says(
    rows: list[tuple[int, int, int, int]], td: int
) -> None:
    """`unchanged_many`'s compiled check of keys with several label rows (laid out a slot per
    key) against `_consistent`, on any rows: counts that go negative, keys with no label or
    two at once, a first change after ``td``."""
    from timely_libs.linq.propagate._compiled import consistent_slots

    nkeys = 6
    rows = sorted(rows)
    rank = np.array([r[0] for r in rows], dtype=np.int64)
    label = np.array([r[1] for r in rows], dtype=np.int64)
    time = np.array([r[2] for r in rows], dtype=np.int64)
    diff = np.array([r[3] for r in rows], dtype=np.int64)
    bad, greatest, labelled = np.zeros(nkeys, bool), np.full(nkeys, np.iinfo(np.int64).min), np.zeros(nkeys, bool)
    if rows:
        ranked = Rows(rank, [label], [np.zeros(len(rows), dtype=np.int64), time], diff)
        _least._consistent(ranked, rank, td, bad, greatest, labelled)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rank, minlength=nkeys))]).astype(np.int64)
    # each slot's rows shuffled (as batches leave them): the loop sorts them
    order_ = np.concatenate([np.random.default_rng(k).permutation(np.flatnonzero(rank == k)) for k in range(nkeys)])
    order_ = order_.astype(np.int64)
    c_bad, c_most, c_labelled = (
        np.zeros(nkeys, np.int64),
        np.full(nkeys, np.iinfo(np.int64).min),
        np.zeros(nkeys, np.int64),
    )
    consistent_slots(
        offsets, label[order_].copy(), np.maximum(time[order_], td), diff[order_].copy(), td, c_bad, c_most, c_labelled
    )
    assert (c_bad == 1).tolist() == bad.tolist()
    assert (c_labelled == 1).tolist() == labelled.tolist()
    assert c_most[labelled].tolist() == greatest[labelled].tolist()


def test_a_few_changes_that_cancel_leave_no_key_to_decide() -> None:
    """Proposal changes at t that sum to nothing make an empty batch: no key, no answer (the
    span-by-span reading must not look for a first key)."""
    t = (1, 0, 3)
    changes = Batch(_rows([(3, 4, t, 1), (3, 4, t, -1)], 3))
    assert len(changes.ukeys) == 0
    labels = _spine_of([(3, 4, (1, 0, 2), 1)])
    found = _least.unchanged_few(changes, labels, t, _spine_of([(3, 4, (1, 0, 2), 1)]))
    assert found is not None and found.tolist() == []


@st.composite
def consistent_along_the_line(draw: st.DrawFn) -> tuple[list[Row], list[Row], list[Row], Time]:
    """`consistent`'s history and labels, with changes at several times of the line from ``t``
    on (what `line_wave` checks at once): a removal only of what is there, at its time and
    every later one."""
    proposals, labels, _, t = draw(consistent())
    change = st.tuples(st.sampled_from(KEYS), st.integers(0, 12), st.integers(t[-1], 9), st.sampled_from([1, -1]))
    delta: list[Row] = []
    for key, lab, x, d in draw(st.lists(change, max_size=8)):
        row = (key, lab, (1, 0, x), d)
        if all(_accumulated([*proposals, *delta, row], key, (1, 0, y)).get(lab, 0) >= 0 for y in range(10)):
            delta.append(row)
    return proposals, labels, delta, t


@pytest.mark.parametrize("inserted", [True, False], ids=["inserted", "pending"])
@pytest.mark.parametrize("form", ["few", "few-spine"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=consistent_along_the_line(), cut=st.integers(0, 30))
def test_changes_at_several_times_said_unchanged_keep_every_least_proposal(
    form: str, inserted: bool, case: Any, cut: int
) -> None:
    """`unchanged_few` on changes at several times of the line (each checked from its own time
    on), with the changes in the proposals' arrangement or (``pending``) not yet: a key said
    unchanged keeps its least proposal at every line time."""
    proposals, labels, delta, t = case
    if not delta:
        return
    with pytest.MonkeyPatch.context() as patch:
        _spine_tier(patch, form == "few-spine")
        spine = Spine(1, 3)
        for part in (proposals[:cut], proposals[cut:], delta if inserted else []):
            if part:
                spine.insert(Batch(_rows(part, 3)))
        changes = Batch(_rows(delta, 3))
        said = _least.unchanged_few(changes, _spine(labels, [cut // 2]), t, spine, inserted=inserted)
    assert said is not None
    for key, same in zip(changes.ukeys.tolist(), said.tolist(), strict=True):
        if same:
            for x in range(t[-1], 12):
                at = (1, 0, x)
                assert _least_positive(proposals + delta, key, at) == _least_positive(proposals, key, at), (key, x)


@pytest.mark.parametrize("form", ["few", "few-spine"])
def test_changes_late_on_the_line_meet_only_the_labels_from_their_time_on(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 3's label falls along the line (9 from 2, 5 from 4): a proposal of 7 at 6 moves
    nothing, one of 7 at 3 does (it is less than 9 there); removing a copy of 5 at 6 moves
    nothing while another copy stays proposed, whether or not the removal is inserted yet.
    Node 4's label rises (5 from 2, 9 from 5): a proposal of 7 at 3 moves it at 5."""
    _spine_tier(monkeypatch, form == "few-spine")
    proposals: list[Row] = [(3, 9, (1, 0, 2), 1), (3, 5, (1, 0, 4), 2)]
    labels = _spine_of([(3, 9, (1, 0, 2), 1), (3, 9, (1, 0, 4), -1), (3, 5, (1, 0, 4), 1)])
    t = (1, 0, 2)
    cases: list[tuple[list[Row], bool]] = [
        ([(3, 7, (1, 0, 6), 1)], True),
        ([(3, 7, (1, 0, 3), 1)], False),
        ([(3, 7, (1, 0, 3), 1), (3, 7, (1, 0, 6), -1)], False),
        ([(3, 5, (1, 0, 6), -1)], True),
        ([(3, 5, (1, 0, 6), -1), (3, 5, (1, 0, 8), -1)], False),
        ([(3, 10, (1, 0, 2), 1), (3, 6, (1, 0, 7), 1)], True),
    ]
    rising: list[Row] = [(4, 5, (1, 0, 2), 1), (4, 9, (1, 0, 2), 1), (4, 5, (1, 0, 5), -1)]
    rising_labels: list[Row] = [(4, 5, (1, 0, 2), 1), (4, 5, (1, 0, 5), -1), (4, 9, (1, 0, 5), 1)]
    rising_cases: list[tuple[list[Row], bool]] = [([(4, 7, (1, 0, 3), 1)], False), ([(4, 9, (1, 0, 3), 1)], True)]
    scenarios: list[tuple[list[Row], Spine, list[tuple[list[Row], bool]]]] = [
        (proposals, labels, cases),
        (rising, _spine_of(rising_labels), rising_cases),
    ]
    for history, label_rows, more in scenarios:
        for delta, same in more:
            for inserted in (True, False):
                spine = _spine_of(history + delta if inserted else history)
                found = _least.unchanged_few(Batch(_rows(delta, 3)), label_rows, t, spine, inserted=inserted)
                assert found is not None
                assert found.tolist() == [same], (delta, inserted)
