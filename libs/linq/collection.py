"""`Collection`: a multiset of records that changes over lattice times (TR §3).

A collection is a timely stream of differences as column blocks (`_columns.Block`): each
message carries blocks whose records are all at the message's time, the differences' lattice
time. `Collection.stream` spells the same differences out as ``(record, diff)`` pairs for a
user's own vertex, `Collection(stream)` turns such a stream back into a collection,
``to_stream`` / `Collection.from_stream` do the same with ``(record, time, diff)`` triples, and
``to_columns`` / `Collection.from_columns` with ``(columns, diffs)`` numpy arrays.

Operators are methods that return new collections. Linear ones (select, where, concat,
negate, ...) are stateless and move nothing between workers; the others route records by
key to the worker that owns the key (`_linear.Route`, one cut per block) and keep arranged
traces (`_join`, `_reduce`).
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

from timely import LoopContext, Scope, ScopeError, Stream

from ._arrange import Arrange, Arranged, JoinArranged, SharedSide
from ._column_io import FromColumns, ToColumns
from ._columns._functions import identity, left, nothing
from ._errors import OperatorError
from ._join import Join
from ._keys import KeyOf
from ._lattice import Lattice
from ._linear import (
    Consolidate,
    Delay,
    FromPairs,
    FromTriples,
    Inspect,
    Negate,
    Route,
    Select,
    SelectMany,
    ToPairs,
    ToTriples,
    Where,
    by_destination,
)
from ._reduce import Count, Counts, Distinct, Evaluate, Extreme, Reduce, Reducer, Sum

__all__ = ["Collection"]

_lattices: weakref.WeakKeyDictionary[Scope, Lattice] = weakref.WeakKeyDictionary()
_names: weakref.WeakKeyDictionary[Scope, tuple[Iterable[int], set[tuple[Any, str]]]] = weakref.WeakKeyDictionary()


def lattice_of(scope: Scope) -> Lattice:
    """The order of ``scope``'s times: set by fixed_point / prioritize, else the product order."""
    lattice = _lattices.get(scope)
    if lattice is None:
        lattice = lattice_of(scope.parent).enter() if isinstance(scope, LoopContext) else Lattice(0)
        _lattices[scope] = lattice
    return lattice


def _root(scope: Scope) -> Scope:
    while isinstance(scope, LoopContext):
        scope = scope.parent
    return scope


def operator_name(scope: Scope, op: str, name: str | None) -> str:
    """``name``, or ``op`` numbered per dataflow; a name already given in the same scope gets a
    number too, so a library function can be used twice. Every process builds the same
    dataflow in the same order, so every process picks the same names."""
    root = _root(scope)
    entry = _names.get(root)
    if entry is None:
        entry = _names[root] = (itertools.count(1), set())
    counter, used = entry
    where = (scope.depth, scope.name)  # not id(scope): ids of dead scopes are reused, differently per process
    if name and (where, name) not in used:
        used.add((where, name))
        return name
    while True:
        full = f"{name or op}{next(counter)}"  # type: ignore[call-overload]
        if (where, full) not in used:
            used.add((where, full))
            return full


_sides: weakref.WeakKeyDictionary[Scope, dict[tuple[int, int], SharedSide]] = weakref.WeakKeyDictionary()


def _shared_side(collection: Collection, key: Callable[[Any], Any]) -> tuple[SharedSide, int]:
    """The input of a join inside a loop that takes ``collection`` by ``key``, and this join's
    reader number: joins of one collection by one key function (the same objects) keep one
    arrangement of it per worker (`_arrange.SharedSide`), which a join uses once a second
    join reads it too."""
    sides = _sides.get(collection.scope)
    if sides is None:
        sides = _sides[collection.scope] = {}
    at = (id(collection._blocks), id(key))
    side = sides.get(at)
    if side is None:  # it holds the stream and the key, so their ids stay theirs
        side = sides[at] = SharedSide(collection._blocks, key)
    side.readers += 1
    return side, side.readers - 1


