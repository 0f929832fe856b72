"""Getting differences in and out of a dataflow."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from timely import Input, KeyedState, Probe, Scope, Timestamp, Vertex

from ._columns import SCALAR, Block, concat_blocks
from ._columns._functions import as_block
from ._linear import block_in, consolidate_block, record_key
from ._stateful import paused_gc, pieces_of, routed
from .collection import Collection, operator_name

__all__ = ["CollectionInput", "CollectionOutput", "ColumnOutput", "new_input"]

_first, _second = itemgetter(0), itemgetter(1)

FLUSH_AT = 65536
"""Changes buffered by a `CollectionInput` before they leave as one block."""


def new_input(scope: Scope, name: str | None = None) -> CollectionInput:
    """An input collection in the root scope, changed epoch by epoch from outside."""
    return CollectionInput(scope, operator_name(scope, "input", name))


class CollectionInput:
    """Adds and removes records, epoch by epoch.

    Changes sent before ``advance_to(e)`` belong to the current epoch; the outputs report the
    epoch's consequences once every process has advanced past it. In a computation with
    several processes, each process feeds its own share (any share: records are routed by key).

    ``insert`` and ``remove`` gather single changes, which leave as one block with the next
    bulk call (``insert_all``, ``remove_all``, ``update``, ``update_columns``), ``flush``,
    ``advance_to`` or ``close`` (or every `FLUSH_AT` changes); the bulk calls send at once.
    ``update_columns`` hands over columns directly (the fast path for large loads).
    ``input`` is the underlying timely input, which takes ``(record, diff)`` pairs too.
    """

    def __init__(self, scope: Scope, name: str) -> None:
        self.input: Input = scope.new_input(name)
        self.collection = Collection(self.input)
        self._records: list[Any] = []
        self._diffs: list[int] = []

    @property
    def epoch(self) -> int:
        return self.input.epoch

    def _add(self, records: Iterable[Any], diff: int) -> None:
        before = len(self._records)
        self._records.extend(records)
        self._diffs.extend([diff] * (len(self._records) - before))
        self.flush()

    def insert(self, record: Any, count: int = 1) -> None:
        self._records.append(record)
        self._diffs.append(count)
        if len(self._records) >= FLUSH_AT:
            self.flush()

    def remove(self, record: Any, count: int = 1) -> None:
        self.insert(record, -count)

    def insert_all(self, records: Iterable[Any]) -> None:
        self._add(records, 1)

    def remove_all(self, records: Iterable[Any]) -> None:
        self._add(records, -1)

    def update(self, changes: Iterable[tuple[Any, int]]) -> None:
        """Apply ``(record, diff)`` changes: a positive diff adds copies, a negative one removes them."""
        pairs = changes if isinstance(changes, list) else list(changes)
        # the common case in C (no Python step per change): a list of 2-tuples with int diffs
        if set(map(type, pairs)) == {tuple} and set(map(len, pairs)) == {2}:
            diffs = list(map(_second, pairs))
            if set(map(type, diffs)) == {int}:
                self._records.extend(map(_first, pairs))
                self._diffs.extend(diffs)
                self.flush()
                return
        for change in pairs:
            record, diff = change
            if type(diff) is not int:
                raise TypeError(f"update: the diff of {change!r} must be an int")
            self._records.append(record)
            self._diffs.append(diff)
        self.flush()

    def update_columns(self, columns: Sequence[Any] | Any, diffs: Any = None) -> None:
        """Apply changes given as columns: one array of records, or a tuple of arrays (one per
        field of tuple records), and their diffs (an int array; default: each record once)."""
        self.flush()
        first = columns[0] if isinstance(columns, tuple) else columns
        n = len(first)
        d = np.ones(n, dtype=np.int64) if diffs is None else np.asarray(diffs, dtype=np.int64)
        if len(d) != n:
            raise ValueError(f"update_columns: {n} records but {len(d)} diffs")
        block = as_block(tuple(columns) if isinstance(columns, tuple) else columns, d, "update_columns")
        if len(block):
            self.input.send([block], count=len(block))

    def flush(self) -> None:
        """Send the buffered changes now (``advance_to`` and ``close`` do it anyway)."""
        if not self._records:
            return
        records, diffs = self._records, self._diffs
        self._records, self._diffs = [], []
        self.input.send([Block.of_records(records, np.asarray(diffs, dtype=np.int64))], count=len(records))

    def advance_to(self, epoch: int) -> None:
        self.flush()
        self.input.advance_to(epoch)

    def close(self) -> None:
        self.flush()
        self.input.close()


class Contents(Vertex):
    """The share of an output's accumulated collection that one worker owns (the consolidation
    before it routes each record to one worker), passing the differences on unchanged.

    Checkpoint: pieces ``block`` of ``(record, count)``, cut by the record's route; for a
    gathered output, one piece routed to this worker, where its records go."""

    def __init__(self, op: str, gathered: bool = False) -> None:
        self.op = op
        self.gathered = gathered
        self.contents: dict[Any, int] = {}

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        contents = self.contents
        for d, r in block.pairs():
            c = contents.get(d, 0) + r
            if c:
                contents[d] = c
            else:
                contents.pop(d, None)
        self.send_by(self.outputs[0], [block], time)

    def checkpoint(self) -> KeyedState | None:
        if not self.contents:
            return None
        with paused_gc():
            block = Block.of_records(list(self.contents), np.fromiter(self.contents.values(), np.int64))
            if self.gathered:
                routes = np.full(len(block), self.worker_index, dtype=np.int64)
            else:
                routes = record_key(self.op).routes(block)
            return KeyedState(routed((), routes, block))

    def restore(self, state: Any) -> None:
        contents = self.contents
        with paused_gc():
            for _, (block,) in pieces_of(self.op, state):
                for d, c in block.pairs():
                    c += contents.get(d, 0)
                    if c:
                        contents[d] = c
                    else:
                        contents.pop(d, None)


class CollectionOutput:
    """The changes of a collection, per completed epoch, and its accumulated contents.

    Holds what this process's workers own: with several processes, each has its share, unless
    ``gather_to`` names the process that receives every change (`timely.Stream.gather`): then
    that process holds the whole collection and the others nothing.
    ``on_change(epoch, changes)`` is called for each epoch whose changes are not empty.

    The accumulated contents live in the workers' vertices (stage ``<name>.contents``), so a
    checkpoint saves them and a computation resumed from it starts with them; ``changes`` is
    the log of what this run reported, and starts empty.
    """

    def __init__(
        self,
        collection: Collection,
        on_change: Callable[[int, list[tuple[Any, int]]], None] | None = None,
        name: str | None = None,
        gather_to: int | None = None,
    ) -> None:
        if collection.scope.depth != 0:
            raise ValueError("output: the collection must be in the root scope; leave its loops first")
        full = operator_name(collection.scope, "output", name)
        consolidated = collection.consolidate(name=f"{full}.consolidate")
        if gather_to is not None:  # after the consolidation, which routes by record
            blocks = consolidated._blocks.gather(f"{full}.gather", to=gather_to)
            consolidated = Collection._of(blocks, consolidated.lattice)
        self.gather_to = gather_to
        self._parts: list[Contents] = []
        held = consolidated._unary("contents", f"{full}.contents", self._part)
        self.changes: dict[int, list[tuple[Any, int]]] = {}
        self._on_change = on_change
        self.probe: Probe = held._blocks.subscribe(self._receive, name=full)

    def _part(self, op: str) -> Contents:
        part = Contents(op, gathered=self.gather_to is not None)
        self._parts.append(part)
        return part

    def _receive(self, time: Timestamp, records: list[Any]) -> None:
        block = consolidate_block(concat_blocks(records), "output")
        if not len(block):
            return
        changes = block.pairs()
        self.changes[time[0]] = changes
        if self._on_change is not None:
            self._on_change(time[0], changes)

    def contents(self) -> dict[Any, int]:
        """The accumulated collection (record -> count) that this process's workers hold: every
        epoch the probe has passed (and possibly a later epoch that completed meanwhile)."""
        out: dict[Any, int] = {}
        for part in self._parts:
            out.update(part.contents)
        return out

    def passed(self, epoch: int) -> bool:
        """Every change of ``epoch`` has been reported."""
        return self.probe.passed(epoch)


Columns = tuple[Any, np.ndarray]
"""``(columns, diffs)``: one numpy array of records (records that are not tuples) or a tuple
of arrays, one per field, and an int64 array of diffs, all of one length (`Collection.to_columns`)."""


class ColumnOutput:
    """The changes of a collection per completed epoch as numpy columns, with no Python
    object per record: the columnar `CollectionOutput`, for results of millions of records.

    ``changes[epoch]`` is ``(columns, diffs)`` (`Columns`): the epoch's changes that this
    process's workers own, consolidated (each record once, no zero diff), in no particular
    order; an epoch with no change has no entry. ``on_change(epoch, columns, diffs)`` is called
    for each such epoch. `contents` is the accumulation of the changes reported in this run,
    consolidated when asked for. Records whose fields are all ints or all floats come out as
    int64 / float64 columns; other fields as object columns of the values themselves. An
    epoch whose records have different shapes (ints and pairs, pairs and triples) comes out
    as one object column of the records.
    """

    def __init__(
        self,
        collection: Collection,
        on_change: Callable[[int, Any, np.ndarray], None] | None = None,
        name: str | None = None,
    ) -> None:
        if collection.scope.depth != 0:
            raise ValueError("output: the collection must be in the root scope; leave its loops first")
        full = operator_name(collection.scope, "column_output", name)
        consolidated = collection.consolidate(name=f"{full}.consolidate")
        self.changes: dict[int, Columns] = {}
        self._pending: list[Block] = []
        self._contents = Block.empty()
        self._on_change = on_change
        self.probe: Probe = consolidated._blocks.subscribe(self._receive, name=full)

    def _receive(self, time: Timestamp, records: list[Any]) -> None:
        # each worker's blocks are consolidated already, and the workers own disjoint records
        block = concat_blocks(records)
        if not len(block):
            return
        self._pending.append(block)
        columns = _columns_of(block)
        self.changes[time[0]] = (columns, block.diffs)
        if self._on_change is not None:
            self._on_change(time[0], columns, block.diffs)

    def contents(self) -> Columns:
        """The accumulated collection that this process's workers own, as ``(columns,
        counts)``: every change reported so far, summed per record, zero counts dropped."""
        if self._pending:
            self._contents = consolidate_block(concat_blocks([self._contents, *self._pending]), "output")
            self._pending = []
        return _columns_of(self._contents), self._contents.diffs

    def passed(self, epoch: int) -> bool:
        """Every change of ``epoch`` has been reported."""
        return self.probe.passed(epoch)


def _columns_of(block: Block) -> Any:
    return block.cols[0] if block.arity == SCALAR else tuple(block.cols)
