"""The Pregel loop as timely stages (Naiad §4.2): one superstep per loop iteration.

    vertices, edges ──ingress──▶ superstep ──messages──▶ feedback ─┐
                                  ▲  │  └─mutations─▶ feedback ───┤ (next iteration)
                                  │  └─partials──▶ master ─control─▶ feedback ─┘
                                  └──────────────────────────────────────────────┘
                                 superstep ──results──▶ egress

Iteration 0 loads the graph; iteration i + 1 runs superstep i. The barrier between supersteps
is a notification: a worker computes superstep i once nothing of iteration i + 1 can still
arrive, so it has all its mail. The master (one vertex, on worker 0) merges every worker's
partial (vertex and message counts, aggregator contributions), runs the program's
``master_compute``, and sends every worker the control record for the next superstep: go
on with these aggregated values, or halt and emit your vertices' final values. Every worker
takes part in every superstep, so the master hears from all of them each time.

Checkpoints (Naiad §3.4): nothing outlives an epoch. Each epoch's graph is a separate run,
and an epoch is complete only once its run has halted, emitted its values and dropped its
engines; a checkpoint comes after every epoch it covers is complete and before anything of a
later epoch is delivered, so both stages have nothing to save (`checkpoint` returns None, and
a resumed computation may have any number of workers). A checkpoint taken while a run is still
in flight breaks that contract and is refused with a `PregelError`.
"""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from timely import LoopContext, Stream, Timestamp, Vertex

from .._hash import by_first
from ._array_engine import ArrayEngine, ArrayProgram
from ._errors import PregelError
from ._program import Master, ProgramBase
from ._vertex_engine import Program, VertexEngine

__all__ = ["SuperstepReport", "pregel"]

log = logging.getLogger("timely_libs.pregel")
LOG_EVERY = 5.0
"""Seconds between progress lines in the log (INFO) while a run goes on."""


@dataclass(frozen=True)
class SuperstepReport:
    """What the master knows after a superstep (superstep -1: the graph is loaded)."""

    name: str
    epoch: int
    superstep: int
    vertices: int
    active: int
    messages: int
    seconds: float
    """Since the master first heard of this epoch (the end of loading, for superstep -1)."""
    halting: bool


MESSAGES = 2
"""The superstep stage's first feedback input: inputs 0 and 1 take the vertices and the edges,
2, 3 and 4 the messages, the master's control records and the mutations, which arrive as
``(worker, payload)`` pairs."""
# The superstep stage's output ports.
OUT_MESSAGES, OUT_PARTIALS, OUT_MUTATIONS, OUT_RESULTS = range(4)


def pregel(
    program: ProgramBase | Callable[..., None],
    edges: Stream,
    vertices: Stream | None = None,
    *,
    max_supersteps: int | None = None,
    name: str = "pregel",
    progress: Callable[[SuperstepReport], None] | None = None,
    columns: bool = False,
) -> Stream:
    """Run ``program`` on the graph of each epoch; returns a stream of ``(vertex_id, value)``,
    the final values, at the epoch of the graph.

    ``edges`` carries ``(source, target)`` or ``(source, target, value)``; ``vertices``, if
    given, ``(vertex_id, value)``. Without ``vertices`` every endpoint of an edge is a vertex
    (loaded with value None). Both are streams of the root scope, each process feeding any
    share: records are routed to the worker that owns the vertex (by `stable_hash` of the
    id). Each epoch's graph is a separate run; epochs may overlap in time.

    ``program`` is a `Program`, an `ArrayProgram`, or a plain ``compute(vertex, messages)``
    function. The run ends when every vertex has voted to halt and no message or mutation is
    in flight, when ``master_compute`` halts it, or after ``max_supersteps`` supersteps.

    ``progress``, if given, is called with a `SuperstepReport` after loading and after every
    superstep, in the process that hosts worker 0; the logger ``timely_libs.pregel`` also says how
    a long run is going, every few seconds, at INFO.

    ``columns=True`` (an `ArrayProgram` only) takes and gives numpy arrays instead of a tuple
    per record, as columnar data comes (Arrow batches, Parquet): ``edges`` carries ``(src,
    dst)`` or ``(src, dst, value)`` tuples of arrays of one length, ``vertices`` ``(ids,)`` or
    ``(ids, values)``; each such block is cut by owning worker on the way in, and each
    worker's final values leave as one ``(ids, values)`` pair of arrays.
    """
    if not isinstance(program, ProgramBase):
        if not callable(program):
            raise TypeError(
                f"pregel: program must be a Program, an ArrayProgram or a compute function, got {program!r}"
            )
        program = Program(program)
    program.check()
    if max_supersteps is not None and max_supersteps < 1:
        raise PregelError(f"pregel {name!r}: max_supersteps must be at least 1, got {max_supersteps}")
    scope = edges.scope
    if scope.depth != 0 or (vertices is not None and vertices.scope.depth != 0):
        raise PregelError(f"pregel {name!r}: the graph streams must be in the root scope")
    if columns:
        if not isinstance(program, ArrayProgram):
            raise PregelError(f"pregel {name!r}: columns=True needs an ArrayProgram, got {type(program).__name__}")
        if vertices is None:
            vertices = edges.map(f"{name}.endpoints", partial(_endpoint_block, name))
        edges = edges.stage(f"{name}.edge_blocks", lambda: _ByOwner(name, "edges", 2))
        vertices = vertices.stage(f"{name}.vertex_blocks", lambda: _ByOwner(name, "vertices", 1))
        engine: Callable[..., Any] = partial(ArrayEngine, columns=True)
    elif isinstance(program, ArrayProgram):
        engine = ArrayEngine
    else:
        engine = VertexEngine
    if vertices is None:
        vertices = edges.flat_map(f"{name}.endpoints", _endpoints)

    loop = LoopContext(scope, name)
    v_in = loop.ingress(vertices, "vertices")
    e_in = loop.ingress(edges, "edges")
    messages = loop.feedback("messages")
    control = loop.feedback("control")
    mutations = loop.feedback("mutations")
    msgs_out, partials, muts_out, results = loop.stage(
        "superstep",
        lambda: _Superstep(program, engine, name),
        [v_in, e_in, messages.stream, control.stream, mutations.stream],
        exchange=[by_first, by_first, _by_worker, _by_worker, _by_worker],
        outputs=4,
    )
    control_out = loop.stage(
        "master", lambda: _Master(program, max_supersteps, name, progress), [partials], exchange=[_to_zero]
    )
    messages.connect(msgs_out)
    mutations.connect(muts_out)
    control.connect(control_out)
    return loop.egress(results, "results")


