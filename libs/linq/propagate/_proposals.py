"""`Propagate`'s join for a few rows, in Python values: an update's proposals.

An update's join meets one or two changed rows (an edge, or a node's new label) with the few
rows of their keys in the other arrangement (the node's labels at the iterations where they
changed, or its out-edges). The column form (`Propagate._join`) then costs a few dozen numpy
calls per time for a handful of pairs: a search per batch, a gather per column, a sort of
the joined times and a split by them. Here each key's rows are read span by span as Python
values (`key_spans`) and the pairs are grouped by their joined time in a dict and summed per (node, label), as
`Propagate._join_summed` sums them; the result is the same proposals, with arrays built once
per joined time.
"""

from __future__ import annotations

import numpy as np

from .._columns import PAIRS, POLICY
from .._trace import Batch, Rows, key_spans

__all__ = ["FEW_PAIRS", "Found", "Pairs", "as_pairs", "few_pairs", "few_proposals", "next_batch"]

FEW_PAIRS = 256
"""Up to this many (delta row, arrangement row) pairs, the join runs in Python values; a key
with more rows (a hub's edges) takes the column form."""

Time = tuple[int, ...]
Pairs = dict[Time, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]
"""Per joined time: ``(destination, label, diff)`` columns (`Propagate._join`'s ``out``)."""
Found = dict[Time, dict[tuple[int, int], int]]
"""Per joined time: ``(destination, label)`` to its summed diff, as Python ints (`few_pairs`)."""


def few_pairs(delta: Batch, batches: list[Batch], edges_first: bool, weighted: bool) -> Found | None:
    """The proposals of ``delta`` joined with ``batches`` (an arrangement's), by joined time,
    as Python values: per time, ``(destination, label)`` to the summed diff (zeros kept):
    ``delta`` edge changes ``(src, dst[, weight])`` against labels ``(node, label)`` when
    ``edges_first``, else label changes against edges. A proposal goes to the edge's
    destination with the label (plus the edge's weight, ``weighted``), at the join of the
    two rows' times, with the product of their diffs. None when ``delta`` has more keys than
    the Python tier takes, the pairs are more than `FEW_PAIRS`, or a weighted label or
    weight is not an int (the column form then)."""
    if POLICY.keys_tier(len(delta.ukeys)) != "python":
        return None
    keys = delta.ukeys.tolist()
    if not keys:
        return {}
    starts = delta.starts.tolist()
    d_vals = [c.tolist() for c in delta.vals]
    d_times = list(zip(*(c.tolist() for c in delta.times)))
    d_diffs = delta.diffs.tolist()
    if weighted and max(d_vals[0 if not edges_first else 1]) >= PAIRS:
        return None
    spans = list(key_spans(keys, batches))
    pairs = 0
    for _, i, lo, hi in spans:
        pairs += (hi - lo) * (starts[i + 1] - starts[i])
    if pairs > FEW_PAIRS:
        return None
    found: dict[Time, dict[tuple[int, int], int]] = {}
    for b, i, lo, hi in spans:
        vals = b.vals[0][lo:hi].tolist()
        weights = b.vals[1][lo:hi].tolist() if weighted and not edges_first else None
        if weighted and max(vals if weights is None else weights) >= PAIRS:
            return None
        times = list(zip(*(c[lo:hi].tolist() for c in b.times)))
        diffs = b.diffs[lo:hi].tolist()
        for r in range(starts[i], starts[i + 1]):
            mine, at, d = d_vals[0][r], d_times[r], d_diffs[r]
            for q, theirs in enumerate(vals):
                time = tuple(map(max, at, times[q]))
                if edges_first:  # an edge (mine) meets a label (theirs)
                    dst, label = mine, theirs + d_vals[1][r] if weighted else theirs
                else:  # a label (mine) meets an edge (theirs)
                    dst, label = theirs, mine + weights[q] if weights is not None else mine
                out = found.get(time)
                if out is None:
                    out = found[time] = {}
                out[dst, label] = out.get((dst, label), 0) + d * diffs[q]
    return found


def few_proposals(delta: Batch, batches: list[Batch], edges_first: bool, weighted: bool) -> Pairs | None:
    """`few_pairs` as `Propagate._join`'s ``out``: per joined time, its proposals' columns."""
    found = few_pairs(delta, batches, edges_first, weighted)
    return None if found is None else as_pairs(found)


def as_pairs(found: Found) -> Pairs:
    """`few_pairs`'s answer as columns per joined time, the proposals that sum to zero left out."""
    proposals: Pairs = {}
    for time, summed in found.items():  # summed per (node, label): a history that adds up to nothing proposes nothing
        kept = [(dst, label, d) for (dst, label), d in summed.items() if d]
        if kept:
            dst, label, d = zip(*kept)
            proposals[time] = [
                (np.array(dst, dtype=np.int64), np.array(label, dtype=np.int64), np.array(d, dtype=np.int64))
            ]
    return proposals


def next_batch(found: Found, ntimes: int) -> Batch:
    """`few_pairs`'s answer as one batch at the next iteration of each joined time (where
    `Propagate._send` stages them): sorted and summed in Python values, so the batch is
    made with its arrays once, not per time and again when a step concatenates the times."""
    rows: dict[tuple[int, ...], int] = {}
    for time, summed in found.items():
        after = (*time[:-1], time[-1] + 1)
        for (dst, label), d in summed.items():
            if d:
                rows[(dst, label, *after)] = d
    if not rows:
        return Batch(Rows.empty(1, ntimes))
    table = sorted(rows)
    cols = np.array(table, dtype=np.int64).T.copy()
    diffs = np.array([rows[r] for r in table], dtype=np.int64)
    return Batch(Rows(cols[0], [cols[1]], list(cols[2:]), diffs), tidy=True)
