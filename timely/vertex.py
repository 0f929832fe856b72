"""The user contract: subclass `Vertex`, override `on_recv` and `on_notify`, call `send_by`
and `notify_at` (Naiad §2.2).

A vertex is an actor: the runtime hands it one callback at a time. ``on_recv`` gets a
*batch* of records that all carry one time, from one input. While a callback runs, the
vertex *holds* that time and may send or ask to be notified only at times at or after it;
a record it received stays pending (and holds back notifications downstream) until the
callback returns, even if the callback is ``async def`` and awaits I/O.

What a vertex sends is buffered and leaves when the callback returns, so a callback's
messages and its progress update form one atomic batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import TimelyError, TimestampError
from .progress import Antichain
from .timestamp import Timestamp, _from_flat, product_le

__all__ = [
    "Vertex",
    "Output",
    "VertexStatistics",
    "KeyedState",
    "RoutedPiece",
    "SAME",
    "TOP",
    "VertexContext",
    "attach",
    "emit",
    "give",
]


class _Same:
    """Marker: the capability time of a notification is its guarantee time."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()
"""Default ``capability`` of `Vertex.notify_at`: hold the capability at the guarantee time."""


@dataclass(frozen=True, slots=True)
class Output:
    """A handle for one output of a vertex; pass it to `Vertex.send_by`."""

    index: int


@dataclass
class KeyedState:
    """A vertex's checkpointed state cut into pieces by routing key, so that a computation can
    be resumed on a different number of workers (state re-routed by key on restore).

    ``pieces`` holds ``(route, piece)`` pairs, where ``route`` is the int the stage's exchange
    function gives for the records that piece belongs to (a piece goes to worker
    ``route % peers``, where its records will go). On restore a vertex receives a
    `KeyedState` of the pieces routed to it, from one or several old instances, in any
    order; its `Vertex.restore` merges them.
    """

    pieces: list[tuple[int, Any]]


class RoutedPiece(ABC):
    """A `KeyedState` piece that holds the records of many routes, each with its own.

    Cutting a large state into a piece per route costs a Python object per key to build,
    encode and decode; a piece of columns does not. On a restore onto another number of
    workers the runtime does not send such a piece whole to ``route % peers`` (its route in
    `KeyedState.pieces` is ignored): it asks the piece to `split` itself by the new count. On
    the same count a vertex gets its pieces back as saved. A subclass must be encodable by the
    codec (`timely.register_codec`), like any state.
    """

    @abstractmethod
    def split(self, peers: int, workers: Collection[int]) -> Iterable[tuple[int, Any]]:
        """The records of this piece that each of ``workers`` owns among ``peers`` workers (a
        record with route ``r`` is worker ``r % peers``'s), as ``(worker, piece)`` pairs; a
        worker that owns none may be left out. Only the workers asked for are wanted (those of
        the restoring process)."""


@dataclass(frozen=True)
class VertexStatistics:
    stage: str
    worker: int
    messages_received: int
    records_received: int
    messages_sent: int
    records_sent: int
    notifications_requested: int
    notifications_delivered: int
    callback_seconds: float


