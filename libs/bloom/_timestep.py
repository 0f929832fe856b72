"""Bloom's timesteps on timely: the vertices behind ``<+``, ``<-``, ``<~``, ``<+-``, tables with
deletions and the clock (``bootstrap``, ``periodic``).

A timestep program is two loops: the outer loop's counter is the timestep, the inner one runs
the rules to their fixed point. Times are ``(epoch, timestep, iteration)``; `_ToTimestep` puts
epoch ``e``'s input at timestep ``e``, so every time has ``epoch <= timestep`` and
``(T, T, i)`` comes after every time of timesteps up to ``T`` (a notification there says they
are complete). A rule's facts of timestep ``t`` that take effect at ``t + 1`` (``<+``, ``<-``,
``<+-``, ``<~``) leave the rule loop (egress drops the iteration), go around the outer loop's
feedback (``t + 1``) and come back in at iteration 0; the target collection reads them, tagged
with what they mean (`Op`), so they always reach it at iteration 0 or 1 of their timestep.

A table with deletions (`_Table`) applies a timestep once a notification at ``(T, T, 1)`` says
all of ``T - 1`` reached it (its own path around the outer loop makes that so), sends
*changes*, ``(fact, +1)`` and ``(fact, -1)``, and answers lookups (joins of scratch facts on
its key) itself. A join of its changes with scratch facts on another key (`_ChangeJoin`)
answers a timestep's scratch facts once ``(T, T, 1)`` is complete; inserts that arrive later
are monotone and join as they come. Nothing else waits: tables without deletions, channels and
lattices stay coordination-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import Any

from timely import KeyedState, Stream, Timestamp, Vertex

from .._hash import by_first, stable_hash
from ._errors import BloomError
from ._operators import _at, _Distinct, _items, _keep_earliest, _keyed, _stamp

__all__ = ["Op"]


class Op(IntEnum):
    """What a control record ``(op, fact)`` asks of its collection, at the epoch it carries."""

    INSERT = 0
    """The fact holds at this epoch (a table: from this epoch on, stored)."""
    PERSIST = 1
    """The fact holds at this epoch and every later one (a persistent rule body): a scratch
    collection re-derives it at every later timestep; a table re-inserts it if it is deleted."""
    DELETE = 2
    """Remove the stored fact at this epoch (``<-`` of a scratch body)."""
    DELETE_ALWAYS = 3
    """Remove the fact at this epoch and one timestep after every later insert (``<-`` of a
    persistent body: Bud deletes it at every timestep it holds)."""
    UPSERT = 4
    """Replace whatever the table stores under the fact's key by the fact (``<+-``)."""
    LOOKUP = 5
    """``(join, key, probe)``: answer the scratch fact ``probe`` of join ``join`` with the fact
    stored under ``key`` at this timestep (a join of scratch facts with the table on its key)."""


_INSERT, _PERSIST, _DELETE, _DELETE_ALWAYS, _UPSERT, _LOOKUP = (int(op) for op in Op)


def _tagger(op: Op) -> Callable[[Any], tuple[int, Any]]:
    tag = int(op)
    return lambda fact: (tag, fact)


# Timesteps in the outer loop -----------------------------------------------------------------------
class _ToTimestep(Vertex):
    """Outer loop: records of epoch ``e`` (at timestep 0, as ingress leaves them) go on at
    timestep ``e``. From then on every time ``(e, t, ...)`` has ``e <= t``, so ``(T, T, ...)`` is
    at or after every time of timestep ``T`` and of the timesteps before it: a notification
    there says that they are complete."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = time.epoch
        self.send_by(self.outputs[0], records, Timestamp(epoch, (*time.counters[:-1], epoch)))


class _Stamp(Vertex):
    """Outer loop: each record as ``(timestep, record)``, so that it can leave the loop (which
    drops the counter) and still say at which timestep it holds."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        step = time.counters[-1]
        self.send_by(self.outputs[0], [(step, r) for r in records], time)


