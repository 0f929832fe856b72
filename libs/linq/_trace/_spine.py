"""`Spine`: a trace as a few batches of geometrically growing size, merged a little at a time.

differential-dataflow's fueled spine, in numpy. Each level ``L`` holds at most one batch of
about ``2**L`` rows, or one merge in progress of two such batches. A batch inserted at a level
that already holds a batch starts a merge of the two; a merge advances by a number of rows
(its *fuel*) proportional to the rows inserted since, so no single insertion pays for merging
millions of rows: it pays for its share. A merge works through both inputs by key range, a
chunk at a time, and the merged batch replaces its inputs when it is complete; until then the
inputs stay readable, so readers never see a half-merged state. A merge that must make room
for another batch at its level is finished at once (rare when fuel keeps pace).

A large merge (`BACKGROUND_ROWS`) runs whole on the process's merge thread instead: its
compiled loops and numpy's sort release the GIL, so with a second core the operator does not
wait for it (a batch of 10,000 edge changes to connected components spent a sixth of its time
merging). Only the operator's own thread changes the levels: it adopts a finished merge when
it next reads, inserts or calls `Spine.advance_to`, and waits for one it needs out of the way.
The batches a reader sees may therefore depend on timing; the rows they hold never do.

Contract of logical compaction (`Spine.advance_to`): after ``advance_to(E)``, the trace may
move the time of any row of an epoch before ``E`` to the same time in epoch ``E``, and sum
rows that then agree. For every time ``t`` with ``t[0] >= E`` the accumulation at ``t`` (the
sum of diffs of rows whose time is ``<= t``) is unchanged; at times of epochs before ``E`` it
is forgotten (reading it is an error the trace cannot detect: the operator must not ask).
Calling ``advance_to`` with an earlier epoch than before changes nothing.

Contract of physical compaction (the merges): rows are summed across the batches they arrived
in, so the trace forgets *when* a difference was inserted and keeps only its (key, value,
time) and diff. Readers therefore get rows, never insertion order; an operator that needs to
know what it has already seen (a join's delta) keeps that itself.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from .._columns import consolidate_parts
from ._batch import Batch, Rows, concat_rows
from ._frontier import Antichain, Time
from ._reader import SpineReads, accumulate, key_totals, later_times, matches_each, spine_batches

__all__ = ["Spine"]

FUEL_PER_ROW = 4
"""Rows of merge work done per row inserted (differential-dataflow's default effort is of the
same order): enough that a merge finishes before another batch reaches its level."""
MIN_CHUNK = 4096
"""Smallest chunk a merge step takes: below it, numpy's per-call cost dominates."""
SMALL = 64
"""Batches up to this many rows merge at once on insertion: they cost less than a merge step."""
TAIL = 1024
"""Batches up to this many rows join the spine's tail (`Spine.tail`), not a level."""
TAIL_BATCHES = 8
"""The tail's batches are merged into one when there are this many."""
BACKGROUND_ROWS = 1 << 16
"""Merges of at least this many rows run whole on the merge thread (`_merger`), off the
operator's path: their loops (numba's and numpy's sorts) release the GIL, so on a second core
they cost the operator nothing; it keeps reading the two inputs until it adopts the result."""
FINISH_CHUNK = 1 << 18
"""Rows a merge finished at once (on the merge thread, or to make room) takes per step: one
step over millions of rows would hold several temporary copies of them at the same time."""

_pool: ThreadPoolExecutor | None = None


class _Finished(threading.local):
    """Per operator thread: the spines with a merge the merge thread has finished and they
    have not adopted yet (`_adopt_finished`)."""

    def __init__(self) -> None:
        self.spines: deque[Spine] = deque()


_finished = _Finished()


def _done(spines: deque[Spine], spine: Spine, future: Future[Batch]) -> None:
    """On the merge thread, once a merge of ``spine`` is done: its operator thread's list."""
    spines.append(spine)


