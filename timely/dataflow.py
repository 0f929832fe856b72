"""Building a dataflow: scopes, streams, inputs, probes (the user's side of layer 3).

`build(scope)` receives the root `Scope` of a `Dataflow`. Streams are the outputs of stages;
calling ``stream.stage(...)`` (or a shortcut such as ``stream.map``) adds a stage that reads
it. Nothing runs while building. When the computation starts, the runtime freezes the
dataflow's graph and hands every handle made while building its running side through
`Dataflow.bind`: the runtime implements the `Binder` protocol declared here, and the handles
see only the `InputBinding` and `ProbeBinding` protocols, so handles created while building
work afterwards without the runtime touching their insides.

Why over 400 lines in one module: this is the whole building API a user meets (scopes, streams,
inputs, probes) with the one interface the runtime implements to bind them (`Binder`), so that
a handle's private state is touched only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .errors import ComputationFailed, ScopeError, TimelyError
from .graph import FrozenGraph, GraphBuilder, StageKind
from .operators import Collect, Filter, FlatMap, Forward, Inspect, InspectBatch, Map, ProbeVertex
from .progress import Antichain, PathSummary
from .timestamp import Timestamp
from .vertex import Vertex

__all__ = [
    "Binder",
    "Dataflow",
    "Input",
    "InputBinding",
    "Probe",
    "ProbeBinding",
    "Scope",
    "Source",
    "Stream",
    "Subscription",
    "as_time",
]

Partition = Callable[[Any], int]
VertexFactory = Callable[[], Vertex]
T = TypeVar("T")


# What the runtime implements ---------------------------------------------------------------------


class InputBinding(Protocol):
    """The running side of an `Input`: takes its records and epochs into the computation."""

    @property
    def epoch(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def failure(self) -> BaseException | None:
        """The computation's failure, if it has failed."""

    def send(self, records: Iterable[Any], count: int | None = None) -> None: ...

    def advance_to(self, epoch: int) -> None: ...

    def close(self) -> None: ...


class ProbeBinding(Protocol):
    """The running side of a `Probe` (or a `Subscription`): the frontier at its location."""

    @property
    def failure(self) -> BaseException | None:
        """The computation's failure, if it has failed."""

    def frontier(self) -> Antichain: ...


class Binder(Protocol):
    """What a starting computation offers the handles of its dataflow: a running side for each.

    `Dataflow.bind` calls it once per handle, in the order the handles were made.
    """

    def bind_input(self, handle: Input, stage: int, throttle: tuple[Probe, int] | None) -> InputBinding: ...

    def bind_probe(self, handle: Probe, stage: int) -> ProbeBinding: ...

    def bind_subscription(
        self, handle: Subscription, stage: int, fn: Callable[[Timestamp, list[Any]], object]
    ) -> ProbeBinding: ...


# The dataflow ---------------------------------------------------------------------------------------


class Dataflow:
    """One process's dataflow: the graph being built, the handles made while building it, and
    where this process stands (every process builds the same dataflow: SPMD).

    ``Dataflow(...).root`` is the scope `build(scope)` receives; `freeze` seals the graph and
    `bind` gives the handles their running side.
    """

    def __init__(self, process_index: int = 0, processes: int = 1, workers: int = 1) -> None:
        self.process_index = process_index
        self.processes = processes
        self.workers = workers
        self.graph = GraphBuilder()
        self.inputs: list[Input] = []
        self.probes: list[Probe] = []
        self.subscriptions: list[Subscription] = []
        self.root = Scope._of(self, 0)

    @classmethod
    def build(
        cls, build: Callable[[Scope], T], process_index: int = 0, processes: int = 1, workers: int = 1
    ) -> tuple[Dataflow, T, FrozenGraph]:
        """Run ``build`` on a new dataflow's root scope and freeze the graph it made."""
        dataflow = cls(process_index, processes, workers)
        result = build(dataflow.root)
        return dataflow, result, dataflow.freeze()

    def freeze(self) -> FrozenGraph:
        """Check and seal the graph: no stage can be added afterwards."""
        return self.graph.freeze()

    def bind(self, binder: Binder) -> None:
        """Give every handle of this dataflow its running side, taken from ``binder``."""
        for i in self.inputs:
            i._attach(binder.bind_input(i, i.source.stage, i._throttle))
        for p in self.probes:
            p._attach(binder.bind_probe(p, p._stage))
        for s in self.subscriptions:
            s._attach(binder.bind_subscription(s, s._stage, s.fn))


