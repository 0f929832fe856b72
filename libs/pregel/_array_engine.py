"""Vectorised programs: a worker's vertices as numpy arrays, computed all at once.

Per-vertex Python (`Program`) costs about a microsecond per vertex and per message; PageRank
on a million edges then takes seconds per superstep. An `ArrayProgram` states the same
superstep over arrays (values, combined messages, out-degrees), and messages travel as one
``(ids, values)`` pair of arrays per destination worker, combined with a numpy ufunc
(``np.add``, ``np.minimum``, ``np.maximum``) before they leave. Ids must be integers.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from timely import register_codec

from ._errors import PregelError
from ._program import ProgramBase

__all__ = ["ArrayEngine", "ArrayProgram", "ArrayStep"]


def _encode_array(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    if a.dtype.hasobject:
        raise TypeError("numpy arrays of Python objects cannot be sent")
    return (a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes())


def _decode_array(v: tuple[str, tuple[int, ...], bytes]) -> np.ndarray:
    dtype, shape, data = v
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


register_codec(np.ndarray, _encode_array, _decode_array)


class ArrayProgram(ProgramBase):
    """A program whose `compute` runs once per worker and superstep, on `ArrayStep` arrays.

    ``combine`` is the ufunc that merges messages to one vertex; ``message_identity`` the
    value of "no message" (by default the ufunc's identity: 0 for ``np.add``, +inf / -inf for
    ``np.minimum`` / ``np.maximum``). ``on_missing_vertex`` may be ``"error"`` or ``"drop"``.
    Graph mutation is for `Program`s only.
    """

    value_dtype: Any = np.float64
    message_dtype: Any = np.float64
    combine: np.ufunc = np.add
    message_identity: Any = None

    def check(self) -> None:
        super().check()
        if self.on_missing_vertex == "create":
            raise PregelError(f"{type(self).__name__}: an ArrayProgram cannot create vertices; use 'error' or 'drop'")
        if not isinstance(self.combine, np.ufunc):
            raise PregelError(f"{type(self).__name__}: combine must be a numpy ufunc such as np.add")

    def initial_values(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The starting values, from those loaded (NaN or 0 where a vertex came without one)."""
        return values

    def compute(self, step: ArrayStep) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define compute(step)")

    def identity(self) -> Any:
        if self.message_identity is not None:
            return self.message_identity
        dtype = np.dtype(self.message_dtype)
        big = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
        if self.combine is np.minimum:
            return big
        if self.combine is np.maximum:
            return -big if dtype.kind == "f" else np.iinfo(dtype).min
        if self.combine.identity is None:
            raise PregelError(f"{type(self).__name__}: set message_identity for combine={self.combine.__name__}")
        return self.combine.identity


class ArrayStep:
    """One superstep on one worker. ``values`` may be changed in place or replaced; ``active``
    marks the vertices a per-vertex program would compute (not halted, or with mail): a
    program that must leave the others alone masks with it."""

    def __init__(self, engine: ArrayEngine, superstep: int, num_vertices: int, aggregated: dict[str, Any]) -> None:
        self._engine = engine
        self.superstep = superstep
        self.num_vertices = num_vertices
        self._aggregated = aggregated
        self.ids: np.ndarray = engine.ids
        self.messages: np.ndarray = engine.messages
        self.has_message: np.ndarray = engine.has_message
        self.active: np.ndarray = ~engine.halted
        self.out_degree: np.ndarray = engine.out_degree

    @property
    def values(self) -> np.ndarray:
        return self._engine.values

    @values.setter
    def values(self, values: Any) -> None:
        engine = self._engine
        values = np.asarray(values, dtype=engine.program.value_dtype)
        if values.shape != engine.ids.shape:
            raise PregelError(f"values must have shape {engine.ids.shape}, got {values.shape}")
        engine.values = values

    @property
    def edge_values(self) -> np.ndarray | None:
        """The value of each out-edge (CSR order: by source, then target), if edges had values."""
        return self._engine.edge_values

    def send_to_all_neighbors(self, messages: np.ndarray) -> None:
        """Vertex i sends ``messages[i]`` along each of its out-edges."""
        self._engine.send_along_edges(np.asarray(messages, dtype=self._engine.program.message_dtype))

    def send(self, targets: np.ndarray, messages: np.ndarray) -> None:
        """Send ``messages[k]`` to vertex id ``targets[k]``, for every k."""
        engine = self._engine
        engine.send(np.asarray(targets, dtype=np.int64), np.asarray(messages, dtype=engine.program.message_dtype))

    def vote_to_halt(self, which: np.ndarray | None = None) -> None:
        """Halt the vertices where ``which`` is true (all of them without it)."""
        if which is None:
            self._engine.halted[:] = True
        else:
            self._engine.halted |= which

    def aggregate(self, name: str, value: Any) -> None:
        self._engine.aggregate(name, value, self.superstep)

    def aggregated(self, name: str) -> Any:
        try:
            return self._aggregated[name]
        except KeyError:
            raise PregelError(
                f"pregel {self._engine.name!r}: superstep {self.superstep} read aggregator {name!r}, "
                "but the program has no aggregator of that name"
            ) from None