def _adopt_finished() -> None:
    """Adopt the finished merges of every spine of this thread, not only the caller's. A
    finished merge holds its two inputs and its result until its spine adopts it, and the
    spine of an operator that is not running (SCC's first trim while the second runs) would
    hold both for as long: on 2M edges, 0.3 GiB twice over at the peak. Adopting changes
    which batches hold the rows, never the rows (the module's contract), and happens here
    only on the operator thread, at the start of any spine's insert."""
    spines = _finished.spines
    while spines:
        spines.popleft()._adopt()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
"""glibc's ``mallopt`` parameters (``malloc.h``)."""
MALLOC_SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, 8 << 20), (M_TRIM_THRESHOLD, 64 << 20))
"""What `_tune_malloc` sets: one arena, arrays of 8 MiB or more mapped on their own, and the
heap's top returned to the system past 64 MiB free."""
MALLOC_ENVIRONMENT = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def _tune_malloc() -> bool:
    """Before the merge thread starts (a process holding large arrays): glibc's malloc with
    one arena and an 8 MiB mmap threshold, as ``MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=8388608
    MALLOC_TRIM_THRESHOLD_=67108864`` in the environment would. Why: by default glibc raises
    its mmap threshold to each large block freed (up to 32 MiB), so a column of two million
    rows comes from the heap, and the holes freed columns leave in the middle of the heap stay
    resident; a thread also gets an arena of its own, whose holes the other thread never
    reuses. Columns of more than a million rows now come and go as their own mappings; smaller
    ones (an update's) still come from the heap, where a fixed threshold of 256 KiB cost 30%
    more CPU in fresh pages. SCC's first answer over 2M edges: 3.2-3.3 against 3.8-4.0 GiB
    resident after it, 0.7-0.85 against 1.2-1.35 GiB free inside the heap, peak 3.6-3.9
    against 4.0-4.05 GiB, CPU the same. Left alone when the environment already tunes
    malloc, and on any C library but glibc (True: set here)."""
    if any(name in os.environ for name in MALLOC_ENVIRONMENT) or not hasattr(os, "confstr"):
        return False
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
        return all([bool(mallopt(param, value)) for param, value in MALLOC_SETTINGS])
    except (OSError, ValueError, AttributeError):  # no such name, or no C library to ask
        return False


def _merger() -> ThreadPoolExecutor:
    """The process's one merge thread (started at the first large merge, malloc tuned for
    large arrays first: `_tune_malloc`)."""
    global _pool
    if _pool is None:
        _tune_malloc()
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="linq-merge")
    return _pool


def _forget_merger() -> None:
    """A forked child has no merge thread: it starts its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_merger)


def _merged(rows: Rows, since: Antichain) -> Batch:
    """A merge's batch, its rows advanced by ``since``."""
    batch = Batch(rows, tidy=True)
    batch.since = since
    return batch


def _compacted(parts: Sequence[Rows], nvals: int, epoch: int) -> Rows:
    """The rows of ``parts`` (each sorted: a few batches or slices of them) with the times of
    epochs before ``epoch`` moved to it (logical compaction), then consolidated: what every
    merge of a spine makes, packed straight from the parts (`consolidate_parts`)."""
    cols, diffs = consolidate_parts([(p.columns(), p.diffs) for p in parts], (1 + nvals, epoch), runs=True)
    return Rows(cols[0], cols[1 : 1 + nvals], cols[1 + nvals :], diffs)


def _level(n: int) -> int:
    return max(n - 1, 0).bit_length()


def _frontier(epoch: int, ntimes: int) -> Antichain:
    return ((epoch,) + (0,) * (ntimes - 1),)