def keyed_inputs(
    scope: Scope, full: str, streams: list[Stream], keys: list[Callable[[Any], Any]]
) -> tuple[list[Stream], Any]:
    """The inputs of a keyed stage and their exchange: each input first passes a `Route` stage
    that cuts its blocks by the key's route, and the stage exchanges by the chosen worker.
    (With one worker the route stage passes blocks on untouched; it is there all the same,
    so that the graph, and a checkpoint of it, is the same for any number of workers.)"""
    routed = []
    for i, (s, k) in enumerate(zip(streams, keys)):
        name = f"{full}.route{i}" if len(streams) > 1 else f"{full}.route"
        routed.append(s.stage(name, _router(KeyOf(k, full))))
    return routed, [by_destination] * len(streams)


def _router(key: KeyOf) -> Callable[[], Route]:
    return lambda: Route(key)


class Collection:
    """A multiset of records varying over lattice times: a stream of differences.

    ``Collection(stream)`` wraps a plain timely stream of ``(record, diff)`` pairs (each at
    its message's time); ``collection.stream`` is such a stream of this collection."""

    __slots__ = ("_blocks", "_net", "_pairs", "lattice")

    def __init__(self, stream: Stream, lattice: Lattice | None = None) -> None:
        if not isinstance(stream, Stream):
            raise TypeError(f"a Collection wraps a timely Stream, got {stream!r}")
        full = operator_name(stream.scope, "from_pairs", None)
        self._blocks = stream.stage(full, lambda: FromPairs(full))
        self._pairs: Stream | None = stream
        self._net = False
        self.lattice = lattice if lattice is not None else lattice_of(stream.scope)

    @classmethod
    def _of(cls, blocks: Stream, lattice: Lattice, net: bool = False) -> Collection:
        """A collection of a stream of blocks (linq's own operators make these).

        ``net``: the differences it sends at each time depend only on its inputs'
        accumulations, not on how their differences were split (a reduce sends ``f(new) -
        f(old)`` per key, a consolidate one sum per record), and a linear operator of such
        collections only keeps that. So a difference and its opposite arriving together
        upstream change nothing here, which lets `fixed_point` skip consolidating its feedback."""
        self = object.__new__(cls)
        self._blocks = blocks
        self._pairs = None
        self._net = net
        self.lattice = lattice
        return self

    @property
    def stream(self) -> Stream:
        """This collection as a plain timely stream of ``(record, diff)`` pairs, each at its
        message's time (made on first use; the same stream after that)."""
        if self._pairs is None:
            full = self._name("to_pairs", None)
            self._pairs = self._blocks.stage(full, ToPairs)
        return self._pairs

    @property
    def scope(self) -> Scope:
        return self._blocks.scope

    def __repr__(self) -> str:
        return f"<Collection {self._blocks!r}>"

    # Plumbing ----------------------------------------------------------------------------------
    def _name(self, op: str, name: str | None) -> str:
        return operator_name(self.scope, op, name)

    def _same_scope(self, op: str, *others: Collection) -> None:
        for other in others:
            if not isinstance(other, Collection):
                raise TypeError(f"{op}: expected a Collection, got {other!r}")
            if other.scope is not self.scope:
                raise ScopeError(
                    f"{op}: the collections belong to different scopes ({_scope_name(self.scope)} and "
                    f"{_scope_name(other.scope)}); bring a collection into a loop with "
                    "collection.enter(loop_scope) (the TR's ExtendTime)"
                )

    def _unary(self, op: str, name: str | None, factory: Callable[[str], Any]) -> Collection:
        """A linear operator: it maps each difference on its own, so it keeps `_net`."""
        full = self._name(op, name)
        stream = self._blocks.stage(full, lambda: factory(full))
        return Collection._of(stream, self.lattice, self._net)

    def _reduce(
        self,
        op: str,
        name: str | None,
        keys: list[Callable[[Any], Any]],
        reducer: Reducer | Evaluate,
        others: list[Collection],
    ) -> Collection:
        self._same_scope(op, *others)
        full = self._name(op, name)
        lattice = self.lattice
        streams, exchange = keyed_inputs(self.scope, full, [self._blocks, *(o._blocks for o in others)], keys)
        stream = self.scope.stage(full, lambda: Reduce(full, lattice, keys, reducer), streams, exchange=exchange)
        return Collection._of(stream, lattice, net=True)

    # Linear operators ----------------------------------------------------------------------------
    def select(self, selector: Callable[[Any], Any], name: str | None = None) -> Collection:
        """Each record mapped through ``selector``."""
        return self._unary("select", name, lambda op: Select(op, selector))

    def where(self, predicate: Callable[[Any], bool], name: str | None = None) -> Collection:
        """The records for which ``predicate`` holds."""
        return self._unary("where", name, lambda op: Where(op, predicate))

    def select_many(self, selector: Callable[[Any], Iterable[Any]], name: str | None = None) -> Collection:
        """Every record of ``selector(record)``, for each record."""
        return self._unary("select_many", name, lambda op: SelectMany(op, selector))

    def negate(self, name: str | None = None) -> Collection:
        """Every count negated: ``a.concat(b.negate())`` is ``a - b`` as multisets."""
        return self._unary("negate", name, lambda op: Negate())

    def concat(self, *others: Collection, name: str | None = None) -> Collection:
        """The multiset sum: counts add."""
        self._same_scope("concat", *others)
        full = self._name("concat", name)
        net = self._net and all(o._net for o in others)
        return Collection._of(self.scope.concat(full, [self._blocks, *(o._blocks for o in others)]), self.lattice, net)

    def inspect(self, fn: Callable[[Any, Any, int], None], name: str | None = None) -> Collection:
        """Call ``fn(record, time, diff)`` for every difference, and pass the collection on."""
        return self._unary("inspect", name, lambda op: Inspect(op, fn))

    def consolidate(self, name: str | None = None) -> Collection:
        """The same collection with the differences of each record at each time summed (TR Table 5)."""
        full = self._name("consolidate", name)
        streams, exchange = keyed_inputs(self.scope, full, [self._blocks], [identity])
        return Collection._of(
            self.scope.stage(full, lambda: Consolidate(full), streams, exchange=exchange), self.lattice, net=True
        )

    # Keyed operators -------------------------------------------------------------------------------
    def join(
        self,
        other: Collection | Arranged,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any] | None,
        selector: Callable[[Any, Any], Any],
        name: str | None = None,
    ) -> Collection:
        """``selector(a, b)`` for each pair with ``key1(a) == key2(b)``; counts multiply.

        ``other`` may be an `Arranged` (`arrange`): then only this collection is arranged here,
        the other side is the shared arrangement, and ``key2`` is its key (pass None)."""
        if isinstance(other, Arranged):
            return self._join_arranged(other, key1, key2, selector, name)
        if key2 is None:
            raise TypeError("join: key2 is needed unless other is an Arranged")
        self._same_scope("join", other)
        full = self._name("join", name)
        lattice = self.lattice
        sides: tuple[tuple[SharedSide, int] | None, tuple[SharedSide, int] | None] = (None, None)
        if lattice.depth > 0 and not (other._blocks is self._blocks and key1 is key2):
            sides = (_shared_side(self, key1), _shared_side(other, key2))
        streams, exchange = keyed_inputs(self.scope, full, [self._blocks, other._blocks], [key1, key2])
        stream = self.scope.stage(
            full, lambda: Join(full, lattice, key1, key2, selector, sides), streams, exchange=exchange
        )
        return Collection._of(stream, lattice)

    def semijoin(
        self,
        other: Collection,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Collection:
        """The records of this collection whose ``key1(record)`` is a key of ``other``, each
        with its own count: ``other``'s records are the keys themselves, or ``key2(record)``
        of them. A key counts once however often ``other`` holds it (a `distinct` of the
        keys is kept; differential dataflow's ``semijoin`` multiplies by the key's count)."""
        self._same_scope("semijoin", other)
        full = self._name("semijoin", name)
        return self._matching(full, other, key1, key2)

    def antijoin(
        self,
        other: Collection,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Collection:
        """The records of this collection whose ``key1(record)`` is *not* a key of ``other``
        (``other``'s records, or ``key2`` of them), each with its own count: this collection
        less its `semijoin`."""
        self._same_scope("antijoin", other)
        full = self._name("antijoin", name)
        matching = self._matching(full, other, key1, key2)
        return self.concat(matching.negate(name=f"{full}.negate"), name=f"{full}.rest")

    def _matching(
        self, full: str, other: Collection, key1: Callable[[Any], Any], key2: Callable[[Any], Any] | None
    ) -> Collection:
        keys = other if key2 is None else other.select(key2, name=f"{full}.keys")
        present = keys.distinct(name=f"{full}.present")
        return self.join(present, key1, identity, left, name=f"{full}.match")

    def arrange(self, key: Callable[[Any], Any], name: str | None = None) -> Arranged:
        """This collection arranged by ``key`` once, for any number of joins against it
        (``c.join(arranged, key1, None, selector)``) in this scope: each reads the same
        arrangement instead of building its own (differential dataflow's ``arrange``)."""
        full = self._name("arrange", name)
        lattice = self.lattice
        arranged = Arranged(self, key, full)
        streams, exchange = keyed_inputs(self.scope, full, [self._blocks], [key])
        arranged.stream = self.scope.stage(
            full, lambda: Arrange(full, lattice, key, arranged), streams, exchange=exchange
        )
        return arranged

    def _join_arranged(
        self,
        other: Arranged,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any] | None,
        selector: Callable[[Any, Any], Any],
        name: str | None,
    ) -> Collection:
        if key2 is not None and key2 is not other.key:
            raise ValueError(f"join: {other!r} is arranged by its own key; pass key2=None")
        self._same_scope("join", other.collection)
        full = self._name("join", name)
        lattice = self.lattice
        reader = other.readers
        other.readers += 1
        streams, exchange = keyed_inputs(self.scope, full, [self._blocks], [key1])
        stream = self.scope.stage(
            full,
            lambda: JoinArranged(full, lattice, key1, selector, reader),
            [*streams, other.stream],
            exchange=[*exchange, None],
        )
        return Collection._of(stream, lattice)

    def group_by(
        self,
        key: Callable[[Any], Any],
        reducer: Callable[[Any, list[Any]], Iterable[Any]],
        name: str | None = None,
    ) -> Collection:
        """``reducer(key, records)`` for each key's group (records repeated by their count, sorted
        where they can be); the output is every record it returns."""

        def evaluate(k: Any, group: Counts) -> Counts:
            return _records(reducer(k, _expand(group)), "group_by", k)

        return self._reduce("group_by", name, [key], evaluate, [])

    def co_group_by(
        self,
        other: Collection,
        key1: Callable[[Any], Any],
        key2: Callable[[Any], Any],
        reducer: Callable[[Any, list[Any], list[Any]], Iterable[Any]],
        name: str | None = None,
    ) -> Collection:
        """``reducer(key, records1, records2)`` for each key present in either collection."""

        def evaluate(k: Any, group: Counts) -> Counts:
            first, second = _split(group)
            return _records(reducer(k, _expand(first), _expand(second)), "co_group_by", k)

        return self._reduce("co_group_by", name, [key1, key2], evaluate, [other])

    def distinct(self, name: str | None = None) -> Collection:
        """Each record once (set semantics)."""
        return self._reduce("distinct", name, [identity], Distinct(), [])

    def count(self, key: Callable[[Any], Any] | None = None, name: str | None = None) -> Collection:
        """``(key, n)``: how many records have each key (each distinct record, without ``key``)."""
        return self._reduce("count", name, [key or identity], Count(), [])

    def count_all(self, name: str | None = None) -> Collection:
        """The number of records (with their counts) as a collection of one record, an int;
        no record while the collection is empty (as a `count` has no key then). One worker
        holds the count."""
        full = self._name("count_all", name)
        counted = self._reduce("count_all", f"{full}.count", [nothing], Count(), [])
        return counted.select(_second, name=f"{full}.total")

    def sum(self, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str | None = None) -> Collection:
        """``(key, total)``: the sum of ``value(record)`` over each key's records."""

        def evaluate(k: Any, group: Counts) -> Counts:
            return {(k, sum(value(d) * c for d, c in group.items())): 1}

        return self._reduce("sum", name, [key], Sum(value, evaluate), [])

    def min(self, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str | None = None) -> Collection:
        """Per key, the record with the least ``value(record)`` (ties: the least record)."""
        return self._reduce("min", name, [key], Extreme(value, False, _extreme(value, min)), [])

    def max(self, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str | None = None) -> Collection:
        """Per key, the record with the greatest ``value(record)`` (ties: the greatest record)."""
        return self._reduce("max", name, [key], Extreme(value, True, _extreme(value, max)), [])

    def union(self, other: Collection, name: str | None = None) -> Collection:
        """Multiset union: each record's count is the larger of its two counts."""
        return self._reduce("union", name, [identity, identity], _set_op(max), [other])

    def intersect(self, other: Collection, name: str | None = None) -> Collection:
        """Multiset intersection: each record's count is the smaller of its two counts."""
        return self._reduce("intersect", name, [identity, identity], _set_op(min), [other])

    def except_(self, other: Collection, name: str | None = None) -> Collection:
        """Multiset difference: each record's count less its count in ``other``, at least zero."""
        return self._reduce("except", name, [identity, identity], _set_op(lambda a, b: a - b), [other])

    # Loops ------------------------------------------------------------------------------------------
    def enter(self, scope: Scope, name: str | None = None) -> Collection:
        """This collection inside ``scope``, a loop directly inside this collection's scope
        (the TR's ExtendTime): it enters at the loop's first iteration and never changes there."""
        stream = self._loop("enter", scope).ingress(self._blocks, operator_name(scope, "enter", name))
        return Collection._of(stream, lattice_of(scope))

    def _loop(self, op: str, scope: Scope) -> LoopContext:
        """``scope``, refused unless it is a loop directly inside this collection's scope."""
        if not isinstance(scope, LoopContext) or scope.parent is not self.scope:
            raise ScopeError(
                f"{op}: {_scope_name(scope)} is not a loop directly inside {_scope_name(self.scope)}, "
                "where this collection lives"
            )
        return scope

    def leave(self, name: str | None = None) -> Collection:
        """This collection outside its loop: the differences of all iterations, summed per outer time."""
        scope = self.scope
        if not isinstance(scope, LoopContext):
            raise ScopeError("leave: this collection is not inside a loop")
        stream = scope.egress(self._blocks, self._name("leave", name))
        return Collection._of(stream, lattice_of(scope.parent))

    def fixed_point(
        self,
        body: Callable[[Collection], Collection],
        max_iterations: int | None = None,
        name: str | None = None,
    ) -> Collection:
        """``body`` applied until nothing changes: ``body^∞(self)`` (TR §5.1.1).

        ``body`` receives this collection inside a new loop and returns a collection of that
        loop. Other collections it uses must be brought in with ``c.enter(x.scope)``. With
        ``max_iterations`` the result is ``body^max_iterations(self)``.

        Inside a new loop the variable ``x`` is this collection entered at iteration 0 plus what
        the feedback brings back, ``body(x) - input`` one iteration later: ``x`` is ``body(x_{i-1})``
        at iteration ``i``, and a difference goes round only while something still changes. The
        result leaves summed over iterations and consolidated (the TR's egress "accumulates all
        differences").

        The feedback is consolidated (a ``cancel`` stage), so that ``+r`` and ``-r`` at one
        time cancel there instead of going round for ever through a linear body, unless the
        body's result is net (it ends in a ``distinct``, ``count``, ``min``, any reduce or
        ``consolidate``, perhaps followed by linear operators). Then its differences follow
        from the accumulation of ``x`` alone, and that accumulation is the same whether or not
        the feedback was consolidated, so the body sends the same differences either way: a
        pair that goes round unconsolidated is summed away by the body's reduce one iteration
        later, and the loop stops when it would have stopped. Skipping ``cancel`` saves a
        notification per iteration, which on several workers is a wait for every peer.
        """
        full, loop, entered = _open_loop(self, "fixed_point", name)
        feedback = loop.feedback("next", max_iterations)
        x = Collection._of(loop.concat("x", [entered._blocks, feedback.stream]), entered.lattice)
        result = _loop_result(full, loop, body(x))
        step = result.concat(entered.negate(name="undo_input"), name="step")
        if not result._net:  # a linear body would send +r and -r round for ever
            step = step.consolidate(name="cancel")
        feedback.connect(step._blocks)
        return result.leave(name="result").consolidate(name="limit")

    def prioritize(
        self,
        priority: Callable[[Any], int],
        body: Callable[[Collection], Collection],
        name: str | None = None,
    ) -> Collection:
        """``body(self)``, computed with this collection's records introduced in order of
        ``priority(record)`` (a non-negative int), smaller first (TR §2.6, §5.1.2).

        Prioritize changes only *times*: a new coordinate holds the priority, each record
        enters at its own, and the body's result leaves summed over all priorities. So the
        result is exactly ``body(self)`` for any body (a `count`, a `select`, a nested
        `fixed_point`, ...); what the priority changes is the order of the work: the body's
        result for the records of priority at most ``p`` is computed as a difference from
        the result for those of priority at most ``p - 1``, as a later epoch reuses an
        earlier one's work (docs/linq.md, "Loops").
        """
        full, loop, entered = _open_loop(self, "prioritize", name)
        x = entered._delayed(priority, "priority", "arrive")
        result = _loop_result(full, loop, body(x))
        return result.leave(name="result").consolidate(name="limit")

    def enter_at(self, scope: Scope, iteration: Callable[[Any], int], name: str | None = None) -> Collection:
        """`enter`, with each record entering ``scope`` at loop iteration ``iteration(record)``
        (a non-negative int) rather than at the first (differential dataflow's ``enter_at``).

        Inside a `fixed_point` this lets records join the iteration late, e.g. large labels
        only once the small ones have flooded the graph; a retraction enters at the same
        iteration as its record. The body sees a record from its iteration on."""
        loop = self._loop("enter_at", scope)
        full = operator_name(loop, "enter_at", name)
        entered = Collection._of(loop.ingress(self._blocks, f"{full}.ingress"), lattice_of(scope))
        stream = entered._blocks.stage(full, lambda: Delay(full, iteration, "iteration"))
        return Collection._of(stream, entered.lattice)

    # To and from plain timely streams ---------------------------------------------------------------
    def to_stream(self, name: str | None = None) -> Stream:
        """A plain timely stream of ``(record, time, diff)`` triples, each at its own time.

        The time in a triple is a `timely.Timestamp` here, but a triple that crosses to another
        process arrives with a plain tuple (equal, and hashing the same): use ``tuple(time)``
        or ``time[0]`` rather than ``time.epoch`` in a vertex that reads it."""
        full = self._name("to_stream", name)
        return self._blocks.stage(full, ToTriples)  # type: ignore[no-any-return]

    @classmethod
    def from_stream(cls, stream: Stream, name: str | None = None) -> Collection:
        """A collection from a stream of ``(record, time, diff)`` triples. A triple's time may be
        later than the time of the message that carries it, never earlier."""
        scope = stream.scope
        full = operator_name(scope, "from_stream", name)
        lattice = lattice_of(scope)
        depth = lattice.depth
        out = stream.stage(full, lambda: FromTriples(full, depth))
        return Collection._of(out, lattice)

    def to_columns(self, name: str | None = None) -> Stream:
        """A plain timely stream of ``(columns, diffs)`` records, one per message: ``columns`` the
        records' fields as numpy arrays (a tuple, one per field of tuple records; one array of
        scalar records), ``diffs`` an int64 array. No Python object per record (see
        `from_columns`); `consolidate` first for one difference per record and time."""
        full = self._name("to_columns", name)
        return self._blocks.stage(full, ToColumns)  # type: ignore[no-any-return]

    @classmethod
    def from_columns(cls, stream: Stream, name: str | None = None) -> Collection:
        """A collection from a stream of ``(columns, diffs)`` records (as `to_columns` makes them,
        or as columnar data comes: Arrow batches, Parquet, numpy): ``columns`` one array of
        records or a tuple of arrays, one per field, of one length; ``diffs`` an int array or
        None (each record once). Each record becomes one block, column by column."""
        scope = stream.scope
        full = operator_name(scope, "from_columns", name)
        return Collection._of(stream.stage(full, lambda: FromColumns(full)), lattice_of(scope))

    def _delayed(self, shift: Callable[[Any], int], what: str, name: str) -> Collection:
        return self._unary("delay", name, lambda op: Delay(op, shift, what))


def _open_loop(collection: Collection, kind: str, name: str | None) -> tuple[str, LoopContext, Collection]:
    """A new loop around ``collection``'s scope, its name, and ``collection`` entered into it."""
    full = operator_name(collection.scope, kind, name)
    loop = LoopContext(collection.scope, full)
    lattice = collection.lattice.enter()
    _lattices[loop] = lattice
    return full, loop, Collection._of(loop.ingress(collection._blocks, "enter"), lattice)


def _loop_result(full: str, loop: LoopContext, result: Any) -> Collection:
    """What a loop body returned, refused unless it is a collection of that loop."""
    if not isinstance(result, Collection):
        raise TypeError(f"{full}: the loop body must return a Collection, got {result!r}")
    if result.scope is not loop:
        raise ScopeError(
            f"{full}: the loop body returned a collection of {_scope_name(result.scope)}, but it must "
            f"return one of the loop it was given ({_scope_name(loop)})"
        )
    return result


def _scope_name(scope: Scope) -> str:
    return f"loop {scope.name!r}" if isinstance(scope, LoopContext) else "the root scope"


# Reducers ------------------------------------------------------------------------------------------
def _expand(group: Counts) -> list[Any]:
    records = [d for d, c in group.items() for _ in range(c)]
    try:
        records.sort()
    except TypeError:
        pass
    return records


_second = itemgetter(1)


def _records(answer: Any, op: str, key: Any) -> Counts:
    """A reducer's answer as record -> count; it must be an iterable of records (not a mapping,
    which would read as record -> count, nor None, a forgotten ``return``)."""
    if answer is None or isinstance(answer, str | bytes | Mapping) or not isinstance(answer, Iterable):
        raise OperatorError(
            f"the {op} reducer returned {answer!r} for key {key!r}; it must return an iterable of output records"
        )
    return Counter(iter(answer))


def _split(group: Counts) -> tuple[Counts, Counts]:
    first: Counts = {}
    second: Counts = {}
    for (side, d), c in group.items():
        (second if side else first)[d] = c
    return first, second


def _extreme(value: Callable[[Any], Any], pick: Callable[..., Any]) -> Evaluate:
    def evaluate(key: Any, group: Counts) -> Counts:
        if len(group) == 1:
            for d in group:
                return {d: 1}
        best = pick(map(value, group))
        tied = [d for d in group if value(d) == best]
        if len(tied) > 1:
            try:
                return {pick(tied): 1}
            except TypeError:
                return {pick(tied, key=repr): 1}
        return {tied[0]: 1}

    return evaluate


def _set_op(combine: Callable[[int, int], int]) -> Evaluate:
    def evaluate(key: Any, group: Counts) -> Counts:
        n = combine(group.get((0, key), 0), group.get((1, key), 0))
        return {key: n} if n > 0 else {}

    return evaluate