def _endpoints(edge: tuple[Any, ...]) -> tuple[tuple[Any, None], tuple[Any, None]]:
    return ((edge[0], None), (edge[1], None))


def _endpoint_block(name: str, block: Any) -> tuple[np.ndarray]:
    """A block of edges as the block of their ends' ids (``vertices`` when none are given)."""
    src, dst, *_ = _columns_of(name, "edges", 2, block)
    return (np.concatenate([src, dst]),)


def _columns_of(name: str, what: str, width: int, block: Any) -> list[np.ndarray]:
    """A block's columns, refused unless it is a tuple of at least ``width`` arrays of one
    length whose first (the ids) holds integers."""
    if not (isinstance(block, tuple) and len(block) >= width):
        raise PregelError(
            f"pregel {name!r}: with columns=True, {what} must be tuples of at least "
            f"{width} numpy arrays, got {type(block).__name__}"
        )
    columns = [np.asarray(c) for c in block]
    ids = columns[0]
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or any(c.shape != ids.shape for c in columns):
        raise PregelError(
            f"pregel {name!r}: {what} blocks need integer ids and columns of one length, got "
            f"dtypes {[str(c.dtype) for c in columns]} and shapes {[c.shape for c in columns]}"
        )
    return columns


class _ByOwner(Vertex):
    """Cuts each block of columns (a tuple of arrays, the first the vertex ids) into one
    ``(worker, block)`` record per worker that owns some of its ids: worker ``id % peers``,
    as the exchange routes an int key (`stable_hash` of an int is the int). The record's key
    is the worker's index, so ``by_first`` takes it straight there."""

    def __init__(self, name: str, what: str, width: int) -> None:
        self.name = name
        self.what = what
        self.width = width

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        out = []
        for block in records:
            columns = _columns_of(self.name, self.what, self.width, block)
            owner = columns[0] % self.peers
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(self.peers + 1))
            for w in range(self.peers):
                if bounds[w + 1] > bounds[w]:
                    part = order[bounds[w] : bounds[w + 1]]
                    out.append((w, tuple(c[part] for c in columns)))
        if out:
            self.send_by(self.outputs[0], out, time)


def _by_worker(record: tuple[int, Any]) -> int:
    return record[0]


def _to_zero(record: Any) -> int:
    return 0


class _Superstep(Vertex):
    """A worker's vertices: loads its share of each epoch's graph, runs its supersteps."""

    def __init__(self, program: ProgramBase, engine: Callable[[ProgramBase, int, str], Any], name: str) -> None:
        self.program = program
        self.make_engine = engine
        self.name = name
        self.inboxes: dict[Timestamp, list[list[Any]]] = {}
        self.engines: dict[int, Any] = {}

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        box = self.inboxes.get(time)
        if box is None:
            box = self.inboxes[time] = [[], [], [], [], []]
            self.notify_at(time)
        if edge >= MESSAGES:
            box[edge].extend([payload for _, payload in records])
        else:
            box[edge].extend(records)

    def on_notify(self, time: Timestamp) -> None:
        vertices, edges, messages, control, mutations = self.inboxes.pop(time)
        epoch = time.epoch
        engine = self.engines.get(epoch)
        if engine is None:
            engine = self.engines[epoch] = self.make_engine(self.program, self.peers, self.name)
        if not control:  # iteration 0: the graph arrives
            engine.load(vertices, edges)
            self.send_by(self.outputs[OUT_PARTIALS], [(0, engine.loaded())], time)
            return
        if control[0][0]:  # halt
            del self.engines[epoch]
            self.send_by(self.outputs[OUT_RESULTS], engine.finish(mutations), time)
            return
        by_worker, mutations_out, partial = engine.step(control[0], messages, mutations)
        if by_worker:
            self.send_by(self.outputs[OUT_MESSAGES], list(by_worker.items()), time)
        if mutations_out:
            self.send_by(self.outputs[OUT_MUTATIONS], list(mutations_out.items()), time)
        self.send_by(self.outputs[OUT_PARTIALS], [(0, partial)], time)

    def state_size(self) -> tuple[int, int]:
        """The vertices this worker holds in its running supersteps, and the bytes of their
        arrays (the array engine's; the vertex engine's objects are counted as rows only)."""
        rows = nbytes = 0
        for engine in self.engines.values():
            rows += engine.loaded()[0]
            nbytes += sum(a.nbytes for a in getattr(engine, "__dict__", {}).values() if isinstance(a, np.ndarray))
        return rows, nbytes

    def checkpoint(self) -> None:
        """None: every run a checkpoint covers has ended (see the module's docstring)."""
        _idle(self.name, "superstep", {t.epoch for t in self.inboxes} | set(self.engines))