class ArrayEngine:
    """One epoch's graph on one worker: sorted ids, values, CSR out-edges."""

    def __init__(self, program: ArrayProgram, peers: int, name: str, columns: bool = False) -> None:
        self.program = program
        self.peers = peers
        self.name = name
        self.columns = columns
        """The graph arrives as ``(worker, arrays)`` blocks and the values leave as arrays."""
        self.ids = np.empty(0, np.int64)
        self.values = np.empty(0, program.value_dtype)
        self.halted = np.zeros(0, bool)
        self.indptr = np.zeros(1, np.int64)
        self.targets = np.empty(0, np.int64)
        self.edge_values: np.ndarray | None = None
        self.out_degree = np.empty(0, np.int64)
        self.messages = np.empty(0, program.message_dtype)
        self.has_message = np.zeros(0, bool)
        self._plan: tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int]]] | None = None
        self._outbox: list[tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]] | None]] = []
        """What this superstep sent: (targets, messages, per-worker slices if already combined)."""
        self._partial: dict[str, Any] = {}

    # Loading ---------------------------------------------------------------------------------
    def load(self, vertex_records: list[Any], edge_records: list[Any]) -> None:
        if self.columns:
            self._load_arrays(vertex_records, edge_records)
            return
        widths = set(map(len, edge_records))
        width = widths.pop() if len(widths) == 1 else 2
        if widths:
            raise PregelError(
                f"pregel {self.name!r}: an ArrayProgram needs edges all of the form (src, dst) or all (src, dst, value)"
            )
        ends = chain.from_iterable(edge_records) if width == 2 else chain.from_iterable(r[:2] for r in edge_records)
        _check_integers(self.name, chain((r[0] for r in vertex_records), ends))
        try:
            vids = np.fromiter([r[0] for r in vertex_records], dtype=np.int64, count=len(vertex_records))
            vvals = np.array([np.nan if r[1] is None else r[1] for r in vertex_records], dtype=np.float64).astype(
                self.program.value_dtype, copy=False
            )
            flat = chain.from_iterable(edge_records)
            table = np.fromiter(flat, dtype=np.float64 if width == 3 else np.int64, count=width * len(edge_records))
            table = table.reshape(-1, width)
            src, dst = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise PregelError(
                f"pregel {self.name!r}: an ArrayProgram needs integer vertex ids that fit in 64 bits ({exc})"
            ) from exc
        self._build(vids, vvals, src, dst, table[:, 2] if width == 3 else None)

    def _load_arrays(self, vertex_blocks: list[Any], edge_blocks: list[Any]) -> None:
        """The graph from ``(worker, arrays)`` blocks (``pregel(columns=True)``): no Python
        object per vertex or edge."""
        vertex_cols = [cols for _, cols in vertex_blocks]
        edge_cols = [cols for _, cols in edge_blocks]
        widths = {len(c) for c in edge_cols}
        if len(widths) > 1 or widths - {2, 3}:
            raise PregelError(
                f"pregel {self.name!r}: an ArrayProgram needs edges all of the form (src, dst) or all (src, dst, value)"
            )
        vids = _joined([c[0] for c in vertex_cols], np.int64)
        vvals = np.full(len(vids), np.nan)
        if any(len(c) > 1 for c in vertex_cols):
            vvals = _joined([c[1] if len(c) > 1 else np.full(len(c[0]), np.nan) for c in vertex_cols], np.float64)
        src = _joined([c[0] for c in edge_cols], np.int64)
        dst = _joined([c[1] for c in edge_cols], np.int64)
        values = _joined([c[2] for c in edge_cols], np.float64) if widths == {3} else None
        self._build(vids, vvals.astype(self.program.value_dtype, copy=False), src, dst, values)

    def _build(
        self, vids: np.ndarray, vvals: np.ndarray, src: np.ndarray, dst: np.ndarray, edge_values: np.ndarray | None
    ) -> None:
        """Sorted ids, initial values and CSR out-edges from the loaded arrays."""
        ids, first = np.unique(np.concatenate([vids, src]), return_index=True)
        values = np.zeros(len(ids), vvals.dtype)
        if np.issubdtype(values.dtype, np.floating):
            values[:] = np.nan
        from_vertices = first < len(vids)
        values[from_vertices] = vvals[first[from_vertices]]
        # dedupe edges, sorted by source position then target: CSR order
        spos = np.searchsorted(ids, src)
        spos, dst, order = _unique_edges(spos, dst)
        if edge_values is not None:
            self.edge_values = edge_values[order]
        self.ids = ids
        self.values = np.asarray(self.program.initial_values(ids, values), dtype=self.program.value_dtype)
        self.halted = np.zeros(len(ids), bool)
        self.out_degree = np.bincount(spos, minlength=len(ids)).astype(np.int64)
        self.indptr = np.concatenate([[0], np.cumsum(self.out_degree)])
        self.targets = dst.astype(np.int64)
        self._plan = None

    def loaded(self) -> tuple[Any, ...]:
        n = len(self.ids)
        return (n, n, 0, 0, {})

    # One superstep ---------------------------------------------------------------------------
    def step(
        self, control: tuple[Any, ...], messages: list[Any], mutations: list[Any]
    ) -> tuple[dict[int, Any], dict[int, Any], tuple[Any, ...]]:
        _, superstep, num_vertices, aggregated = control
        if mutations:
            raise PregelError(f"pregel {self.name!r}: an ArrayProgram cannot mutate the graph")
        self._deliver(messages, superstep)
        self.halted[self.has_message] = False
        self._outbox = []
        self._partial = {}
        step = ArrayStep(self, superstep, num_vertices, aggregated)
        try:
            self.program.compute(step)
        except PregelError:
            raise
        except Exception as exc:
            raise PregelError(
                f"pregel {self.name!r}: compute raised {type(exc).__name__} in superstep {superstep}: {exc}"
            ) from exc
        out, sent = self._flush()
        active = int(len(self.halted) - np.count_nonzero(self.halted))
        return out, {}, (len(self.ids), active, sent, 0, self._partial)

    def finish(self, mutations: list[Any]) -> list[Any]:
        if self.columns:
            return [(self.ids, self.values)] if len(self.ids) else []
        return list(zip(self.ids.tolist(), self.values.tolist(), strict=True))

    # Messages --------------------------------------------------------------------------------
    def _deliver(self, payloads: list[Any], superstep: int) -> None:
        program = self.program
        n = len(self.ids)
        self.messages = messages = np.full(n, program.identity(), dtype=program.message_dtype)
        self.has_message = has = np.zeros(n, bool)
        combine = program.combine
        for targets, values in payloads:
            if len(targets) == 0:
                continue
            pos = np.searchsorted(self.ids, targets)
            np.minimum(pos, n - 1, out=pos)
            found = self.ids[pos] == targets if n else np.zeros(len(targets), bool)
            if not found.all():
                if program.on_missing_vertex == "error":
                    missing = targets[~found][:5].tolist()
                    raise PregelError(
                        f"pregel {self.name!r}: superstep {superstep}: {int((~found).sum())} message(s) sent in "
                        f"superstep {superstep - 1} to vertices that do not exist: {missing} "
                        "(set the program's on_missing_vertex to 'drop' to allow this)"
                    )
                pos, values = pos[found], values[found]
            combine.at(messages, pos, values)
            has[pos] = True

    def send_along_edges(self, per_vertex: np.ndarray) -> None:
        if per_vertex.shape != self.ids.shape:
            raise PregelError(f"send_to_all_neighbors needs one message per vertex, shape {self.ids.shape}")
        sources, targets, starts, slices = self._edge_plan()
        combined = self.program.combine.reduceat(per_vertex[sources], starts) if len(starts) else per_vertex[:0]
        self._outbox.append((targets, combined, slices))

    def send(self, targets: np.ndarray, messages: np.ndarray) -> None:
        if targets.shape != messages.shape:
            raise PregelError(f"send: {targets.shape[0]} targets but {messages.shape[0]} messages")
        self._outbox.append((targets, messages, None))

    def _edge_plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
        """The sources of the edges sorted by (destination worker, target), each distinct target,
        where its run of edges starts, and each worker's range of targets: computed once per
        graph, reused by every superstep."""
        if self._plan is None:
            edge_src = np.repeat(np.arange(len(self.ids)), self.out_degree)
            order, starts, slices = _group(self.targets, self.peers)
            self._plan = (edge_src[order], self.targets[order][starts], starts, slices)
        return self._plan

    def _flush(self) -> tuple[dict[int, Any], int]:
        """Group what was sent by destination worker, combining messages to the same vertex."""
        chunks = self._outbox
        if not chunks:
            return {}, 0
        if len(chunks) == 1 and chunks[0][2] is not None:  # one send_to_all_neighbors: grouped already
            targets, values, slices = chunks[0]
        else:
            targets = np.concatenate([c[0] for c in chunks])
            values = np.concatenate([c[1] for c in chunks])
            order, starts, slices = _group(targets, self.peers)
            values = self.program.combine.reduceat(values[order], starts) if len(starts) else values
            targets = targets[order][starts]
        assert slices is not None
        return {w: (targets[lo:hi], values[lo:hi]) for w, lo, hi in slices}, len(targets)

    def aggregate(self, name: str, value: Any, superstep: int) -> None:
        aggregator = self.program.aggregators.get(name)
        if aggregator is None:
            raise PregelError(
                f"pregel {self.name!r}: superstep {superstep} contributed to aggregator {name!r}, "
                "but the program has no aggregator of that name"
            )
        if isinstance(value, np.generic):
            value = value.item()
        old = self._partial.get(name, _NONE)
        self._partial[name] = value if old is _NONE else aggregator.merge(old, value)


