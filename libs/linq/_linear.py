"""Stateless operators (TR §3), block in, block out, and the plumbing between blocks and records.

Every message of a collection is a list of `Block`s at the message's time (or of
``(worker, block)`` pairs right after an exchange, see `Route`). A linear operator maps each
block to a block: column-wise for ``itemgetter`` and `linq.columns` functions, through Python
records otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from timely import Timestamp, Vertex

from ._columns import (
    SCALAR,
    Block,
    blocks_of,
    codes_of,
    concat_blocks,
    consolidate,
    every,
    group_starts,
    order,
    some,
)
from ._columns._functions import Columns, apply_columns, as_block, fields_of, twice
from ._errors import OperatorError
from ._keys import KeyOf, unhashable

Pairs = list[tuple[Any, int]]


def find_failure(what: str, op: str, fn: Callable[..., Any], records: Iterable[Any], exc: BaseException) -> Exception:
    """After a batch comprehension raised, call ``fn`` record by record to name the one it fails on."""
    for record in records:
        try:
            fn(record)
        except Exception as again:
            return OperatorError(f"{op}: the {what} raised {type(again).__name__}: {again} on record {record!r}")
    return OperatorError(f"{op}: the {what} raised {type(exc).__name__}: {exc}")


def block_in(records: list[Any]) -> Block:
    """The one block of a message (its blocks concatenated)."""
    if len(records) == 1 and type(records[0]) is Block:
        return records[0]  # type: ignore[no-any-return]
    return concat_blocks(blocks_of(records))


def changes_in(records: list[Any]) -> Block:
    """The one block of a message, without its zero diffs (what a keyed operator arranges)."""
    block = block_in(records)
    return block if every(block.diffs) else block.take(block.diffs != 0)


class _Linear(Vertex):
    def __init__(self, op: str, fn: Callable[..., Any]) -> None:
        self.op = op
        self.fn = fn

    def fail(self, what: str, records: list[Any], exc: BaseException) -> Exception:
        return find_failure(what, self.op, self.fn, records, exc)

    def columns(self, what: str, block: Block) -> Any:
        try:
            return apply_columns(self.fn, block)  # type: ignore[arg-type]
        except Exception as exc:
            raise OperatorError(f"{self.op}: the {what} raised {type(exc).__name__}: {exc}") from exc


class Select(_Linear):
    def __init__(self, op: str, fn: Callable[[Any], Any]) -> None:
        super().__init__(op, fn)
        self.fields = fields_of(fn)

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        fields = self.fields
        if fields is not None and block.arity > max(fields, default=-1):
            cols = [block.cols[i] for i in fields]
            out = Block(cols, len(fields), block.diffs) if len(fields) > 1 else Block(cols, SCALAR, block.diffs)
        elif self.fn is twice and block.arity == SCALAR:
            out = Block([block.cols[0], block.cols[0]], 2, block.diffs)
        elif type(self.fn) is Columns:
            try:
                out = as_block(self.columns("selector", block), block.diffs, "selector")
            except ValueError as exc:
                raise OperatorError(f"{self.op}: {exc}") from exc
        else:
            fn = self.fn
            recs = block.records()
            try:
                mapped = [fn(d) for d in recs]
            except Exception as exc:
                raise self.fail("selector", recs, exc) from exc
            out = Block.of_records(mapped, block.diffs)
        self.send_by(self.outputs[0], [out], time)


class Where(_Linear):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        if type(self.fn) is Columns:
            mask = np.asarray(self.columns("predicate", block), dtype=bool)
        else:
            keep = self.fn
            recs = block.records()
            try:
                mask = np.fromiter((bool(keep(d)) for d in recs), dtype=bool, count=len(recs))
            except Exception as exc:
                raise self.fail("predicate", recs, exc) from exc
        if some(mask):
            self.send_by(self.outputs[0], [block.take(mask) if not every(mask) else block], time)


class SelectMany(_Linear):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        fn = self.fn
        recs = block.records()
        out: list[Any] = []
        counts: list[int] = []
        try:
            for d in recs:
                ys = list(fn(d))
                out.extend(ys)
                counts.append(len(ys))
        except Exception as exc:
            raise self.fail("selector", recs, exc) from exc
        if out:
            diffs = np.repeat(block.diffs, counts)
            self.send_by(self.outputs[0], [Block.of_records(out, diffs)], time)


class Negate(Vertex):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        self.send_by(self.outputs[0], [block.with_diffs(-block.diffs)], time)


class Inspect(_Linear):
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        fn = self.fn
        for d, r in block.pairs():
            try:
                fn(d, time, r)  # type: ignore[call-arg]
            except Exception as exc:
                raise OperatorError(
                    f"{self.op}: the inspector raised {type(exc).__name__}: {exc} on record {d!r}"
                ) from exc
        self.send_by(self.outputs[0], [block], time)


class FromPairs(Vertex):
    """A plain stream of ``(record, diff)`` pairs (or blocks) as a stream of blocks."""

    def __init__(self, op: str) -> None:
        self.op = op

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        blocks = []
        pairs = []
        for r in records:
            if type(r) is Block:
                blocks.append(r)
            else:
                pairs.append(r)
        if pairs:
            try:
                blocks.append(Block.of_pairs(pairs))
            except (TypeError, ValueError) as exc:
                bad = next(
                    (p for p in pairs if not (isinstance(p, tuple) and len(p) == 2 and type(p[1]) is int)), pairs[0]
                )
                raise OperatorError(f"{self.op}: expected (record, diff) pairs with int diffs, got {bad!r}") from exc
        block = concat_blocks(blocks)
        if len(block):
            self.send_by(self.outputs[0], [block], time)


class ToPairs(Vertex):
    """Blocks back to ``(record, diff)`` pairs (`Collection.stream`)."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(self.outputs[0], block_in(records).pairs(), time)


