"""The least label of each key at every time of a *line*: what `Propagate` evaluates.

A notification at time ``t`` evaluates some keys (their proposals changed at ``t``, or a
least upper bound of their history is ``t``). By TR §4.3 a key's label may then also change
at ``join(t, s)`` for every time ``s`` of its history (proposals and labels) that is not
``<= t``. `Reduce` schedules a notification at each of those. Here, the ones on ``t``'s
*line* are evaluated at once instead: the times ``(t[:-1], x)`` that differ from ``t`` only in
the innermost loop counter, with ``x > t[-1]``. They are the joins of ``t`` with the history
rows whose outer coordinates are ``<= t[:-1]`` (in one loop with one epoch in flight: every
later iteration of the key), and they are totally ordered, so one pass over the key's rows,
sorted by position on the line, gives the accumulation at each of them. The joins with the
other rows (another epoch in flight, another outer iteration) are scheduled as before, and
their own evaluations cover their lines in turn.

Evaluating ``x > t[-1]`` now, before every input at times ``<= x`` has arrived, is
speculative but exact in the end: an input that still arrives for the key at a time ``u <=
x`` is evaluated at ``u``, and ``x`` (a time of the key's history, or on the line of ``u``)
is evaluated again from there, after it. What it saves is a notification, and a fresh read of
the key's history, per later time: for a single-edge change of shortest paths, the eight or
so evaluations of each touched key at the later iterations where its neighbours proposed.

At each line time ``x`` the key's label must become the least label whose proposals,
accumulated over the times ``<= x``, have a positive count. With ``M(x)`` that label (count
1) less the labels accumulated at ``x`` so far, the changes to send are ``M(x_i) -
M(x_{i-1})`` at ``x_i``, for the key's line times ``x_0 = t[-1] < x_1 < ...``.

Two forms: column-wise for int labels (a row meets each line time at or after its own,
`numpy.repeat` and ranges, then one consolidation), and a Python pass per key for a few rows
(where numpy's cost per call dominates) or labels that are not ints (ordered by value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from heapq import heapify, heappop, heappush
from operator import gt, le

import numpy as np

from .._columns import (
    EMPTY,
    PAIRS,
    POLICY,
    all_ints,
    consolidate,
    distinct,
    group_starts,
    order,
    ranges,
    time_runs,
    values_of,
)
from .._errors import OperatorError
from .._trace import Batch, Rows, Spine, concat_rows, indexed, key_spans, latest, matches, matches_each
from .._trace._reader import address_table

__all__ = [
    "FEW_ROWS",
    "NO_BOUND",
    "WAVE_ROWS",
    "LineWalk",
    "absorbs_wave",
    "few_line_changes",
    "later_keys",
    "line_changes",
    "line_wave",
    "ranked_rows_of",
    "rows_of",
    "split_line",
    "unchanged",
    "unchanged_few",
    "unchanged_many",
]

FEW_ROWS = 192
"""Up to this many history rows, `line_changes` works in Python (no numpy call per step)."""
MAX_PAIRS = 1 << 22
"""Above this many (row, line time) pairs, the column form would build too large arrays: the
Python pass is linear in the rows per key instead."""

NO_BOUND = 1 << 62
"""No time staged off a line is at or before any of its positions (`line_wave`, `Propagate._iterate`)."""

WAVE_ROWS = 64
"""Up to this many proposal rows in all, a step with one worker may take the staged proposals
of its line's later times too (`line_wave`)."""

Time = tuple[int, ...]


def rows_of(spine: Spine, keys: np.ndarray) -> Rows:
    """Every row of ``keys`` (sorted, distinct) in ``spine``, at any time; not consolidated
    across batches."""
    return ranked_rows_of(spine, keys)[0]


def ranked_rows_of(spine: Spine, keys: np.ndarray) -> tuple[Rows, np.ndarray]:
    """`rows_of`, and for each row the index of its key in ``keys`` (the reader's `matches`)."""
    found = matches(keys, spine.batches(), spine.nvals, spine.ntimes)
    if found is None:
        return Rows.empty(spine.nvals, spine.ntimes), EMPTY
    rank, rows = found
    return rows, rank


def later_keys(off: Sequence[Rows], t: Time) -> dict[Time, np.ndarray]:
    """The keys of the rows ``off`` (those `split_line` leaves off ``t``'s line), sorted and
    distinct, at each join of their times with ``t``: where they must be evaluated again
    (TR §4.3)."""
    off = [r for r in off if len(r)]
    if not off:
        return {}
    keys = np.concatenate([r.keys for r in off])
    times = [np.maximum(np.concatenate([r.times[i] for r in off]), c) for i, c in enumerate(t)]
    idx = order([*times, keys])
    times = [c[idx] for c in times]
    keys = keys[idx]
    return {u: distinct(keys[s:e], ordered=True) for u, s, e in time_runs(times)}


