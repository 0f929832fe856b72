"""Bloom's collections and rules on a timely loop.

    with bloom.Program(scope, "tc") as p:
        link = p.table("link", edges)                  # persistent, fed by a root-scope stream
        path = p.table("path")
        path |= link                                   # Bloom's  path <= link
        path |= link.join(path, lambda l: l[1], lambda q: q[0], lambda l, q: (l[0], q[1]))
    paths = p.output(path)                             # the answer, epoch by epoch

A `Program` is one timely loop. Each collection is one stage in it (a coordination-free
`distinct`, or an `aggregate` for a lattice collection) whose inputs are its source (brought
into the loop) and one feedback edge; each rule ``target |= expression`` compiles at once into
stages reading the collections' streams, and its result goes around the target's feedback.
Leaving the ``with`` block (or `Program.finish`) connects the feedback edges. Nothing in the
loop calls ``notify_at`` unless a rule asks for it (`Expr.not_in`, an unmarked function): the
rules run to their fixed point asynchronously, and the loop ends when nothing new is derived.

A *timestep program* (``Program(scope, name, timesteps=True)``) wraps that loop in an outer one
whose counter is Bloom's timestep: ``<+`` (`Collection.defer`), ``<-`` (`Collection.delete`),
``<+-`` (`Collection.upsert`) and ``<~`` (`Collection.send`) carry facts around it to the
next timestep, and tables with deletions (`Program.keyed_table`) apply each timestep's changes
once the previous one is complete (docs/bloom.md, "Timesteps").
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Literal, Self

from timely import Feedback, LoopContext, Probe, Scope, Stream, Timestamp

from .._hash import by_first, stable_hash
from ._errors import BloomError
from ._lattice import Lattice
from ._operators import _TIMESTEP_LOOPS, _Aggregate, _group_pairs, _pair, apply, join, not_in, when
from ._timestep import (
    Op,
    _Answers,
    _Bootstrap,
    _Collection,
    _Delay,
    _Later,
    _NotInStep,
    _Stamp,
    _Table,
    _tagger,
    _ToTimestep,
    change_join,
    ticks,
)

__all__ = ["Collection", "Expr", "Keep", "LatticeCollection", "LatticeExpr", "Output", "Program"]

Kind = Literal["persistent", "scratch", "mutable", "mixed"]


class Program:
    """A Bloom program: collections and the rules between them, evaluated in one timely loop
    inside the root scope ``scope``. Use it as a context manager, or call `finish`.

    With ``timesteps=True`` (or a ``clock``) it is a *timestep program*: an outer loop whose
    counter is Bloom's timestep around the rule loop, so that ``<+``, ``<-``, ``<+-`` and ``<~``
    can carry facts to the next timestep (a timely cycle must pass a loop's feedback; an epoch
    cannot be advanced around one). Input of epoch ``e`` joins timestep ``e``. ``clock``, a
    root-scope stream with a record at every timestep, drives ``bootstrap`` and ``periodic``."""

    def __init__(
        self, scope: Scope, name: str = "bloom", *, timesteps: bool = False, clock: Stream | None = None
    ) -> None:
        if scope.depth != 0:
            raise BloomError(f"bloom program {name!r}: build it in the root scope (it makes its own loop)")
        self.scope = scope
        self.name = name
        self.timesteps = timesteps or clock is not None
        self.outer: LoopContext | None = LoopContext(scope, name) if self.timesteps else None
        self.loop = LoopContext(self.outer, "step") if self.outer is not None else LoopContext(scope, name)
        if self.outer is not None:
            _TIMESTEP_LOOPS.add(self.loop)
        self.collections: list[Collection] = []
        self.finished = False
        self._count = 0
        self.ticks: Stream | None = None
        """Root scope: one ``(worker, epoch)`` per worker at every timestep of ``clock``."""
        if clock is not None:
            if not isinstance(clock, Stream) or clock.scope.depth != 0:
                raise BloomError(f"bloom program {name!r}: the clock must be a root-scope stream, got {clock!r}")
            self.ticks = ticks(clock, f"{name}.clock")
        self._bootstrap: list[tuple[int, Any]] = []
        self._periodic: list[tuple[int, str, int]] = []
        self._outer_joins: list[tuple[Expr, str]] = []
        self._instant: list[tuple[str, frozenset[str], frozenset[str]]] = []
        """The ``<=`` rules: (target, collections read, collections read through ``not_in``)."""

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.finish()

    def _name(self, op: str) -> str:
        self._count += 1
        return f"{op}{self._count}"

    def _declare(self, name: str) -> None:
        if self.finished:
            raise BloomError(f"bloom program {self.name!r}: collection {name!r} declared after finish()")
        if any(c.name == name for c in self.collections):
            raise BloomError(f"bloom program {self.name!r}: there is already a collection named {name!r}")

    # Moving streams in and out ---------------------------------------------------------------------
    def bring_in(self, stream: Stream, name: str) -> Stream:
        """A root-scope ``stream`` inside the rule loop; in a timestep program, epoch ``e``'s
        records at timestep ``e``."""
        if self.outer is None:
            return self.loop.ingress(stream, name)
        outer = self.outer.ingress(stream, f"{name}.in")
        return self.loop.ingress(outer.stage(f"{name}.at", _ToTimestep), name)

    def _take_out(self, stream: Stream, name: str) -> Stream:
        if self.outer is None:
            return self.loop.egress(stream, name)
        stamped = self.loop.egress(stream, f"{name}.step").stage(f"{name}.stamp", _Stamp)
        return self.outer.egress(stamped, name)

    def _timestep_only(self, what: str) -> None:
        if self.outer is None:
            raise BloomError(
                f"{what} acts at the next timestep: build the program with bloom.Program(scope, name, "
                "timesteps=True) (an outer loop whose counter is the timestep)"
            )

    # Collections --------------------------------------------------------------------------------
    def table(
        self,
        name: str,
        source: Stream | None = None,
        *,
        coordinated: bool = False,
        partition: Callable[[Any], Any] | None = None,
    ) -> Collection:
        """A persistent set: a fact, once in, holds at its epoch and every later one.

        ``partition`` picks the part of a fact that says which worker keeps it (default: the
        whole fact); when a rule joins the table on that same key, its facts are already where
        the join needs them and never cross to another process a second time.
        ``coordinated`` holds each time's new facts until the time is complete (one notification
        per iteration, Naiad's synchronous style), for comparison with the default."""
        self._declare(name)
        route = stable_hash if partition is None else _hash_of(partition)
        return Collection(self, name, "persistent", source, route, coordinated)

    def scratch(self, name: str, source: Stream | None = None) -> Collection:
        """A per-epoch set (Bloom's scratch): a fact holds at the epoch it was derived at only."""
        self._declare(name)
        return Collection(self, name, "scratch", source, stable_hash)

    def channel(
        self,
        name: str,
        source: Stream | None = None,
        address: Callable[[Any], Any] = itemgetter(0),
        *,
        delay: int | Callable[[Any], int] = 1,
    ) -> Collection:
        """A scratch collection whose facts travel to the worker that owns ``address(fact)``
        (Bloom's ``@address`` field): rules joining on the address run where it lives.

        ``delay``: how many timesteps a fact sent with ``<~`` (`Collection.send`) at timestep ``t``
        takes to arrive, ``t + delay`` (an int >= 1, or a function of the fact: Bud promises only
        "some later timestep", and a program whose answer must not depend on when messages
        arrive can be run under several delays to show that it does not)."""
        if not callable(delay) and (not isinstance(delay, int) or isinstance(delay, bool) or delay < 1):
            raise BloomError(f"channel {name!r}: delay must be an int >= 1 or a function of the fact, got {delay!r}")
        self._declare(name)
        return Collection(self, name, "scratch", source, _hash_of(address), channel=True, delay=delay)

    def keyed_table(
        self, name: str, key: Callable[[Any], Any] | None = None, source: Stream | None = None
    ) -> Collection:
        """A table with deletions (Bud's ``table :t, [:k] => [:v]`` that ``<-`` or ``<+-`` rules
        change): one stored fact per ``key(fact)`` (default: the whole fact). Its stream carries
        changes, ``(fact, +1)`` and ``(fact, -1)``; it applies each timestep once the previous
        one is complete (one notification per timestep: deletion is not monotone)."""
        self._timestep_only(f"table with deletions {name!r}")
        self._declare(name)
        k = key or _whole
        return Collection(self, name, "mutable", source, _hash_of(k), key=k)

    def input(self, name: str, stream: Stream) -> Expr:
        """Bud's ``interface input``: the records of the root-scope ``stream`` as scratch facts, each
        epoch's at its timestep (not deduplicated, as no collection keeps them: use
        `Program.scratch` with a source for a named, deduplicated one)."""
        if not isinstance(stream, Stream) or stream.scope.depth != 0:
            raise BloomError(f"input {name!r}: needs a root-scope stream, got {stream!r}")
        return Expr(self, name, self.bring_in(stream, f"{name}.input"), "scratch")

    def temp(self, name: str, expr: Expr) -> Expr:
        """Bud's ``temp :name <= expr``: a name for ``expr``, re-derived at every timestep from what
        holds then (it holds what ``expr`` holds: persistent, scratch or changing facts)."""
        expr = _expr_of(self, expr, f"temp {name!r}")
        return Expr(self, name, expr.stream, expr.kind, expr.reads, expr.negates)

    def periodic(self, name: str, every: int = 1) -> Collection:
        """Bud's ``periodic``: a scratch collection holding ``(name, e)`` at every timestep ``e`` of
        the program's clock with ``e % every == 0`` (a wall-clock timer is a clock fed by time)."""
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise BloomError(f"periodic {name!r}: every must be an int >= 1, got {every!r}")
        self._needs_clock(f"periodic {name!r}")
        collection = self.scratch(name)
        self._periodic.append((len(self.collections) - 1, name, every))
        return collection

    def _needs_clock(self, what: str) -> None:
        if self.ticks is None:
            raise BloomError(
                f"{what} needs the program's clock: give bloom.Program(scope, name, clock=stream) a root "
                "stream with a record at every timestep (epoch) that should see it"
            )

    def lattice(
        self, name: str, lattice: type[Lattice] | None = None, source: Stream | None = None
    ) -> LatticeCollection:
        """A map from keys to lattice values, fed ``(key, value)`` records and merged per key by
        the asynchronous `aggregate`; its stream carries every improvement."""
        self._declare(name)
        return LatticeCollection(self, name, lattice, source)

    # Ending ---------------------------------------------------------------------------------------
    def finish(self) -> None:
        """Connect every collection's feedback to its rules (done by leaving the ``with`` block)."""
        if self.finished:
            return
        self.finished = True
        self._stratify()
        for table, join_name in self._outer_joins:
            if isinstance(table, Collection) and table._changes_within():
                raise BloomError(
                    f"left join {join_name!r}: table {table.name!r} also changes within a timestep (a source or "
                    "<= rules), so a fact without a match at a timestep could still get one; feed it with <+ / "
                    "<+- only"
                )
        if self._bootstrap or self._periodic:
            assert self.ticks is not None
            facts, periodic = self._bootstrap, self._periodic
            boot = self.ticks.stage(f"{self.name}.bootstrap", lambda: _Bootstrap(facts, periodic))
            inside = self.bring_in(boot, f"{self.name}.bootstrap")
            for index in sorted({t for t, _ in facts} | {t for t, _, _ in periodic}):
                c = self.collections[index]
                c.controls.append(inside.flat_map(f"{c.name}.bootstrap", _for_target(index)))
        for c in self.collections:
            _connect(self.loop, c.feedback, c.rules, f"{c.name}.rules", f"{c.name}.norules")
            if c.control is not None:
                _connect(self.loop, c.control, c.controls, f"{c.name}.controls", f"{c.name}.nocontrols")
            if c.next_feedback is not None:
                assert self.outer is not None
                _connect(self.outer, c.next_feedback, c.nexts, f"{c.name}.nexts", f"{c.name}.nonexts")

    def _stratify(self) -> None:
        """Refuse a cycle through negation within a timestep: a collection that ``not_in`` reads
        must not depend, through ``<=`` rules, on what that ``not_in`` derives (Bud stratifies
        such a program or refuses it; across ``<+``/``<~`` it is fine: that is the next timestep)."""
        after: dict[str, set[str]] = {}
        for target, reads, negates in self._instant:
            for source in reads | negates:
                after.setdefault(source, set()).add(target)
        for target, _, negates in self._instant:
            for negated in negates:
                seen, todo = set(), [target]
                while todo:
                    c = todo.pop()
                    if c == negated:
                        raise BloomError(
                            f"bloom program {self.name!r}: a cycle through negation: {target!r} is derived with "
                            f"not_in({negated!r}), and {negated!r} depends on {target!r} within the same timestep, "
                            "so neither can wait for the other to be complete (not stratifiable); move one "
                            "rule of the cycle to the next timestep (<+)"
                        )
                    if c not in seen:
                        seen.add(c)
                        todo.extend(after.get(c, ()))

    def output(
        self, collection: Expr, name: str | None = None, gather_to: int | None = None, *, keep: Keep = "all"
    ) -> Output:
        """The contents of ``collection`` (or any expression) outside the loop, epoch by epoch
        (in a timestep program: timestep by timestep): each process's share, or with
        ``gather_to`` the whole of it on that process alone (`timely.Stream.gather`).
        ``keep``: what the `Output` stores for its reader (every epoch, the latest answer, the
        changes since the last read, or nothing)."""
        if collection.program is not self:
            raise BloomError(f"bloom program {self.name!r}: output of an expression from another program")
        label = name or f"{collection.name}.out"
        stream = self._take_out(collection.stream, label)
        if gather_to is not None:
            stream = stream.gather(f"{label}.gather", to=gather_to)
        lattice = isinstance(collection, LatticeCollection)
        return Output(stream, collection.kind, lattice, stamped=self.outer is not None, keep=keep)

    def _next(self, stream: Stream, target: Collection, what: str) -> None:
        """Send ``stream``'s ``(op, fact)`` records to ``target``'s control input at the next
        timestep: out of the rule loop, around the outer loop's feedback, back in."""
        self._timestep_only(what)
        if target.next_feedback is None or not target.takes_control:
            raise BloomError(f"{what}: {target.name!r} takes rules with <= only (a lattice collection)")
        out = self.loop.egress(stream, f"{target.name}.{self._name('next')}")
        delay = target.delay
        if delay != 1:  # a channel's later timestep: sent on in the outer loop, before its feedback adds one
            channel = target.name
            out = out.stage(f"{channel}.{self._name('delay')}", lambda: _Delay(channel, delay))
        target.nexts.append(out)

    def _tagged(self, expr: Expr, op: Op, target: Collection, what: str) -> None:
        self._next(expr.stream.map(self._name(f"{target.name}.tag"), _tagger(op)), target, what)