def _idle(name: str, stage: str, epochs: set[int]) -> None:
    """Refuse a checkpoint while the runs of ``epochs`` are in flight (it would lose them)."""
    if epochs:
        raise PregelError(
            f"pregel {name!r}: checkpoint() of the {stage} stage while the run(s) of epoch(s) "
            f"{sorted(epochs)} are in flight; a checkpoint must come after every epoch it covers is complete"
        )


class _Master(Vertex):
    """Worker 0's instance merges the partials of each superstep and decides what comes next."""

    def __init__(
        self,
        program: ProgramBase,
        max_supersteps: int | None,
        name: str,
        progress: Callable[[SuperstepReport], None] | None,
    ) -> None:
        self.program = program
        self.max_supersteps = max_supersteps
        self.name = name
        self.progress = progress
        self.started: dict[int, float] = {}
        self.logged = _time.monotonic()
        self.partials: dict[Timestamp, list[Any]] = {}
        self.last: dict[int, dict[str, Any]] = {}
        """Per epoch, the aggregated values sent with the last control record (for persistent aggregators)."""

    def on_recv(self, edge: int, records: list[Any], time: Timestamp) -> None:
        box = self.partials.get(time)
        if box is None:
            box = self.partials[time] = []
            self.notify_at(time)
        box.extend([partial for _, partial in records])

    def on_notify(self, time: Timestamp) -> None:
        partials = self.partials.pop(time)
        aggregators = self.program.aggregators
        last = self.last.get(time.epoch, {})
        merged = {key: last[key] for key, agg in aggregators.items() if agg.persistent and key in last}
        vertices = active = sent = mutations = 0
        for n, a, m, k, contributions in partials:
            vertices += n
            active += a
            sent += m
            mutations += k
            for key, value in contributions.items():
                merged[key] = aggregators[key].merge(merged[key], value) if key in merged else value
        aggregated = {key: merged.get(key, agg.initial) for key, agg in aggregators.items()}
        iteration = time.counters[-1]
        if iteration == 0:  # loaded: superstep 0 comes next
            halt, superstep = vertices == 0, 0
        else:
            superstep = iteration - 1
            master = Master(superstep, vertices, active, sent, aggregated)
            try:
                self.program.master_compute(master)
            except PregelError:
                raise
            except Exception as exc:
                raise PregelError(
                    f"pregel {self.name!r}: master_compute raised {type(exc).__name__} after superstep "
                    f"{superstep}: {exc}"
                ) from exc
            superstep += 1
            halt = (
                master.halted
                or (self.max_supersteps is not None and superstep >= self.max_supersteps)
                or (active == 0 and sent == 0 and mutations == 0)
            )
        self._report(time.epoch, superstep - 1, vertices, active, sent, halt)
        if halt:
            self.last.pop(time.epoch, None)
        else:
            self.last[time.epoch] = aggregated
        record = (halt, superstep, vertices, aggregated)
        self.send_by(self.outputs[0], [(w, record) for w in range(self.peers)], time)

    def checkpoint(self) -> None:
        """None: every run a checkpoint covers has ended (see the module's docstring)."""
        _idle(self.name, "master", {t.epoch for t in self.partials} | set(self.last) | set(self.started))

    def _report(self, epoch: int, superstep: int, vertices: int, active: int, sent: int, halt: bool) -> None:
        now = _time.monotonic()
        started = self.started.setdefault(epoch, now)
        if halt:
            del self.started[epoch]
        report = SuperstepReport(self.name, epoch, superstep, vertices, active, sent, now - started, halt)
        if self.progress is not None:
            self.progress(report)
        if halt or now - self.logged >= LOG_EVERY:
            self.logged = now
            log.info(
                "pregel %r epoch %d: superstep %d done after %.1f s: %d vertices, %d active, %d messages%s",
                self.name,
                epoch,
                superstep,
                report.seconds,
                vertices,
                active,
                sent,
                " (halting)" if halt else "",
            )
