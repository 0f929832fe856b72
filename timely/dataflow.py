"""Building a dataflow: scopes, streams, inputs, probes (the user's side of layer 3).

`build(scope)` receives the root `Scope`. Streams are the outputs of stages; calling
``stream.stage(...)`` (or a shortcut such as ``stream.map``) adds a stage that reads it.
Nothing runs while building; the runtime binds inputs and probes when the computation
starts, so handles created here work afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .errors import ComputationFailed, ScopeError, TimelyError
from .graph import GraphBuilder, StageKind
from .operators import Collect, Filter, FlatMap, Forward, Inspect, InspectBatch, Map, ProbeVertex
from .progress import Antichain, PathSummary
from .timestamp import Timestamp
from .vertex import Vertex

__all__ = ["Scope", "Stream", "Input", "Probe", "Subscription"]

Partition = Callable[[Any], int]
VertexFactory = Callable[[], Vertex]


class Scope:
    """Where stages are created: the root scope, or a `LoopContext` (a scope inside a loop)."""

    _builder: GraphBuilder
    _context: int
    _inputs: list[Input]
    _probes: list[Probe]
    _subscriptions: list[Subscription]

    def __init__(self) -> None:
        raise TypeError("scopes are made by timely: use the scope passed to build(scope)")

    _process_index: int
    _processes: int
    _workers: int

    @classmethod
    def _root(cls, process_index: int = 0, processes: int = 1, workers: int = 1) -> Scope:
        self = object.__new__(cls)
        self._process_index, self._processes, self._workers = process_index, processes, workers
        self._builder = GraphBuilder()
        self._context = 0
        self._inputs = []
        self._probes = []
        self._subscriptions = []
        return self

    @property
    def name(self) -> str:
        return self._builder.contexts[self._context].name

    @property
    def depth(self) -> int:
        """How many loop contexts enclose this scope."""
        return self._builder.contexts[self._context].depth

    @property
    def _root_scope(self) -> Scope:
        return self

    @property
    def process_index(self) -> int:
        """Which process is building (every process runs the same build: SPMD)."""
        return self._root_scope._process_index

    @property
    def processes(self) -> int:
        return self._root_scope._processes

    @property
    def peers(self) -> int:
        """Workers in the whole computation: processes times workers per process."""
        root = self._root_scope
        return root._processes * root._workers

    def new_input(self, name: str) -> Input:
        """An input fed from outside, epoch by epoch (only in the root scope)."""
        if self._context != 0:
            raise ScopeError(f"inputs belong to the root scope, not to loop {self.name!r}")
        index = self._builder.add_stage(name, StageKind.INPUT, 0, None, 0, [PathSummary.identity(0)])
        stream = Input(self, index)
        self._root_scope._inputs.append(stream)
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
            if s._scope._builder is not self._builder:
                raise ScopeError(f"stage {name!r}: a stream from another dataflow was given as input")
            if s._context != self._context:
                raise ScopeError(
                    f"stage {name!r} is in scope {self.name or '<root>'!r} but its input from "
                    f"{s._source_name!r} belongs to scope {s._scope_name or '<root>'!r}; "
                    "use LoopContext.ingress / egress to move streams between loops"
                )
        if callable(exchange) or exchange is None:
            partitions: list[Partition | None] = [exchange] * len(inputs)  # type: ignore[list-item]
        else:
            partitions = list(exchange)
        if not callable(factory):
            raise TypeError(f"stage {name!r}: factory must be a Vertex class or a callable making one")
        summaries = [PathSummary.identity(self.depth)] * outputs
        index = self._builder.add_stage(
            name, StageKind.VERTEX, self._context, factory, len(inputs), summaries, partitions
        )
        for port, s in enumerate(inputs):
            self._builder.connect(s._stage, s._port, index, port)
        streams = tuple(Stream(self, index, p) for p in range(outputs))
        return streams[0] if outputs == 1 else streams

    def concat(self, name: str, streams: Sequence[Stream]) -> Stream:
        """All records of all ``streams`` in one stream."""
        return self.stage(name, Forward, streams)  # type: ignore[no-any-return]


class Stream:
    """The records leaving one output of one stage, over time."""

    __slots__ = ("_port", "_scope", "_stage")

    def __init__(self, scope: Scope, stage: int, port: int = 0) -> None:
        self._scope = scope
        self._stage = stage
        self._port = port

    @property
    def _context(self) -> int:
        return self._scope._context

    @property
    def _scope_name(self) -> str:
        return self._scope.name

    @property
    def _source_name(self) -> str:
        return self._scope._builder.stages[self._stage].name

    @property
    def scope(self) -> Scope:
        return self._scope

    def __repr__(self) -> str:
        return f"<Stream from {self._source_name}[{self._port}]>"

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

    def concat(self, name: str, *others: Stream) -> Stream:
        return self._scope.concat(name, [self, *others])

    def inspect(self, name: str, fn: Callable[[Any], None]) -> Stream:
        """Call ``fn(record)`` for every record and pass the stream on."""
        return self.stage(name, lambda: Inspect(fn))  # type: ignore[no-any-return]

    def inspect_batch(self, name: str, fn: Callable[[Timestamp, list[Any]], None]) -> Stream:
        """Call ``fn(time, records)`` for every batch and pass the stream on."""
        return self.stage(name, lambda: InspectBatch(fn))  # type: ignore[no-any-return]

    def probe(self, name: str | None = None) -> Probe:
        """A handle that tells which times can still appear on this stream."""
        root = self._scope._root_scope
        index = self._scope._builder.add_stage(
            name or f"probe{len(root._probes)}", StageKind.PROBE, self._context, ProbeVertex, 1, []
        )
        self._scope._builder.connect(self._stage, self._port, index, 0)
        probe = Probe(self._scope, index)
        root._probes.append(probe)
        return probe

    def subscribe(self, fn: Callable[[Timestamp, list[Any]], None], name: str | None = None) -> Subscription:
        """Call ``fn(time, records)`` once per completed time that has records, in time order,
        with this process's records of that time (root scope only)."""
        if self._context != 0:
            raise ScopeError("subscribe reads a stream of the root scope; use loop.egress first")
        root = self._scope._root_scope
        index = self._scope._builder.add_stage(
            name or f"subscribe{len(root._subscriptions)}", StageKind.PROBE, 0, Collect, 1, []
        )
        self._scope._builder.connect(self._stage, self._port, index, 0)
        sub = Subscription(self._scope, index, fn)
        root._subscriptions.append(sub)
        return sub