class _Merge:
    """Two batches being merged, chunk by chunk, with the compaction epoch applied."""

    __slots__ = ("a", "b", "epoch", "future", "ntimes", "nvals", "out", "pa", "pb")

    def __init__(self, a: Batch, b: Batch, epoch: int) -> None:
        self.a, self.b = a, b
        self.pa = self.pb = 0
        self.out: list[Rows] = []
        self.epoch = epoch
        self.nvals = len(a.vals)
        self.ntimes = len(a.times)
        self.future: Future[Batch] | None = None
        """The merge running on the merge thread, if it was large enough to go there."""

    def finish(self) -> Batch:
        """Merge everything left, `FINISH_CHUNK` rows at a time; the merged batch."""
        while not self.work(FINISH_CHUNK):
            pass
        return self.result()

    def wait(self) -> Batch:
        """The merged batch, now: from the merge thread (done inline if it has not started)."""
        future = self.future
        if future is None or future.cancel():
            return self.finish()
        return future.result()

    def done(self) -> bool:
        return self.pa >= len(self.a) and self.pb >= len(self.b)

    def work(self, fuel: int) -> bool:
        """Merge at least ``fuel`` rows (or everything left); True once complete."""
        a, b = self.a, self.b
        na, nb = len(a), len(b)
        while fuel > 0 and not self.done():
            step = max(fuel, MIN_CHUNK)
            pa, pb = self.pa, self.pb
            if pa + step >= na and pb + step >= nb:
                ea, eb = na, nb
            else:
                # a key boundary: every row of a key lands in the same chunk
                cand = []
                if pa + step < na:
                    cand.append(a.keys[pa + step])
                if pb + step < nb:
                    cand.append(b.keys[pb + step])
                bound = min(cand)
                ea = int(np.searchsorted(a.keys, bound, "left"))
                eb = int(np.searchsorted(b.keys, bound, "left"))
                if ea == pa and eb == pb:  # one key larger than the step: take it whole
                    ea = int(np.searchsorted(a.keys, bound, "right"))
                    eb = int(np.searchsorted(b.keys, bound, "right"))
            self.out.append(_compacted([a.take(slice(pa, ea)), b.take(slice(pb, eb))], self.nvals, self.epoch))
            fuel -= (ea - pa) + (eb - pb)
            self.pa, self.pb = ea, eb
        return self.done()

    def result(self) -> Batch:
        """The merged batch (once complete); the chunks it was made of are let go, since a merge
        finished on the merge thread lives on until the operator adopts its result."""
        out, self.out = self.out, []
        return _merged(_joined(out, self.nvals, self.ntimes), _frontier(self.epoch, self.ntimes))


def _joined(chunks: list[Rows], nvals: int, ntimes: int) -> Rows:
    """A merge's chunks as one set of rows, a column at a time, each chunk's column let go once
    copied (the chunks and the result are never held whole at once). A column of one value in
    every chunk (the epoch, after logical compaction moved every row to the first open one)
    stays a zero-stride view: it costs no memory, and readers already take such time columns
    (`time_columns`)."""
    n = sum(len(c) for c in chunks)
    columns: list[list[np.ndarray | None]] = [[c.keys, *c.vals, *c.times, c.diffs] for c in chunks if len(c)]
    chunks.clear()  # the caller's list: the columns above are now the only references
    if len(columns) <= 1:
        return Rows(*_rows_of(columns[0], nvals)) if columns else Rows.empty(nvals, ntimes)
    out = []
    for j in range(len(columns[0])):
        parts = [p for p in (cols[j] for cols in columns) if p is not None]
        for cols in columns:
            cols[j] = None
        times = 1 + nvals <= j < 1 + nvals + ntimes
        out.append(_one_value(parts, n) if times else np.concatenate(parts))
        del parts
    return Rows(*_rows_of(out, nvals))


def _rows_of(columns: list[Any], nvals: int) -> tuple[Any, list[Any], list[Any], Any]:
    return columns[0], columns[1 : 1 + nvals], columns[1 + nvals : -1], columns[-1]


def _one_value(arrays: list[np.ndarray], n: int) -> np.ndarray:
    """``arrays`` concatenated (``n`` rows), or a zero-stride view if they all hold one value."""
    first = int(arrays[0][0])
    for p in arrays:
        if p.strides[0] != 0 and (int(p.min()) != first or int(p.max()) != first):
            return np.concatenate(arrays)
        if int(p[0]) != first:
            return np.concatenate(arrays)
    return np.broadcast_to(np.int64(first), n)