_NONE: Any = object()


def _group(targets: np.ndarray, peers: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """Sort by (worker, target): the order, where each distinct target's run starts (in sorted
    order), and per worker the (worker, first, end) range of its distinct targets."""
    workers = targets % peers
    order = np.lexsort((targets, workers))
    t = targets[order]
    change = np.ones(len(t), bool)
    change[1:] = t[1:] != t[:-1]
    starts = np.flatnonzero(change)
    bounds = np.searchsorted(workers[order][starts], np.arange(peers + 1))
    return order, starts, [(k, int(bounds[k]), int(bounds[k + 1])) for k in range(peers) if bounds[k + 1] > bounds[k]]


def _joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.empty(0, dtype)


def _check_integers(name: str, ids: Any) -> None:
    """Refuse ids that numpy would silently turn into integers (0.5, True, "12")."""
    bad = [t for t in set(map(type, ids)) if t is bool or not issubclass(t, (int, np.integer))]
    if bad:
        raise PregelError(
            f"pregel {name!r}: an ArrayProgram needs integer vertex ids, got {', '.join(t.__name__ for t in bad)}"
        )


def _unique_edges(spos: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (source position, target) pairs sorted by both, and where each came from."""
    if len(dst) == 0:
        return spos, dst, np.zeros(0, np.int64)
    low, high = int(dst.min()), int(dst.max())
    span = high - low + 1
    if span * (int(spos.max()) + 1) < 1 << 62:  # one int64 key per edge: a 1-D unique, much faster
        _, order = np.unique(spos * span + (dst - low), return_index=True)
        return spos[order], dst[order], order
    pairs, order = np.unique(np.stack([spos, dst], axis=1), axis=0, return_index=True)
    return pairs[:, 0], pairs[:, 1], order