def line_wave(
    staged: dict[Time, list[Rows | np.ndarray]],
    staged_edges: dict[Time, list[Rows]],
    t: Time,
    proposals: Spine,
    labels: Spine,
    walk: LineWalk | None = None,
) -> list[Rows | np.ndarray] | None:
    """What a step at ``t`` takes off ``staged`` (`Propagate`'s inputs to absorb and keys to
    evaluate, per time) with one worker: the entries at ``t``, as a step always did; or,
    when the proposals staged at ``t`` and at the later times of ``t``'s line (in order, up
    to `WAVE_ROWS` rows, up to a time with keys to evaluate or a time staged off the line
    at or before it) move no label (`unchanged_few`, each change checked from its own time
    on), those proposals inserted into ``proposals`` as one batch, and None: nothing is
    left to do at ``t``.

    An update's single changed edge proposes to its destination at each iteration where the
    source's label changed (two or three times), and each of those times would be a step of
    its own: a batch made and inserted, the labels read, for proposals that nearly always
    move nothing. Checked before they are inserted, such proposals are absorbed in one step
    exactly as the steps would have absorbed them one by one (each step's check would have
    passed, and nothing between them changes a label). If one may move a label, the steps
    run as before, one time at a time: evaluating a key at ``t`` with its later proposals
    already in the arrangement would let a change and its correction, which the steps
    would have summed at one time, travel a loop apart, without end."""
    mine = staged.pop(t, None)
    if staged_edges or not staged:
        return mine
    entries: list[Rows] = []
    rows = 0
    for entry in mine or ():
        if isinstance(entry, np.ndarray):
            return mine
        entries.append(entry)
        rows += len(entry)
    prefix, x = t[:-1], t[-1]
    if walk is not None and walk.prefix == prefix:  # kept up to date by `Propagate._stage`
        later = [(*prefix, y) for y in sorted(set(walk.positions)) if y > x]
        later = [u for u in later if u in staged]
        blocked = walk.blocked
    else:
        later = []
        blocked = NO_BOUND  # the first line position a time staged off the line is at or before
        for u in staged:
            if u[:-1] == prefix:
                if u[-1] > x:
                    later.append(u)
            elif u[-1] < blocked and all(map(le, u[:-1], prefix)):
                blocked = u[-1]
        later.sort()
    taken = []
    for u in later:
        here = staged[u]
        if u[-1] >= blocked or any(isinstance(e, np.ndarray) for e in here):
            break
        rows += sum(len(e) for e in here)
        if rows > WAVE_ROWS:
            break
        entries.extend(here)  # type: ignore[arg-type]
        taken.append(u)
    if not taken:
        return mine
    delta = Batch(concat_rows(entries, 1, len(t)))
    if not absorbs_wave(delta, t, proposals, labels):
        return mine
    for u in taken:
        del staged[u]
    return None


def absorbs_wave(delta: Batch, t: Time, proposals: Spine, labels: Spine) -> bool:
    """`line_wave`'s check and insert: whether the proposals ``delta`` (at ``t`` and the later
    times of its line, at most `WAVE_ROWS` rows) move no label, every row of both
    arrangements being on ``t``'s line (`Propagate._touched`); if so, they are inserted into
    ``proposals`` (an empty delta: nothing to insert). Also `Propagate._wave_edges`'s, for
    an update's edge proposals made straight into one batch."""
    if not len(delta):
        return True
    if len(delta) > WAVE_ROWS or POLICY.keys_tier(len(delta.ukeys)) != "python":
        return False
    prefix = t[:-1]
    for spine in (proposals, labels):
        top = latest(spine.batches())
        if top is not None and any(map(gt, top[:-1], prefix)):
            return False
    keep = unchanged_few(delta, labels, t, proposals, inserted=False)
    if keep is None or not keep.all():
        return False
    proposals.insert(delta)
    return True


class LineWalk:
    """What `Propagate._iterate` knows of the staged times while it walks one line: the
    positions staged on it (a heap; a position may have left ``staged`` since, or be there
    twice), and ``blocked``, the least position a time staged off the line is at or before
    (``s <= (prefix, y)`` exactly when ``s[:-1] <= prefix`` and ``s[-1] <= y``). One scan of
    the staged times when the walk starts, then `add` for each time staged during it, instead
    of a scan per step."""

    __slots__ = ("blocked", "positions", "prefix", "x")

    def __init__(self, staged: Iterable[Time], t: Time) -> None:
        self.prefix = t[:-1]
        self.x = t[-1]
        """The position of the step running now."""
        self.positions: list[int] = []
        self.blocked = NO_BOUND
        for s in staged:
            self.add(s)
        heapify(self.positions)

    def add(self, s: Time) -> None:
        """A time newly staged: on the line, a later step; off it, perhaps a lower bound."""
        if s[:-1] == self.prefix:
            if s[-1] <= self.x:  # a step at or before this one: the walk must stop here
                self.blocked = min(self.blocked, self.x)
            else:
                heappush(self.positions, s[-1])
        elif s[-1] < self.blocked and all(map(le, s[:-1], self.prefix)):
            self.blocked = s[-1]

    def next(self, staged: dict[Time, list[Rows | np.ndarray]]) -> Time | None:
        """The next line time still staged, if nothing off the line comes at or before it."""
        positions = self.positions
        while positions:
            y = positions[0]
            if y >= self.blocked:
                return None
            u = (*self.prefix, y)
            if u in staged:
                return u
            heappop(positions)
        return None


