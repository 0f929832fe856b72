"""The running side of the handles a dataflow's build made: inputs, probes and subscriptions.

`Bindings` implements `timely.dataflow.Binder`: `Dataflow.bind` asks it for one binding per
handle, and the handles use them only through the `InputBinding` and `ProbeBinding` protocols
declared in layer 3. What a binding needs of the process runtime is the `Host` protocol below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..dataflow import Input, Probe, Subscription, as_time
from ..errors import CodecError, InputError, TimelyError, VertexError
from ..graph import FrozenGraph
from ..operators import Collect
from ..progress import Antichain, ChangeBatch, ProgressTracker
from ..timestamp import Timestamp, _from_flat
from .scheduler import Scheduler

__all__ = ["Bindings", "Host", "InputBinding", "ProbeBinding", "SubscriptionBinding"]

MESSAGE_BATCH = 1024
"""Inputs split what they are sent into messages of at most this many records."""
INPUT_BACKLOG = 128
"""Queued messages (about this many thousand records) above which a synchronous `Input.send`
runs the computation until the queues are a quarter as long: memory stays bounded."""

Driver = Callable[[Callable[[], bool], float | None, tuple[Probe, Timestamp] | None], None]
"""Runs the computation until a predicate holds (a synchronous program's event loop runs only
inside timely calls); None while the computation is driven from async code. The third argument
names the (probe, time) the predicate waits to see passed, so a wait that an input this
program holds open can never end is refused at once instead of hanging."""


class Host(Protocol):
    """What bindings need of the process they run in (`ProcessRuntime` implements it)."""

    @property
    def failure(self) -> BaseException | None: ...

    @property
    def driver(self) -> Driver | None: ...

    def record_failure(self, err: BaseException) -> None:
        """Fail the computation with ``err`` (it is raised out of the scheduler too)."""

    def wake(self) -> None: ...

    def backlog(self) -> int: ...

    def congested(self) -> bool: ...

    def ready(self) -> bool: ...


class InputBinding:
    """The running side of an `Input`: feeds this process's instances of the input stage."""

    def __init__(
        self,
        host: Host,
        pending: ChangeBatch,
        scheduler: Scheduler,
        stage: int,
        name: str,
        epoch: int,
        throttle: tuple[Probe, int] | None,
    ) -> None:
        self._host = host
        self._pending = pending
        self.stage = stage
        self.name = name
        self.epoch = epoch
        self.closed = False
        self._time = _from_flat((epoch,))
        self._log: Callable[[int, list[Any], int | None], None] | None = None
        self._unsealed: list[Any] = []
        self._next = 0  # round-robin over local workers
        self.contexts = scheduler.instances_of(stage)
        self.throttle = throttle
        self.backpressure_waits = 0
        """Times `send` waited for the computation to drain (backpressure)."""

    @property
    def failure(self) -> BaseException | None:
        return self._host.failure

    @property
    def logging(self) -> bool:
        """Whether each epoch's records are kept for the input log (recovery turns it on)."""
        return self._log is not None

    def log_to(self, seal: Callable[[int, list[Any], int | None], None] | None) -> None:
        """From now on, call ``seal(epoch, records, next_epoch)`` as each epoch ends (None: stop)."""
        self._log = seal

    def send(self, records: Iterable[Any], count: int | None = None) -> None:
        """``count``: the records the items stand for (each a batch), counted as sent in their
        place: split over the messages in proportion, so the total is exact."""
        if self.closed:
            raise InputError(f"input {self.name!r} is closed; it takes no more records")
        batch = records if isinstance(records, list) else list(records)
        if not batch:
            return
        n = len(batch)
        if self._log is not None:
            self._unsealed.extend(batch)
        host = self._host
        contexts = self.contexts
        time = self._time
        pending = self._pending
        try:
            for start in range(0, len(batch), MESSAGE_BATCH):
                chunk = batch[start : start + MESSAGE_BATCH] if len(batch) > MESSAGE_BATCH else batch
                instance = contexts[self._next]
                self._next = (self._next + 1) % len(contexts)
                instance.records_sent += (
                    len(chunk) if count is None else count * (start + len(chunk)) // n - count * start // n
                )
                for i, route in enumerate(instance.routes[0]):
                    instance.messages_sent += route.send(chunk if i == 0 else list(chunk), time, pending)
        except CodecError as exc:  # a record for another process: say which input sent it
            raise CodecError(f"input {self.name!r} at epoch {self.epoch}: {exc}") from exc
        except VertexError as exc:  # an exchange function raised: part of the batch went, so stop
            if host.failure is None:
                host.record_failure(exc)
            host.wake()
            raise
        host.wake()
        driver = host.driver
        if driver is not None and (host.backlog() > INPUT_BACKLOG or host.congested()):
            self.backpressure_waits += 1
            driver(host.ready, None, None)

    def advance_to(self, epoch: int) -> None:
        if self.closed:
            raise InputError(f"input {self.name!r} is closed; it cannot advance")
        if not isinstance(epoch, int) or epoch < self.epoch:
            raise InputError(f"input {self.name!r} is at epoch {self.epoch}; it cannot go to {epoch!r}")
        if epoch == self.epoch:
            return
        if self._log is not None:
            self._seal(epoch)
        n = len(self.contexts)
        pending = self._pending
        old, new = (self._time, self.stage), (_from_flat((epoch,)), self.stage)
        pending[new] = pending.get(new, 0) + n
        pending[old] = pending.get(old, 0) - n
        self.epoch = epoch
        self._time = new[0]
        host = self._host
        host.wake()
        if self.throttle is not None and host.driver is not None:
            probe, ahead = self.throttle
            if epoch - ahead - 1 >= 0:
                target = _from_flat((epoch - ahead - 1,))
                host.driver(lambda: not probe.frontier().less_equal(target), None, (probe, target))

    def _seal(self, next_epoch: int | None) -> None:
        """Log the records of the epoch that ends now (before anyone can see it end)."""
        records, self._unsealed = self._unsealed, []
        assert self._log is not None
        self._log(self.epoch, records, next_epoch)

    def close(self) -> None:
        if self.closed:
            return
        if self._log is not None:
            self._seal(None)
        key = (self._time, self.stage)
        pending = self._pending
        pending[key] = pending.get(key, 0) - len(self.contexts)
        self.closed = True
        self._host.wake()