class Scope:
    """Where stages are created: the root scope, or a `LoopContext` (a scope inside a loop)."""

    _dataflow: Dataflow
    _context: int

    def __init__(self) -> None:
        raise TypeError("scopes are made by timely: use the scope passed to build(scope)")

    @classmethod
    def _of(cls, dataflow: Dataflow, context: int) -> Scope:
        self = object.__new__(cls)
        self._dataflow = dataflow
        self._context = context
        return self

    @property
    def dataflow(self) -> Dataflow:
        """The dataflow this scope adds stages to."""
        return self._dataflow

    @property
    def context(self) -> int:
        """The index of this scope's loop context in the graph (0: the root scope)."""
        return self._context

    @property
    def name(self) -> str:
        return self._dataflow.graph.contexts[self._context].name

    @property
    def depth(self) -> int:
        """How many loop contexts enclose this scope."""
        return self._dataflow.graph.contexts[self._context].depth

    @property
    def process_index(self) -> int:
        """Which process is building (every process runs the same build: SPMD)."""
        return self._dataflow.process_index

    @property
    def processes(self) -> int:
        return self._dataflow.processes

    @property
    def peers(self) -> int:
        """Workers in the whole computation: processes times workers per process."""
        return self._dataflow.processes * self._dataflow.workers

    def new_input(self, name: str) -> Input:
        """An input fed from outside, epoch by epoch (only in the root scope)."""
        if self._context != 0:
            raise ScopeError(f"inputs belong to the root scope, not to loop {self.name!r}")
        index = self._dataflow.graph.add_stage(name, StageKind.INPUT, 0, None, 0, [PathSummary.identity(0)])
        stream = Input(self, index)
        self._dataflow.inputs.append(stream)
        return stream

    def stage(
        self,
        name: str,
        factory: VertexFactory,
        inputs: Sequence[Stream],
        exchange: Sequence[Partition | None] | Partition | None = None,
        outputs: int = 1,
    ) -> Any:
        """Add a stage whose vertices ``factory()`` makes, one per worker.

        ``exchange`` gives, per input, a function from record to int that routes each record
        to worker ``f(record) % peers``; ``None`` keeps records on the worker that sent them.
        Returns the output stream, or a tuple of them when ``outputs != 1``.
        """
        inputs = list(inputs)
        for s in inputs:
            if not isinstance(s, Stream):
                raise TypeError(f"stage {name!r}: inputs must be Streams, got {s!r}")
            if s.scope.dataflow is not self._dataflow:
                raise ScopeError(f"stage {name!r}: a stream from another dataflow was given as input")
            if s.scope is not self:
                raise ScopeError(
                    f"stage {name!r} is in scope {self.name or '<root>'!r} but its input from "
                    f"{s.source_name!r} belongs to scope {s.scope.name or '<root>'!r}; "
                    "use LoopContext.ingress / egress to move streams between loops"
                )
        if callable(exchange) or exchange is None:
            partitions: list[Partition | None] = [exchange] * len(inputs)  # type: ignore[list-item]
        else:
            partitions = list(exchange)
        if not callable(factory):
            raise TypeError(f"stage {name!r}: factory must be a Vertex class or a callable making one")
        summaries = [PathSummary.identity(self.depth)] * outputs
        graph = self._dataflow.graph
        index = graph.add_stage(name, StageKind.VERTEX, self._context, factory, len(inputs), summaries, partitions)
        for port, s in enumerate(inputs):
            graph.connect(s.source.stage, s.source.port, index, port)
        streams = tuple(Stream(self, index, p) for p in range(outputs))
        return streams[0] if outputs == 1 else streams

    def concat(self, name: str, streams: Sequence[Stream]) -> Stream:
        """All records of all ``streams`` in one stream."""
        return self.stage(name, Forward, streams)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a stream's records come from: output ``port`` of the stage with index ``stage``."""

    stage: int
    port: int