class Spine:
    """A trace: ``insert`` batches, read ``batches()`` (each finds its keys' rows itself)."""

    def __init__(self, nvals: int, ntimes: int) -> None:
        self.nvals = nvals
        self.ntimes = ntimes
        self.levels: list[Batch | _Merge | None] = []
        self.tail: list[Batch] = []
        """Small batches, merged a few at a time: an update's many tiny batches make few batches
        to read, and a tiny insert does not re-sort a thousand rows."""
        self.epoch = 0
        """The logical compaction frontier: epochs before it may be merged into it."""
        self.pending = 0
        """Merges on the merge thread not yet adopted."""
        self.reads: SpineReads | None = None
        """The batches as of the last change, with their address table once read (`batches`);
        None after a change."""

    # Writing -------------------------------------------------------------------------------------
    def insert(self, batch: Batch) -> None:
        """Add a batch (its rows join the trace); merges advance by fuel for its rows."""
        n = len(batch)
        if not n:
            return
        if _finished.spines:
            _adopt_finished()  # first: adopting a merge of this spine drops its kept reads
        reads, self.reads = self.reads, None
        if n <= TAIL:
            tail = self.tail
            tail.append(batch)
            if len(tail) < TAIL_BATCHES:
                if reads is not None:
                    self.reads = _with_tail_batch(reads, batch, len(tail) - 1)
                return
            merged = _merged(_compacted(tail, self.nvals, self.epoch), self.since)
            if len(merged) <= TAIL:
                self.tail = [merged] if len(merged) else []
                return
            self.tail = []
            batch = merged
        self._place(batch)
        self._work(n * FUEL_PER_ROW)

    def advance_to(self, epoch: int) -> None:
        """Logical compaction to the epoch ``epoch`` (see the module's contract); merges
        finished on the merge thread are adopted."""
        if epoch > self.epoch:
            self.epoch = epoch
        self._adopt()

    def set_logical_compaction(self, frontier: Antichain) -> None:
        """Logical compaction to ``frontier`` (differential-dataflow's name): reads will be at
        times beyond it. Compaction moves only the epoch coordinate, so the trace advances to
        the least epoch of the frontier's elements (every time beyond the frontier is at that
        epoch or later); an empty frontier (no more reads) changes nothing here."""
        if frontier:
            self.advance_to(min(f[0] for f in frontier))

    @property
    def since(self) -> Antichain:
        """The logical compaction frontier: ``{(epoch, 0, ..., 0)}``."""
        return _frontier(self.epoch, self.ntimes)

    def _place(self, batch: Batch) -> None:
        self.reads = None
        level = _level(len(batch))
        while True:
            while len(self.levels) <= level:
                self.levels.append(None)
            here = self.levels[level]
            if here is None:
                self.levels[level] = batch
                return
            if isinstance(here, _Merge):  # make room: finish it and move its result up
                self.levels[level] = None
                if here.future is not None:
                    self.pending -= 1
                self._place(here.wait())
                continue
            merge = _Merge(here, batch, self.epoch)
            if len(here) + len(batch) <= SMALL:
                merge.work(SMALL)
                self.levels[level] = None
                batch = merge.result()
                level = _level(len(batch))
                if not len(batch):
                    return
                continue
            if len(here) + len(batch) >= BACKGROUND_ROWS:
                try:
                    merge.future = _merger().submit(merge.finish)
                    self.pending += 1
                except RuntimeError:  # the interpreter is shutting down: merge here, by fuel
                    pass
                else:  # the merge thread says when it is done; this thread adopts it
                    merge.future.add_done_callback(partial(_done, _finished.spines, self))
            self.levels[level] = merge
            return

    def _adopt(self) -> None:
        """Adopt the merges the merge thread has finished (a finished merge not yet adopted
        holds its inputs and its result at once)."""
        if self.pending:
            self._work(0)

    def _work(self, fuel: int) -> None:
        """Merges advance by ``fuel`` rows; those on the merge thread are adopted once done."""
        for level, here in enumerate(self.levels):
            if not isinstance(here, _Merge):
                continue
            future = here.future
            if future is None:
                if not here.work(fuel):
                    continue
                done = here.result()
            elif future.done():
                self.pending -= 1
                done = future.result()
            else:
                continue
            self.levels[level] = None
            self.reads = None
            if len(done):
                self._place(done)

    def compact(self) -> None:
        """Finish every merge and merge everything into one batch (for a checkpoint or when idle)."""
        batches = self.batches()
        for here in self.levels:
            if isinstance(here, _Merge) and here.future is not None:
                here.future.cancel()  # its inputs are merged here (one still running is let be)
        self.pending = 0
        self.levels = []
        self.tail = []
        self.reads = None
        if not batches:
            return
        self._place(_merged(_compacted(batches, self.nvals, self.epoch), self.since))

    # Reading -------------------------------------------------------------------------------------
    def batches(self) -> list[Batch]:
        """Every batch holding rows (the inputs of unfinished merges included), after adopting
        the merges the merge thread has finished: a list of the caller's own, listed once per
        change of the spine (`SpineReads`). A reader that walks the batches twice takes one
        list."""
        self._adopt()
        reads = self.reads
        if reads is None:
            out: list[Batch] = list(self.tail)
            for here in self.levels:
                if here is None:
                    continue
                if isinstance(here, _Merge):
                    out.append(here.a)
                    out.append(here.b)
                else:
                    out.append(here)
            reads = self.reads = SpineReads(tuple(out))
        return spine_batches(reads)

    def find(self, keys: np.ndarray) -> Iterator[tuple[Batch, slice | np.ndarray, np.ndarray]]:
        """For each batch with rows of ``keys`` (any order, repeats allowed): the batch, those
        rows, and for each row the index in ``keys`` of its key (`_reader.matches_each`)."""
        return matches_each(keys, self.batches())

    def accumulate(self, keys: np.ndarray, t: Time) -> tuple[Rows, Rows]:
        """The (key, value) rows of ``keys`` (sorted, distinct) accumulated at ``t``, consolidated,
        and the (key, time) of their rows at times not ``<= t`` (`_reader.accumulate`)."""
        return accumulate(self.batches(), keys, t, self.nvals, self.ntimes)

    def totals(self, keys: np.ndarray, t: Time, values: bool = True) -> tuple[np.ndarray, list[np.ndarray], Rows]:
        """Per key of ``keys`` (sorted, distinct): its diffs at times ``<= t`` summed, the values
        of one of its rows (``[]`` unless ``values``), and the (key, time) of rows not ``<= t``
        (`_reader.key_totals`)."""
        return key_totals(self.batches(), keys, t, self.nvals, self.ntimes, values)

    def times(self, keys: np.ndarray, t: Time) -> Rows:
        """The (key, time) of the rows of ``keys`` (sorted, distinct) at times not ``<= t``."""
        return later_times(self.batches(), keys, t, self.ntimes)

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches())

    def footprint(self) -> tuple[int, int]:
        """Rows and bytes of the trace's columns (what the live console shows)."""
        rows = nbytes = 0
        for b in self.batches():
            rows += len(b)
            nbytes += sum(c.nbytes for c in b.columns()) + b.diffs.nbytes
        return rows, nbytes

    def rows(self) -> Rows:
        """Every row (for checkpoints), unconsolidated across batches."""
        return concat_rows(self.batches(), self.nvals, self.ntimes)


def _with_tail_batch(reads: SpineReads, batch: Batch, at: int) -> SpineReads:
    """``reads`` with ``batch`` added to the tail at position ``at`` (`Spine.batches` lists the
    tail first), and its address table, if one was made, extended by the batch's row: a loop
    step inserts a small batch into each spine it reads, and the compiled read right after
    would otherwise rebuild the whole table. Their `latest`, if asked, is joined with the
    batch's, so a join's next read does not fold it again over every batch."""
    held = reads.batches
    out = SpineReads((*held[:at], batch, *held[at:]))
    table = reads.table
    if table is not None and held:  # (an empty spine's table has no row to say its width)
        out.table = np.concatenate((table[:at], batch.address()[None], table[at:]))
    if reads.latest_known:
        was = reads.latest
        out.latest = batch.latest if was is None else tuple(map(max, was, batch.latest))
        out.latest_known = True
    return out
