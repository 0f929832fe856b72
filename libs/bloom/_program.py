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
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Literal, Self

from timely import Feedback, LoopContext, Probe, Scope, Stream, Timestamp

from .._hash import by_first, stable_hash
from ._errors import BloomError
from ._lattice import Lattice
from ._operators import _Aggregate, _Distinct, apply, join, not_in, when

__all__ = ["Collection", "Expr", "LatticeCollection", "LatticeExpr", "Output", "Program"]

Kind = Literal["persistent", "scratch", "mixed"]


class Program:
    """A Bloom program: collections and the rules between them, evaluated in one timely loop
    inside the root scope ``scope``. Use it as a context manager, or call `finish`."""

    def __init__(self, scope: Scope, name: str = "bloom") -> None:
        if scope.depth != 0:
            raise BloomError(f"bloom program {name!r}: build it in the root scope (it makes its own loop)")
        self.scope = scope
        self.name = name
        self.loop = LoopContext(scope, name)
        self.collections: list[Collection] = []
        self.finished = False
        self._count = 0

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
        self, name: str, source: Stream | None = None, address: Callable[[Any], Any] = itemgetter(0)
    ) -> Collection:
        """A scratch collection whose facts travel to the worker that owns ``address(fact)``
        (Bloom's ``@address`` field): rules joining on the address run where it lives."""
        self._declare(name)
        return Collection(self, name, "scratch", source, _hash_of(address))

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
        for c in self.collections:
            if not c.rules:
                c.feedback.connect(c.feedback.stream.filter(f"{c.name}.norules", _never))
            elif len(c.rules) == 1:
                c.feedback.connect(c.rules[0])
            else:
                c.feedback.connect(self.loop.concat(f"{c.name}.rules", c.rules))

    def output(self, collection: Expr, name: str | None = None, gather_to: int | None = None) -> Output:
        """The contents of ``collection`` (or any expression) outside the loop, epoch by epoch:
        each process's share, or with ``gather_to`` the whole of it on that process alone
        (`timely.Stream.gather`)."""
        if collection.program is not self:
            raise BloomError(f"bloom program {self.name!r}: output of an expression from another program")
        label = name or f"{collection.name}.out"
        stream = self.loop.egress(collection.stream, label)
        if gather_to is not None:
            stream = stream.gather(f"{label}.gather", to=gather_to)
        return Output(stream, collection.kind, isinstance(collection, LatticeCollection))


def _hash_of(key: Callable[[Any], Any]) -> Callable[[Any], int]:
    """The exchange function routing a record by ``key(record)``."""
    return lambda record: stable_hash(key(record))


def _never(record: Any) -> bool:
    return False


class Expr:
    """A rule body: a stream of facts in the program's loop and how long they hold."""

    def __init__(self, program: Program, name: str, stream: Stream, kind: Kind) -> None:
        self.program = program
        self.name = name
        self.stream = stream
        self.kind: Kind = kind

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({self.kind})>"

    def _derive(self, op: str, stream: Stream, kind: Kind | None = None) -> Expr:
        return Expr(self.program, f"{self.name}.{op}", stream, self.kind if kind is None else kind)

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
        """``fn(fact)`` for every fact."""
        return self._derive("select", self.stream.map(self.program._name("select"), fn))

    def where(self, predicate: Callable[[Any], bool]) -> Expr:
        return self._derive("where", self.stream.filter(self.program._name("where"), predicate))

    def select_many(self, fn: Callable[[Any], Any]) -> Expr:
        return self._derive("select_many", self.stream.flat_map(self.program._name("select_many"), fn))

    def project(self, *indices: int) -> Expr:
        """The tuple of the fields at ``indices`` of every (tuple) fact."""
        pick = itemgetter(*indices)
        fn = (lambda r: (pick(r),)) if len(indices) == 1 else pick
        return self._derive("project", self.stream.map(self.program._name("project"), fn))

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
        return Expr(self.program, f"{self.name}.join({other.name})", stream, kind)

    def union(self, *others: Expr) -> Expr:
        exprs = [self, *(self._same_program(o, "union") for o in others)]
        kinds = {e.kind for e in exprs}
        kind: Kind = kinds.pop() if len(kinds) == 1 else "mixed"
        stream = self.program.loop.concat(self.program._name("union"), [e.stream for e in exprs])
        return Expr(self.program, "|".join(e.name for e in exprs), stream, kind)

    def __or__(self, other: Expr) -> Expr:
        return self.union(other)

    def not_in(self, negated: Stream, key: Callable[[Any], Any] | None = None) -> Expr:
        """Facts whose ``key`` (default: the fact) is not in ``negated``, a root-scope stream from a
        lower stratum (e.g. another program's output). Coordinated: it waits, per time, until
        everything up to that time has arrived; its facts hold at their epoch only."""
        if not isinstance(negated, Stream) or negated.scope.depth != 0:
            raise BloomError(
                f"not_in on {self.name!r}: the negated side must be a root-scope stream (a lower stratum, "
                f"e.g. Output.stream of an earlier program), got {negated!r}"
            )
        name = self.program._name("not_in")
        inside = self.program.loop.ingress(negated, f"{name}.negated")
        stream = not_in(self.stream, inside, key, name)
        return self._derive("not_in", stream, "scratch")


