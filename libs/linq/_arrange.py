"""Shared arrangements: a collection arranged by key once, joined against by several operators.

``collection.arrange(key)`` returns an `Arranged`: one `Arrange` vertex per worker keeps the
collection's rows by key in a `Spine` (as a join's own input would), and tells every reader of
each new batch with a message ``(seq, batch, shared)`` (the batch and the arrangement are
objects of the same process: readers sit on the same worker, nothing is copied). A join of
another collection against an `Arranged` (`collection.join(arranged, ...)`) arranges only its
own input; the other side is the shared one, built and merged once however many joins read it.

Consistency. Each pair of differences must meet exactly once: a reader's own delta meets the
arrangement *as the reader has seen it*, and each new batch of the arrangement meets the
reader's own arrangement when its message arrives. So a batch enters the spine that readers
read only once every reader has received it (`SharedArrangement.settle`); until then it waits in
``pending``, where each reader sees the batches up to the last sequence number it received.
The spine's merges then never mix a batch some reader has not seen with one it has (the
physical compaction frontier of differential-dataflow's trace handles, here one sequence
number per reader). Likewise the arrangement compacts times only to the least epoch that
every reader has finished (`SharedArrangement.advance`): a reader whose other input is still
in an earlier epoch (a loop still iterating it) must meet the rows at their own times.

`SharedSide` is the same sharing made by the engine for plain joins inside a loop that take one
collection by one key function: no arranging vertex, each join (`_join.Join`) a reader whose
notification at a time brings that time's whole input on the shared side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timely import KeyedState, Timestamp

from ._join import Published, arrangement_pieces, delta_batch, meet, restored
from ._keys import KeyOf
from ._lattice import Lattice
from ._layout import Layout, widened
from ._linear import changes_in
from ._stateful import Stateful, paused_gc
from ._trace import Batch, Rows, Spine, concat_rows

__all__ = ["Arrange", "Arranged", "JoinArranged", "SharedArrangement", "SharedSide"]


class SharedArrangement:
    """One worker's arrangement of a collection, with what each reader has received."""

    def __init__(self, readers: int, layout: Layout, ntimes: int, arranger: bool = True) -> None:
        self.spine: Spine | None = None
        self.layout = layout
        self.ntimes = ntimes
        self.pending: list[tuple[int, Batch]] = []
        """Batches not yet received by every reader, with their sequence numbers."""
        self.received = [0] * readers
        """Per reader, a sequence number up to which it has received every batch."""
        self.early: list[set[int]] = [set() for _ in range(readers)]
        """Per reader, batches received beyond ``received`` (messages of different times may
        overtake each other in a worker's queue)."""
        self.seq = 0
        self.frontiers = [0] * (readers + arranger)
        """Per reader (and last, the arranging vertex, if one arranges it apart from the
        readers), the epoch it may compact to: the arrangement compacts to the least of them,
        since a reader's delta of an earlier epoch must still meet the rows at their own times
        (a trace handle's logical compaction)."""
        self.published: dict[tuple[int, ...], Published] = {}
        """Joins sharing an input (`SharedSide`): per time, the batch's sequence number, the
        delta block the first reader made, and how many readers have yet to take it."""

    def advance(self, who: int, epoch: int) -> None:
        """Reader ``who`` (-1: the arranging vertex) will read no time of an epoch before ``epoch``."""
        self.frontiers[who] = max(self.frontiers[who], epoch)
        if self.spine is not None:
            self.spine.advance_to(min(self.frontiers))

    def add(self, batch: Batch) -> int:
        self.seq += 1
        self.pending.append((self.seq, batch))
        if not self.received:
            self.settle()
        return self.seq

    def settle(self) -> None:
        """Move the batches every reader has received into the spine."""
        seen = min(self.received, default=self.seq)
        while self.pending and self.pending[0][0] <= seen:
            _, batch = self.pending.pop(0)
            if self.spine is None:
                self.spine = Spine(self.layout.width, self.ntimes)
                self.spine.advance_to(min(self.frontiers))
            self.spine.insert(batch)

    def receive(self, reader: int, seq: int) -> None:
        """Reader ``reader`` has met batch ``seq`` with its own arrangement."""
        early = self.early[reader]
        early.add(seq)
        n = self.received[reader]
        while n + 1 in early:
            n += 1
            early.discard(n)
        self.received[reader] = n
        self.settle()

    def batches(self, reader: int) -> list[Batch]:
        """The batches reader ``reader`` has received (so its deltas meet exactly those)."""
        out = [] if self.spine is None else self.spine.batches()
        seen, early = self.received[reader], self.early[reader]
        out.extend(b for s, b in self.pending if s <= seen or s in early)
        return out

    def widen(self) -> None:
        """The records become whole-record codes (a block of another shape arrived)."""
        old = self.layout.arity
        self.spine = widened(self.spine, self.layout, self.ntimes)
        if self.pending:
            recode = Layout(self.layout.op, old, self.layout.key)
            self.pending = [
                (s, Batch(Rows(b.keys, recode.widen(list(b.vals), b.keys), b.times, b.diffs))) for s, b in self.pending
            ]


class Arranged:
    """A collection arranged by ``key``, to be joined against (`Collection.join`) by any
    number of operators in its scope. Made by `Collection.arrange`."""

    def __init__(self, collection: Any, key: Callable[[Any], Any], name: str) -> None:
        self.collection = collection
        self.key = key
        self.name = name
        self.readers = 0
        """Joins reading it (counted while the dataflow is built)."""
        self.stream: Any = None

    @property
    def scope(self) -> Any:
        return self.collection.scope

    def __repr__(self) -> str:
        return f"<Arranged {self.name!r}>"