class ProbeBinding:
    """The running side of a `Probe`: the frontier at its location."""

    def __init__(self, host: Host, tracker: ProgressTracker, location: int, depth: int) -> None:
        self._host = host
        self._tracker = tracker
        self.location = location
        self.depth = depth

    @property
    def failure(self) -> BaseException | None:
        return self._host.failure

    def frontier(self) -> Antichain:
        return self._tracker.frontier_at(self.location)

    def time(self, time: Timestamp | int) -> Timestamp:
        """``time`` (an epoch, or a timestamp) as a timestamp at this probe's loop depth."""
        return as_time(time, self.depth)


class SubscriptionBinding(ProbeBinding):
    """Hands each completed time's records, gathered from this process's workers, to the callback."""

    def __init__(
        self,
        host: Host,
        tracker: ProgressTracker,
        location: int,
        name: str,
        fn: Callable[[Timestamp, list[Any]], object],
        collectors: list[Collect],
    ) -> None:
        super().__init__(host, tracker, location, 0)
        self.fn = fn
        self.name = name
        self.collectors = collectors
        self._delivered = -1
        self._mark: Callable[[int], None] | None = None

    def track_deliveries(self, delivered: int, mark: Callable[[int], None]) -> None:
        """Skip the epochs up to ``delivered`` (handed over before a restart) and call
        ``mark(epoch)`` after each later one is handed over."""
        self._delivered = delivered
        self._mark = mark

    def deliver(self) -> None:
        if not any(c.pending for c in self.collectors):
            return
        frontier = self.frontier()
        done = sorted({t for c in self.collectors for t in c.pending if not frontier.less_equal(t)})
        mark = self._mark
        for t in done:
            records: list[Any] = []
            for c in self.collectors:
                part = c.pending.pop(t, None)
                if part:
                    records.extend(part)
            if mark is not None and t[0] <= self._delivered:
                continue  # delivered before a restart
            try:
                self.fn(t, records)
            except BaseException as exc:
                err = VertexError(
                    f"subscriber {self.name!r} raised {type(exc).__name__} at time {t}: {exc}",
                    self.name,
                    -1,
                    t,
                    "subscribe",
                )
                err.__cause__ = exc
                self._host.record_failure(err)
                raise err from exc
            if mark is not None:
                self._delivered = t[0]
                try:
                    mark(t[0])  # the runtime's own record (a full disk is not the subscriber's error)
                except BaseException as exc:
                    self._host.record_failure(exc)
                    raise

    @property
    def delivered(self) -> int:
        """The last epoch handed over (-1: none), counting those before a restart."""
        return self._delivered


class Bindings:
    """The bindings of one process's handles (the `Binder` its dataflow binds through)."""

    def __init__(
        self,
        host: Host,
        graph: FrozenGraph,
        scheduler: Scheduler,
        tracker: ProgressTracker,
        pending: ChangeBatch,
        epoch: int,
    ) -> None:
        self._host = host
        self._graph = graph
        self._scheduler = scheduler
        self._tracker = tracker
        self._pending = pending
        self._epoch = epoch
        self.inputs: list[InputBinding] = []
        self.probes: dict[Probe, ProbeBinding] = {}
        self.subscriptions: list[SubscriptionBinding] = []

    def bind_input(self, handle: Input, stage: int, throttle: tuple[Probe, int] | None) -> InputBinding:
        binding = InputBinding(self._host, self._pending, self._scheduler, stage, handle.name, self._epoch, throttle)
        self.inputs.append(binding)
        return binding

    def bind_probe(self, handle: Probe, stage: int) -> ProbeBinding:
        location = self._graph.stage_location(stage)
        binding = ProbeBinding(self._host, self._tracker, location, self._graph.stages[stage].depth)
        self.probes[handle] = binding
        return binding

    def bind_subscription(
        self, handle: Subscription, stage: int, fn: Callable[[Timestamp, list[Any]], object]
    ) -> SubscriptionBinding:
        collectors: list[Collect] = [instance.vertex for instance in self._scheduler.instances_of(stage)]  # type: ignore[misc]
        binding = SubscriptionBinding(
            self._host, self._tracker, self._graph.stage_location(stage), handle.name, fn, collectors
        )
        self.probes[handle] = binding
        self.subscriptions.append(binding)
        return binding

    def probe(self, handle: Probe) -> ProbeBinding:
        """The binding of a probe of this computation's dataflow."""
        binding = self.probes.get(handle)
        if binding is None:
            raise TimelyError(f"{handle!r} is not running yet: start the computation with timely.execute")
        return binding

    def close_inputs(self) -> None:
        for binding in self.inputs:
            binding.close()

    def frontier_changed(self) -> None:
        """Hand the subscriptions the times that are now complete."""
        for sub in self.subscriptions:
            sub.deliver()