class ToTriples(Vertex):
    """``(record, diff)`` at time t becomes ``(record, t, diff)``: a plain timely stream."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(self.outputs[0], [(d, time, r) for d, r in block_in(records).pairs()], time)


class FromTriples(Vertex):
    """``(record, time, diff)`` triples back into a collection: each difference leaves at its time."""

    def __init__(self, op: str, depth: int) -> None:
        self.op = op
        self.width = depth + 1

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        by_time: dict[Any, Pairs] = {}
        for triple in records:
            try:
                d, t, r = triple
                t = tuple(t)
            except (TypeError, ValueError):
                raise OperatorError(f"{self.op}: expected (record, time, diff) triples, got {triple!r}") from None
            if type(r) is not int or len(t) != self.width:
                raise OperatorError(
                    f"{self.op}: {triple!r} needs an int diff and a time with {self.width} coordinate(s)"
                )
            if t == time:
                t = time
            batch = by_time.get(t)
            if batch is None:
                by_time[t] = [(d, r)]
            else:
                batch.append((d, r))
        for t, batch in by_time.items():
            # send_by refuses a time before the batch's own: a difference cannot travel back in time
            self.send_by(self.outputs[0], [Block.of_pairs(batch)], t)


class Delay(_Linear):
    """Moves each difference to the time whose innermost coordinate is larger by
    ``fn(record)``, a non-negative int (``what`` names it in errors): how `prioritize`
    introduces records at their priority and `enter_at` lets them into a loop late.
    ``fn`` may be `columns`-wrapped: one call per block."""

    def __init__(self, op: str, fn: Callable[[Any], Any], what: str) -> None:
        super().__init__(op, fn)
        self.what = what

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        block = block_in(records)
        if not len(block):
            return
        shifts = self._shifts(block)
        idx = np.argsort(shifts, kind="stable")
        shifts = shifts[idx]
        starts = group_starts([shifts]).tolist()
        ends = [*starts[1:], len(idx)]
        prefix = tuple(time[:-1])
        for s, e in zip(starts, ends):
            t = (*prefix, time[-1] + int(shifts[s]))
            self.send_by(self.outputs[0], [block.take(idx[s:e]) if e - s < len(idx) else block], t)  # type: ignore[arg-type]

    def _shifts(self, block: Block) -> np.ndarray:
        """Each record's shift as an int64 array, refused unless every one is an int >= 0."""
        if type(self.fn) is Columns:
            out = np.asarray(self.columns(self.what, block))
            if out.shape != (len(block),) or out.dtype.kind not in "iu":
                raise OperatorError(f"{self.op}: the {self.what} must give one int per record, got {out!r}")
            bad = np.flatnonzero(out < 0)
            if len(bad):
                rec = block.records()[int(bad[0])]
                raise OperatorError(f"{self.op}: {self.what} {int(out[bad[0]])} of record {rec!r} is negative")
            return out.astype(np.int64, copy=False)
        recs = block.records()
        fn = self.fn
        try:
            shifts = [fn(d) for d in recs]
        except Exception as exc:
            raise self.fail(f"{self.what} function", recs, exc) from exc
        for d, p in zip(recs, shifts):
            if type(p) is not int or p < 0:
                raise OperatorError(f"{self.op}: {self.what} {p!r} of record {d!r} is not a non-negative int")
        return np.asarray(shifts, dtype=np.int64)