def split_line(rows: Rows, t: Time) -> tuple[Rows, Rows]:
    """``rows`` whose outer time coordinates are ``<= t[:-1]`` (on ``t``'s line: their join
    with ``t`` differs from ``t`` at most in the last coordinate), and the others."""
    if not len(rows):
        return rows, rows
    mask = None
    for col, c in zip(rows.times[:-1], t[:-1]):
        if int(col.max()) <= c:
            continue
        m = col <= c
        mask = m if mask is None else mask & m
    if mask is None:
        return rows, Rows.empty(len(rows.vals), len(rows.times))
    return rows.take(mask), rows.take(~mask)


def line_changes(proposals: Rows, labels: Rows, keys: np.ndarray, t: Time, op: str) -> Rows:
    """The label changes of ``keys`` along ``t``'s line: rows ``(key, label, time, diff)`` at
    times ``(t[:-1], x)``, ``x >= t[-1]``, in no order and not consolidated (a `Batch` of them
    is). ``proposals`` and ``labels`` are the keys' rows on the line (`split_line`). Refuses a
    negative count of a proposal at ``t``."""
    td = t[-1]
    pos_p = np.maximum(proposals.times[-1], td) if len(proposals) else EMPTY
    pos_l = np.maximum(labels.times[-1], td) if len(labels) else EMPTY
    n = len(proposals) + len(labels)
    ints = all_ints(proposals.vals[0]) and all_ints(labels.vals[0])
    if ints and n > FEW_ROWS:
        out = _line_columns(proposals, pos_p, labels, pos_l, keys, t, op)
        if out is not None:
            k, label, pos, d = out
            return _at_line(k, label, pos, d, t)
    k, label, pos, d = _line_python(proposals, pos_p, labels, pos_l, keys, t, ints, op)
    return _at_line(k, label, pos, d, t)


def _at_line(keys: np.ndarray, labels: np.ndarray, pos: np.ndarray, diffs: np.ndarray, t: Time) -> Rows:
    times = [np.full(len(keys), c, dtype=np.int64) for c in t[:-1]]
    return Rows(keys, [labels], [*times, pos], diffs)


# Column-wise --------------------------------------------------------------------------------------

DENSE = 1 << 24
"""At most this many positions past ``t``: they are numbered through a table of that size."""
CELLS = 1 << 24
"""At most this many (key, position) cells: the line times are found by marking cells, no sort.
Beyond it (a first answer over a million keys), by sorting the cells the rows mark."""
NONE = np.iinfo(np.int64).max
"""No label (greater than every code)."""