def _expr_of(program: Program, expr: Any, what: str) -> Expr:
    if not isinstance(expr, Expr) or expr.program is not program:
        raise BloomError(f"{what}: {expr!r} is not an expression of program {program.name!r}")
    return expr


def _connect(loop: LoopContext, feedback: Feedback, streams: list[Stream], many: str, none: str) -> None:
    if not streams:
        feedback.connect(feedback.stream.filter(none, _never))
    elif len(streams) == 1:
        feedback.connect(streams[0])
    else:
        feedback.connect(loop.concat(many, streams))


def _for_target(index: int) -> Callable[[Any], list[tuple[int, Any]]]:
    insert = int(Op.INSERT)
    return lambda r: [(insert, r[1])] if r[0] == index else []


def _whole(fact: Any) -> Any:
    return fact


def _left(left: Any, right: Any) -> Any:
    return left


def _flipped(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda probe, fact: fn(fact, probe)


def _added(change: tuple[Any, int]) -> list[Any]:
    return [change[0]] if change[1] > 0 else []


def _on_fact(fn: Callable[[Any], Any]) -> Callable[[tuple[Any, int]], tuple[Any, int]]:
    return lambda change: (fn(change[0]), change[1])


def _control_route(route: Callable[[Any], int]) -> Callable[[Any], int]:
    """Routes an ``(op, fact)`` control record as ``route`` routes the fact, and a lookup
    ``(LOOKUP, (join, key, probe))`` by its key (as a table routes its facts)."""
    lookup = int(Op.LOOKUP)
    return lambda record: stable_hash(record[1][1]) if record[0] == lookup else route(record[1])


def _lookup_of(join: int, key: Callable[[Any], Any]) -> Callable[[Any], tuple[int, tuple[int, Any, Any]]]:
    lookup = int(Op.LOOKUP)
    return lambda probe: (lookup, (join, key(probe), probe))


def _hash_of(key: Callable[[Any], Any]) -> Callable[[Any], int]:
    """The exchange function routing a record by ``key(record)``."""
    return lambda record: stable_hash(key(record))


def _never(record: Any) -> bool:
    return False


class Expr:
    """A rule body: a stream of facts in the program's loop and how long they hold."""

    def __init__(
        self,
        program: Program,
        name: str,
        stream: Stream,
        kind: Kind,
        reads: frozenset[str] = frozenset(),
        negates: frozenset[str] = frozenset(),
    ) -> None:
        self.program = program
        self.name = name
        self.stream = stream
        self.kind: Kind = kind
        self.reads = reads
        """The collections this expression reads within its timestep."""
        self.negates = negates
        """The collections it reads through ``not_in`` (what stratification is about)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({self.kind})>"

    def _derive(self, op: str, stream: Stream, kind: Kind | None = None) -> Expr:
        kind = self.kind if kind is None else kind
        return Expr(self.program, f"{self.name}.{op}", stream, kind, self.reads, self.negates)

    def _with(self, other: Expr, name: str, stream: Stream, kind: Kind) -> Expr:
        """An expression reading both ``self`` and ``other``."""
        return Expr(self.program, name, stream, kind, self.reads | other.reads, self.negates | other.negates)

    def _same_program(self, other: Any, op: str) -> Expr:
        if isinstance(other, Stream):
            raise BloomError(
                f"{op} on {self.name!r}: {other!r} is a timely stream; make it the source of a collection "
                "(program.table(name, stream)) to use it in rules"
            )
        if not isinstance(other, Expr) or other.program is not self.program:
            raise BloomError(f"{op} on {self.name!r}: {other!r} is not an expression of program {self.program.name!r}")
        return other

    # Set-valued operators (all coordination-free) ---------------------------------------------------
    def select(self, fn: Callable[[Any], Any]) -> Expr:
        """``fn(fact)`` for every fact (Bud's ``t { |x| ... }`` / ``map``)."""
        f = _on_fact(fn) if self.kind == "mutable" else fn
        return self._derive("select", self.stream.map(self.program._name("select"), f))

    def where(self, predicate: Callable[[Any], bool]) -> Expr:
        f = (lambda c: predicate(c[0])) if self.kind == "mutable" else predicate
        return self._derive("where", self.stream.filter(self.program._name("where"), f))

    def select_many(self, fn: Callable[[Any], Any]) -> Expr:
        f = (lambda c: [(x, c[1]) for x in fn(c[0])]) if self.kind == "mutable" else fn
        return self._derive("select_many", self.stream.flat_map(self.program._name("select_many"), f))

    def project(self, *indices: int) -> Expr:
        """The tuple of the fields at ``indices`` of every (tuple) fact."""
        pick = itemgetter(*indices)
        fn = (lambda r: (pick(r),)) if len(indices) == 1 else pick
        return self.select(fn)

    def join(
        self,
        other: Expr,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        fn: Callable[[Any, Any], Any] | None = None,
    ) -> Expr:
        """``fn(l, r)`` (default ``(l, r)``) for every pair of facts with equal keys. A result holds
        while both of its facts do: persistent if both sides are, else at one epoch."""
        other = self._same_program(other, "join")
        if "mutable" in (self.kind, other.kind):
            return self._change_join(other, left_key, right_key, fn)
        for e in (self, other):
            if e.kind == "mixed":
                raise BloomError(
                    f"join of {self.name!r} and {other.name!r}: {e.name!r} unions persistent and scratch facts; "
                    "merge it into a collection first"
                )
        persistent = (self.kind == "persistent", other.kind == "persistent")
        stream = join(
            self.stream, other.stream, left_key, right_key, fn, self.program._name("join"), persistent=persistent
        )
        kind: Kind = "persistent" if all(persistent) else "scratch"
        return self._with(other, f"{self.name}.join({other.name})", stream, kind)

    def _change_join(
        self,
        other: Expr,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        fn: Callable[[Any, Any], Any] | None,
    ) -> Expr:
        """A join with a table with deletions: the other side must be scratch facts (an input, a
        channel), answered at each timestep against the table as it is then."""
        table, probe = (self, other) if self.kind == "mutable" else (other, self)
        if probe.kind != "scratch":
            raise BloomError(
                f"join of {self.name!r} and {other.name!r}: {table.name!r} is a table with deletions; it joins "
                f"with scratch facts only (an input, a channel, a scratch), and {probe.name!r} is {probe.kind}"
            )
        f = fn if fn is not None else _pair
        table_key, probe_key = (left_key, right_key) if table is self else (right_key, left_key)
        if isinstance(table, Collection) and table_key is table.key:  # on the table's key: it answers itself
            result = f if table is other else _flipped(f)
            stream = table._lookup(probe, probe_key, result, outer=False)
            return self._with(other, f"{self.name}.join({other.name})", stream, "scratch")
        stream = change_join(
            table.stream,
            probe.stream,
            left_key if table is self else right_key,
            right_key if table is self else left_key,
            f,
            self.program._name("join"),
            changes_first=table is self,
        )
        return self._with(other, f"{self.name}.join({other.name})", stream, "scratch")

    def left_join(
        self,
        table: Expr,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        fn: Callable[[Any, Any], Any] | None = None,
    ) -> Expr:
        """Bud's ``outer`` join of scratch facts (``self``) with a table with deletions: ``fn(l, r)``
        for every match, ``fn(l, None)`` for a fact with none at its timestep. Saying "none" needs
        the table complete for the timestep, so the table may only change through ``<+``, ``<-``
        and ``<+-`` (checked when the program is finished)."""
        table = self._same_program(table, "left_join")
        if self.kind != "scratch" or table.kind != "mutable":
            raise BloomError(
                f"left_join of {self.name!r} with {table.name!r}: joins scratch facts with a table with deletions "
                f"(program.keyed_table), got {self.kind} and {table.kind}"
            )
        name = self.program._name("left_join")
        if isinstance(table, Collection) and right_key is table.key:
            stream = table._lookup(self, left_key, fn or _pair, outer=True)
        else:
            stream = change_join(
                table.stream, self.stream, right_key, left_key, fn or _pair, name, changes_first=False, outer=True
            )
        self.program._outer_joins.append((table, name))
        return self._with(table, f"{self.name}.left_join({table.name})", stream, "scratch")

    def next(self) -> Expr:
        """The same facts one timestep later (a temp declared with ``<+``: ``temp :x <+ expr`` is
        ``program.temp("x", expr.next())``); for feeding a collection, use `Collection.defer`."""
        self.program._timestep_only(f"next() of {self.name!r}")
        if self.kind == "mutable":
            raise BloomError(
                f"next() of {self.name!r}: a table with deletions changes; join it with scratch facts first"
            )
        return self._derive("next", self.stream.stage(self.program._name("next"), _Later))

    def where_in(
        self, other: Expr, key: Callable[[Any], Any] | None = None, other_key: Callable[[Any], Any] | None = None
    ) -> Expr:
        """The facts with a match in ``other`` (Bud's ``t { |x| x if other.include? x }`` and
        ``exists?``): a semi-join, monotone. ``key``/``other_key`` default to the whole fact."""
        k, ok = key or _whole, other_key or _whole
        return self.join(other, k, ok, _left)._distinct_view("where_in")

    def _distinct_view(self, op: str) -> Expr:
        return self._derive(op, self.stream)

    def union(self, *others: Expr) -> Expr:
        exprs = [self, *(self._same_program(o, "union") for o in others)]
        kinds = {e.kind for e in exprs}
        kind: Kind = kinds.pop() if len(kinds) == 1 else "mixed"
        stream = self.program.loop.concat(self.program._name("union"), [e.stream for e in exprs])
        reads = frozenset().union(*(e.reads for e in exprs))
        negates = frozenset().union(*(e.negates for e in exprs))
        return Expr(self.program, "|".join(e.name for e in exprs), stream, kind, reads, negates)

    def __or__(self, other: Expr) -> Expr:
        return self.union(other)

    def not_in(
        self,
        negated: Stream | Expr,
        key: Callable[[Any], Any] | None = None,
        *,
        negated_key: Callable[[Any], Any] | None = None,
        predicate: Callable[[Any, Any], Any] | None = None,
    ) -> Expr:
        """Facts whose ``key`` (default: the fact) is not in ``negated``: a collection or expression of
        this program (Bud's ``notin``: it must not depend on the result within a timestep; see
        `_not_in_here`), or a root-scope stream from a lower stratum (e.g. another program's
        output, an input). Coordinated: it waits, per time,
        until everything up to that time has arrived; its facts hold at their epoch only. With
        ``negated_key`` and ``predicate``: Bud's ``notin(other, :a => :b) { |x, y| ... }`` (see
        `bloom.not_in`)."""
        if isinstance(negated, Expr):
            return self._not_in_here(negated, key, negated_key, predicate)
        if not isinstance(negated, Stream) or negated.scope.depth != 0:
            raise BloomError(
                f"not_in on {self.name!r}: the negated side must be a collection of this program or a root-scope "
                f"stream (a lower stratum, e.g. Output.stream of an earlier program), got {negated!r}"
            )
        if self.kind == "mutable":
            raise BloomError(f"not_in on {self.name!r}: a table with deletions cannot be negated against yet")
        name = self.program._name("not_in")
        inside = self.program.bring_in(negated, f"{name}.negated")
        stream = not_in(self.stream, inside, key, name, negated_key=negated_key, predicate=predicate)
        return self._derive("not_in", stream, "scratch")

    def _not_in_here(
        self,
        negated: Expr,
        key: Callable[[Any], Any] | None,
        negated_key: Callable[[Any], Any] | None,
        predicate: Callable[[Any, Any], Any] | None,
    ) -> Expr:
        """``not_in`` against an expression of this program (Bud's stratified ``notin``): both sides
        leave the rule loop, and a stage outside it answers each timestep once the rule loop has
        drained it (a notification per timestep: then the negated side is complete); the answer
        comes back in at the start of the rule loop, still in that timestep. If the negated side
        depends on the answer within the timestep, `Program.finish` refuses the cycle."""
        negated = self._same_program(negated, "not_in")
        if self.kind != "scratch":
            raise BloomError(
                f"not_in on {self.name!r}: against a collection of the program, the facts tested must be scratch "
                f"facts (an input, a channel, a scratch), and {self.name!r} is {self.kind}"
            )
        if negated.kind == "mixed":
            raise BloomError(f"not_in on {self.name!r}: {negated.name!r} unions persistent and scratch facts")
        program = self.program
        name = program._name("not_in")
        k = key or _whole
        nk = negated_key or _whole
        loop = program.loop
        mine = loop.egress(self.stream, f"{name}.facts")
        theirs = loop.egress(negated.stream, f"{name}.negated")
        on_fact = (lambda c: nk(c[0])) if negated.kind == "mutable" else nk
        answered = mine.scope.stage(
            name,
            lambda: _NotInStep(name, k, nk, predicate, negated.kind),
            [mine, theirs],
            exchange=[lambda r: stable_hash(k(r)), lambda n: stable_hash(on_fact(n))],
        )
        stream = loop.ingress(answered, f"{name}.in")
        return Expr(
            program,
            f"{self.name}.not_in({negated.name})",
            stream,
            "scratch",
            self.reads,
            self.negates | negated.reads | negated.negates,
        )


class Collection(Expr):
    """A named set in a program: its source (if any) plus whatever its rules derive.

    Its stage reads the rules (``<=``, through one feedback edge), control records (``(Op,
    fact)``: bootstrap facts, persistent bodies of a scratch or keyed table, and in a timestep
    program what the rules of the previous timestep sent here with ``<+``, ``<-``, ``<+-`` or
    ``<~``), its source, and for a scratch collection of a program with a clock, the ticks."""

    takes_control = True
    """Whether ``<+``, ``<-``, ``<~`` and bootstrap facts may target it (not a lattice collection)."""

    def __init__(
        self,
        program: Program,
        name: str,
        kind: Kind,
        source: Stream | None,
        route: Callable[[Any], int],
        coordinated: bool = False,
        *,
        key: Callable[[Any], Any] | None = None,
        channel: bool = False,
        delay: int | Callable[[Any], int] = 1,
    ) -> None:
        self.coordinated = coordinated
        self.channel = channel
        self.delay = delay
        """A channel: the timesteps a ``<~`` takes (`Program.channel`)."""
        self.key = key
        loop = program.loop
        self.feedback: Feedback = loop.feedback(f"{name}.derived")
        self.control: Feedback | None = None
        """Timestep programs: the rule loop's feedback carrying control records within a timestep."""
        self.next_feedback: Feedback | None = None
        """Timestep programs: the outer loop's feedback carrying this collection's next-timestep records."""
        inputs = [self.feedback.stream]
        if program.outer is not None:  # a program without timesteps has no use for them: no extra stages
            self.control = loop.feedback(f"{name}.control")
            self.next_feedback = program.outer.feedback(f"{name}.next")
            inputs.append(self.control.stream)
            inputs.append(loop.ingress(self.next_feedback.stream, f"{name}.next.in"))
        self.has_source = source is not None
        self.instant_controls = False
        """Whether control records come within a timestep (persistent rule bodies)."""
        if source is not None:
            if not isinstance(source, Stream) or source.scope.depth != 0:
                raise BloomError(f"collection {name!r}: the source must be a root-scope stream, got {source!r}")
            inputs.append(program.bring_in(source, f"{name}.source"))
        exchange: list[Any] = [route] * len(inputs)
        if self.control is not None:
            exchange[1] = exchange[2] = _control_route(route)
        self.rules: list[Stream] = []
        self.controls: list[Stream] = []
        self.nexts: list[Stream] = []
        self.lookups: dict[int, tuple[Callable[[Any, Any], Any], bool]] = {}
        """A table with deletions: the joins it answers itself (filled while rules are added)."""
        self.answers: Stream | None = None
        """A table with deletions: ``(join, result)`` answers of its lookups."""
        if kind == "mutable":
            assert key is not None
            lookups = self.lookups
            changes, again, self.answers = loop.stage(
                name,
                lambda: _Table(name, key, lookups, late_inserts=self._changes_within()),
                inputs,
                exchange=exchange,
                outputs=3,
            )
            super().__init__(program, name, changes, kind, frozenset((name,)))
            # The table's own path to its next timestep: repeated deletions, and the guarantee that
            # everything of a timestep has reached it before it applies the next one.
            program._next(again, self, f"table {name!r}")
        else:
            control = (1, 2) if self.control is not None else ()
            stream = loop.stage(name, self._vertex(name, kind, route, control), inputs, exchange=exchange)
            super().__init__(program, name, stream, kind, frozenset((name,)))
        program.collections.append(self)

    def _changes_within(self) -> bool:
        """Whether facts can be inserted within a timestep (``<=`` rules, a source, persistent
        bodies), after its lookups were answered: known once the program is finished."""
        return bool(self.rules or self.has_source or self.instant_controls)

    def _vertex(
        self, name: str, kind: Kind, route: Callable[[Any], int], control: tuple[int, ...]
    ) -> Callable[[], Any]:
        persistent = kind == "persistent"
        coordinated = self.coordinated
        return lambda: _Collection(name, persistent, coordinated, route, control)

    def _rule(self, what: str, expr: Any) -> Expr:
        expr = self._same_program(expr, f"{what} into {self.name!r}")
        if self.program.finished:
            raise BloomError(f"{what} into {self.name!r}: program {self.program.name!r} is already finished")
        if expr.kind == "mixed" and (what != "<=" or self.kind != "persistent"):
            raise BloomError(
                f"{what} into {self.name!r}: {expr.name!r} unions persistent and scratch facts; give each its own rule"
            )
        return expr

    def merge(self, expr: Expr) -> Self:
        """Add the rule ``self <= expr`` (Bud's ``<=``): everything ``expr`` derives at a timestep
        holds in this collection at that timestep (and, in a table, is stored from then on)."""
        expr = self._rule("<=", expr)
        self.program._instant.append((self.name, expr.reads, expr.negates))
        kind = expr.kind
        if kind == "mutable":
            if self.kind != "persistent":
                raise BloomError(
                    f"<= into {self.name!r} ({self.kind}): {expr.name!r} comes from a table with deletions; only a "
                    f"table without deletions stores it with <= (name it with program.temp to read it as it changes)"
                )
            self.rules.append(expr.stream.flat_map(self.program._name(f"{self.name}.added"), _added))
        elif kind == "persistent" and self.kind == "scratch":
            raise BloomError(
                f"<= into scratch {self.name!r}: {expr.name!r} is persistent, so Bud re-derives it at every "
                "timestep; name it with program.temp (it then holds at every timestep) or store it in a table"
            )
        elif kind == "persistent" and self.kind == "mutable":
            self.instant_controls = True
            self.controls.append(expr.stream.map(self.program._name(f"{self.name}.persist"), _tagger(Op.PERSIST)))
        else:
            self.rules.append(expr.stream)
        return self

    def __ior__(self, expr: Expr) -> Self:  # type: ignore[misc]
        return self.merge(expr)

    def defer(self, expr: Expr) -> Self:
        """Bud's ``<+``: what ``expr`` derives at timestep ``e`` holds here from timestep ``e + 1``
        (a scratch collection: at ``e + 1`` only; a table stores it)."""
        expr = self._rule("<+", expr)
        self._later(expr, "<+")
        return self

    def send(self, expr: Expr) -> Self:
        """Bud's ``<~`` into a channel: what ``expr`` derives at timestep ``e`` arrives at the worker
        owning its address at a later timestep (``e + 1``, or the channel's ``delay``), where it
        holds at that timestep."""
        if not self.channel:
            raise BloomError(f"<~ into {self.name!r}: only a channel takes asynchronous sends (program.channel)")
        expr = self._rule("<~", expr)
        self._later(expr, "<~")
        return self

    def _later(self, expr: Expr, what: str) -> None:
        if expr.kind == "mutable":
            raise BloomError(
                f"{what} into {self.name!r}: {expr.name!r} comes from a table with deletions; join it with "
                "scratch facts first"
            )
        if expr.kind == "persistent" and self.kind == "scratch":
            raise BloomError(
                f"{what} into scratch {self.name!r}: {expr.name!r} is persistent, so Bud would send it again at "
                "every timestep; send scratch facts (e.g. join it with an input or a periodic)"
            )
        self.program._tagged(expr, Op.INSERT, self, f"{what} into {self.name!r}")

    def delete(self, expr: Expr) -> Self:
        """Bud's ``<-``: each fact ``expr`` derives at timestep ``e`` is removed from this table at
        timestep ``e + 1`` (if it is stored then); a persistent body removes it at every timestep
        after one it holds at."""
        expr = self._rule("<-", expr)
        if self.kind != "mutable":
            raise BloomError(
                f"<- into {self.name!r}: only a table with deletions (program.keyed_table) can delete; "
                f"{self.name!r} is {self.kind} (monotone: it never forgets, and needs no coordination)"
            )
        if expr.kind == "mutable":
            raise BloomError(f"<- into {self.name!r}: join {expr.name!r} with scratch facts first")
        op = Op.DELETE_ALWAYS if expr.kind == "persistent" else Op.DELETE
        self.program._tagged(expr, op, self, f"<- into {self.name!r}")
        return self

    def upsert(self, expr: Expr) -> Self:
        """Bud's ``<+-``: at timestep ``e + 1`` each fact ``expr`` derives at ``e`` replaces the fact
        stored under its key."""
        expr = self._rule("<+-", expr)
        if self.kind != "mutable":
            raise BloomError(f"<+- into {self.name!r}: only a table with deletions (program.keyed_table) can upsert")
        if expr.kind != "scratch":
            raise BloomError(f"<+- into {self.name!r}: the body must be scratch facts, {expr.name!r} is {expr.kind}")
        self.program._tagged(expr, Op.UPSERT, self, f"<+- into {self.name!r}")
        return self

    def _lookup(
        self, probe: Expr, probe_key: Callable[[Any], Any], fn: Callable[[Any, Any], Any], *, outer: bool
    ) -> Stream:
        """The join of scratch facts ``probe`` with this table on its key, answered by the table
        itself (`Op.LOOKUP`): ``fn(probe, fact)`` at the probe's timestep."""
        if self.program.finished:
            raise BloomError(f"join with {self.name!r}: program {self.program.name!r} is already finished")
        join = len(self.lookups)
        self.lookups[join] = (fn, outer)
        name = self.program._name(f"{self.name}.lookup")
        self.controls.append(probe.stream.map(f"{name}.ask", _lookup_of(join, probe_key)))
        assert self.answers is not None
        return self.answers.stage(f"{name}.answers", lambda: _Answers(join))  # type: ignore[no-any-return]

    def bootstrap(self, facts: Any) -> Self:
        """Bud's ``bootstrap``: ``facts`` are inserted at timestep 0 (once, by one worker)."""
        self.program._needs_clock(f"bootstrap of {self.name!r}")
        if not self.takes_control:
            raise BloomError(f"bootstrap of {self.name!r}: a lattice collection takes rules with <= only")
        if self.program.finished:
            raise BloomError(f"bootstrap of {self.name!r}: program {self.program.name!r} is already finished")
        index = self.program.collections.index(self)
        self.program._bootstrap.extend((index, f) for f in facts)
        return self


class LatticeCollection(Collection):
    """A map from keys to lattice values; its stream carries ``(key, value)`` each time a key's
    value grows. In a join it acts as a persistent table of those improvements."""

    takes_control = False

    def __init__(self, program: Program, name: str, lattice: type[Lattice] | None, source: Stream | None) -> None:
        self.lattice = lattice
        super().__init__(program, name, "persistent", source, by_first)

    def _vertex(
        self, name: str, kind: Kind, route: Callable[[Any], int], control: tuple[int, ...]
    ) -> Callable[[], Any]:
        lattice = self.lattice  # ``route`` is by_first: the aggregate's checkpoint routes its keys alike
        return lambda: _Aggregate(name, lattice, coordinated=False)

    def apply(self, fn: Callable[[Lattice], Lattice]) -> LatticeExpr:
        """``(key, fn(value))`` per improvement if ``fn`` is marked monotone (sent at once);
        else per time, on values complete for that time (coordinated)."""
        out = apply(self.stream, fn, self.program._name("apply"))
        return LatticeExpr(self.program, f"{self.name}.apply", out, self.reads, self.negates)

    def when(self, predicate: Callable[..., Any], *, keyed: bool = False) -> Expr:
        """The keys whose value satisfies ``predicate``, each once, as persistent facts; at once if
        the predicate is marked monotone (a threshold), else on values complete for their time.
        ``keyed``: the predicate is ``predicate(key, value)`` (a threshold that depends on the key)."""
        out = when(self.stream, predicate, self.program._name("when"), keyed=keyed)
        return Expr(self.program, f"{self.name}.when", out, "persistent", self.reads, self.negates)


class LatticeExpr(Expr):
    """``(key, lattice value)`` records: merge them into a `LatticeCollection`."""

    def __init__(
        self,
        program: Program,
        name: str,
        stream: Stream,
        reads: frozenset[str] = frozenset(),
        negates: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(program, name, stream, "persistent", reads, negates)


# Reading the answer ---------------------------------------------------------------------------------
Keep = Literal["all", "latest", "changes", "none"]
"""What an `Output` keeps of its stream (`Program.output`'s ``keep``)."""
KEEPS: tuple[str, ...] = ("all", "latest", "changes", "none")


class Output:
    """What an expression holds at each epoch, on this process (each process has its share, or
    one process the whole: `Program.output`'s ``gather_to``).

    `answer(epoch)` is final once ``probe`` has passed the epoch: the persistent facts sent at
    epochs up to it, the scratch facts sent at it, the facts of a table with deletions whose
    changes up to it add up to one, or per key the merge of the lattice values sent at epochs
    up to it.

    ``keep`` says what it stores, so that a long-running program's output costs memory (and
    the collector's time) only for what its reader asks for:

    * ``"all"``: every record, so `answer` works for any epoch (tests, small programs);
    * ``"latest"``: the answer at the latest complete epoch, kept up to date as epochs
      complete (as large as the answer, not as the history), and the records of epochs still
      in flight; `answer` of an earlier epoch is refused;
    * ``"changes"``: the records that arrived since the last `changes` call, and nothing after
      it hands them over;
    * ``"none"``: nothing: read the ``stream`` (subscribe to it) and ``probe`` only."""

    def __init__(self, stream: Stream, kind: Kind, lattice: bool, *, stamped: bool = False, keep: Keep = "all") -> None:
        if keep not in KEEPS:
            raise BloomError(f"output: keep must be one of {', '.join(map(repr, KEEPS))}, not {keep!r}")
        self.stream = stream
        self.kind = kind
        self.lattice = lattice
        self.stamped = stamped
        """Records come as ``(timestep, record)`` (a timestep program's output)."""
        self.keep: Keep = keep
        self.batches: dict[int, list[Any]] = {}
        """Epoch (timestep) -> the records of it that reached this process: every epoch
        (``"all"``), the epochs not folded into the latest answer yet (``"latest"``), or those
        not handed over by `changes` yet (``"changes"``)."""
        self.settled = -1
        """``"latest"``: the epoch ``_state`` is the answer at (-1: none yet)."""
        self._state: Any = self._empty()
        self.probe: Probe = stream.probe() if keep == "none" else stream.subscribe(self._receive)

    def _receive(self, time: Timestamp, records: list[Any]) -> None:
        batches = self.batches
        if not self.stamped:
            batch = batches.get(time[0])
            if batch is None:
                batches[time[0]] = list(records)
            else:
                batch.extend(records)
        else:
            _group_pairs(batches, records)
        if self.keep == "latest":  # called once per complete epoch, in order: all up to it is here
            self._settle(time[0])

    # the answer at an epoch, folded from its records ------------------------------------------------
    def _empty(self) -> Any:
        return {} if self.lattice or self.kind == "mutable" else set()

    def _fold(self, state: Any, records: list[Any]) -> None:
        """Add one epoch's ``records`` to ``state``, the answer at the epoch before it (not scratch)."""
        if self.lattice:
            for key, value in records:
                old = state.get(key)
                state[key] = value if old is None else old.merge(value)
        elif self.kind == "mutable":  # changes: a fact holds while its +1s outnumber its -1s
            for fact, diff in records:
                n = state.get(fact, 0) + diff
                if n:
                    state[fact] = n
                else:
                    del state[fact]
        else:
            state.update(records)

    def _answer_of(self, state: Any) -> Any:
        if self.kind == "mutable" and not self.lattice:
            return {fact for fact, n in state.items() if n > 0}
        return dict(state) if self.lattice else set(state)

    def _settle(self, epoch: int) -> None:
        """``"latest"``: fold the records of epochs up to ``epoch`` (complete) into the answer."""
        if epoch <= self.settled:
            return
        batches = self.batches
        steps = sorted(e for e in batches if e <= epoch)
        if self.kind == "scratch" and not self.lattice:  # a scratch fact holds at its own epoch only
            self._state = set(batches.get(epoch, ()))
            for e in steps:
                del batches[e]
        else:
            for e in steps:
                self._fold(self._state, batches.pop(e))
        self.settled = epoch

    def _passed(self) -> int | None:
        """The latest epoch the probe has passed (None: none yet, or no records at all)."""
        frontier = self.probe.frontier()
        if not frontier:
            return max(self.batches, default=self.settled if self.settled >= 0 else None)
        first = min(t[0] for t in frontier)
        return first - 1 if first > 0 else None

    def answer(self, epoch: int | None = None) -> Any:
        """A set of facts, or a dict key -> lattice value (``epoch`` None: the latest; with
        ``keep="latest"``, the latest complete epoch)."""
        if self.keep in ("changes", "none"):
            raise BloomError(
                f"output kept with keep={self.keep!r} has no answer to give: read it with "
                + ("changes()" if self.keep == "changes" else "its stream")
                + ', or make it with keep="latest" (the latest answer) or keep="all" (every epoch\'s)'
            )
        if self.keep == "latest":
            return self._latest(epoch)
        if epoch is None:
            epoch = max(self.batches, default=0)
        if self.kind == "scratch" and not self.lattice:
            return set(self.batches.get(epoch, ()))
        state = self._empty()
        for e in sorted(self.batches):
            if e > epoch:
                break
            self._fold(state, self.batches[e])
        return self._answer_of(state)

    def _latest(self, epoch: int | None) -> Any:
        passed = self._passed()
        if passed is not None:
            self._settle(passed)
        if epoch is None:
            epoch = max(self.settled, 0)
        if epoch < self.settled:
            raise BloomError(
                f"output keeps only the latest answer (keep='latest'): epoch {epoch} is before the latest "
                f"complete one, {self.settled}; make it with keep='all' to read every epoch"
            )
        if epoch == self.settled:
            return self._answer_of(self._state)
        later = sorted(e for e in self.batches if e <= epoch)  # epochs still in flight: not final yet
        if self.kind == "scratch" and not self.lattice:
            return set(self.batches.get(epoch, ()))
        state = dict(self._state) if isinstance(self._state, dict) else set(self._state)
        for e in later:
            self._fold(state, self.batches[e])
        return self._answer_of(state)

    def changes(self) -> dict[int, list[Any]]:
        """``keep="changes"``: epoch (timestep) -> the records that arrived since the last call
        (a table with deletions: ``(fact, +1 | -1)``; a lattice: ``(key, value)`` improvements).
        An epoch's records may come over several calls until the probe has passed it."""
        if self.keep != "changes":
            raise BloomError(f"output kept with keep={self.keep!r}: changes() needs keep='changes'")
        taken, self.batches = self.batches, {}
        return taken
