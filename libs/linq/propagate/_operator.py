"""`propagate`: least labels along edges, a loop body fused into one vertex.

Morally (differential-dataflow's ``propagate_at``)::

    labels = fixed point of  min_by_node(nodes entered at at(label)  +  labels ⋈ edges)

where ``labels ⋈ edges`` sends each node's label (plus the edge's weight) to the edge's
destination. The loop body is one reduce (min per node) and one join (labels with the edges,
both keyed by the node), so it runs as one vertex per worker (`Propagate`) around one feedback
edge: per iteration, one notification, with no stage between the reduce and the join. The
arrangements are the ones `Reduce` and `Join` use (`Spine`), and so is the treatment of
times: several epochs in flight, changes at the least upper bounds of a key's history.

``at`` lets labels in by size: a node's own label enters the loop at iteration
``at(label)`` (256 times its bit length for connected components), so the least label
floods the graph before larger ones even start, and each node's label changes about once
instead of once per label that passes by (the TR's prioritisation, §2.6, with no extra loop).
Nodes are counted once (the caller makes them distinct), so an edge change moves a node's
label or nothing.

Column-wise throughout for int node ids, labels and weights; other labels (strings, ...) take
a Python path per node for the minimum, and other weights per proposal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter, le
from time import perf_counter
from typing import Any

import numpy as np

from timely import KeyedState, LoopContext, Timestamp

from .._columns import (
    EMPTY,
    PAIRS,
    POLICY,
    Block,
    all_ints,
    block_of_codes,
    codes_of,
    consolidate,
    distinct,
    group_starts,
    order,
    route_of,
    time_runs,
    values_of,
)
from .._columns._codes import codes_of_values, release_unused
from .._errors import OperatorError
from .._keys import KeyOf
from .._lattice import Lattice
from .._linear import Route, by_destination, changes_in, split_by
from .._stateful import Stateful, paused_gc, pieces_of, restored_batch, rows_of_piece, rows_pieces
from .._trace import Batch, Rows, Spine, concat_rows, indexed, latest, matches, matches_each, time_columns
from .._trace._batch import SMALL_ROWS
from .._trace._reader import address_table
from ..collection import Collection, _lattices, lattice_of, operator_name
from ._covered import Covered
from ._exchange import line_messages
from ._least import (
    WAVE_ROWS,
    LineWalk,
    _negative,
    absorbs_wave,
    few_line_changes,
    later_keys,
    line_changes,
    line_wave,
    ranked_rows_of,
    rows_of,
    split_line,
    unchanged,
    unchanged_few,
    unchanged_many,
)
from ._proposals import as_pairs, few_pairs, few_proposals, next_batch

__all__ = ["Propagate", "by_size", "propagate"]

EDGES, NODES, PROPOSALS = 0, 1, 2

JOIN_SUMMED_BELOW = 1024
"""Deltas of fewer rows join all their times at once (`Propagate._join_summed`), their
proposals summed; larger ones (a first load's) take the compiled join per time and batch."""

LINE_JOIN_BELOW = 1 << 16
"""A step's label changes, fewer than this many (and once the compiled loops are loaded),
meet the edges in one compiled pass over the pairs (`Propagate._join_line`), whichever form
evaluated them: in a large SCC round (steps of a few thousand keys) a third of the CPU of the
join per time and batch; more (a first load's) take that join."""

ITERATE_SECONDS = 0.1
"""At most this long in one callback on the later iterations of a loop (`Propagate._iterate`):
then the runtime gets its turn, and the rest waits for its notifications."""


def propagate(
    edges: Collection,
    nodes: Collection,
    weighted: bool = False,
    at: Callable[[np.ndarray], np.ndarray] | None = None,
    name: str | None = None,
) -> Collection:
    """``(node, least label)`` for every node reached: ``nodes`` are ``(node, label)``, ``edges``
    ``(src, dst)`` (or ``(src, dst, weight)`` with ``weighted``, a label growing by the weight
    along the edge). ``at(labels)`` gives, column-wise, the iteration at which each node's own
    label enters (default: all at once)."""
    edges._same_scope("propagate", nodes)
    scope = edges.scope
    full = operator_name(scope, "propagate", name)
    loop = LoopContext(scope, full)
    lattice = lattice_of(scope).enter()
    _lattices[loop] = lattice
    first = KeyOf(itemgetter(0), full)
    feedback = loop.feedback("proposals")
    inputs = []
    for i, c in enumerate((edges, nodes)):
        entered = loop.ingress(c._blocks, f"enter{i}")
        inputs.append(entered.stage(f"route{i}", lambda: Route(first)))
    stage = loop.stage(
        "labels",
        lambda: Propagate(full, lattice, weighted, at),
        [*inputs, feedback.stream],
        exchange=[by_destination, by_destination, by_destination],
        outputs=2,
    )
    proposals, changes = stage
    feedback.connect(proposals)
    return Collection._of(loop.egress(changes, "result"), lattice_of(scope))


def by_size(labels: np.ndarray) -> np.ndarray:
    """The iteration at which a label enters: 256 times its bit length (``propagate_at``'s
    schedule: each order of magnitude gets 256 iterations to settle before the next)."""
    return 256 * np.frexp(labels.astype(np.float64))[1].astype(np.int64)


class Propagate(Stateful):
    """One worker's share of the loop body: the edges by source, the proposals and own labels
    by node (the min-reduce's input), the labels by node (its output)."""

    def __init__(
        self, op: str, lattice: Lattice, weighted: bool, at: Callable[[np.ndarray], np.ndarray] | None
    ) -> None:
        super().__init__(op, lattice)
        self.weighted = weighted
        self.at = at
        self.ntimes = lattice.depth + 1
        self.edges = Spine(2 if weighted else 1, self.ntimes)
        self.proposals = Spine(1, self.ntimes)
        self.labels = Spine(1, self.ntimes)
        self.staged: dict[tuple[int, ...], list[Rows | np.ndarray]] = {}
        """Per time: input rows to absorb, and arrays of keys to evaluate there (TR §4.3)."""
        self.staged_edges: dict[tuple[int, ...], list[Rows]] = {}
        """Per time: edge changes, arranged when the time is complete."""
        self.requested: set[tuple[int, ...]] = set()
        """Times of ``staged`` whose notification has been asked for and not yet delivered."""
        self.changed: list[Rows] = []
        """The label changes of the current callback, sent once at its end (`_send_changes`)."""
        self.walk: LineWalk | None = None
        """While `_iterate` walks a line: what is staged on it and what blocks it."""
        self.unwaved: tuple[int, ...] | None = None
        """A time whose step `_wave_edges` found its proposals would move a label: the step
        skips `line_wave`, whose check of the same proposals would say so again."""
        self.covered = Covered()
        """Each key's latest evaluation: a key staged where it covers is not evaluated again."""
        self.arrived = -1
        """With `_alone`, the latest epoch of a notification so far: every input at it or
        before has arrived."""

    # Compaction --------------------------------------------------------------------------------
    def _alone(self) -> bool:
        """Whether every notification shows which epochs are complete, so that compaction needs
        no end-of-epoch notification of its own (a runtime round an update: `watch`).

        With one worker and the loop in the top scope, inputs enter at loop counter 0 and
        nothing arrives on the feedback (this vertex keeps its own proposals, `_send`). A
        notification at ``(e, c)`` then means every input at an epoch ``<= e`` has arrived,
        since ``(e', 0) <= (e, c)`` (`arrived`: the latest such ``e``); what is still to do at
        those epochs is in ``staged`` and ``staged_edges``, which `on_notify` takes into
        account. So after any step, times of the epochs before both ``arrived + 1`` and the
        first staged one can no longer be told apart by anything still to come (TR §5.3), and
        the last step of the last epoch in flight compacts past every epoch so far. With
        peers, proposals arrive at any iteration; inside an outer loop, inputs arrive at every
        outer iteration: there a notification says nothing of other epochs, and the operator
        compacts from its input frontier like every stateful operator (`Stateful.catch_up`)."""
        return self.peers == 1 and self.ntimes == 2

    def watch(self, time: Timestamp) -> None:
        if self._alone():
            release_unused()  # what `Stateful.watch` does besides asking for the notification
            return
        super().watch(time)

    # Receiving ---------------------------------------------------------------------------------
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        block = changes_in(records)
        if not len(block):
            return
        t = tuple(time)
        if edge == EDGES:
            self._edges(block, t)
        elif edge == NODES:
            self._nodes(block, t)
        else:  # proposals along t's line, each at t plus its offset (`_exchange.line_messages`)
            dst, label, offsets = codes_of(block.cols[0]), codes_of(block.cols[1]), block.cols[2]
            if not offsets.any():
                self._stage(Rows.at(dst, [label], t, block.diffs), t)
            else:
                for d, rows in _runs(offsets):
                    u = (*t[:-1], t[-1] + d)
                    self._stage(Rows.at(dst[rows], [label[rows]], u, block.diffs[rows]), u)
        self._request(t)

    def _edges(self, block: Block, t: tuple[int, ...]) -> None:
        width = 3 if self.weighted else 2
        if block.arity != width:
            raise OperatorError(
                f"{self.op}: edges must be {'(src, dst, weight)' if self.weighted else '(src, dst)'} tuples, got {block.records()[:1]!r}"
            )
        try:
            cols = [codes_of(c) for c in block.cols]
        except TypeError:
            raise OperatorError(f"{self.op}: an edge cannot be hashed: {block.records()[:1]!r}") from None
        staged = self.staged_edges.get(t)
        if staged is None:
            self.staged_edges[t] = [Rows.at(cols[0], cols[1:], t, block.diffs)]
            if t not in self.requested:  # known to `_request`, which then asks for no later time of the line
                self.requested.add(t)
                self.notify_at(t)  # type: ignore[arg-type]
        else:
            staged.append(Rows.at(cols[0], cols[1:], t, block.diffs))

    def _absorb_edges(self, t: tuple[int, ...]) -> None:
        """A time's edge changes, all at once (one batch, however many messages brought them):
        they meet every label so far, then join the arrangement. An update's edge or two, in
        one message, become a batch as they were staged (summed in Python values by `Batch`):
        3.1 us of CPU against 7.8 for the general form's concatenations and consolidation."""
        staged = self.staged_edges.pop(t, None)
        if not staged:
            return
        if len(staged) == 1 and len(staged[0]) <= SMALL_ROWS:
            rows = staged[0]
            batch = Batch(rows, tidy=len(rows) == 1 and bool(rows.diffs[0]))  # one row, not zero: tidy as it is
        else:
            # every row is at ``t``: sum (key, values) alone and keep the times as zero-stride
            # columns, letting each copy go once the next is made (SCC's peak memory is here,
            # at the two million edges of a loop's first iteration)
            nvals = self.edges.nvals
            cols = [np.concatenate([p.keys for p in staged])]
            cols += [np.concatenate([p.vals[i] for p in staged]) for i in range(nvals)]
            diffs = np.concatenate([p.diffs for p in staged])
            staged.clear()
            cols, diffs = consolidate(cols, diffs)
            batch = Batch.at(cols[0], cols[1:], t, diffs, tidy=True)
            del cols, diffs
        if len(batch) and not self._wave_edges(batch, t):
            self._join(batch, self.labels, edges_first=True)
        self.edges.insert(batch)

    def _wave_edges(self, batch: Batch, t: tuple[int, ...]) -> bool:
        """An update's few edge changes met with the labels (`_proposals.few_pairs`), their
        proposals made straight into one batch at their next iterations (`next_batch`) and
        checked and absorbed as `line_wave` would absorb them once staged (`absorbs_wave`), or
        else staged as `_send` stages them; False (nothing done) when the general join must
        run. Only with one worker and nothing else staged, so that the proposals would be
        all that `line_wave` finds staged, and on ``t``'s line, so that it would take them
        all: the batch then skips the arrays made per time, their concatenation and a
        second sort."""
        if self.peers > 1 or self.staged or self.staged_edges:
            return False
        batches = self.labels.batches()
        found = few_pairs(batch, batches, True, self.weighted) if batches else None
        if found is None:
            return False
        if not found:  # no label at the source (unreached): nothing to propose, no batch to make
            return True
        prefix = t[:-1]
        if all(u[:-1] == prefix for u in found):
            delta = next_batch(found, self.ntimes)
            if len(delta) <= WAVE_ROWS:  # what `line_wave` would take: all of them
                if absorbs_wave(delta, t, self.proposals, self.labels):
                    return True
                self.unwaved = t  # and its check would fail again
        self._send(as_pairs(found))
        return True

    def _nodes(self, block: Block, t: tuple[int, ...]) -> None:
        if block.arity != 2:
            raise OperatorError(f"{self.op}: nodes must be (node, label) pairs, got {block.records()[:1]!r}")
        try:
            node, label = codes_of(block.cols[0]), codes_of(block.cols[1])
        except TypeError:
            raise OperatorError(f"{self.op}: a node or label cannot be hashed: {block.records()[:1]!r}") from None
        if self.at is None or not all_ints(label):  # labels that are not ints enter at once
            self._stage(Rows.at(node, [label], t, block.diffs), t)
            return
        for offset, rows in _runs(np.asarray(self.at(label), dtype=np.int64)):
            u = (*t[:-1], t[-1] + offset)
            self._stage(Rows.at(node[rows], [label[rows]], u, block.diffs[rows]), u)

    def _stage(self, rows: Rows | np.ndarray, t: tuple[int, ...]) -> None:
        """Rows to absorb (or keys to evaluate) at ``t``; the notification is asked for by
        `_request` once the callback has done what it can itself."""
        staged = self.staged.get(t)
        if staged is None:
            self.staged[t] = [rows]
            if self.walk is not None:
                self.walk.add(t)
        else:
            staged.append(rows)

    def _request(self, held: tuple[int, ...] | None = None, walked: bool = False) -> None:
        """A notification for every staged time; with one worker, only for the first staged
        time of each line not behind a requested one: `_iterate` goes on from there along the
        line, and asks again for what it leaves (a notification per time it covered would be
        delivered to an empty ``staged``, a runtime round each).

        ``held``: the time of the callback (a message's, or a notification's after its walk,
        ``walked``), at or after which it may ask. With one worker, a line with no time
        requested yet is asked for as early as ``held`` allows, ``held``'s last coordinate,
        rather than at its first staged time: a later input on the line (an edge change at its
        first iteration) then finds the line requested, and one walk takes both, where the
        notification at the staged time would be delivered after that walk, to nothing. In
        SCC's inner loops: an update's edge change and a new node's own label entering at
        ``at(label)``; proposals joined with edges of a later outer iteration and the edge
        changes of that iteration. Not ``held``'s own line after its walk: what the walk left
        is blocked, and asking for ``held`` again would deliver the same step at once."""
        if self.peers > 1:
            for t in self.staged:
                if t not in self.requested:
                    self.requested.add(t)
                    self.notify_at(t)  # type: ignore[arg-type]
            return
        first: dict[tuple[int, ...], int] = {}
        for t in self.staged:
            x = first.get(t[:-1])
            if x is None or t[-1] < x:
                first[t[:-1]] = t[-1]
        if held is not None:
            prefix, x = held[:-1], held[-1]
            for line, y in first.items():
                if x < y and (line != prefix or not walked) and all(map(le, prefix, line)):
                    first[line] = x
        for t in self.requested:
            x = first.get(t[:-1])
            if x is not None and t[-1] <= x:
                del first[t[:-1]]
        for prefix, x in first.items():
            t = (*prefix, x)
            self.requested.add(t)
            self.notify_at(t)  # type: ignore[arg-type]

    # The min-reduce, then the join ---------------------------------------------------------------
    def on_notify(self, time: Timestamp) -> None:
        t = tuple(time)
        self.requested.discard(t)
        self.changed = []
        self._process(t)
        if self.peers == 1:
            self._iterate(t)
        self._send_changes(t)
        self._request(t, walked=True)
        if self._alone():
            self.arrived = max(self.arrived, t[0])
            epoch: int | None = self.arrived + 1
        else:
            epoch = self.epoch_completed(t)
        if epoch is not None:
            self.compact(epoch)

    def compact(self, epoch: int) -> None:
        if self.staged or self.staged_edges:
            epoch = min(epoch, *(s[0] for s in self.staged), *(s[0] for s in self.staged_edges))
        if self.compaction(epoch):
            for spine in (self.edges, self.proposals, self.labels):
                spine.advance_to(epoch)

    def _iterate(self, t: tuple[int, ...]) -> None:
        """With one worker, the later times of ``t``'s line, in order, while nothing else can
        arrive before them: inputs enter at loop counter 0, so once ``t`` is complete any input
        at or before ``(t[:-1], x)`` has arrived, and the proposals this vertex sends round the
        loop come back to itself (it keeps them, `_send`). A time of ``staged`` at or before
        the next one (another epoch in flight) stops it, as does `ITERATE_SECONDS`."""
        if not self.staged:  # an update that moved no label: nothing to walk
            return
        deadline = perf_counter() + ITERATE_SECONDS
        walk = self.walk = LineWalk(self.staged, t)  # `_stage` tells it what is staged meanwhile
        try:
            while perf_counter() < deadline:
                u = walk.next(self.staged)
                if u is None:
                    return
                for s in self.staged_edges:
                    if s != u and all(map(le, s, u)):
                        return
                walk.x = u[-1]
                self._process(u)
        finally:
            self.walk = None

    def _process(self, t: tuple[int, ...]) -> None:
        """What is staged at ``t``: edge changes, proposals, keys to evaluate."""
        if self.staged_edges:
            self._absorb_edges(t)
        if self.peers > 1 or self.unwaved == t:
            staged = self.staged.pop(t, None)
            self.unwaved = None
        else:
            staged = line_wave(self.staged, self.staged_edges, t, self.proposals, self.labels, self.walk)
        if staged is not None:
            rows = concat_rows([r for r in staged if not isinstance(r, np.ndarray)], 1, self.ntimes)
            keys = [r for r in staged if isinstance(r, np.ndarray)]
            if keys:  # staged by evaluations elsewhere: those evaluated since on this line are done
                uncovered = self.covered.uncovered(np.concatenate(keys) if len(keys) > 1 else keys[0], t)
                keys = [] if not len(uncovered) else [distinct(uncovered) if len(keys) > 1 else uncovered]
            labels = None
            if len(rows):
                batch = Batch(rows)
                self.proposals.insert(batch)
                touched, labels = self._touched(batch, t)
                keys.append(touched)
            if len(keys) == 1 and labels is not None:  # the labels are read: only those keys
                self._evaluate(keys[0], t, labels)
            elif keys:
                ukeys = distinct(np.concatenate(keys)) if len(keys) > 1 else keys[0]
                self._evaluate(ukeys, t)

    def _touched(self, delta: Batch, t: tuple[int, ...]) -> tuple[np.ndarray, Rows | None]:
        """The keys of proposal changes at ``t`` whose labels may change (`_least.unchanged`),
        and their label rows if it read them. Only when no row of either arrangement lies off
        ``t``'s line (no other epoch in flight, no later outer iteration): the key's joins
        with such rows would need evaluating too."""
        prefix = t[:-1]
        for spine in (self.proposals, self.labels):
            top = latest(spine.batches())
            if top is not None and any(u > c for u, c in zip(top[:-1], prefix)):
                return delta.ukeys, None
        tier = POLICY.keys_tier(len(delta.ukeys))
        if tier == "python":  # an update's few keys: read span by span
            keep = unchanged_few(delta, self.labels, t, self.proposals)
            if keep is not None:
                return delta.ukeys[~keep], None
        if tier == "compiled":  # many keys: their labels are not gathered
            return delta.ukeys[~unchanged_many(delta, self.labels, t, self.proposals)], None
        labels, ranks = ranked_rows_of(self.labels, delta.ukeys)
        keep = ~unchanged(delta, labels, t, self.proposals, ranks)
        if keep.all():
            return delta.ukeys, labels
        return delta.ukeys[keep], labels.take(keep[ranks]) if len(labels) else labels

    def _evaluate(self, keys: np.ndarray, t: tuple[int, ...], labels: Rows | None = None) -> None:
        """``keys`` at ``t`` and at the later times of ``t``'s line (`_least`); the joins of
        ``t`` with the rest of their history are scheduled. ``labels``: the keys' label rows,
        if the caller has read them (used for many keys; a few are read again, as Python
        values, by `few_line_changes`)."""
        if not len(keys):
            return
        self.covered.evaluated(keys, t)
        matrix = None  # the changes as the compiled step made them, for the compiled join
        found: Rows
        stepped = _stepped(self.proposals, self.labels, keys, t, self.op)
        few = (
            few_line_changes(self.proposals, self.labels, keys.tolist(), t, self.op)
            if (stepped is None and POLICY.keys_tier(len(keys)) == "python")
            else None
        )
        if stepped is not None:
            found, later, matrix = stepped
        elif few is not None:
            found, later = few
        else:
            on_p, off_p = split_line(rows_of(self.proposals, keys), t)
            on_l, off_l = split_line(rows_of(self.labels, keys) if labels is None else labels, t)
            found = line_changes(on_p, on_l, keys, t, self.op)
            later = later_keys([off_p, off_l], t)
        changes = found if isinstance(found, Batch) else Batch(found)
        if len(changes):
            self.labels.insert(changes)
            self.changed.append(changes)
            if matrix is None and POLICY.eager and JOIN_SUMMED_BELOW <= len(changes) < LINE_JOIN_BELOW:
                # the column form's changes (on the line, by key) as the compiled step makes them
                matrix = np.stack([changes.keys, changes.vals[0], changes.times[-1], changes.diffs])
            if matrix is None or not self._join_line(matrix, t):
                self._join(changes, self.edges, edges_first=False)
        for u, ks in later.items():
            self._stage(ks, u)

    def _send_changes(self, t: tuple[int, ...]) -> None:
        """The label changes of a callback (`changed`: every step it took along ``t``'s line)
        out of the loop as one message at ``t``, summed per (node, label).

        Only the loop's egress reads them, and it forgets the loop counter: the result at
        ``t[:-1]`` is the sum over every iteration, so a change may leave at any iteration
        of its line that the callback can still send at (``t``, the earliest), and a label
        that came and went within the callback leaves as nothing. One message per callback,
        instead of one per step and time, is what keeps the operators after the loop (SCC's
        trimming joins) from paying their fixed cost per step."""
        changed, self.changed = self.changed, []
        if not changed:
            return
        rows = concat_rows(changed, 1, self.ntimes)
        (node, label), diffs = consolidate([rows.keys, rows.vals[0]], rows.diffs)
        if len(diffs):
            self.send_by(self.outputs[1], [block_of_codes([node, label], 2, diffs)], t)  # type: ignore[arg-type]

    def _join(self, delta: Batch, spine: Spine, edges_first: bool) -> None:
        """Label changes with edges (or edge changes with labels): a proposal ``(dst, label
        [+ weight])`` for each match, at the join of the two times, sent round the loop.

        The delta is taken a time at a time (label changes come at a few line times): a
        batch whose times are all at or before that time (the edges, compacted into the
        current epoch) gives every match that time, so no time column is gathered, joined
        or sorted for it; a batch on its line (the labels, met by edge changes) gives each
        match's last coordinate from the same compiled loop; other batches' matches are
        grouped by their joined times. The delta is a batch, so each time's rows come sorted
        by key (`_by_time`), as the compiled join wants them."""
        batches = spine.batches()
        if not batches:
            return
        few = few_proposals(delta, batches, edges_first, self.weighted)  # an update's few rows: `_proposals`
        if few is not None:
            self._send(few)
            return
        if len(delta) < JOIN_SUMMED_BELOW:
            self._join_summed(delta, spine, edges_first)
            return
        out: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        for u, rows in _by_time(delta):
            rest = batches
            keys = rows.keys
            if not self.weighted and POLICY.keys_tier(len(keys)) == "compiled":
                from ._compiled import join_values  # numba: arrays are large

                sorted_keys = np.ascontiguousarray(keys)
                rest = []
                for batch, index in indexed(sorted_keys, batches):  # the batches the keys' range meets
                    if _at_or_before(batch, u):
                        last = EMPTY  # every match at u
                    elif all(x <= c for x, c in zip(batch.latest[:-1], u[:-1])):
                        last = batch.times[-1]  # matches on u's line, at their last coordinates
                    else:
                        rest.append(batch)
                        continue
                    # the pairs' values and diffs (and where on the line) in one compiled loop
                    mine, theirs, diffs, at = join_values(
                        sorted_keys,
                        rows.vals[0],
                        rows.diffs,
                        *index,
                        batch.vals[0],
                        batch.diffs,
                        last,
                        u[-1],
                    )
                    if not len(diffs):
                        continue
                    pair = (mine, theirs, diffs) if edges_first else (theirs, mine, diffs)
                    if not len(at):
                        out.setdefault(u, []).append(pair)
                    elif int(at.min()) == int(at.max()):  # one line time: no gather
                        out.setdefault((*u[:-1], int(at[0])), []).append(pair)
                    else:
                        for x, part in _runs(at):
                            out.setdefault((*u[:-1], x), []).append(tuple(c[part] for c in pair))
            later: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]] = []
            for batch, idx, rank in matches_each(keys, rest):
                edge_rows, edge_idx, label_rows, label_idx = (
                    (rows, rank, batch, idx) if edges_first else (batch, idx, rows, rank)
                )
                dst = edge_rows.vals[0][edge_idx]
                label = label_rows.vals[0][label_idx]
                if self.weighted:
                    label = _add(label, edge_rows.vals[1][edge_idx], self.op)
                diffs = rows.diffs[rank] * batch.diffs[idx]
                if _at_or_before(batch, u):
                    out.setdefault(u, []).append((dst, label, diffs))
                else:
                    later.append((dst, label, diffs, [np.maximum(col[idx], c) for col, c in zip(batch.times, u)]))
            if later:  # the matches with rows at later times, grouped by their joined times at once
                dst = np.concatenate([p[0] for p in later])
                label = np.concatenate([p[1] for p in later])
                diffs = np.concatenate([p[2] for p in later])
                times = [np.concatenate([p[3][i] for p in later]) for i in range(len(u))]
                order_ = order(times)
                times = [c[order_] for c in times]
                for v, s, e in time_runs(times):
                    part = order_[s:e]
                    out.setdefault(v, []).append((dst[part], label[part], diffs[part]))
        self._send(out)

    def _join_line(self, changes: np.ndarray, t: tuple[int, ...]) -> bool:
        """`_join` of a step's label changes as `_stepped` made them (`_line.line_step`'s
        matrix; or the column form's, put in that matrix by `_evaluate`) with the edges, in
        one compiled pass over the pairs (`_line.line_join`), the proposals summed per (time,
        node, label) as `_join_summed` sums them; False (nothing sent) for a large step (a
        first load's: the per-time join keeps its arrays small) or a weight that is not an int."""
        batches = self.edges.batches()
        if not batches:
            return True
        if changes.shape[1] >= LINE_JOIN_BELOW:
            return False
        from ._line import line_join  # loaded: the policy is eager (`linq.preload`)

        pairs, status = line_join(changes, address_table(batches), np.array(t, dtype=np.int64), self.edges.nvals, PAIRS)
        if status:
            return False
        if not pairs.shape[1]:
            return True
        ntimes = len(t)
        cols, diffs = consolidate(list(pairs[: ntimes + 2]), pairs[ntimes + 2])
        if not len(diffs):
            return True
        dst, label = cols[ntimes], cols[ntimes + 1]
        runs = time_runs(cols[:ntimes])
        if self.peers > 1:
            self._send({u: [(dst[s:e], label[s:e], diffs[s:e])] for u, s, e in runs})
            return True
        # kept, as `_send` keeps them, at the next iteration: each time's rows are slices of
        # the summed columns (no time column made per time, about nine times a step in SCC)
        times = [*cols[: ntimes - 1], cols[ntimes - 1] + 1]
        for u, s, e in runs:
            self._stage(Rows(dst[s:e], [label[s:e]], [c[s:e] for c in times], diffs[s:e]), (*u[:-1], u[-1] + 1))
        return True

    def _join_summed(self, delta: Batch, spine: Spine, edges_first: bool) -> None:
        """`_join` of a small delta, all its times at once: one read of the matches in every
        batch (`matches`), each pair at the join of its two times, and the proposals summed
        per (time, node, label) before they are sent, so that an edge's history that adds up
        to nothing (an edge removed in a later batch than the one that added it) proposes
        nothing, instead of a proposal and its cancellation for the next step to read and
        consolidate. A loop step's few label changes thus cost a handful of array calls,
        not a few per time and per batch."""
        found = matches(delta.keys, spine.batches(), spine.nvals, spine.ntimes)
        if found is None:
            return
        rank, rows = found
        if edges_first:
            dst, label = delta.vals[0][rank], rows.vals[0]
            weight = delta.vals[1][rank] if self.weighted else None
        else:
            dst, label = rows.vals[0], delta.vals[0][rank]
            weight = rows.vals[1] if self.weighted else None
        if weight is not None:
            label = _add(label, weight, self.op)
        times = [np.maximum(col, mine[rank]) for col, mine in zip(rows.times, delta.times)]
        cols, diffs = consolidate([*times, dst, label], rows.diffs * delta.diffs[rank])
        if not len(diffs):
            return
        ntimes = len(times)
        times, dst, label = cols[:ntimes], cols[ntimes], cols[ntimes + 1]
        out = {u: [(dst[s:e], label[s:e], diffs[s:e])] for u, s, e in time_runs(times)}
        self._send(out)

    def _send(self, out: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]) -> None:
        """Proposals at their times, for the next iteration: those for this worker's own nodes
        are kept, staged at the next iteration (the feedback would bring them back here at that
        time: `_iterate` with one worker; with peers, the notification `_request` asks for), and
        the rest go round the loop to their nodes' workers, one message per line (`_exchange`)."""
        peers = self.peers
        away: list[tuple[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = []
        for u, parts in out.items():
            if len(parts) == 1:
                dst, label, diffs = parts[0]
            else:
                dst, label, diffs = (np.concatenate(c) for c in zip(*parts))
            if not len(dst):
                continue
            v = (*u[:-1], u[-1] + 1)
            if peers == 1:
                self._stage(Rows.at(dst, [label], v, diffs), v)
                continue
            dest = route_of(dst) % peers
            mine = dest == self.worker_index
            if mine.any():
                if mine.all():
                    self._stage(Rows.at(dst, [label], v, diffs), v)
                    continue
                self._stage(Rows.at(dst[mine], [label[mine]], v, diffs[mine]), v)
                theirs = ~mine
                dst, label, diffs, dest = dst[theirs], label[theirs], diffs[theirs], dest[theirs]
            away.append((u, (dst, label, diffs), dest))
        for u, block, dest in line_messages(away):
            self.send_by(self.outputs[0], split_by(block, dest, peers), u)  # type: ignore[arg-type]

    # Checkpoints -------------------------------------------------------------------------------
    def checkpoint(self) -> KeyedState | None:
        if not len(self.edges) and not len(self.proposals) and not self.staged and not self.staged_edges:
            return None
        pieces: list[tuple[int, Any]] = []
        with paused_gc():
            for tag, spine in enumerate((self.edges, self.proposals, self.labels)):
                spine.compact()
                rows = spine.rows()
                arity = len(rows.vals)
                pieces.extend(rows_pieces((tag, arity), rows, route_of(rows.keys), arity))
            for staged_edges in self.staged_edges.values():
                rows = concat_rows(staged_edges, self.edges.nvals, self.ntimes)
                pieces.extend(rows_pieces((5, len(rows.vals)), rows, route_of(rows.keys), len(rows.vals)))
            for t, staged in self.staged.items():
                rows = concat_rows([r for r in staged if not isinstance(r, np.ndarray)], 1, self.ntimes)
                keys = [r for r in staged if isinstance(r, np.ndarray)]
                pieces.extend(rows_pieces((3, 1), rows, route_of(rows.keys), 1))
                if keys:
                    k = distinct(np.concatenate(keys))
                    empty = Rows(k, [k], [np.full(len(k), c, dtype=np.int64) for c in t], np.zeros(len(k), np.int64))
                    pieces.extend(rows_pieces((4, 1), empty, route_of(k), 1))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        with paused_gc():
            parts: dict[int, list[Rows]] = {}
            for _, piece in pieces_of(self.op, state):
                tag = piece[0][0]
                parts.setdefault(tag, []).append(rows_of_piece(piece, self.ntimes, _recode))
            for tag, spine in enumerate((self.edges, self.proposals, self.labels)):
                if tag in parts:
                    spine.insert(
                        restored_batch(self.op, parts[tag], spine.nvals, self.ntimes, self.worker_index, self.peers)
                    )
            for rows in parts.get(5, []):
                for i in range(len(rows)):
                    u = tuple(int(c[i]) for c in rows.times)
                    self.staged_edges.setdefault(u, []).append(rows.take(slice(i, i + 1)))
            for tag in (3, 4):
                for rows in parts.get(tag, []):
                    for i in range(len(rows)):
                        u = tuple(int(c[i]) for c in rows.times)
                        item: Any = rows.take(slice(i, i + 1)) if tag == 3 else rows.keys[i : i + 1]
                        self.staged.setdefault(u, []).append(item)


STEP_BELOW = 1024
"""Below this many keys (and once the compiled loops are loaded), a step reads and evaluates
its keys in one compiled call (`_line.line_step`); a larger one (a first load's, or a large
SCC round's, at the same CPU) takes the column form, whose arrays are sized by the rows, not
by the keys times the batches."""


def _stepped(
    proposals: Spine, labels: Spine, keys: np.ndarray, t: tuple[int, ...], op: str
) -> tuple[Batch, dict[tuple[int, ...], np.ndarray], np.ndarray] | None:
    """`_least.line_changes` of ``keys`` (sorted, distinct), as a batch, and the keys to evaluate later
    (`_least.later_keys`), both read and computed in one compiled call (`_line.line_step`),
    and the changes as that call made them (rows key, label, position, diff: `_join_line`);
    None when the policy keeps the compiled loops out, a spine is empty, or the call gives
    up (labels that are not ints, a hub key): the general forms then."""
    if not POLICY.eager or len(keys) >= STEP_BELOW:
        return None
    held_p, held_l = proposals.batches(), labels.batches()
    if not held_p or not held_l:
        return None
    from ._line import NEGATIVE, line_step  # loaded: the policy is eager

    changes, off, status = line_step(
        np.ascontiguousarray(keys),
        address_table(held_p),
        address_table(held_l),
        np.array(t, dtype=np.int64),
        PAIRS,
    )
    if status == NEGATIVE:
        raise _negative(op, int(changes[0, 0]), int(changes[1, 0]), int(changes[2, 0]), t)
    if status:
        return None
    prefix = time_columns(t[:-1], changes.shape[1])
    found = Batch(Rows(changes[0], [changes[1]], [*prefix, changes[2]], changes[3]), tidy=True)  # in order
    later: dict[tuple[int, ...], np.ndarray] = {}
    if off.shape[1]:
        (*times, key), _ = consolidate(list(off), np.ones(off.shape[1], dtype=np.int64))
        for u, s, e in time_runs(times):
            later[u] = key[s:e]
    return found, later, changes


def _at_or_before(batch: Batch, u: tuple[int, ...]) -> bool:
    """Whether every row of ``batch`` is at or before ``u`` (so its join with ``u`` is ``u``)."""
    return all(x <= c for x, c in zip(batch.latest, u))


def _by_time(rows: Rows) -> Iterator[tuple[tuple[int, ...], Rows]]:
    """``rows`` split by time: each distinct time with its rows (in their order)."""
    if all(int(c.min()) == int(c.max()) for c in rows.times):
        yield tuple(int(c[0]) for c in rows.times), rows
        return
    idx = order(rows.times)
    times = [c[idx] for c in rows.times]
    for u, s, e in time_runs(times):
        yield u, rows.take(np.sort(idx[s:e]))  # the rows' own order: by key


def _runs(column: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each distinct value of an int ``column``, in increasing order, with the indices of its rows."""
    idx = np.argsort(column, kind="stable")
    ordered = column[idx]
    starts = group_starts([ordered]).tolist()
    for s, e in zip(starts, [*starts[1:], len(idx)]):
        yield int(ordered[s]), idx[s:e]


def _recode(block: Block) -> list[np.ndarray]:
    return [codes_of(c) for c in block.cols]


def _add(labels: np.ndarray, weights: np.ndarray, op: str) -> np.ndarray:
    """Label codes plus weight codes, as codes (column-wise for ints)."""
    if all_ints(labels) and all_ints(weights):
        return labels + weights
    try:
        return codes_of_values([a + b for a, b in zip(values_of(labels), values_of(weights))], len(labels))
    except TypeError as exc:
        raise OperatorError(f"{op}: cannot add a weight to a label: {exc}") from exc