class _Later(Vertex):
    """Rule loop of a timestep program: every batch one timestep later (a forward shift, no
    cycle: ``temp :x <+ expr`` read as a view)."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(self.outputs[0], records, _at(time, _stamp(time) + 1))


class _Delay(Vertex):
    """Outer loop, between a ``<~``'s exit from the rule loop and the outer feedback: each ``(op,
    fact)`` record of timestep ``t`` is sent on at ``t + delay(fact) - 1``, so that the feedback
    brings it in at ``t + delay(fact)`` (a vertex may always send at a later time than it holds)."""

    def __init__(self, name: str, delay: int | Callable[[Any], int]) -> None:
        self.name = name
        self.delay = delay

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        delay = self.delay
        if not callable(delay):
            self.send_by(self.outputs[0], records, Timestamp(time[0], (time[-1] + delay - 1,)))
            return
        later: dict[int, list[Any]] = {}
        for r in records:
            try:
                d = delay(r[1])
            except Exception as exc:
                raise BloomError(f"channel {self.name!r}: the delay failed on {r[1]!r}: {exc!r}") from exc
            if type(d) is not int or d < 1:
                raise BloomError(f"channel {self.name!r}: the delay of {r[1]!r} is {d!r}; it must be an int >= 1")
            batch = later.get(d)
            if batch is None:
                later[d] = [r]
            else:
                batch.append(r)
        for d, batch in later.items():
            self.send_by(self.outputs[0], batch, time if d == 1 else Timestamp(time[0], (time[-1] + d - 1,)))


def _settled(time: Timestamp) -> Timestamp:
    """The time after which nothing of ``time``'s timestep ``T`` that came through the control
    input (iteration 0 or 1) and nothing of timesteps before ``T`` can arrive: ``(T, T, i)``
    with ``i = max(1, time's iteration)`` (not earlier than ``time``, as ``e <= T``)."""
    step, iteration = time.counters
    return Timestamp(step, (step, iteration if iteration >= 1 else 1))


class _Settling:
    """Records of each timestep held until nothing more of the timestep can come (`_settled`),
    then released at once: one notification per timestep, moved later when a later record
    needs it. The table with deletions and the change join both hold their records so."""

    __slots__ = ("asked", "released", "waiting")

    def __init__(self) -> None:
        self.waiting: dict[int, list[Any]] = {}
        """epoch -> records not released yet."""
        self.asked: dict[int, Timestamp] = {}
        """epoch -> the earliest notification requested for it."""
        self.released: set[int] = set()

    def hold(self, epoch: int, records: list[Any], time: Timestamp, notify_at: Callable[[Timestamp], None]) -> None:
        self.waiting.setdefault(epoch, []).extend(records)
        at = _settled(time)
        old = self.asked.get(epoch)
        if old is None or not old.less_equal(at):
            self.asked[epoch] = at
            notify_at(at)

    def release(self, time: Timestamp) -> tuple[int, list[Any]] | None:
        """At a notification: the timestep's epoch and its held records, once (None after)."""
        epoch = _stamp(time)
        if epoch in self.released:
            return None
        self.released.add(epoch)
        self.asked.pop(epoch, None)  # restored records have no request of their own: the runtime re-made it
        return epoch, self.waiting.pop(epoch, [])

    def held(self) -> Iterator[tuple[int, Any]]:
        """Every ``(timestep, record)`` still held: at a checkpoint, records of timesteps after it
        (a timestep's records can arrive at an earlier epoch, from ``<+``, ``<-``, ``<~``)."""
        for epoch, records in self.waiting.items():
            for r in records:
                yield epoch, r

    def restore(self, epoch: int, record: Any) -> None:
        """Hold ``record`` of timestep ``epoch`` again; the runtime restores its notification."""
        self.waiting.setdefault(epoch, []).append(record)


# Negation against the program's own collections -------------------------------------------------------
class _NotInStep(Vertex):
    """Outside the rule loop (the outer loop of a timestep program; the root scope of a plain
    one), so that a notification at ``(T, T)`` (``(T,)``) says the rule loop of every timestep up
    to ``T`` has drained: input 0's scratch facts of timestep ``T`` are then answered against
    everything input 1 holds at ``T`` (a scratch: its facts of ``T``; a table: those inserted by
    ``T``; a table with deletions: its changes up to ``T``), once, in one batch."""

    def __init__(
        self,
        name: str,
        key: Callable[[Any], Any],
        negated_key: Callable[[Any], Any],
        predicate: Callable[[Any, Any], Any] | None,
        kind: str,
    ) -> None:
        self.name = name
        self.key = key
        self.negated_key = negated_key
        self.predicate = predicate
        self.kind = kind
        self.waiting: dict[int, list[Any]] = {}
        """timestep -> facts to answer at it."""
        self.negated: dict[Any, dict[Any, Any]] = {}
        """negated key -> negated fact -> its timesteps (a set: scratch), first timestep
        (persistent) or ``[(timestep, +1 | -1), ...]`` (a table with deletions)."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        step = time[-1]
        if edge == 0:
            held = self.waiting.get(step)
            if held is None:
                self.waiting[step] = list(records)
                self.notify_at(Timestamp(step, (step,)) if len(time) == 2 else Timestamp(step))
            else:
                held.extend(records)
            return
        kind, index = self.kind, self.negated
        for r in records:
            fact = r[0] if kind == "mutable" else r
            try:
                k = self.negated_key(fact)
            except Exception as exc:
                raise BloomError(f"not_in {self.name!r}: the negated key failed on {fact!r}: {exc!r}") from exc
            facts = index.setdefault(k, {})
            if kind == "scratch":
                facts.setdefault(fact, set()).add(step)
            elif kind == "mutable":
                facts.setdefault(fact, []).append((step, r[1]))
            else:
                _keep_earliest(facts, fact, step)

    def _holds(self, info: Any, step: int) -> bool:
        if self.kind == "scratch":
            return step in info  # type: ignore[no-any-return]
        if self.kind == "mutable":
            return sum(d for s, d in info if s <= step) > 0
        return info <= step  # type: ignore[no-any-return]

    def on_notify(self, time: Timestamp) -> None:
        step = time[-1]
        facts = self.waiting.pop(step, [])
        out = []
        for r in facts:
            try:
                k = self.key(r)
            except Exception as exc:
                raise BloomError(f"not_in {self.name!r}: the key failed on {r!r}: {exc!r}") from exc
            blocked = False
            for n, info in self.negated.get(k, {}).items():
                if self._holds(info, step):
                    try:
                        if self.predicate is None or self.predicate(r, n):
                            blocked = True
                            break
                    except Exception as exc:
                        raise BloomError(
                            f"not_in {self.name!r}: the predicate failed on {r!r}, {n!r}: {exc!r}"
                        ) from exc
            if not blocked:
                out.append(r)
        if out:
            self.send_by(self.outputs[0], out, time)

    def checkpoint(self) -> KeyedState | None:
        """``KeyedState`` routed by `stable_hash` of the key: the negated facts ``(0, key, fact,
        info)`` and the facts waiting for a later timestep ``(1, timestep, fact)``."""
        entries: list[tuple[int, Any]] = []
        for k, facts in self.negated.items():
            for fact, info in facts.items():
                saved = tuple(info) if isinstance(info, (set, list)) else info
                entries.append((stable_hash(k), (0, k, fact, saved)))
        key = self.key
        entries.extend((stable_hash(key(r)), (1, step, r)) for step, rs in self.waiting.items() for r in rs)
        return _keyed(entries)

    def restore(self, state: Any) -> None:
        for item in _items(f"not_in {self.name!r}", state):
            if item[0] == 1:
                self.waiting.setdefault(item[1], []).append(item[2])
                continue
            _, k, fact, info = item
            facts = self.negated.setdefault(k, {})
            if self.kind == "scratch":
                facts.setdefault(fact, set()).update(info)
            elif self.kind == "mutable":
                facts.setdefault(fact, []).extend(tuple(c) for c in info)
            else:
                _keep_earliest(facts, fact, info)


# The clock ------------------------------------------------------------------------------------------
class _Ticks(Vertex):
    """Root scope: for every record of the clock at epoch ``e``, a tick ``(worker, e)`` for every
    worker (exchanged by the first field: a broadcast), once per epoch per worker."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = time.epoch
        if epoch in self.seen:
            return
        self.seen.add(epoch)
        self.send_by(self.outputs[0], [(w, epoch) for w in range(self.peers)], time)


def ticks(clock: Stream, name: str) -> Stream:
    """One ``(worker, epoch)`` tick per worker and per epoch at which ``clock`` has records,
    delivered to that worker (every process may feed the clock; duplicates are dropped where they
    arrive)."""
    return clock.stage(name, _Ticks).stage(f"{name}.each", _Once, exchange=by_first)  # type: ignore[no-any-return]


class _Once(Vertex):
    """Drops a tick already seen (several processes may tick the same epoch)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        fresh = []
        for r in records:
            if r[1] not in self.seen:
                self.seen.add(r[1])
                fresh.append(r)
        if fresh:
            self.send_by(self.outputs[0], fresh, time)


class _Bootstrap(Vertex):
    """Root scope, fed the ticks: at the tick of epoch 0 worker 0 sends ``(target, fact)`` for
    every bootstrap fact; at every tick ``e`` with ``e % every == 0`` it sends
    ``(target, (name, e))`` for every periodic."""

    def __init__(self, facts: list[tuple[int, Any]], periodics: list[tuple[int, str, int]]) -> None:
        self.facts = facts
        self.periodics = periodics

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if self.worker_index != 0:
            return
        epoch = time.epoch
        out = list(self.facts) if epoch == 0 else []
        out.extend((target, (name, epoch)) for target, name, every in self.periodics if epoch % every == 0)
        if out:
            self.send_by(self.outputs[0], out, time)


# Tables without deletions, scratch collections and channels ------------------------------------------
class _Collection(_Distinct):
    """`_Distinct` plus control inputs (edges ``control``, ``(op, fact)`` records: bootstrap
    facts and what rules sent here at the previous timestep), which may only insert."""

    def __init__(
        self, name: str, persistent: bool, coordinated: bool, route: Callable[[Any], int], control: tuple[int, ...]
    ) -> None:
        super().__init__(name, persistent, coordinated, route)
        self.control = control

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if edge in self.control:
            for op, fact in records:
                if op > Op.PERSIST:
                    raise BloomError(
                        f"collection {self.name!r}: got a deletion of {fact!r}, but only a table with deletions "
                        "(program.keyed_table) can delete"
                    )
            records = [fact for _, fact in records]
        super().on_recv(edge, records, time)


# Tables with deletions ---------------------------------------------------------------------------------
class _Table(Vertex):
    """A table with deletions (Bud's ``table`` with ``<-`` or ``<+-`` rules): per key (the whole
    fact without one) one stored fact. Inputs: edge 0 the rules (``<=``), edges 1 and 2 the
    control records (within the timestep, and from the previous one), then its source if it has
    one. Output 0: changes ``(fact, +1 | -1)``; output 1: `Op.DELETE` records for itself at the
    next timestep (`Op.DELETE_ALWAYS`'s repeated deletion; it also makes the table's own output
    a path to its control input, so that timestep ``e`` is only applied after everything of
    ``e - 1`` reached it); output 2: the answers ``(join, result)`` of `Op.LOOKUP` records.

    The records of an epoch are applied together, in Bud's order (deletions, then upserts and
    inserts), when a notification at ``(e, e, 1)`` (or the earliest later time they arrived at)
    says none of the deletions of epoch ``e`` is still on its way; records of an applied epoch
    can only be inserts and lookups, applied at once. A lookup (a join of scratch facts with
    the table on its key) is answered against the table as it is at the lookup's timestep: the
    table applies ``e + 1`` only after every record of ``e`` reached it, lookups included."""

    def __init__(
        self,
        name: str,
        key: Callable[[Any], Any],
        lookups: dict[int, tuple[Callable[[Any, Any], Any], bool]],
        late_inserts: bool = True,
    ) -> None:
        self.name = name
        self.key = key
        self.lookups = lookups
        self.late_inserts = late_inserts
        """Whether inserts can come within a timestep after its lookups (``<=`` rules, a source):
        only then are the lookups answered kept, to be joined with them (`probed`)."""
        """join id -> (result function ``fn(probe, fact)``, outer: answer ``fn(probe, None)`` on no match)."""
        self.stored: dict[Any, Any] = {}
        """key -> the fact stored under it."""
        self.settling = _Settling()
        """``(op, fact)`` records of each epoch, held until it is applied."""
        self.latest = -1
        """The latest epoch applied: the one the table's state is at."""
        self.probed: dict[Any, list[tuple[int, Any]]] = {}
        """Lookups answered at ``latest``: key -> ``(join, probe)`` (a later insert of ``latest`` joins them)."""
        self.persisted: dict[Any, int] = {}
        """fact -> epoch from which a persistent rule body derives it (re-inserted if deleted)."""
        self.doomed: dict[Any, int] = {}
        """fact -> epoch from which a persistent ``<-`` body deletes it, one timestep after it holds."""

    # receiving -------------------------------------------------------------------------------------
    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = _stamp(time)
        tagged = records if edge in (1, 2) else [(_INSERT, r) for r in records]
        if epoch in self.settling.released:
            for op, _ in tagged:
                if Op.DELETE <= op <= Op.UPSERT:
                    raise BloomError(f"table {self.name!r}: a deletion of epoch {epoch} came after it was applied")
            self._send(self._apply(epoch, tagged), time)
            return
        self.settling.hold(epoch, tagged, time, self.notify_at)

    def on_notify(self, time: Timestamp) -> None:
        released = self.settling.release(time)
        if released is not None:
            self._send(self._apply(*released), time)

    def _send(self, result: tuple[list[Any], list[Any], list[Any]], time: Timestamp) -> None:
        changes, again, answers = result
        if changes:
            self.send_by(self.outputs[0], changes, time)
        if again:
            self.send_by(self.outputs[1], again, time)
        if answers:
            self.send_by(self.outputs[2], answers, time)

    # applying one epoch ---------------------------------------------------------------------------------
    def _apply(self, epoch: int, records: list[tuple[int, Any]]) -> tuple[list[Any], list[Any], list[Any]]:
        """Apply ``records`` of ``epoch``; return (the changes, deletions for the next epoch, answers)."""
        if epoch != self.latest:
            self.latest = epoch
            self.probed = {}
        stored, key, persisted = self.stored, self.key, self.persisted
        before: dict[Any, Any] = {}  # key -> fact before this call (absent: None), for the changes
        inserts: list[tuple[int, Any]] = []
        lookups: list[Any] = []
        fact: Any = None
        try:
            for op, fact in records:  # deletions first (Bud applies them before pending inserts)
                if op == _LOOKUP:
                    lookups.append(fact)
                elif op == _UPSERT or op < _DELETE:
                    inserts.append((op, fact))
                else:
                    if op == _DELETE_ALWAYS:
                        since = self.doomed.get(fact)
                        if since is None or epoch - 1 < since:
                            self.doomed[fact] = epoch - 1
                    k = key(fact)
                    if stored.get(k) == fact and not (persisted and self._persists(fact, epoch)):
                        if k not in before:
                            before[k] = fact
                        del stored[k]
            written: set[Any] = set()  # keys written by this call: a second, different fact is a conflict
            for op, fact in inserts:
                k = key(fact)
                if op == _PERSIST:
                    since = persisted.get(fact)
                    if since is None or epoch < since:
                        persisted[fact] = epoch
                old = stored.get(k)
                if old is not None:
                    if old == fact:
                        continue
                    if op != _UPSERT or k in written:
                        raise BloomError(
                            f"table {self.name!r}: key {k!r} holds {old!r}; {fact!r} at timestep {epoch} breaks "
                            "the key constraint (delete the old fact first, or replace it with upsert, Bud's <+-)"
                        )
                if k not in before:
                    before[k] = old
                written.add(k)
                stored[k] = fact
        except BloomError:
            raise
        except Exception as exc:
            raise BloomError(f"table {self.name!r}: the key failed on fact {fact!r}: {exc!r}") from exc
        changes: list[Any] = []
        again: list[Any] = []
        answers: list[Any] = []
        doomed, probed = self.doomed, self.probed
        if not doomed and not probed:  # the common case: each key's old and new fact, nothing more
            append = changes.append
            for k, old in before.items():
                new = stored.get(k)
                if old != new:
                    if old is not None:
                        append((old, -1))
                    if new is not None:
                        append((new, 1))
        else:
            self._changed(epoch, before, changes, again, answers)
        if lookups:
            self._answer(lookups, answers)
        return changes, again, answers

    def _changed(
        self, epoch: int, before: dict[Any, Any], changes: list[Any], again: list[Any], answers: list[Any]
    ) -> None:
        """The changes of keys ``before`` (key -> fact before), with a persistent ``<-``'s deletion
        of a re-inserted fact for the next epoch, and inserts joined with lookups answered earlier."""
        stored, doomed, probed = self.stored, self.doomed, self.probed
        for k, old in before.items():
            new = stored.get(k)
            if old == new:
                continue
            if old is not None:
                changes.append((old, -1))
            if new is not None:
                changes.append((new, 1))
                if doomed:
                    since = doomed.get(new)
                    if since is not None and since <= epoch:
                        again.append((_DELETE, new))
                if not probed:
                    continue
                for join, probe in probed.get(k, ()):  # lookups of this epoch answered before it came
                    fn, outer = self.lookups[join]
                    if outer:
                        raise BloomError(
                            f"table {self.name!r}: {new!r} was inserted at timestep {epoch} after a left join "
                            f"answered {probe!r} without it"
                        )
                    answers.append((join, fn(probe, new)))

    def _answer(self, lookups: list[Any], answers: list[Any]) -> None:
        stored, probed, specs = self.stored, self.probed, self.lookups
        join = probe = None
        try:
            append = answers.append
            if not self.late_inserts:  # the common case: no later inserts, so no lookup is kept
                for join, k, probe in lookups:
                    fn, outer = specs[join]
                    fact = stored.get(k)
                    if fact is not None:
                        append((join, fn(probe, fact)))
                    elif outer:
                        append((join, fn(probe, None)))
                return
            for join, k, probe in lookups:
                fn, outer = specs[join]
                fact = stored.get(k)
                if fact is not None:
                    append((join, fn(probe, fact)))
                elif outer:
                    append((join, fn(probe, None)))
                seen = probed.get(k)
                if seen is None:
                    probed[k] = [(join, probe)]
                else:
                    seen.append((join, probe))
        except Exception as exc:
            raise BloomError(f"table {self.name!r}: join {join} failed on {probe!r}: {exc!r}") from exc

    def _persists(self, fact: Any, epoch: int) -> bool:
        since = self.persisted.get(fact)
        return since is not None and since <= epoch

    def contents(self) -> set[Any]:
        """What this worker stores now (for tests and debugging)."""
        return set(self.stored.values())

    def checkpoint(self) -> KeyedState | None:
        """``KeyedState`` routed as the table's records are (`stable_hash` of the key): the stored
        facts ``(0, fact, None)``, the persistent bodies ``(1, fact, since)`` and ``<-`` bodies
        ``(2, fact, since)``, and the control records held for timesteps after the checkpoint
        ``(3, timestep, record)`` (sent at its epoch by ``<+``/``<-``/``<+-``/``<~``; no replay
        would send them again). Lookups answered at the latest timestep are not kept: a
        checkpoint's timesteps are complete, so no insert of them can come."""
        key = self.key
        entries: list[tuple[int, Any]] = [(stable_hash(k), (0, fact, None)) for k, fact in self.stored.items()]
        entries.extend((stable_hash(key(f)), (1, f, since)) for f, since in self.persisted.items())
        entries.extend((stable_hash(key(f)), (2, f, since)) for f, since in self.doomed.items())
        for epoch, (op, x) in self.settling.held():
            route = stable_hash(x[1]) if op == _LOOKUP else stable_hash(key(x))
            entries.append((route, (3, epoch, (op, x))))
        return _keyed(entries)

    def restore(self, state: Any) -> None:
        for kind, a, b in _items(f"table {self.name!r}", state):
            if kind == 0:
                self.stored[self.key(a)] = a
            elif kind == 1:
                _keep_earliest(self.persisted, a, b)
            elif kind == 2:
                _keep_earliest(self.doomed, a, b)
            else:
                self.settling.restore(a, tuple(b))