class _Bound:
    """Something the runtime binds when the computation starts."""

    _binding: Any = None

    def _bound(self) -> Any:
        binding = self._binding
        if binding is None:
            raise TimelyError(f"{self!r} is not running yet: start the computation with timely.execute")
        if binding.runtime.failure is not None:
            raise ComputationFailed("the computation has failed") from binding.runtime.failure
        return binding


class Input(Stream, _Bound):
    """A stream fed from outside the dataflow, epoch by epoch.

    ``send`` adds records to the current epoch; ``advance_to(e)`` promises that no more
    records with an earlier epoch will come; ``close`` promises no more records at all.
    In a computation with several processes each process feeds its own part.
    """

    def __init__(self, scope: Scope, stage: int) -> None:
        super().__init__(scope, stage, 0)
        self._binding = None
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
        return self._source_name

    @property
    def epoch(self) -> int:
        return self._bound().epoch  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        return self._bound().closed  # type: ignore[no-any-return]

    def send(self, records: Iterable[Any]) -> None:
        self._bound().send(records)

    def advance_to(self, epoch: int) -> None:
        self._bound().advance_to(epoch)

    def close(self) -> None:
        self._bound().close()

    def __repr__(self) -> str:
        return f"<Input {self._source_name!r}>"


class Probe(_Bound):
    """Tells which times can still reach a point of the dataflow."""

    def __init__(self, scope: Scope, stage: int) -> None:
        self._scope = scope
        self._stage = stage
        self._binding = None

    @property
    def name(self) -> str:
        return self._scope._builder.stages[self._stage].name

    def frontier(self) -> Antichain:
        """The earliest times that can still arrive here (empty: nothing more will)."""
        return self._bound().frontier()  # type: ignore[no-any-return]

    def passed(self, time: Timestamp | int) -> bool:
        """Nothing at or before ``time`` (an epoch, in the root scope) can arrive any more."""
        return not self.frontier().less_equal(_as_time(time, self._scope.depth))

    def __repr__(self) -> str:
        return f"<Probe {self.name!r}>"


class Subscription(Probe):
    """A probe that also delivers the records of each completed time to a callback."""

    def __init__(self, scope: Scope, stage: int, fn: Callable[[Timestamp, list[Any]], None]) -> None:
        super().__init__(scope, stage)
        self.fn = fn


def _as_time(time: Timestamp | int | tuple[int, ...], depth: int) -> Timestamp:
    if isinstance(time, int):
        return Timestamp(time, (0,) * depth)
    if isinstance(time, Timestamp):
        return time
    return Timestamp(time[0], tuple(time[1:]))