class Route(Vertex):
    """Cuts each block by its records' routes into one block per worker, sent as
    ``(worker, block)``: the stage after it exchanges by the first item, so a block moves
    with one partition call per destination, not one per record."""

    def __init__(self, key: KeyOf) -> None:
        self.key = key

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        peers = self.peers
        if peers == 1:
            self.send_by(self.outputs[0], records, time)
            return
        block = block_in(records)
        dest = self.key.routes(block) % peers
        self.send_by(self.outputs[0], split_by(block, dest, peers), time)


def split_by(block: Block, dest: np.ndarray, peers: int) -> list[tuple[int, Block]]:
    """``(worker, rows of block for that worker)`` for every worker that gets rows."""
    n = len(block)
    if not n:
        return []
    if peers == 2:  # one mask and one count: a loop iteration's blocks are a few rows, all fixed cost
        to_second = dest.astype(np.bool_)
        second = int(np.count_nonzero(to_second))
        if not second or second == n:
            return [(int(second > 0), block)]
        return [(0, block.take(~to_second)), (1, block.take(to_second))]
    first = int(dest[0])
    if (dest == first).all():
        return [(first, block)]
    out = []
    if peers <= 8:  # a mask per worker: cheaper than sorting by worker
        for w in range(peers):
            mask = dest == w
            if mask.any():
                out.append((w, block.take(mask)))
        return out
    idx = np.argsort(dest, kind="stable")
    bounds = np.searchsorted(dest[idx], np.arange(peers + 1))
    for w in range(peers):
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        if hi > lo:
            out.append((w, block.take(idx[lo:hi])))
    return out


def by_destination(record: Any) -> int:
    """The exchange function after a `Route`: the worker it chose."""
    return record[0]  # type: ignore[no-any-return]


class Consolidate(Vertex):
    """Sums the differences of each record at each time once the time is complete; keeps nothing after.

    Checkpoint: what awaits a time that is not complete, as pieces ``(time, block)`` routed by
    record; None (nothing) between epochs, unless a later time had records before it was complete."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.staged: dict[Any, list[Block]] = {}

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        staged = self.staged.get(time)
        if staged is None:
            self.staged[time] = blocks_of(records)
            self.notify_at(time)
        else:
            staged.extend(blocks_of(records))

    def on_notify(self, time: Timestamp) -> None:
        staged = self.staged.pop(time, None)
        if not staged:
            return
        out = consolidate_block(concat_blocks(staged), self.op)
        if len(out):
            self.send_by(self.outputs[0], [out], time)

    def checkpoint(self) -> Any:
        if not self.staged:
            return None
        from timely import KeyedState

        from ._stateful import routed

        key = record_key(self.op)
        pieces: list[tuple[int, Any]] = []
        for t, blocks in self.staged.items():
            block = concat_blocks(blocks)
            pieces.extend(routed((tuple(t),), key.routes(block), block))
        return KeyedState(pieces)

    def restore(self, state: Any) -> None:
        from ._stateful import pieces_of

        for _, (t, block) in pieces_of(self.op, state):
            self.staged.setdefault(tuple(t), []).append(block)


def record_key(op: str) -> KeyOf:
    """The key of record-routed operators (consolidate, an output's contents): the record."""
    from ._columns._functions import identity

    return KeyOf(identity, op)


def consolidate_block(block: Block, op: str) -> Block:
    """The block with each record's diffs summed and zero sums dropped (records keep their values)."""
    if not len(block):
        return block
    try:
        cols = [block.record_codes()] if block.arity <= 0 else [codes_of(c) for c in block.cols]
    except TypeError:
        raise unhashable(op, "record", block.records()) from None
    if len(cols) == len(block.cols) and all(a is b for a, b in zip(cols, block.cols)):  # ints: their own codes
        out, diffs = consolidate(cols, block.diffs)
        return Block(out, block.arity, diffs)
    idx = order(cols)
    starts = group_starts([c[idx] for c in cols])
    diffs = np.add.reduceat(block.diffs[idx], starts)
    keep = diffs != 0
    return block.take(idx[starts[keep]]).with_diffs(diffs[keep])


__all__ = [
    "Consolidate",
    "Delay",
    "FromPairs",
    "FromTriples",
    "Inspect",
    "Negate",
    "Route",
    "Select",
    "SelectMany",
    "ToPairs",
    "ToTriples",
    "Where",
    "block_in",
    "changes_in",
    "by_destination",
    "consolidate_block",
    "split_by",
]
