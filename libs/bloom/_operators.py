"""The operators, as timely vertices: the coordination-free ones send from ``on_recv`` and never
call ``notify_at``; the coordinated ones wait for ``on_notify`` (Naiad §2.4, §4.2).

Times and answers. The operators run in the root scope or in a loop directly inside it, so a
time is ``(epoch,)`` or ``(epoch, iteration)``. The iteration counter only says *when* a fact
was derived; what a fact means is decided by its epoch:

- a *persistent* fact sent at epoch ``e`` holds at every epoch from ``e`` on (Bloom's tables):
  the answer at epoch ``e`` is every fact sent at an epoch ``<= e``;
- a *scratch* fact holds at its own epoch only (Bloom's scratch collections and channels);
- a *lattice* record ``(key, value)`` sent at epoch ``e`` is a lower bound of the key's value
  at every epoch from ``e`` on: the answer is the merge of what was sent at epochs ``<= e``.
  An aggregate sends each epoch's *whole* value whenever it grows (also for later epochs it
  already knows, when a late record of an earlier epoch arrives), so a monotone function of the
  records it sends sees every epoch's complete value, not only pieces of it.

So an operator never needs to know that an epoch is complete to say something true about it,
and a fact derived from facts of two epochs is sent at the later one (a vertex may always send
later than it holds). The answer is final once a probe after the loop has passed the epoch.

Checkpoints (Naiad §3.4). `Vertex.checkpoint` is called once every epoch up to some F is
complete and before anything of a later epoch has been delivered. What is then kept for a
single epoch — records held for a notification, scratch facts, `not_in`'s per-epoch sends —
belongs to a complete epoch and is never read again; what persists across epochs is saved: the
persistent facts `distinct`, `join` and `not_in` have seen, each key's latest value in
`aggregate`, the keys `when` has fired for. It is saved as a `KeyedState`, one piece per route
(the exchange function's value for the piece's records), so a computation can resume on
another number of workers: a worker gets the pieces whose records would now be sent to it.

Termination. Records move only while something new is derived: `distinct` and `join` drop what
they have already seen (at the same or an earlier epoch), `aggregate` drops what does not make
its value grow. With finitely many facts, and lattice values that can grow only finitely often,
the loop drains and the computation ends without anyone counting iterations.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sized
from typing import Any

from timely import KeyedState, Scope, Stream, Timestamp, Vertex

from .._hash import by_first, stable_hash
from ._errors import BloomError
from ._functions import kind_of
from ._lattice import Lattice

__all__ = ["aggregate", "apply", "distinct", "join", "not_in", "when"]


_TIMESTEP_LOOPS: weakref.WeakSet[Scope] = weakref.WeakSet()
"""The rule loops of timestep programs: two deep, the outer counter being the timestep."""


def _check_scope(op: str, *streams: Stream) -> None:
    for s in streams:
        if s.scope.depth > 1 and s.scope not in _TIMESTEP_LOOPS:
            raise BloomError(
                f"{op}: runs in the root scope or in a loop directly inside it (or a timestep program's rule "
                f"loop), but {s!r} is {s.scope.depth} loops deep (facts are dated by epoch; outer loop "
                "counters would be lost)"
            )


def _stamp(time: Timestamp) -> int:
    """What dates a fact: the epoch, or in a timestep program's loops (two deep) the timestep,
    the outer counter."""
    counters = time.counters
    return counters[0] if len(counters) == 2 else time.epoch


def _at(time: Timestamp, stamp: int) -> Timestamp:
    """``time`` moved to epoch (or timestep) ``stamp``, its other coordinates kept: a vertex
    holding ``time`` may send there whenever ``stamp`` is not earlier than `_stamp` of ``time``."""
    counters = time.counters
    if len(counters) == 2:
        return time if counters[0] == stamp else Timestamp(time.epoch, (stamp, counters[1]))
    return time if time.epoch == stamp else time.with_epoch(stamp)


def _hold(vertex: Vertex, pending: dict[Timestamp, list[Any]], records: list[Any], time: Timestamp) -> None:
    """Keep ``records`` until ``time`` is complete (the coordinated forms send in ``on_notify``)."""
    held = pending.get(time)
    if held is None:
        held = pending[time] = []
        vertex.notify_at(time)
    held.extend(records)


def _unhashable(op: str, record: Any, exc: BaseException) -> BloomError:
    return BloomError(f"{op}: record {record!r} cannot be kept in a set ({exc})")


def _group_pairs(groups: dict[Any, list[Any]], pairs: Iterable[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    """Append each ``(key, item)`` of ``pairs`` to ``groups[key]`` (a new list for a new key);
    ``groups``. One loop over a batch, not a call per record: outputs, aggregates and
    checkpoints group every record they see this way."""
    for key, item in pairs:
        group = groups.get(key)
        if group is None:
            groups[key] = [item]
        else:
            group.append(item)
    return groups


# Checkpoints -------------------------------------------------------------------------------------
def _keyed(entries: Iterable[tuple[int, Any]]) -> KeyedState | None:
    """``(route, item)`` entries as a `KeyedState` with one piece (a list of items) per route;
    None if there are none (nothing to restore)."""
    pieces: dict[int, list[Any]] = _group_pairs({}, entries)
    return KeyedState(list(pieces.items())) if pieces else None


def _items(op: str, state: Any) -> Iterator[Any]:
    """The items of every piece of a restored `KeyedState`, whichever old instances they came from."""
    if not isinstance(state, KeyedState):
        raise BloomError(f"{op}: restore() needs the KeyedState its checkpoint() returned, got {type(state).__name__}")
    for _, piece in state.pieces:
        yield from piece


def _keep_earliest(table: dict[Any, int], key: Any, epoch: int) -> None:
    """Restore ``key`` at ``epoch`` unless the table has it from earlier (pieces arrive in any order)."""
    seen = table.get(key)
    if seen is None or epoch < seen:
        table[key] = epoch


def _complete(op: str, waiting: Sized) -> None:
    """Refuse a checkpoint while records wait for a notification: the checkpoint would come
    before a time it covers is complete."""
    if waiting:
        raise BloomError(
            f"{op}: checkpoint() while {len(waiting)} time(s) still wait for a notification; a checkpoint "
            "must come after every time it covers is complete"
        )


# distinct --------------------------------------------------------------------------------------
class _Distinct(Vertex):
    """Sends each fact the first time it holds: once per fact (persistent), or once per fact and
    epoch (scratch). Coordinated: the same facts, but sent in ``on_notify`` once per time."""

    def __init__(
        self, name: str, persistent: bool, coordinated: bool, route: Callable[[Any], int] | None = stable_hash
    ) -> None:
        self.name = name
        self.persistent = persistent
        self.coordinated = coordinated
        self.route = route
        """The stage's exchange function (None: records are not exchanged)."""
        self.first: dict[Any, int] = {}
        """Persistent: fact -> the earliest epoch it was sent at."""
        self.by_epoch: dict[int, set[Any]] = {}
        """Scratch: epoch -> the facts sent at it."""
        self.pending: dict[Timestamp, list[Any]] = {}
        self.horizon = -1
        """The latest epoch delivered here: scratch facts of later timesteps (sent ahead by ``<+``,
        ``<~``) are not complete at a checkpoint, and are saved."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if time[0] > self.horizon:
            self.horizon = time[0]
        if self.coordinated:
            _hold(self, self.pending, records, time)
            return
        fresh = self._fresh(records, _stamp(time))
        if fresh:
            self.send_by(self.outputs[0], fresh, time)

    def on_notify(self, time: Timestamp) -> None:
        fresh = self._fresh(self.pending.pop(time), _stamp(time))
        if fresh:
            self.send_by(self.outputs[0], fresh, time)

    def _fresh(self, records: list[Any], epoch: int) -> list[Any]:
        fresh = []
        try:
            if self.persistent:
                first = self.first
                for r in records:
                    seen = first.get(r)
                    if seen is None or epoch < seen:
                        first[r] = epoch
                        fresh.append(r)
            else:
                seen_now = self.by_epoch.setdefault(epoch, set())
                for r in records:
                    if r not in seen_now:
                        seen_now.add(r)
                        fresh.append(r)
        except TypeError as exc:
            bad = next(r for r in records if not isinstance(r, Hashable))
            raise _unhashable(f"distinct {self.name!r}", bad, exc) from exc
        return fresh

    def checkpoint(self) -> Any:
        """Persistent: ``KeyedState`` of ``(fact, first epoch)`` items, routed by the exchange
        function (a plain dict when the stage does not exchange: no rescaling). Scratch: the
        facts of timesteps after every epoch delivered so far (a timestep program's ``<+`` and
        ``<~`` send facts ahead), as the same items; None without any (the facts of complete
        epochs are never read again)."""
        _complete(f"distinct {self.name!r}", self.pending)
        if self.persistent:
            items: Iterable[tuple[Any, int]] = self.first.items()
        else:
            horizon = self.horizon
            items = [(f, e) for e, facts in self.by_epoch.items() if e > horizon for f in facts]
        if not items:
            return None
        route = self.route
        if route is None:
            return dict(items)
        return _keyed((int(route(fact)), (fact, epoch)) for fact, epoch in items)

    def restore(self, state: Any) -> None:
        items = state.items() if isinstance(state, dict) else _items(f"distinct {self.name!r}", state)
        for fact, epoch in items:
            if self.persistent:
                _keep_earliest(self.first, fact, epoch)
            else:
                self.by_epoch.setdefault(epoch, set()).add(fact)


def distinct(
    stream: Stream,
    name: str = "distinct",
    *,
    persistent: bool = True,
    coordinated: bool = False,
    exchange: Callable[[Any], int] | None = stable_hash,
) -> Stream:
    """Each fact once: the set-valued collection behind a table (``persistent``) or a scratch.

    Coordination-free unless ``coordinated``, which holds new facts until their time is
    complete and sends them in one batch per time (one notification per time)."""
    _check_scope(f"distinct {name!r}", stream)
    return stream.stage(name, lambda: _Distinct(name, persistent, coordinated, exchange), exchange=exchange)  # type: ignore[no-any-return]


# join ------------------------------------------------------------------------------------------
def _epochs(epoch: int, mine_persistent: bool, theirs: Any, theirs_persistent: bool) -> tuple[int, ...]:
    """The earliest epochs at which a fact of epoch ``epoch`` and its match both hold."""
    if mine_persistent:
        if theirs_persistent:
            return (epoch if theirs <= epoch else theirs,)
        return tuple(s for s in theirs if s >= epoch)
    if theirs_persistent:
        return (epoch,) if theirs <= epoch else ()
    return (epoch,) if epoch in theirs else ()


class _Join(Vertex):
    """Keeps both inputs indexed by key; a new record meets every match already there."""

    def __init__(
        self,
        name: str,
        keys: tuple[Callable[[Any], Any], Callable[[Any], Any]],
        fn: Callable[[Any, Any], Any],
        persistent: tuple[bool, bool],
    ) -> None:
        self.name = name
        self.keys = keys
        self.fn = fn
        self.persistent = persistent
        self.index: tuple[dict[Any, dict[Any, Any]], dict[Any, dict[Any, Any]]] = ({}, {})
        """Per input: key -> record -> earliest epoch (persistent) or set of epochs (scratch)."""
        self.horizon = -1
        """The latest epoch delivered here (see `_Distinct.horizon`)."""
        self.sent: set[Any] | None = set() if persistent == (True, True) else None
        """Persistent results this instance has sent at epoch `base` (or earlier: see `sent_at`).
        Two pairs often give one result (two paths to one node); the second is dropped here,
        before it is routed, encoded and queued, and not by the collection it goes to. A cache,
        not state: a result sent again is harmless, so it is not checkpointed (None: results
        are per epoch, or one was unhashable)."""
        self.base = -1
        """The epoch of the first result sent (-1: none yet); most joins see only it, and a set
        lookup is cheaper than a dict's."""
        self.sent_at: dict[Any, int] = {}
        """Results first sent at an epoch other than `base`: result -> the earliest such epoch."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if time[0] > self.horizon:
            self.horizon = time[0]
        epoch = _stamp(time)
        key_of = self.keys[edge]
        mine, theirs = self.index[edge], self.index[1 - edge]
        mine_p, theirs_p = self.persistent[edge], self.persistent[1 - edge]
        fn = self.fn
        now: list[Any] = []
        later: dict[int, list[Any]] = {}
        for r in records:
            try:
                k = key_of(r)
                bucket = mine.get(k)
                if bucket is None:
                    bucket = mine[k] = {}
                old = bucket.get(r)
            except Exception as exc:
                raise BloomError(
                    f"join {self.name!r}: the key of input {edge} failed on record {r!r}: {exc!r}"
                ) from exc
            if mine_p:
                if old is not None and old <= epoch:
                    continue
                bucket[r] = epoch
            elif old is None:
                bucket[r] = {epoch}
            elif epoch in old:
                continue
            else:
                old.add(epoch)
            matches = theirs.get(k)
            if not matches:
                continue
            try:
                for other, when in matches.items():
                    if mine_p and theirs_p and when <= epoch:
                        now.append(fn(r, other) if edge == 0 else fn(other, r))
                        continue
                    for e in _epochs(epoch, mine_p, when, theirs_p):
                        out = fn(r, other) if edge == 0 else fn(other, r)
                        if e == epoch:
                            now.append(out)
                        else:
                            later.setdefault(e, []).append(out)
            except Exception as exc:
                raise BloomError(f"join {self.name!r}: the result function failed on {r!r}: {exc!r}") from exc
        if self.sent is not None:
            now = self._unsent(now, epoch)
            later = {e: self._unsent(out, e) for e, out in later.items()}
        if now:
            self.send_by(self.outputs[0], now, time)
        for e, out in later.items():
            if out:
                self.send_by(self.outputs[0], out, _at(time, e))

    def _unsent(self, results: list[Any], epoch: int) -> list[Any]:
        """The ``results`` not sent yet at ``epoch`` or earlier; remembers them as sent."""
        sent = self.sent
        assert sent is not None
        if self.base < 0:
            self.base = epoch
        at = self.sent_at
        fresh = []
        try:
            if epoch == self.base:
                for out in results:
                    if out not in sent and not (at and at.get(out, epoch + 1) <= epoch):
                        sent.add(out)
                        fresh.append(out)
            else:
                early = self.base <= epoch
                for out in results:
                    if (early and out in sent) or at.get(out, epoch + 1) <= epoch:
                        continue
                    at[out] = epoch
                    fresh.append(out)
        except TypeError:  # an unhashable result (a later stage may make it hashable): send all
            self.sent = None
            self.sent_at = {}
            return results
        return fresh

    def checkpoint(self) -> Any:
        """``KeyedState`` of ``(input, key, ((record, first epoch), ...))`` items, routed by
        `stable_hash` of the key (as both inputs are exchanged). A scratch record matches at its
        own epochs only: those of timesteps after every epoch delivered so far (sent ahead in a
        timestep program) are kept, as ``(record, (epoch, ...))``."""
        entries = []
        horizon = self.horizon
        for side in (0, 1):
            persistent = self.persistent[side]
            for key, bucket in self.index[side].items():
                if persistent:
                    records = tuple(bucket.items())
                else:
                    records = tuple(
                        (r, ahead) for r, epochs in bucket.items() if (ahead := tuple(e for e in epochs if e > horizon))
                    )
                if records:
                    entries.append((stable_hash(key), (side, key, records)))
        return _keyed(entries)

    def restore(self, state: Any) -> None:
        for side, key, records in _items(f"join {self.name!r}", state):
            bucket = self.index[side].setdefault(key, {})
            for r, epoch in records:
                if self.persistent[side]:
                    _keep_earliest(bucket, r, epoch)
                else:
                    bucket.setdefault(r, set()).update(epoch)


def join(
    left: Stream,
    right: Stream,
    left_key: Callable[[Any], Any],
    right_key: Callable[[Any], Any],
    fn: Callable[[Any, Any], Any] | None = None,
    name: str = "join",
    *,
    persistent: tuple[bool, bool] = (True, True),
) -> Stream:
    """``fn(l, r)`` for every pair with equal keys (default: the pair ``(l, r)``), coordination-free.

    Each input is also deduplicated: a record already joined (at the same or an earlier epoch)
    is dropped. ``persistent`` says, per input, whether its facts hold from their epoch on or at
    their epoch only; a result is sent at the earliest epoch at which both of its facts hold."""
    _check_scope(f"join {name!r}", left, right)
    f = fn if fn is not None else _pair
    keys = (left_key, right_key)
    return left.scope.stage(
        name,
        lambda: _Join(name, keys, f, persistent),
        [left, right],
        exchange=[lambda r: stable_hash(left_key(r)), lambda r: stable_hash(right_key(r))],
    )  # type: ignore[no-any-return]


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)


# aggregate ---------------------------------------------------------------------------------------
class _History:
    """One key's value by epoch: ``epochs[i]`` and the merged value of everything at epochs
    ``<= epochs[i]`` (cumulative, so reading an epoch's value is one bisection)."""

    __slots__ = ("epochs", "values")

    def __init__(self, epoch: int, value: Lattice) -> None:
        self.epochs = [epoch]
        self.values = [value]

    def upto(self, epoch: int) -> Lattice | None:
        i = bisect.bisect_right(self.epochs, epoch) - 1
        return self.values[i] if i >= 0 else None

    def absorb(self, epoch: int, x: Lattice) -> list[tuple[int, Lattice]]:
        """Merge ``x`` in at ``epoch``; every ``(epoch, new value)`` that grew: the one at ``epoch``
        and those of later epochs already known. Each whole value is sent again, not just ``x``, so
        that a monotone function downstream sees every epoch's complete value (``f(a) ⊔ f(b)``
        can be less than ``f(a ⊔ b)`` for a threshold)."""
        epochs, values = self.epochs, self.values
        if len(epochs) == 1 and epochs[0] == epoch:  # the common case: one epoch
            old = values[0]
            new = old.merge(x)
            if new is old or new == old:
                return []
            values[0] = new
            return [(epoch, new)]
        i = bisect.bisect_right(epochs, epoch) - 1
        if i >= 0:
            old = values[i]
            new = old.merge(x)
            if new is old or new == old:
                return []
        else:
            new = x
        if i >= 0 and epochs[i] == epoch:
            values[i] = new
        else:
            i += 1
            epochs.insert(i, epoch)
            values.insert(i, new)
        grown = [(epoch, new)]
        for j in range(i + 1, len(epochs)):
            old = values[j]
            merged = old.merge(x)
            if merged is not old and merged != old:
                values[j] = merged
                grown.append((epochs[j], merged))
        return grown


class _Aggregate(Vertex):
    """Merges ``(key, lattice)`` records per key. Asynchronous: sends ``(key, value)`` as soon as
    the key's value grows. Coordinated: once per time, in ``on_notify``, for each key that grew."""

    def __init__(self, name: str, lattice: type[Lattice] | None, coordinated: bool) -> None:
        self.name = name
        self.lattice = lattice
        self.coordinated = coordinated
        self.history: dict[Any, _History] = {}
        self.pending: dict[Timestamp, list[Any]] = {}

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        if self.coordinated:
            _hold(self, self.pending, records, time)
            return
        self._send(self._absorb(records, _stamp(time)), time)

    def on_notify(self, time: Timestamp) -> None:
        self._send(self._absorb(self.pending.pop(time), _stamp(time)), time)

    def _send(self, out: dict[int, list[tuple[Any, Lattice]]], time: Timestamp) -> None:
        for epoch, records in out.items():
            self.send_by(self.outputs[0], records, _at(time, epoch))

    def _absorb(self, records: list[Any], epoch: int) -> dict[int, list[tuple[Any, Lattice]]]:
        try:
            grouped: dict[Any, list[Lattice]] = _group_pairs({}, records)
        except (TypeError, ValueError) as exc:
            bad = next((r for r in records if not (isinstance(r, tuple) and len(r) == 2)), records[0])
            raise BloomError(
                f"aggregate {self.name!r}: records must be (key, lattice) pairs with a hashable key, got {bad!r}"
            ) from exc
        history = self.history
        expected = self.lattice
        out: dict[int, list[tuple[Any, Lattice]]] = {}
        for key, values in grouped.items():
            first = values[0]
            cls = type(first)
            if (expected is not None and cls is not expected) or not isinstance(first, Lattice):
                want = expected.__name__ if expected is not None else "a Lattice"
                raise BloomError(f"aggregate {self.name!r}: key {key!r} got {first!r}, which is not {want}")
            x = first if len(values) == 1 else cls.merge_all(values)
            h = history.get(key)
            if h is None:
                if x.is_bottom():
                    continue
                history[key] = _History(epoch, x)
                out.setdefault(epoch, []).append((key, x))
                continue
            for e, new in h.absorb(epoch, x):
                out.setdefault(e, []).append((key, new))
        return out

    def value(self, key: Any, epoch: int) -> Lattice | None:
        """This worker's value of ``key`` at ``epoch`` so far (for tests and debugging)."""
        h = self.history.get(key)
        return None if h is None else h.upto(epoch)

    def checkpoint(self) -> Any:
        """``KeyedState`` of ``(key, epoch, value)`` items routed by `stable_hash` of the key: each
        key's value at the latest epoch it changed, the only one later epochs build on (the
        values of earlier, complete epochs are not kept; a restored `value` of those epochs is
        None)."""
        _complete(f"aggregate {self.name!r}", self.pending)
        return _keyed((stable_hash(key), (key, h.epochs[-1], h.values[-1])) for key, h in self.history.items())

    def restore(self, state: Any) -> None:
        history = self.history
        for key, epoch, value in _items(f"aggregate {self.name!r}", state):
            h = history.get(key)
            if h is None:
                history[key] = _History(epoch, value)
            else:
                h.absorb(epoch, value)


def aggregate(
    stream: Stream,
    name: str = "aggregate",
    *,
    lattice: type[Lattice] | None = None,
    coordinated: bool = False,
) -> Stream:
    """Merge a stream of ``(key, lattice value)`` per key (BloomL's lattice aggregation).

    Asynchronous (the default): whenever a key's value grows it sends ``(key, value)`` at once
    and requests no notification; what adds nothing is dropped, so a loop through it ends.
    Coordinated: it sends, once per time and only after that time is complete, ``(key, value)``
    for each key that grew: fewer messages, each a value that is final for that time."""
    _check_scope(f"aggregate {name!r}", stream)
    return stream.stage(name, lambda: _Aggregate(name, lattice, coordinated), exchange=by_first)  # type: ignore[no-any-return]


# apply and when: functions of lattice values ------------------------------------------------------
class _Apply(Vertex):
    def __init__(self, name: str, fn: Callable[[Any], Any]) -> None:
        self.name = name
        self.fn = fn

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        fn = self.fn
        out = []
        for key, value in records:
            try:
                out.append((key, fn(value)))
            except Exception as exc:
                raise BloomError(
                    f"apply {self.name!r}: {fn!r} failed on key {key!r}, value {value!r}: {exc!r}"
                ) from exc
        self.send_by(self.outputs[0], out, time)


def apply(stream: Stream, fn: Callable[[Any], Any], name: str = "apply") -> Stream:
    """``(key, fn(value))`` for a stream of lattice records.

    If ``fn`` is marked `monotone` or `morphism`, each improvement is mapped and sent at once:
    ``fn`` of a lower bound is a lower bound of ``fn`` of the final value. Otherwise the values
    are first merged by a coordinated `aggregate`, and ``fn`` sees, once per time, each grown
    key's value complete for that time."""
    _check_scope(f"apply {name!r}", stream)
    if kind_of(fn) is None:
        stream = aggregate(stream, f"{name}.wait", coordinated=True)
    return stream.stage(name, lambda: _Apply(name, fn))  # type: ignore[no-any-return]


class _When(Vertex):
    """Sends ``key`` (a persistent fact) the first time ``predicate(value)`` is true."""

    def __init__(self, name: str, predicate: Callable[..., Any], keyed: bool = False) -> None:
        self.name = name
        self.predicate = predicate
        self.keyed = keyed
        self.fired: dict[Any, int] = {}

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = _stamp(time)
        fired = self.fired
        out = []
        for key, value in records:
            seen = fired.get(key)
            if seen is not None and seen <= epoch:
                continue
            try:
                verdict = self.predicate(key, value) if self.keyed else self.predicate(value)
            except Exception as exc:
                raise BloomError(
                    f"when {self.name!r}: the predicate failed on key {key!r}, value {value!r}: {exc!r}"
                ) from exc
            if verdict.value if isinstance(verdict, Lattice) else verdict:
                fired[key] = epoch
                out.append(key)
        if out:
            self.send_by(self.outputs[0], out, time)

    def checkpoint(self) -> Any:
        """``KeyedState`` of ``(key, epoch fired)`` items, routed by `stable_hash` of the key."""
        return _keyed((stable_hash(key), (key, epoch)) for key, epoch in self.fired.items())

    def restore(self, state: Any) -> None:
        for key, epoch in _items(f"when {self.name!r}", state):
            _keep_earliest(self.fired, key, epoch)


def when(stream: Stream, predicate: Callable[..., Any], name: str = "when", *, keyed: bool = False) -> Stream:
    """The keys of a lattice stream whose value satisfies ``predicate``, each sent once, as
    persistent facts (BloomL's threshold test: a quorum reached stays reached).

    A ``predicate`` marked `monotone` (returning an `LBool` or a bool that, once true, stays true
    as the value grows) fires as soon as a partial value satisfies it, without coordination.
    An unmarked predicate is only asked about values complete for their time. ``keyed``: the
    predicate is ``predicate(key, value)``, monotone in the value for every key."""
    _check_scope(f"when {name!r}", stream)
    if kind_of(predicate) is None:
        stream = aggregate(stream, f"{name}.wait", coordinated=True)
    return stream.stage(name, lambda: _When(name, predicate, keyed), exchange=by_first)  # type: ignore[no-any-return]


# not_in: stratified negation --------------------------------------------------------------------
class _NotIn(Vertex):
    """Facts of input 0 whose key is not among the facts of input 1, once each time is complete.

    With a join predicate (Bud's ``notin(other, :a => :b) { |x, y| ... }``) input 1 carries
    whole facts, indexed by ``negated_key``; a fact is blocked by those with its key for which
    ``predicate(fact, negated)`` holds."""

    def __init__(
        self,
        name: str,
        key: Callable[[Any], Any],
        negated_key: Callable[[Any], Any] | None = None,
        predicate: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.negated_key = negated_key
        self.predicate = predicate
        self.positive: dict[Any, int] = {}
        self.negative: dict[Any, int] = {}
        """Without a predicate: negated key -> first epoch; with one: negated fact -> first epoch."""
        self.by_key: dict[Any, dict[Any, int]] = {}
        """With a predicate: negated key -> negated fact -> first epoch."""
        self.sent: dict[int, set[Any]] = {}
        self.asked: set[Timestamp] = set()

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        epoch = _stamp(time)
        facts = self.negative if edge else self.positive
        for r in records:
            seen = facts.get(r)
            if seen is None or epoch < seen:
                facts[r] = epoch
                if edge and self.negated_key is not None:
                    self._index(r, epoch)
        if time not in self.asked:
            self.asked.add(time)
            self.notify_at(time)

    def _index(self, negated: Any, epoch: int) -> None:
        assert self.negated_key is not None
        try:
            k = self.negated_key(negated)
        except Exception as exc:
            raise BloomError(f"not_in {self.name!r}: the negated key failed on {negated!r}: {exc!r}") from exc
        self.by_key.setdefault(k, {})[negated] = epoch

    def _blocked(self, r: Any, k: Any, epoch: int) -> bool:
        if self.negated_key is None:
            blocked = self.negative.get(k)
            return blocked is not None and blocked <= epoch
        predicate = self.predicate
        for n, since in self.by_key.get(k, {}).items():
            if since <= epoch:
                try:
                    if predicate is None or predicate(r, n):
                        return True
                except Exception as exc:
                    raise BloomError(f"not_in {self.name!r}: the predicate failed on {r!r}, {n!r}: {exc!r}") from exc
        return False

    def on_notify(self, time: Timestamp) -> None:
        self.asked.discard(time)
        epoch = _stamp(time)
        sent = self.sent.setdefault(epoch, set())
        out = []
        for r, since in self.positive.items():
            if since > epoch or r in sent:
                continue
            try:
                k = self.key(r)
            except Exception as exc:
                raise BloomError(f"not_in {self.name!r}: the key failed on record {r!r}: {exc!r}") from exc
            if not self._blocked(r, k, epoch):
                sent.add(r)
                out.append(r)
        if out:
            self.send_by(self.outputs[0], out, time)

    def checkpoint(self) -> Any:
        """``KeyedState`` of ``(input, fact, first epoch)`` items, routed as the inputs are
        exchanged: a fact of input 0 by `stable_hash` of its key, a negated fact by that of its
        key (the fact itself without a negated key). What was sent is per epoch (scratch), so
        it is not kept."""
        _complete(f"not_in {self.name!r}", self.asked)
        key, negated_key = self.key, self.negated_key or _identity
        entries = [(stable_hash(key(r)), (0, r, epoch)) for r, epoch in self.positive.items()]
        entries.extend((stable_hash(negated_key(n)), (1, n, epoch)) for n, epoch in self.negative.items())
        return _keyed(entries)

    def restore(self, state: Any) -> None:
        for edge, fact, epoch in _items(f"not_in {self.name!r}", state):
            _keep_earliest(self.negative if edge else self.positive, fact, epoch)
            if edge and self.negated_key is not None:
                self._index(fact, self.negative[fact])


def not_in(
    stream: Stream,
    negated: Stream,
    key: Callable[[Any], Any] | None = None,
    name: str = "not_in",
    *,
    negated_key: Callable[[Any], Any] | None = None,
    predicate: Callable[[Any, Any], Any] | None = None,
) -> Stream:
    """The facts of ``stream`` whose ``key`` (default: the fact itself) is not a fact of ``negated``
    (stratified negation; coordinated: one notification per time).

    With ``negated_key`` (Bud's ``notin(other, :a => :b)``) ``negated`` carries whole facts, and a
    fact is blocked by those whose ``negated_key`` equals its ``key`` and, with ``predicate``
    (Bud's block), for which ``predicate(fact, negated_fact)`` holds.

    At each complete time it sends, as scratch facts of that epoch, every fact that holds then
    and is not negated then, each once per epoch. ``negated`` must be complete at the times
    ``stream`` carries: a lower stratum, e.g. a stream from outside the loop (brought in at
    iteration 0) or the output of an earlier loop."""
    _check_scope(f"not_in {name!r}", stream, negated)
    k = key if key is not None else _identity
    if predicate is not None and negated_key is None:
        negated_key = _identity
    nk = negated_key or _identity
    return stream.scope.stage(
        name,
        lambda: _NotIn(name, k, negated_key, predicate),
        [stream, negated],
        exchange=[lambda r: stable_hash(k(r)), lambda n: stable_hash(nk(n))],
    )  # type: ignore[no-any-return]


def _identity(x: Any) -> Any:
    return x