class VertexContext:
    """What the runtime keeps for one vertex instance: the time held, what the running
    callback sent (by output and time, until it returns), and counters. The runtime fills it in
    and registers notification requests (`request_notification`); vertices use it only through
    `Vertex`'s methods."""

    __slots__ = (
        "__weakref__",
        "callback_seconds",
        "depth",
        "held",
        "messages_received",
        "messages_sent",
        "notifications_delivered",
        "notifications_requested",
        "peers",
        "processes",
        "records_received",
        "records_sent",
        "sent",
        "stage_name",
        "worker",
    )

    def __init__(self, stage_name: str, worker: int, peers: int, depth: int, outputs: int, processes: int = 1) -> None:
        self.held: tuple[int, ...] | None = None
        """The time the running callback holds; None outside callbacks; TOP for a capability-free notification."""
        self.sent: list[dict[Timestamp, list[Any]]] = [{} for _ in range(outputs)]
        """Per output, the records the running callback sent at each time: routed when it returns."""
        self.stage_name = stage_name
        self.worker = worker
        self.peers = peers
        self.processes = processes
        self.depth = depth
        self.messages_received = 0
        self.records_received = 0
        self.messages_sent = 0
        self.records_sent = 0
        self.notifications_requested = 0
        self.notifications_delivered = 0
        self.callback_seconds = 0.0

    def send(self, port: int, records: Iterable[Any], time: Timestamp) -> None:
        """Keep ``records`` for output ``port`` at ``time`` (already checked) until the callback
        returns: a callback's messages leave together, with its progress changes."""
        outgoing = self.sent[port]
        waiting = outgoing.get(time)
        if waiting is None:
            outgoing[time] = list(records)
        else:
            waiting.extend(records)

    def request_notification(self, time: Timestamp, capability: Timestamp | None) -> None:
        """Register a checked request for ``on_notify(time)`` holding ``capability`` (None: no
        capability). The runtime's context implements it."""
        raise NotImplementedError

    def input_frontier(self) -> Antichain:
        """The frontier at this vertex's location in the process's view of progress (see
        `Vertex.input_frontier`). The runtime's context implements it."""
        raise NotImplementedError

    def check_time(self, time: Any, what: str) -> Timestamp:
        """Normalise ``time`` and refuse it if it is before the held time (or has the wrong depth)."""
        held = self.held
        if held is None:
            raise TimelyError(f"stage {self.stage_name!r}: {what} called outside a callback")
        if held is TOP:
            raise TimestampError(
                f"stage {self.stage_name!r} (worker {self.worker}): {what} at {time} inside a notification "
                "that holds no capability (it was requested with capability=None)",
                self.stage_name,
                time,
                None,
            )
        if type(time) is not Timestamp:
            if not isinstance(time, tuple) or not all(type(c) is int for c in time):
                raise TimestampError(
                    f"stage {self.stage_name!r}: {what} needs a Timestamp, got {time!r}", self.stage_name, time, held
                )
            time = _from_flat(tuple(time))
        if len(time) != self.depth + 1:
            raise TimestampError(
                f"stage {self.stage_name!r} (worker {self.worker}): {what} at {time} with {len(time) - 1} loop "
                f"counters, but the stage is inside {self.depth} loop(s)",
                self.stage_name,
                time,
                held,
            )
        if not product_le(held, time):
            raise TimestampError(
                f"stage {self.stage_name!r} (worker {self.worker}): {what} at {time}, earlier than the time "
                f"{_show(held)} it holds; a vertex may only {what} at or after the time of its callback",
                self.stage_name,
                time,
                held,
            )
        return time


TOP: Any = (float("inf"),)
"""The held time of a notification with no capability (nothing may be sent)."""


def _show(t: tuple[int, ...]) -> str:
    return str(_from_flat(t)) if t is not TOP else "TOP"