class Stream:
    """The records leaving one output of one stage, over time."""

    __slots__ = ("_scope", "source")

    def __init__(self, scope: Scope, stage: int, port: int = 0) -> None:
        self._scope = scope
        self.source = Source(stage, port)

    @property
    def scope(self) -> Scope:
        return self._scope

    @property
    def source_name(self) -> str:
        """The full name of the stage this stream leaves."""
        return self._scope.dataflow.graph.stages[self.source.stage].name

    def __repr__(self) -> str:
        return f"<Stream from {self.source_name}[{self.source.port}]>"

    # Adding stages ----------------------------------------------------------------------
    def stage(
        self,
        name: str,
        factory: VertexFactory,
        exchange: Partition | None = None,
        outputs: int = 1,
    ) -> Any:
        """A stage with this stream as its only input; see `Scope.stage`."""
        return self._scope.stage(name, factory, [self], exchange, outputs)

    def map(self, name: str, fn: Callable[[Any], Any]) -> Stream:
        return self.stage(name, lambda: Map(fn))  # type: ignore[no-any-return]

    def filter(self, name: str, predicate: Callable[[Any], bool]) -> Stream:
        return self.stage(name, lambda: Filter(predicate))  # type: ignore[no-any-return]

    def flat_map(self, name: str, fn: Callable[[Any], Iterable[Any]]) -> Stream:
        return self.stage(name, lambda: FlatMap(fn))  # type: ignore[no-any-return]

    def exchange(self, name: str, key: Partition) -> Stream:
        """The same records, each moved to worker ``key(record) % peers``."""
        return self.stage(name, Forward, exchange=key)  # type: ignore[no-any-return]

    def gather(self, name: str | None = None, to: int = 0) -> Stream:
        """The same records, all moved to one worker: the first worker of process ``to``.

        Every process runs the same build, so each one calls ``gather``; only process ``to``
        receives records afterwards. ``stream.gather().subscribe(fn)`` calls ``fn`` on process
        ``to`` alone, with the whole of each completed time, whatever the number of processes
        and workers. It funnels the stream through one worker: gather results, not the bulk of
        a computation. ``name`` defaults to ``<stage>.gather`` (``<stage>.gather<port>`` for an
        output other than the first).
        """
        dataflow = self._scope.dataflow
        if isinstance(to, bool) or not isinstance(to, int):
            raise TypeError(f"gather: to must be a process index (an int), got {to!r}")
        if not 0 <= to < dataflow.processes:
            raise ValueError(
                f"gather: to={to} names no process; this computation has {dataflow.processes} "
                f"(0 to {dataflow.processes - 1})"
            )
        if name is None:
            stage = self.source_name
            prefix = f"{self._scope.name}." if self._scope.name else ""
            stage = stage[len(prefix) :] if stage.startswith(prefix) else stage
            name = f"{stage}.gather" + (str(self.source.port) if self.source.port else "")
        target = to * dataflow.workers
        return self.stage(name, Forward, exchange=lambda record: target)  # type: ignore[no-any-return]

    def concat(self, name: str, *others: Stream) -> Stream:
        return self._scope.concat(name, [self, *others])

    def inspect(self, name: str, fn: Callable[[Any], None]) -> Stream:
        """Call ``fn(record)`` for every record and pass the stream on."""
        return self.stage(name, lambda: Inspect(fn))  # type: ignore[no-any-return]

    def inspect_batch(self, name: str, fn: Callable[[Timestamp, list[Any]], object]) -> Stream:
        """Call ``fn(time, records)`` for every batch and pass the stream on."""
        return self.stage(name, lambda: InspectBatch(fn))  # type: ignore[no-any-return]

    def probe(self, name: str | None = None) -> Probe:
        """A handle that tells which times can still appear on this stream."""
        dataflow = self._scope.dataflow
        index = dataflow.graph.add_stage(
            name or f"probe{len(dataflow.probes)}", StageKind.PROBE, self._scope.context, ProbeVertex, 1, []
        )
        dataflow.graph.connect(self.source.stage, self.source.port, index, 0)
        probe = Probe(self._scope, index)
        dataflow.probes.append(probe)
        return probe

    def subscribe(self, fn: Callable[[Timestamp, list[Any]], object], name: str | None = None) -> Subscription:
        """Call ``fn(time, records)`` once per completed time that has records, in time order,
        with this process's records of that time (root scope only)."""
        if self._scope.context != 0:
            raise ScopeError("subscribe reads a stream of the root scope; use loop.egress first")
        dataflow = self._scope.dataflow
        index = dataflow.graph.add_stage(
            name or f"subscribe{len(dataflow.subscriptions)}", StageKind.PROBE, 0, Collect, 1, []
        )
        dataflow.graph.connect(self.source.stage, self.source.port, index, 0)
        sub = Subscription(self._scope, index, fn)
        dataflow.subscriptions.append(sub)
        return sub