class Arrange(Stateful):
    """Keeps one worker's share of a collection arranged by key; tells readers of each batch."""

    def __init__(self, op: str, lattice: Lattice, key: Callable[[Any], Any], arranged: Arranged) -> None:
        super().__init__(op, lattice)
        self.keyof = KeyOf(key, op)
        self.shared = SharedArrangement(arranged.readers, Layout(op, key=self.keyof.field), lattice.depth + 1)

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        block = changes_in(records)
        if not len(block):
            return
        keys = self.keyof.codes(block)
        shared = self.shared
        if not shared.layout.accept(block):
            shared.widen()
            shared.layout.accept(block)
        batch = Batch.at(keys, shared.layout.encode(block), tuple(time), block.diffs)
        seq = shared.add(batch)
        self.send_by(self.outputs[0], [(seq, batch, shared)], time)

    def on_notify(self, time: Timestamp) -> None:
        self.compact_if_complete(time)

    def compact(self, epoch: int) -> None:
        if self.compaction(epoch):
            self.shared.advance(-1, epoch)

    def checkpoint(self) -> KeyedState | None:
        shared = self.shared
        if shared.spine is None and not shared.pending:
            return None
        with paused_gc():
            parts = [] if shared.spine is None else shared.spine.batches()
            parts.extend(b for _, b in shared.pending)
            rows = concat_rows(parts, shared.layout.width, shared.ntimes)
            return KeyedState(arrangement_pieces(0, rows, shared.layout))

    def restore(self, state: Any) -> None:
        (self.shared.spine,) = restored(self, state, [self.shared.layout], self.shared.ntimes)


class JoinArranged(Stateful):
    """`Join` with the second input an `Arranged`: input 0 is a collection (arranged here),
    input 1 the arrangement's batches (``(seq, batch, shared)``)."""

    def __init__(
        self,
        op: str,
        lattice: Lattice,
        key1: Callable[[Any], Any],
        selector: Callable[[Any, Any], Any],
        reader: int,
    ) -> None:
        super().__init__(op, lattice)
        self.keyof = KeyOf(key1, op)
        self.selector = selector
        self.reader = reader
        self.layout = Layout(op, key=self.keyof.field)
        self.ntimes = lattice.depth + 1
        self.trace: Spine | None = None
        self.shared: SharedArrangement | None = None

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.watch(time)
        if edge == 1:
            for seq, batch, shared in records:
                self.shared = shared
                if self.trace is not None:
                    theirs = shared.layout.decode(batch.vals, batch.diffs, batch.keys)
                    meet(
                        self,
                        self.selector,
                        theirs,
                        batch.keys,
                        list(batch.times),
                        self.trace.batches(),
                        self.layout,
                        False,
                    )
                shared.receive(self.reader, seq)
            return
        block = changes_in(records)
        if not len(block):
            return
        if not self.layout.accept(block):
            self.trace = widened(self.trace, self.layout, self.ntimes)
            self.layout.accept(block)
        t = tuple(time)
        delta = delta_batch(block, self.keyof.codes(block), self.layout.encode(block), t, self.layout)
        if delta is None:
            return
        block, batch = delta
        if self.shared is not None:
            meet(
                self,
                self.selector,
                block,
                batch.keys,
                t,
                self.shared.batches(self.reader),
                self.shared.layout,
                True,
            )
        if self.trace is None:
            self.trace = Spine(self.layout.width, self.ntimes)
        self.trace.insert(batch)

    def on_notify(self, time: Timestamp) -> None:
        self.compact_if_complete(time)

    def compact(self, epoch: int) -> None:
        if self.compaction(epoch):
            if self.trace is not None:
                self.trace.advance_to(epoch)
            if self.shared is not None:
                self.shared.advance(self.reader, epoch)

    def checkpoint(self) -> KeyedState | None:
        if self.trace is None:
            return None
        with paused_gc():
            self.trace.compact()
            return KeyedState(arrangement_pieces(0, self.trace.rows(), self.layout))

    def restore(self, state: Any) -> None:
        (self.trace,) = restored(self, state, [self.layout], self.ntimes)


class SharedSide:
    """An input that several joins of one loop take from one collection by one key function
    (the same objects): each worker's joins keep one arrangement of it between them, a
    `SharedArrangement` with no arranging vertex of its own, as a differential dataflow user
    arranges it once by hand (`Collection.arrange`). Counted while the dataflow is built."""

    def __init__(self, stream: Any, key: Callable[[Any], Any]) -> None:
        self.stream = stream
        self.key = key
        self.readers = 0
        self.states: dict[int, tuple[SharedArrangement, set[int]]] = {}
        """Per worker (of this process), the arrangement its joins share, and the readers that
        have taken it (a reader that took it already is a new run's: it starts a new one)."""

    def state(self, worker: int, reader: int, op: str, ntimes: int) -> SharedArrangement:
        entry = self.states.get(worker)
        if entry is None or reader in entry[1]:
            layout = Layout(op, key=KeyOf(self.key, op).field)
            entry = self.states[worker] = (SharedArrangement(self.readers, layout, ntimes, arranger=False), set())
        entry[1].add(reader)
        return entry[0]