class Collection(Expr):
    """A named set in a program: its source (if any) plus whatever its rules derive."""

    def __init__(
        self,
        program: Program,
        name: str,
        kind: Kind,
        source: Stream | None,
        route: Callable[[Any], int],
        coordinated: bool = False,
    ) -> None:
        self.coordinated = coordinated
        self.feedback: Feedback = program.loop.feedback(f"{name}.derived")
        inputs = [self.feedback.stream]
        if source is not None:
            if not isinstance(source, Stream) or source.scope.depth != 0:
                raise BloomError(f"collection {name!r}: the source must be a root-scope stream, got {source!r}")
            inputs.append(program.loop.ingress(source, f"{name}.source"))
        stream = program.loop.stage(name, self._vertex(name, kind, route), inputs, exchange=[route] * len(inputs))
        super().__init__(program, name, stream, kind)
        self.rules: list[Stream] = []
        program.collections.append(self)

    def _vertex(self, name: str, kind: Kind, route: Callable[[Any], int]) -> Callable[[], Any]:
        persistent = kind == "persistent"
        coordinated = self.coordinated
        return lambda: _Distinct(name, persistent, coordinated, route)

    def merge(self, expr: Expr) -> Self:
        """Add the rule ``self <= expr``: everything ``expr`` derives goes into this collection."""
        expr = self._same_program(expr, f"rule into {self.name!r}")
        if self.program.finished:
            raise BloomError(f"rule into {self.name!r}: program {self.program.name!r} is already finished")
        self.rules.append(expr.stream)
        return self

    def __ior__(self, expr: Expr) -> Self:  # type: ignore[misc]
        return self.merge(expr)


class LatticeCollection(Collection):
    """A map from keys to lattice values; its stream carries ``(key, value)`` each time a key's
    value grows. In a join it acts as a persistent table of those improvements."""

    def __init__(self, program: Program, name: str, lattice: type[Lattice] | None, source: Stream | None) -> None:
        self.lattice = lattice
        super().__init__(program, name, "persistent", source, by_first)

    def _vertex(self, name: str, kind: Kind, route: Callable[[Any], int]) -> Callable[[], Any]:
        lattice = self.lattice  # ``route`` is by_first: the aggregate's checkpoint routes its keys alike
        return lambda: _Aggregate(name, lattice, coordinated=False)

    def apply(self, fn: Callable[[Lattice], Lattice]) -> LatticeExpr:
        """``(key, fn(value))`` per improvement if ``fn`` is marked monotone (sent at once);
        else per time, on values complete for that time (coordinated)."""
        return LatticeExpr(self.program, f"{self.name}.apply", apply(self.stream, fn, self.program._name("apply")))

    def when(self, predicate: Callable[[Any], Any]) -> Expr:
        """The keys whose value satisfies ``predicate``, each once, as persistent facts; at once if
        the predicate is marked monotone (a threshold), else on values complete for their time."""
        out = when(self.stream, predicate, self.program._name("when"))
        return Expr(self.program, f"{self.name}.when", out, "persistent")


class LatticeExpr(Expr):
    """``(key, lattice value)`` records: merge them into a `LatticeCollection`."""

    def __init__(self, program: Program, name: str, stream: Stream) -> None:
        super().__init__(program, name, stream, "persistent")


# Reading the answer ---------------------------------------------------------------------------------
class Output:
    """What an expression holds at each epoch, on this process (each process has its share, or
    one process the whole: `Program.output`'s ``gather_to``).

    `answer(epoch)` is final once ``probe`` has passed the epoch: the persistent facts sent at
    epochs up to it, the scratch facts sent at it, or per key the merge of the lattice values
    sent at epochs up to it."""

    def __init__(self, stream: Stream, kind: Kind, lattice: bool) -> None:
        self.stream = stream
        self.kind = kind
        self.lattice = lattice
        self.batches: dict[int, list[Any]] = {}
        self.probe: Probe = stream.subscribe(self._receive)

    def _receive(self, time: Timestamp, records: list[Any]) -> None:
        self.batches.setdefault(time[0], []).extend(records)

    def answer(self, epoch: int | None = None) -> Any:
        """A set of facts, or a dict key -> lattice value (``epoch`` None: the latest)."""
        if epoch is None:
            epoch = max(self.batches, default=0)
        if self.lattice:
            merged: dict[Any, Lattice] = {}
            for e in sorted(self.batches):
                if e > epoch:
                    break
                for key, value in self.batches[e]:
                    old = merged.get(key)
                    merged[key] = value if old is None else old.merge(value)
            return merged
        if self.kind == "scratch":  # a scratch fact holds at its own epoch only
            return set(self.batches.get(epoch, ()))
        return {r for e, rs in self.batches.items() if e <= epoch for r in rs}