class _Bound:
    """A handle whose running side the runtime gives it when the computation starts."""

    _binding: Any = None

    def _attach(self, binding: Any) -> None:
        self._binding = binding

    def _bound(self) -> Any:
        binding = self._binding
        if binding is None:
            raise TimelyError(f"{self!r} is not running yet: start the computation with timely.execute")
        failure = binding.failure
        if failure is not None:
            raise ComputationFailed("the computation has failed") from failure
        return binding


class Input(Stream, _Bound):
    """A stream fed from outside the dataflow, epoch by epoch.

    ``send`` adds records to the current epoch; ``advance_to(e)`` promises that no more
    records with an earlier epoch will come; ``close`` promises no more records at all.
    In a computation with several processes each process feeds its own part.
    """

    def __init__(self, scope: Scope, stage: int) -> None:
        super().__init__(scope, stage, 0)
        self._binding: InputBinding | None = None
        self._throttle: tuple[Probe, int] | None = None

    def throttle(self, probe: Probe, epochs_ahead: int) -> None:
        """Hold this input to at most ``epochs_ahead`` epochs ahead of ``probe``.

        From synchronous code, `advance_to(e)` then runs the computation until the probe
        has passed epoch ``e - epochs_ahead - 1``, so a fast producer cannot run away from a
        slow dataflow. From async code, await ``comp.wait_passed(probe, e - epochs_ahead - 1)``.
        """
        if epochs_ahead < 0:
            raise ValueError("epochs_ahead must be >= 0")
        self._throttle = (probe, epochs_ahead)

    @property
    def name(self) -> str:
        return self.source_name

    @property
    def epoch(self) -> int:
        return self._bound().epoch  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        return self._bound().closed  # type: ignore[no-any-return]

    def send(self, records: Iterable[Any], count: int | None = None) -> None:
        """Add ``records`` to the current epoch. ``count``: how many records they stand for,
        when each is a batch of many (a library's block of columns); statistics and the
        console count that many (default: one a record)."""
        if count is None:
            self._bound().send(records)
            return
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"input {self.name!r}: count must be an int >= 0, not {count!r}")
        self._bound().send(records, count)

    def advance_to(self, epoch: int) -> None:
        self._bound().advance_to(epoch)

    def close(self) -> None:
        self._bound().close()

    def __repr__(self) -> str:
        return f"<Input {self.source_name!r}>"


class Probe(_Bound):
    """Tells which times can still reach a point of the dataflow."""

    def __init__(self, scope: Scope, stage: int) -> None:
        self._scope = scope
        self._stage = stage
        self._binding: ProbeBinding | None = None

    @property
    def name(self) -> str:
        return self._scope.dataflow.graph.stages[self._stage].name

    @property
    def scope(self) -> Scope:
        """The scope of the stream this probe watches (its times have that scope's depth)."""
        return self._scope

    def frontier(self) -> Antichain:
        """The earliest times that can still arrive here (empty: nothing more will)."""
        return self._bound().frontier()  # type: ignore[no-any-return]

    def passed(self, time: Timestamp | int) -> bool:
        """Nothing at or before ``time`` (an epoch, in the root scope) can arrive any more."""
        return not self.frontier().less_equal(as_time(time, self._scope.depth))

    def __repr__(self) -> str:
        return f"<Probe {self.name!r}>"


class Subscription(Probe):
    """A probe that also delivers the records of each completed time to a callback."""

    def __init__(self, scope: Scope, stage: int, fn: Callable[[Timestamp, list[Any]], object]) -> None:
        super().__init__(scope, stage)
        self.fn = fn


def as_time(time: Timestamp | int | tuple[int, ...], depth: int) -> Timestamp:
    """``time`` as a `Timestamp` of a scope ``depth`` loops deep: an int is an epoch (with every
    loop counter 0), a tuple is flat ``(epoch, counters...)``."""
    if isinstance(time, int):
        return Timestamp(time, (0,) * depth)
    if isinstance(time, Timestamp):
        return time
    return Timestamp(time[0], tuple(time[1:]))