class Vertex:
    """Base class for user vertices. Override the callbacks you need.

    Attributes set by the runtime before the first callback:
        outputs: one `Output` per output of the stage, in order.
    """

    outputs: list[Output]
    _timely: VertexContext

    urgent: bool = False
    """Deliver messages for this vertex ahead of the other messages queued on its worker (set
    it on the class, or on the instance in ``__init__``). For a light path that must not wait
    behind bulk work on the same worker, such as interactive queries beside a large
    incremental computation. Only the order in which queued messages are delivered changes:
    progress, notifications and what any vertex computes stay the same, since timely never
    promised an order between messages at different times or from different senders."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> Awaitable[None] | None:
        """A batch of ``records`` at ``time`` arrived on input number ``edge``.

        Treat ``records`` as read-only: it may be shared with no one else, but it is not
        yours to keep changing after the callback returns.
        """

    def on_notify(self, time: Timestamp) -> Awaitable[None] | None:
        """No more records at or before ``time`` will arrive: finish the work for ``time``."""

    def send_by(self, output: Output, records: Iterable[Any], time: Timestamp | tuple[int, ...]) -> None:
        """Send ``records`` at ``time`` on ``output``; they leave when the callback returns.
        ``time`` is a `Timestamp` or the same as a flat tuple ``(epoch, counters...)``."""
        ctx = self._timely
        # the held time is a Timestamp; any other is checked and made one (no call on the common path)
        at: Timestamp = time if time is ctx.held else ctx.check_time(time, "send")  # type: ignore[assignment]
        ctx.send(output.index, records, at)

    def notify_at(
        self, time: Timestamp | tuple[int, ...], capability: Timestamp | tuple[int, ...] | None = SAME
    ) -> None:
        """Ask for `on_notify` once nothing at or before ``time`` can arrive any more.

        ``capability`` (Naiad §2.4) is the time the notification lets the vertex send at;
        by default ``time`` itself. A later capability lets other notifications go first;
        ``None`` holds no capability at all, for pure state purging, and never delays
        anyone. Requests for the same (time, capability) coalesce.
        """
        ctx = self._timely
        held = ctx.held
        if time is held or (
            type(time) is Timestamp and held is not None and len(time) == len(held) and product_le(held, time)
        ):
            at: Timestamp = time  # type: ignore[assignment]  # the held time, or a Timestamp after it
        else:
            at = ctx.check_time(time, "notify_at")
        hold: Timestamp | None
        if capability is SAME:
            hold = at
        elif capability is not None:
            hold = ctx.check_time(capability, "hold a capability")
            if not product_le(at, hold):
                raise TimestampError(
                    f"stage {ctx.stage_name!r}: notify_at capability {hold} is earlier than its time {at}",
                    ctx.stage_name,
                    hold,
                    ctx.held,
                )
        else:
            hold = None
        ctx.request_notification(at, hold)

    def input_frontier(self) -> Antichain:
        """The earliest times at which anything could still arrive at this vertex: a record
        on any input (in flight, or yet to be sent by anyone upstream, around a loop too) or a
        notification it asked for holding a capability. A time no element is at or before is
        finished here: nothing at or before it will be delivered again.

        Conservative, never ahead: it is this process's view of progress, taken when the
        current step began, so it may lag what has happened (on several processes, by the
        progress messages still on their way). Inside ``on_recv`` at ``t`` some element is at
        or before ``t`` (the batch, or what sent it, is not retired yet). Call it from a
        callback; it is recomputed only when the view has changed since the last call, and the
        answer is shared: do not modify it. A vertex that reads its frontier when it is
        scheduled (to compact its state, say) needs no capability-free notification to learn
        that a time has passed."""
        return self._timely.input_frontier()

    # Fault tolerance (Naiad §3.4) --------------------------------------------------------------
    def checkpoint(self) -> Any:
        """This vertex's state for a checkpoint; None (the default) when it keeps none.

        Called between callbacks, once every time up to the checkpoint's epoch is complete
        and before any later time has been delivered, so the state is exactly that of the
        epochs so far. Return anything the codec can encode (pickle is allowed in checkpoint
        files); return a `KeyedState` to let a computation resume on another number of
        workers. Notification requests pending at later times are saved by the runtime.
        """
        return None

    def restore(self, state: Any) -> None:
        """Take back what `checkpoint` returned (lists come back as tuples), before any
        callback of the resumed computation. A vertex whose `checkpoint` returns None is never
        restored."""
        raise TimelyError(
            f"stage {self._timely.stage_name!r}: {type(self).__name__} returned state from checkpoint() "
            "but does not implement restore(state)"
        )

    # What the console shows -----------------------------------------------------------------
    def state_size(self) -> tuple[int, int] | None:
        """How much state this instance keeps, as (rows, bytes); None (the default) when it
        keeps none worth showing. The live console (``execute(console=...)``) asks about once a
        second, between callbacks, and shows it on the stage: keep it cheap (counts the vertex
        already has, not a walk over its state); bytes may be an estimate."""
        return None

    # What the vertex knows about where it runs ---------------------------------------------
    @property
    def worker_index(self) -> int:
        """The index of the worker this instance runs on, from 0 to ``peers - 1``."""
        return self._timely.worker

    @property
    def peers(self) -> int:
        """How many workers the computation has (instances of every stage)."""
        return self._timely.peers

    @property
    def processes(self) -> int:
        """How many processes the workers run in. Beyond one, waiting for a notification costs
        a round of progress messages between them, which a loop pays every iteration."""
        return self._timely.processes

    @property
    def stage_name(self) -> str:
        return self._timely.stage_name

    def statistics(self) -> VertexStatistics:
        c = self._timely
        return VertexStatistics(
            c.stage_name,
            c.worker,
            c.messages_received,
            c.records_received,
            c.messages_sent,
            c.records_sent,
            c.notifications_requested,
            c.notifications_delivered,
            c.callback_seconds,
        )


def attach(vertex: Vertex, context: VertexContext, outputs: int) -> None:
    """Give ``vertex`` its runtime context and one `Output` per output of its stage: the runtime
    calls this once per instance, before any callback."""
    vertex._timely = context
    vertex.outputs = [Output(i) for i in range(outputs)]


def give(vertex: Vertex, port: int, records: list[Any], time: Timestamp) -> None:
    """Buffer ``records`` on output ``port`` at the time of the running callback, keeping the
    list itself: for the built-in operators, whose lists are fresh and held by no one else.
    `Vertex.send_by` copies what it is given, since a user may go on changing their list;
    a copy costs a reference count on every record, twice."""
    outgoing = vertex._timely.sent[port]
    waiting = outgoing.get(time)
    if waiting is None:
        outgoing[time] = records
    else:
        waiting.extend(records)


def emit(vertex: Vertex, port: int, records: list[Any], time: Timestamp) -> None:
    """Buffer ``records`` on output ``port`` without checking the time: for the loop vertices,
    whose outputs change a time's depth (their path summaries say what is legal)."""
    vertex._timely.send(port, records, time)