def _line_columns(
    p: Rows, pos_p: np.ndarray, lab: Rows, pos_l: np.ndarray, keys: np.ndarray, t: Time, op: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """`line_changes` over columns, for int labels; None if the positions or pairs would be too many.

    The rows of a batch come sorted by (key, label, time), so sorting the proposals by (key,
    label, position) merges a few sorted runs (linear). Each (key, label) then has a count at
    each of its rows' positions, which holds until its next row: an interval of the key's line
    times; the least label at a line time is the least label of an interval with a positive
    count that covers it (`numpy.minimum.at` over the intervals' line times). The changes are
    the least label's changes from one line time to the next, less the labels already sent
    at each line time (a label row at ``x`` is in the accumulation from ``x`` on)."""
    td = t[-1]
    # proposals by (key, label, position), summed: the batches' sorted runs, merged
    (k, label, pos), diffs = consolidate([p.keys, p.vals[0], pos_p], p.diffs, runs=True)
    count = _running(diffs, k, label)
    negative = (pos == td) & (count < 0)
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        raise _negative(op, int(k[i]), int(label[i]), int(count[i]), t)
    offsets = np.concatenate([pos, pos_l]) - td
    top = int(offsets.max()) if len(offsets) else 0
    if top == 0:  # every row at t or before: the line is t alone
        live = count > 0
        k, label = k[live], label[live]
        first = group_starts([k])
        return (
            np.concatenate([k[first], lab.keys]),
            np.concatenate([label[first], lab.vals[0]]),
            np.full(len(first) + len(lab), td, dtype=np.int64),
            np.concatenate([np.ones(len(first), np.int64), -lab.diffs]),
        )
    if top >= DENSE:
        return None
    # positions as dense indices j (the line's first position, td, is j = 0)
    seen = np.bincount(offsets)
    seen[0] = 1
    positions = np.flatnonzero(seen)
    width = len(positions)
    dense = np.zeros(top + 1, dtype=np.int64)
    dense[positions] = np.arange(width)
    j = dense[pos - td]
    jl = dense[pos_l - td]
    r = np.searchsorted(keys, k)
    rank_l = np.searchsorted(keys, lab.keys)
    # the line times: the (key, position) cells some row (or t itself) marks, in order, and
    # each cell's index among them
    cell_p = r * width + j
    cell_l = rank_l * width + jl
    firsts = np.arange(len(keys), dtype=np.int64) * width
    if len(keys) * width <= CELLS:
        cells = np.zeros(len(keys) * width, dtype=bool)
        cells[cell_p] = True
        cells[cell_l] = True
        cells[firsts] = True
        line = np.flatnonzero(cells)
        index = np.cumsum(cells) - 1
        line_p, line_l, line_first = index[cell_p], index[cell_l], index[firsts]
    else:  # too many cells to mark: sort the marked ones (as many as the rows, not keys x width)
        line = np.unique(np.concatenate([cell_p, cell_l, firsts]))
        line_p, line_l, line_first = (np.searchsorted(line, c) for c in (cell_p, cell_l, firsts))
    line_rank = line // width
    key_end = np.append(line_first[1:], len(line))
    # each row's count holds from its line time until the label's next row (or the line's end)
    lo = line_p
    hi = key_end[r]
    if len(r) > 1:
        same = (r[1:] == r[:-1]) & (label[1:] == label[:-1])
        hi[:-1][same] = lo[1:][same]
    live = count > 0
    lo, hi, label = lo[live], hi[live], label[live]
    if int((hi - lo).sum()) > MAX_PAIRS:
        return None
    least = np.full(len(line), NONE, dtype=np.int64)
    np.minimum.at(least, ranges(lo, hi), np.repeat(label, hi - lo))
    # the least label's changes along each key's line
    before = np.empty_like(least)
    before[0] = NONE
    before[1:] = least[:-1]
    before[line_first] = NONE  # a key's first line time follows nothing
    changed = least != before
    plus = np.flatnonzero(changed & (least != NONE))
    minus = np.flatnonzero(changed & (before != NONE))
    # less the labels sent so far, each from its own line time on
    at = np.concatenate([plus, minus, line_l])
    return (
        keys[line_rank[at]],
        np.concatenate([least[plus], before[minus], lab.vals[0]]),
        positions[line[at] % width] + td,
        np.concatenate([np.ones(len(plus), np.int64), -np.ones(len(minus), np.int64), -lab.diffs]),
    )


def _running(diffs: np.ndarray, *groups: np.ndarray) -> np.ndarray:
    """The running sum of ``diffs`` within each run of equal ``groups`` (rows sorted by them)."""
    total = np.cumsum(diffs)
    starts = group_starts(list(groups))
    if len(starts) == 1:
        return total
    start_of = np.zeros(len(diffs), dtype=np.int64)
    start_of[starts] = starts
    start_of = np.maximum.accumulate(start_of)
    return total - np.where(start_of > 0, total[start_of - 1], 0)


# In Python ------------------------------------------------------------------------------------------


def _line_python(
    p: Rows, pos_p: np.ndarray, lab: Rows, pos_l: np.ndarray, keys: np.ndarray, t: Time, ints: bool, op: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`line_changes` one key at a time: its rows sorted by line position, replayed."""
    history: dict[int, list[tuple[int, int, int, int]]] = {}
    for side, rows, pos in ((0, p, pos_p), (1, lab, pos_l)):
        for k, x, label, d in zip(rows.keys.tolist(), pos.tolist(), rows.vals[0].tolist(), rows.diffs.tolist()):
            h = history.get(k)
            if h is None:
                history[k] = [(x, side, label, d)]
            else:
                h.append((x, side, label, d))
    order = None if ints else _value_order(p.vals[0], op)
    return _replay(history, keys.tolist(), t, order, op)


def few_line_changes(
    proposals: Spine, labels: Spine, keys: list[int], t: Time, op: str
) -> tuple[Rows, dict[Time, np.ndarray]] | None:
    """`line_changes` for a few ``keys`` (sorted, distinct) read from the ``proposals`` and
    ``labels`` arrangements as Python values, with no array per batch (an update's case:
    `rows_of`, `split_line` and the column form cost a few dozen numpy calls on a handful of
    rows). Returns the changes, and the keys to evaluate later (sorted, per time: at the join
    with ``t`` of each of their rows off ``t``'s line, `later_keys`). None when the keys have
    more than `FEW_ROWS` rows or labels that are not ints (the general path then)."""
    prefix = t[:-1]
    td = t[-1]
    history: dict[int, list[tuple[int, int, int, int]]] = {}
    later: dict[Time, set[int]] = {}
    total = 0
    for side, spine in ((0, proposals), (1, labels)):
        on_line: dict[int, bool] = {}  # per batch (by id): every row's outer coordinates <= t's
        for b, i, lo, hi in key_spans(keys, spine.batches()):
            line = on_line.get(id(b))
            if line is None:
                line = on_line[id(b)] = all(map(le, b.latest[:-1], prefix))
            total += hi - lo
            if total > FEW_ROWS:
                return None
            vals = b.vals[0][lo:hi].tolist()
            if max(vals) >= PAIRS:
                return None
            diffs = b.diffs[lo:hi].tolist()
            k = keys[i]
            h = history.setdefault(k, [])
            if line:
                for x, label, d in zip(b.times[-1][lo:hi].tolist(), vals, diffs):
                    h.append((x if x > td else td, side, label, d))
                continue
            for time, label, d in zip(zip(*(c[lo:hi].tolist() for c in b.times)), vals, diffs):
                if all(map(le, time, prefix)):
                    h.append((time[-1] if time[-1] > td else td, side, label, d))
                else:
                    later.setdefault(tuple(map(max, time, t)), set()).add(k)
    changes = _at_line(*_replay(history, keys, t, None, op), t)
    return changes, {u: np.array(sorted(ks), dtype=np.int64) for u, ks in later.items()}


def _replay(
    history: dict[int, list[tuple[int, int, int, int]]], keys: list[int], t: Time, order: _Order | None, op: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each key's ``history`` (``(line position, 0 for a proposal / 1 for a label, label,
    diff)``, in any order) replayed along the line: the label changes ``(key, label,
    position, diff)``. ``order``: the labels' order when they are not ints."""
    td = t[-1]
    out_k: list[int] = []
    out_label: list[int] = []
    out_pos: list[int] = []
    out_d: list[int] = []
    for k in keys:
        line = history.get(k)
        if line is None:
            continue
        line.sort()
        proposed: dict[int, int] = {}
        so_far: dict[int, int] = {}
        before: dict[int, int] = {}
        i, n = 0, len(line)
        x = td
        while True:
            while i < n and line[i][0] <= x:
                _, side, label, d = line[i]
                acc = proposed if side == 0 else so_far
                acc[label] = acc.get(label, 0) + d
                i += 1
            if x == td:
                for label, c in proposed.items():
                    if c < 0:
                        raise _negative(op, k, label, c, t)
            present = [label for label, c in proposed.items() if c > 0]
            now = {label: -c for label, c in so_far.items() if c}
            if present:
                least = min(present) if order is None else min(present, key=order.__getitem__)
                now[least] = now.get(least, 0) + 1
            for label in now.keys() | before.keys():
                d = now.get(label, 0) - before.get(label, 0)
                if d:
                    out_k.append(k)
                    out_label.append(label)
                    out_pos.append(x)
                    out_d.append(d)
            before = now
            if i >= n:
                break
            x = line[i][0]
    return (
        np.array(out_k, dtype=np.int64),
        np.array(out_label, dtype=np.int64),
        np.array(out_pos, dtype=np.int64),
        np.array(out_d, dtype=np.int64),
    )


class _Order:
    """A label code's rank by value (labels that are not all ints: interned codes do not
    order as their values)."""

    def __init__(self, codes: Sequence[int], op: str) -> None:
        values = values_of(np.asarray(codes, dtype=np.int64))
        try:
            ranked = sorted(range(len(values)), key=values.__getitem__)
        except TypeError as exc:
            raise OperatorError(f"{op}: labels must be comparable: {exc}") from exc
        self.rank = {int(codes[i]): r for r, i in enumerate(ranked)}

    def __getitem__(self, code: int) -> int:
        return self.rank[code]


def _value_order(labels: np.ndarray, op: str) -> _Order:
    return _Order(distinct(labels).tolist(), op)


def _negative(op: str, key: int, label: int, count: int, t: Time) -> OperatorError:
    node, value = values_of(np.array([key, label], dtype=np.int64))
    return OperatorError(
        f"{op}: label {value!r} of node {node!r} has multiplicity {count} at time {t}: "
        "an edge or node was removed more often than it was added"
    )


# Changes that cannot move a label ------------------------------------------------------------------


def unchanged(
    delta: Batch, labels: Rows, t: Time, proposals: Spine | None = None, ranks: np.ndarray | None = None
) -> np.ndarray:
    """Which keys of ``delta`` (proposal changes at ``t``, a `Batch`) keep their labels at every
    time of ``t``'s line, read from their ``labels`` rows (all on the line; rows of other keys
    are ignored, unless ``ranks`` gives for each row the index of its key in ``delta.ukeys``)
    and, for removals of a key's greatest label, from ``proposals`` (the proposals'
    arrangement, ``delta`` included, every row on the line), if given.

    A key's labels are consistent when at each line time exactly one label has count 1, and
    then it is the least proposal there (what evaluation maintains; a key evaluated later
    anyway is not asked about). Adding a proposal no smaller than every label of the line, or
    removing one greater than all of them, changes no least proposal: the key need not be
    evaluated, nor its proposals read (half the keys of a batch of edge changes, most keys of
    a shortest-paths update). Nor does removing a copy of the greatest label ``L`` while ``L``
    keeps a positive count at every line time (`_still_proposed`): a node that loses the edge
    its label came along, when another neighbour proposes the same label (most deletions of a
    batch of edge changes)."""
    keys = delta.ukeys
    out = np.zeros(len(keys), dtype=bool)
    if not len(keys) or not len(labels) or not all_ints(labels.vals[0]) or not all_ints(delta.vals[0]):
        return out
    if len(labels) <= FEW_ROWS // 4:
        return _unchanged_python(delta, labels, t)
    td = t[-1]
    if ranks is None:
        rank = np.searchsorted(keys, labels.keys)
        mine = keys[np.minimum(rank, len(keys) - 1)] == labels.keys
        if not mine.all():
            labels, rank = labels.take(mine), rank[mine]
    else:
        rank = ranks
    bad = np.zeros(len(keys), dtype=bool)
    greatest = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    labelled = np.zeros(len(keys), dtype=bool)
    # a key of one label row (most keys, most of the time): consistent when the row adds the
    # label once, at or before t (then it holds at every line time); no sort needed
    one = np.bincount(rank, minlength=len(keys))[rank] == 1
    if one.any():
        r1 = rank[one]
        good = (labels.diffs[one] == 1) & (labels.times[-1][one] <= td)
        bad[r1[~good]] = True
        greatest[r1[good]] = labels.vals[0][one][good]
        labelled[r1[good]] = True
        if not one.all():
            labels, rank = labels.take(~one), rank[~one]
    if not one.all():
        _consistent(labels, rank, td, bad, greatest, labelled)
    # the changes: the least added no smaller, the least removed greater, than every label
    which = np.repeat(np.arange(len(keys)), np.diff(delta.starts))
    added = delta.diffs > 0
    least_added = _least_of(which, added, delta.vals[0], len(keys))
    least_removed = _least_of(which, ~added, delta.vals[0], len(keys))
    return _decided(keys, labelled & ~bad, greatest, least_added, least_removed, td, proposals)


def unchanged_many(delta: Batch, labels: Spine, t: Time, proposals: Spine) -> np.ndarray:
    """`unchanged` for many keys (with the proposals' arrangement), read from the label
    arrangement itself: a compiled walk per batch counts each key's label rows and keeps its
    first, so only the keys with several label rows (most nodes have one label from one time
    on) have their rows laid out, a slot per key, and checked as `unchanged` does, in
    compiled loops (`slot_rows`, `consistent_slots`)."""
    from ._compiled import consistent_slots, first_rows, least_added_removed, slot_rows  # numba

    keys = delta.ukeys
    n = len(keys)
    td = t[-1]
    count = np.zeros(n, dtype=np.int64)
    val = np.zeros(n, dtype=np.int64)
    when = np.zeros(n, dtype=np.int64)
    diff = np.zeros(n, dtype=np.int64)
    batches = labels.batches()  # one list for both walks: the slots are sized by the first
    for b, index in indexed(keys, batches):
        first_rows(keys, *index, b.vals[0], b.times[-1], b.diffs, count, val, when, diff)
    one = count == 1
    if not all_ints(val[one]) or not all_ints(delta.vals[0]):
        return np.zeros(n, dtype=bool)
    consistent = one & (diff == 1) & (when <= td)
    greatest = np.where(consistent, val, np.iinfo(np.int64).min)
    several = np.flatnonzero(count > 1)
    if len(several):  # their rows side by side, a slot per key, checked as `_consistent` does
        wanted = np.ascontiguousarray(keys[several])
        offsets = np.zeros(len(several) + 1, dtype=np.int64)
        np.cumsum(count[several], out=offsets[1:])
        fill = offsets[:-1].copy()
        rows = int(offsets[-1])
        sval, spos, sdiff = np.empty(rows, np.int64), np.empty(rows, np.int64), np.empty(rows, np.int64)
        for b, index in indexed(wanted, batches):
            slot_rows(wanted, *index, b.vals[0], b.times[-1], b.diffs, td, fill, sval, spos, sdiff)
        if not all_ints(sval):
            return np.zeros(n, dtype=bool)
        bad = np.zeros(len(several), dtype=np.int64)
        most = np.full(len(several), np.iinfo(np.int64).min, dtype=np.int64)
        labelled = np.zeros(len(several), dtype=np.int64)
        consistent_slots(offsets, sval, spos, sdiff, td, bad, most, labelled)
        consistent[several] = (labelled == 1) & (bad == 0)
        greatest[several] = most
    least_added, least_removed = least_added_removed(delta.starts, delta.vals[0], delta.diffs, NONE)
    return _decided(keys, consistent, greatest, least_added, least_removed, td, proposals)


def _decided(
    keys: np.ndarray,
    consistent: np.ndarray,
    greatest: np.ndarray,
    least_added: np.ndarray,
    least_removed: np.ndarray,
    td: int,
    proposals: Spine | None,
) -> np.ndarray:
    """`unchanged`'s answer from each key's labels (``consistent`` ones, their ``greatest``)
    and its changes (the least label added, the least removed): adding no smaller, removing
    greater, or removing the greatest while it stays proposed (if ``proposals`` are given)."""
    ok = consistent & (least_added >= greatest)
    out = ok & (least_removed > greatest)
    if proposals is not None:
        maybe = np.flatnonzero(ok & (least_removed == greatest))
        if len(maybe):
            out[maybe] = _still_proposed(proposals, keys[maybe], greatest[maybe], td)
    return out


def _consistent(
    labels: Rows, rank: np.ndarray, td: int, bad: np.ndarray, greatest: np.ndarray, labelled: np.ndarray
) -> None:
    """`unchanged`'s check of keys with several label rows (``rank``: each row's key), into
    ``bad`` (inconsistent), ``greatest`` (the greatest label at some line time), ``labelled``."""
    pos = np.maximum(labels.times[-1], td)
    # each label's count never negative; the greatest label present at some line time
    (r, label, _), count = consolidate([rank, labels.vals[0], pos], labels.diffs, runs=True)
    running = _running(count, r, label)
    bad[r[running < 0]] = True
    present = running > 0
    np.maximum.at(greatest, r[present], label[present])
    labelled[r[present]] = True
    # one label in all at each line time, t's own included
    (r, at), count = consolidate([rank, pos], labels.diffs)
    bad[r[_running(count, r) != 1]] = True
    first = group_starts([r])
    bad[r[first[at[first] != td]]] = True


def _least_of(which: np.ndarray, mask: np.ndarray, vals: np.ndarray, n: int) -> np.ndarray:
    """For rows sorted by (key, value) (``which``: the key's index, of ``n``), the least value
    of each key among the rows of ``mask`` (`NONE` if it has none): its first such row's."""
    out = np.full(n, NONE, dtype=np.int64)
    idx = np.flatnonzero(mask)
    if len(idx):
        w = which[idx]
        first = group_starts([w])
        out[w[first]] = vals[idx[first]]
    return out


def _still_proposed(proposals: Spine, keys: np.ndarray, labels: np.ndarray, td: int) -> np.ndarray:
    """Whether each of ``keys`` (sorted, distinct) keeps a positive count of the proposal
    ``labels[i]`` at every line time from ``td`` on (every row on the line). A lower bound of
    that count at every such time, summed column-wise with no sort: the rows at or before
    ``td`` count at all of them, and of the later rows only the removals may lower it."""
    bound = np.zeros(len(keys), dtype=np.int64)
    batches = proposals.batches()
    if POLICY.keys_tier(len(keys)) == "compiled":
        from ._compiled import label_support  # numba only once arrays are large

        keys = np.ascontiguousarray(keys)
        for b, index in indexed(keys, batches):
            label_support(keys, labels, *index, b.vals[0], b.times[-1], b.diffs, td, bound)
        return bound >= 1
    for b, idx, rank in matches_each(keys, batches):
        diffs = b.diffs[idx]
        counted = (b.vals[0][idx] == labels[rank]) & ((b.times[-1][idx] <= td) | (diffs < 0))
        if counted.any():
            bound += np.bincount(rank[counted], weights=diffs[counted], minlength=len(keys)).astype(np.int64)
    return bound >= 1


def _unchanged_python(delta: Batch, labels: Rows, t: Time) -> np.ndarray:
    """`unchanged` key by key, for a few rows."""
    rows: dict[int, list[tuple[int, int, int]]] = {}
    for k, x, label, d in zip(
        labels.keys.tolist(), labels.times[-1].tolist(), labels.vals[0].tolist(), labels.diffs.tolist()
    ):
        rows.setdefault(k, []).append((x, label, d))
    return np.array(_decided_python(delta, rows, t[-1], None), dtype=bool)


def unchanged_few(delta: Batch, labels: Spine, t: Time, proposals: Spine, inserted: bool = True) -> np.ndarray | None:
    """`unchanged` for a few keys (an update's case: one or two keys at most of its times),
    read from the arrangements span by span as Python values, with no array per batch (the
    column form's lookups cost a dozen numpy calls per batch, for a handful of rows); the
    removal of a key's greatest label is checked as `_still_proposed` does. ``delta`` may
    hold changes at several times of ``t``'s line, none before ``t`` (`line_wave`): each is
    checked against the labels from its own time on. ``inserted``: whether ``proposals``
    holds ``delta`` already (else its rows are counted with them). None when a label is not
    an int (the general path then)."""
    n = len(delta.ukeys)
    if not n:  # the changes cancelled
        return np.zeros(0, dtype=bool)
    if POLICY.spine_read(n):  # the compiled loops are loaded: each spine read whole in one call
        return _unchanged_spines(delta, labels, t, proposals, inserted)
    keys = delta.ukeys.tolist()
    if not all_ints(delta.vals[0]):
        return None
    rows: dict[int, list[tuple[int, int, int]]] = {}
    for b, i, lo, hi in key_spans(keys, labels.batches()):
        vals = b.vals[0][lo:hi].tolist()
        if max(vals) >= PAIRS:
            return None
        rows.setdefault(keys[i], []).extend(zip(b.times[-1][lo:hi].tolist(), vals, b.diffs[lo:hi].tolist()))

    def still_proposed(key: int, label: int, at: int) -> bool:
        bound = 0 if inserted else _pending(delta, keys.index(key), label, at)
        for b, _, lo, hi in key_spans([key], proposals.batches()):
            for v, x, d in zip(b.vals[0][lo:hi].tolist(), b.times[-1][lo:hi].tolist(), b.diffs[lo:hi].tolist()):
                if v == label and (x <= at or d < 0):
                    bound += d
        return bound >= 1

    return np.array(_decided_python(delta, rows, t[-1], still_proposed), dtype=bool)


def _unchanged_spines(delta: Batch, labels: Spine, t: Time, proposals: Spine, inserted: bool) -> np.ndarray | None:
    """`unchanged_few` in compiled calls (`_compiled.unchanged_spine`, `supported`): the label
    arrangement read whole through its address table, and the proposals' only for a key
    whose greatest label a change removes; no Python value per row, no call per batch."""
    from ._compiled import supported, unchanged_spine  # loaded: `Policy.spine_read` says so

    keys = np.ascontiguousarray(delta.ukeys)
    batches = labels.batches()
    if not batches:
        return np.zeros(len(keys), dtype=bool)
    ntimes = len(t)
    said, label, at, checks = unchanged_spine(
        keys, delta.starts, delta.vals[0], delta.times[-1], delta.diffs, address_table(batches), ntimes, PAIRS
    )
    if checks < 0:  # a label that is not an int
        return None
    if checks:
        held = proposals.batches()
        table = address_table(held) if held else None
        for i in np.flatnonzero(said == 2).tolist():
            most, since = int(label[i]), int(at[i])
            need = 1 if inserted else 1 - _pending(delta, i, most, since)
            said[i] = need <= 0 if table is None else supported(keys[i : i + 1], most, table, ntimes, since, need)
    return said.view(np.bool_)


def _pending(delta: Batch, i: int, label: int, at: int) -> int:
    """What the rows of ``delta``'s key ``i`` add to `_still_proposed`'s bound on the count of
    the proposal ``label`` at every line time from ``at`` on, before they are inserted."""
    lo, hi = int(delta.starts[i]), int(delta.starts[i + 1])
    bound = 0
    for v, x, d in zip(
        delta.vals[0][lo:hi].tolist(), delta.times[-1][lo:hi].tolist(), delta.diffs[lo:hi].tolist(), strict=True
    ):
        if v == label and (x <= at or d < 0):
            bound += d
    return bound


def _decided_python(
    delta: Batch,
    rows: dict[int, list[tuple[int, int, int]]],
    td: int,
    still_proposed: Callable[[int, int, int], bool] | None,
) -> list[bool]:
    """`unchanged`'s answer key by key, from each key's label ``rows`` (``(line position,
    label, diff)``, in any order): its labels consistent along the line from its first
    change on (at ``td`` or later), and each change, at its own position, adding no label
    smaller than the greatest from there on, removing none as small, or removing the
    greatest while it stays proposed from there on (``still_proposed(key, label,
    position)``, if given)."""
    starts = delta.starts.tolist()
    vals, when, diffs = delta.vals[0].tolist(), delta.times[-1].tolist(), delta.diffs.tolist()
    out = []
    for i, k in enumerate(delta.ukeys.tolist()):
        history = rows.get(k)
        if history is None:
            out.append(False)
            continue
        lo, hi = starts[i], starts[i + 1]
        first = max(td, min(when[lo:hi]))
        history = sorted((x if x > first else first, label, d) for x, label, d in history)
        # one label, with count 1, at each position from the first change on: a segment each
        segments: list[tuple[int, int]] = []
        acc: dict[int, int] = {}
        ok = history[0][0] == first  # a label at the first change itself
        for j, (x, label, d) in enumerate(history if ok else ()):
            acc[label] = acc.get(label, 0) + d
            if j + 1 < len(history) and history[j + 1][0] == x:
                continue
            present = [lab for lab, c in acc.items() if c]
            if len(present) != 1 or acc[present[0]] != 1:
                ok = False
                break
            segments.append((x, present[0]))
        if not ok:
            out.append(False)
            continue
        most = [label for _, label in segments]  # the greatest label from each segment on
        for g in range(len(most) - 2, -1, -1):
            most[g] = max(most[g], most[g + 1])
        check: tuple[int, int] | None = None  # a removal of the greatest label: (label, from)
        for j in range(lo, hi):
            g = 0
            while g + 1 < len(segments) and segments[g + 1][0] <= when[j]:
                g += 1
            greatest = most[g]
            if diffs[j] > 0:
                ok = vals[j] >= greatest
            elif vals[j] > greatest:
                ok = True
            elif vals[j] == greatest and still_proposed is not None and (check is None or check[0] == greatest):
                check = (greatest, when[j] if check is None else min(check[1], when[j]))
            else:
                ok = False
            if not ok:
                break
        if ok and check is not None and still_proposed is not None:
            ok = still_proposed(k, *check)
        out.append(ok)
    return out