class _Answers(Vertex):
    """The answers of one lookup join (`Op.LOOKUP`), taken from its table's answers output,
    ``(join, result)`` records of all its joins, in one pass (no list per record)."""

    def __init__(self, join: int) -> None:
        self.join = join

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        join = self.join
        out = [result for j, result in records if j == join]
        if out:
            self.send_by(self.outputs[0], out, time)


# Joining changes with scratch facts ---------------------------------------------------------------------
class _ChangeJoin(Vertex):
    """Joins a stream of changes (a table with deletions: ``(fact, +1 | -1)``) with scratch
    facts. The scratch facts of epoch ``e`` are answered once ``(e, 1)`` (or the later time they
    came at) is complete: by then every deletion of timestep ``e`` has arrived. An insert that
    arrives later joins the scratch facts already answered, of its epoch and later ones (it holds
    at every later timestep answered so far: a deletion of those would have come first)."""

    def __init__(
        self,
        name: str,
        changes_edge: int,
        keys: tuple[Callable[[Any], Any], Callable[[Any], Any]],
        fn: Callable[[Any, Any], Any],
        outer: bool = False,
    ) -> None:
        self.name = name
        self.changes_edge = changes_edge
        self.keys = keys
        self.fn = fn
        self.outer = outer
        """Left outer join: a scratch fact without a match gives ``fn(fact, None)`` (only for a
        table whose changes all come at iteration 1, checked when the program is finished)."""
        self.table: dict[Any, dict[Any, list[int]]] = {}
        """key -> fact -> [start, end, start, end, ...] epochs (an open last interval has no end)."""
        self.probes: dict[Any, dict[Any, set[int]]] = {}
        """key -> scratch fact -> epochs at which it was answered."""
        self.settling = _Settling()
        """Scratch facts of each epoch, held until it is answered."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if edge == self.changes_edge:
            self._changes(records, time)
            return
        epoch = _stamp(time)
        if epoch in self.settling.released:
            self._answer(records, epoch, time)
            return
        self.settling.hold(epoch, records, time, self.notify_at)

    def on_notify(self, time: Timestamp) -> None:
        released = self.settling.release(time)
        if released is not None:
            epoch, records = released
            self._answer(records, epoch, time)

    def _out(self, scratch: Any, fact: Any) -> Any:
        try:
            return self.fn(fact, scratch) if self.changes_edge == 0 else self.fn(scratch, fact)
        except Exception as exc:
            raise BloomError(
                f"join {self.name!r}: the result function failed on {scratch!r}, {fact!r}: {exc!r}"
            ) from exc

    def _answer(self, records: list[Any], epoch: int, time: Timestamp) -> None:
        key_of = self.keys[1 - self.changes_edge]
        out = []
        for r in records:
            try:
                k = key_of(r)
            except Exception as exc:
                raise BloomError(f"join {self.name!r}: the key failed on record {r!r}: {exc!r}") from exc
            bucket = self.probes.setdefault(k, {})
            epochs = bucket.get(r)
            if epochs is None:
                bucket[r] = {epoch}
            elif epoch in epochs:
                continue
            else:
                epochs.add(epoch)
            matched = False
            for fact, spans in self.table.get(k, {}).items():
                if _holds(spans, epoch):
                    matched = True
                    out.append(self._out(r, fact))
            if self.outer and not matched:
                out.append(self._out(r, None))
        if out:
            self.send_by(self.outputs[0], out, time)

    def _changes(self, records: list[Any], time: Timestamp) -> None:
        key_of = self.keys[self.changes_edge]
        epoch = _stamp(time)
        later: dict[int, list[Any]] = {}
        for fact, diff in records:
            try:
                k = key_of(fact)
            except Exception as exc:
                raise BloomError(f"join {self.name!r}: the key failed on record {fact!r}: {exc!r}") from exc
            spans = self.table.setdefault(k, {}).setdefault(fact, [])
            if diff > 0:
                spans.append(epoch)
                for r, epochs in self.probes.get(k, {}).items():  # scratch facts answered already
                    for e in epochs:
                        if e >= epoch:
                            if self.outer:
                                raise BloomError(
                                    f"left join {self.name!r}: {fact!r} was inserted at timestep {epoch} after "
                                    f"{r!r} of timestep {e} was answered without it"
                                )
                            later.setdefault(e, []).append(self._out(r, fact))
            else:
                spans.append(epoch)
        for e, out in later.items():
            self.send_by(self.outputs[0], out, _at(time, e))

    def checkpoint(self) -> KeyedState | None:
        """``KeyedState`` routed by `stable_hash` of the join key (as both inputs are exchanged):
        each table fact's lifetime ``(0, key, fact, spans)`` and the scratch facts held for
        timesteps after the checkpoint ``(1, timestep, fact)``. The scratch facts answered so far
        are not kept: they belong to complete timesteps, and a later insert is of a later one."""
        scratch_key = self.keys[1 - self.changes_edge]
        entries: list[tuple[int, Any]] = [
            (stable_hash(k), (0, k, fact, tuple(spans)))
            for k, facts in self.table.items()
            for fact, spans in facts.items()
        ]
        entries.extend((stable_hash(scratch_key(r)), (1, epoch, r)) for epoch, r in self.settling.held())
        return _keyed(entries)

    def restore(self, state: Any) -> None:
        for item in _items(f"join {self.name!r}", state):
            if item[0] == 0:
                _, k, fact, spans = item
                self.table.setdefault(k, {})[fact] = list(spans)
            else:
                self.settling.restore(item[1], item[2])


def _holds(spans: list[int], epoch: int) -> bool:
    """Whether ``[start, end, start, end, ...]`` (the last end may be missing) contains ``epoch``."""
    for i in range(0, len(spans), 2):
        if spans[i] <= epoch and (i + 1 == len(spans) or epoch < spans[i + 1]):
            return True
    return False


def change_join(
    changes: Stream,
    scratch: Stream,
    changes_key: Callable[[Any], Any],
    scratch_key: Callable[[Any], Any],
    fn: Callable[[Any, Any], Any],
    name: str,
    *,
    changes_first: bool,
    outer: bool = False,
) -> Stream:
    """The join of a table's changes with scratch facts (results are scratch facts); ``outer``:
    scratch facts without a match give ``fn(fact, None)`` (the scratch side must be second)."""
    if changes_first:
        inputs, keys, edge = [changes, scratch], (changes_key, scratch_key), 0
        exchange = [lambda c: stable_hash(changes_key(c[0])), lambda r: stable_hash(scratch_key(r))]
    else:
        inputs, keys, edge = [scratch, changes], (scratch_key, changes_key), 1
        exchange = [lambda r: stable_hash(scratch_key(r)), lambda c: stable_hash(changes_key(c[0]))]
    return changes.scope.stage(name, lambda: _ChangeJoin(name, edge, keys, fn, outer), inputs, exchange=exchange)  # type: ignore[no-any-return]
