"""Programs computed one vertex at a time: `Program` (what the user writes), `PregelVertex`
(what its ``compute`` sees) and `VertexEngine` (one worker's share of a graph, computed), as
_array_engine.py has `ArrayProgram`, `ArrayStep` and its engine."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from timely import Codec, CodecError

from .._hash import stable_hash
from ._aggregators import Aggregator
from ._errors import PregelError
from ._program import MISSING, ProgramBase

__all__ = ["PregelVertex", "Program", "VertexEngine"]

# Mutation kinds, in the order they are applied (Pregel §4.5): edge removals, vertex
# removals, vertex additions, edge additions.
REMOVE_EDGE, REMOVE_VERTEX, ADD_VERTEX, ADD_EDGE = range(4)

_PLAIN = frozenset({float, str, bytes, bool, type(None)})
"""Types the codec always sends; everything else (ints included: 64 bits at most) is checked."""
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


class Program(ProgramBase):
    """A vertex program: override `compute`, or pass ``compute=`` (a function of the same
    signature) to the constructor.

    Class attributes (or constructor arguments) that shape the run:

    ``combine(a, b)``
        Combines two messages bound for the same vertex into one (commutative and
        associative). Messages are combined on the sending worker before they cross the
        network, and again on arrival, so ``compute`` sees at most one message per superstep.
    ``aggregators``
        Name to `Aggregator`; vertices contribute with ``vertex.aggregate(name, value)``.
    ``on_missing_vertex``
        What a message to a vertex that does not exist does: ``"error"`` (the default: the
        run fails with `PregelError`), ``"drop"`` (it is discarded) or ``"create"`` (the
        vertex is made with ``initial_value(id, None)`` and no edges, and receives it).
    """

    combine: Callable[[Any, Any], Any] | None = None

    def __init__(
        self,
        compute: Callable[[PregelVertex, list[Any]], None] | None = None,
        *,
        combine: Callable[[Any, Any], Any] | None = None,
        initial_value: Callable[[Any, Any], Any] | None = None,
        aggregators: Mapping[str, Aggregator] | None = None,
        on_missing_vertex: str | None = None,
    ) -> None:
        if compute is not None:
            self.compute = compute  # type: ignore[method-assign,assignment]
        if combine is not None:
            self.combine = combine
        if initial_value is not None:
            self.initial_value = initial_value  # type: ignore[method-assign,assignment]
        if aggregators is not None:
            self.aggregators = dict(aggregators)
        if on_missing_vertex is not None:
            self.on_missing_vertex = on_missing_vertex
        self.check()

    # What a program may override -----------------------------------------------------------
    def compute(self, vertex: PregelVertex, messages: list[Any]) -> None:
        """Superstep work for one vertex: read ``messages`` (sent to it in the previous
        superstep), update ``vertex.value``, send messages, vote to halt."""
        raise NotImplementedError(f"{type(self).__name__} must define compute(vertex, messages)")

    def initial_value(self, vertex_id: Any, value: Any) -> Any:
        """The value a vertex starts with, from the value it was loaded with (None for a vertex
        that only appears in edges or is created implicitly)."""
        return value

    def resolve_add_vertex(self, vertex_id: Any, current: Any, requested: list[Any]) -> Any:
        """The value of a vertex that ``add_vertex`` requests named in one superstep.

        ``current`` is its value if it exists (after this superstep's removals), else `MISSING`;
        ``requested`` holds the requested values in a fixed order (by requesting vertex, then
        the order of its requests), the same on any number of processes. By default an
        existing vertex keeps its value and a new one takes the first requested value.
        """
        return requested[0] if current is MISSING else current


class _Node:
    __slots__ = ("edges", "halted", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.edges: dict[Any, Any] = {}
        self.halted = False


class PregelVertex:
    """The vertex a `Program.compute` call works on. One object is reused for every vertex of a
    worker: keep ids and values, not the object."""

    __slots__ = ("_engine", "_node", "_seq", "id")

    def __init__(self, engine: VertexEngine) -> None:
        self._engine = engine
        self._node: _Node = None  # type: ignore[assignment]
        self._seq = 0
        self.id: Any = None

    @property
    def value(self) -> Any:
        return self._node.value

    @value.setter
    def value(self, value: Any) -> None:
        self._node.value = value

    @property
    def out_edges(self) -> dict[Any, Any]:
        """Target id to edge value (None for an edge loaded as ``(src, dst)``). Read it here;
        change edges with `add_edge` / `remove_edge`."""
        return self._node.edges

    @property
    def superstep(self) -> int:
        return self._engine.superstep

    @property
    def num_vertices(self) -> int:
        """Vertices in the whole graph at the end of the previous superstep, before its mutations
        and before vertices made for messages (after loading, in superstep 0)."""
        return self._engine.num_vertices

    def send(self, target: Any, message: Any) -> None:
        """Send ``message`` to vertex ``target``; it receives it in the next superstep."""
        engine = self._engine
        t = type(message)
        if t not in _PLAIN and not (t is int and _INT_MIN <= message <= _INT_MAX):
            engine.check_message(self.id, message)
        out = engine.outbox
        combine = engine.combine
        if combine is None:
            out.append((target, message))
        else:
            old = out.get(target, MISSING)
            out[target] = message if old is MISSING else combine(old, message)

    def send_to_all_neighbors(self, message: Any) -> None:
        """`send` ``message`` along every out-edge."""
        engine = self._engine
        t = type(message)
        if t not in _PLAIN and not (t is int and _INT_MIN <= message <= _INT_MAX):
            engine.check_message(self.id, message)
        out = engine.outbox
        combine = engine.combine
        if combine is None:
            out.extend([(t, message) for t in self._node.edges])
            return
        get = out.get
        for t in self._node.edges:
            old = get(t, MISSING)
            out[t] = message if old is MISSING else combine(old, message)

    def vote_to_halt(self) -> None:
        """Stay inactive until a message arrives."""
        self._node.halted = True

    def aggregate(self, name: str, value: Any) -> None:
        """Contribute ``value`` to aggregator ``name`` for this superstep."""
        self._engine.aggregate(name, value, self.id)

    def aggregated(self, name: str) -> Any:
        """Aggregator ``name``'s result from the previous superstep (its ``initial`` in superstep 0)."""
        try:
            return self._engine.aggregated[name]
        except KeyError:
            engine = self._engine
            raise PregelError(
                f"pregel {engine.name!r}: vertex {self.id!r} read aggregator {name!r} in superstep "
                f"{engine.superstep}, but the program has no aggregator of that name"
            ) from None

    # Graph mutations: requests, applied before the next superstep --------------------------
    def add_vertex(self, vertex_id: Any, value: Any = None) -> None:
        self._request(ADD_VERTEX, vertex_id, (vertex_id, value))

    def remove_vertex(self, vertex_id: Any = MISSING) -> None:
        """Remove ``vertex_id`` (by default this vertex) and its out-edges; edges that point at
        it stay, and messages along them meet ``on_missing_vertex``."""
        vertex_id = self.id if vertex_id is MISSING else vertex_id
        self._request(REMOVE_VERTEX, vertex_id, (vertex_id,))

    def add_edge(self, source: Any, target: Any, value: Any = None) -> None:
        """Add (or re-value) the edge; a missing ``source`` is created with ``initial_value(source, None)``."""
        self._request(ADD_EDGE, source, (source, target, value))

    def remove_edge(self, source: Any, target: Any) -> None:
        self._request(REMOVE_EDGE, source, (source, target))

    def _request(self, kind: int, owner: Any, args: tuple[Any, ...]) -> None:
        self._engine.check_message(self.id, args, "asked for a graph mutation with")
        self._seq += 1
        self._engine.mutations.append((owner, (kind, self.id, self._seq, args)))

    def __repr__(self) -> str:
        return f"<PregelVertex {self.id!r} value={self.value!r}>"


class VertexEngine:
    """One epoch's graph on one worker: vertices by id, their out-edges and halted flags."""

    def __init__(self, program: Program, peers: int, name: str) -> None:
        self.program = program
        self.peers = peers
        self.name = name
        self.combine = program.combine
        self.vertices: dict[Any, _Node] = {}
        self.superstep = -1
        self.num_vertices = 0
        self.aggregated: dict[str, Any] = {}
        self.outbox: Any = [] if self.combine is None else {}
        self.mutations: list[tuple[Any, tuple[Any, ...]]] = []
        self._partial: dict[str, Any] = {}
        self._codec = Codec()
        self._encodable: set[type] = set()

    # Loading ---------------------------------------------------------------------------------
    def load(self, vertex_records: list[Any], edge_records: list[Any]) -> None:
        initial = self._initial
        vertices = self.vertices
        for record in vertex_records:
            vid, value = record
            node = vertices.get(vid)
            if node is None:
                vertices[vid] = _Node(initial(vid, value))
            elif value is not None and node.value != initial(vid, value):
                raise PregelError(
                    f"pregel {self.name!r}: vertex {vid!r} was loaded twice, with values {node.value!r} and {value!r}"
                )
        for record in edge_records:
            if len(record) == 2:
                src, dst = record
                value = None
            else:
                src, dst, value = record
            node = vertices.get(src)
            if node is None:
                node = vertices[src] = _Node(initial(src, None))
            old = node.edges.get(dst, MISSING)
            if old is not MISSING and old != value:
                raise PregelError(
                    f"pregel {self.name!r}: edge {src!r} -> {dst!r} was loaded twice, with values {old!r} and {value!r}"
                )
            node.edges[dst] = value

    # One superstep ---------------------------------------------------------------------------
    def step(
        self, control: tuple[Any, ...], messages: list[Any], mutations: list[Any]
    ) -> tuple[dict[int, Any], dict[int, Any], tuple[Any, ...]]:
        """Apply ``mutations``, deliver ``messages``, compute every vertex that is active or has
        mail; returns (messages by worker, mutation requests by worker, partial for the master)."""
        _, self.superstep, self.num_vertices, self.aggregated = control
        self.apply(mutations)
        inbox = self._deliver(messages)
        self.outbox = [] if self.combine is None else {}
        self.mutations = []
        self._partial = {}
        handle = PregelVertex(self)
        compute = self.program.compute
        active = 0
        for vid, node in self.vertices.items():
            mail = inbox.pop(vid, None) if inbox else None
            if mail is None:
                if node.halted:
                    continue
                mail = []
            node.halted = False
            handle.id = vid
            handle._node = node
            handle._seq = 0
            try:
                compute(handle, mail)
            except PregelError:
                raise
            except Exception as exc:
                raise PregelError(
                    f"pregel {self.name!r}: compute raised {type(exc).__name__} on vertex {vid!r} "
                    f"in superstep {self.superstep}: {exc}"
                ) from exc
            if not node.halted:
                active += 1
        out = self.outbox
        sent = len(out)
        by_worker = self._split(out.items() if self.combine is not None else out)
        mutations_out = self._split(self.mutations)
        partial = (len(self.vertices), active, sent, len(self.mutations), self._partial)
        return by_worker, mutations_out, partial

    def finish(self, mutations: list[Any]) -> list[tuple[Any, Any]]:
        """The final values, after the last superstep's mutations."""
        self.apply(mutations)
        return [(vid, node.value) for vid, node in self.vertices.items()]

    def loaded(self) -> tuple[Any, ...]:
        return (len(self.vertices), len(self.vertices), 0, 0, {})

    # Pieces ------------------------------------------------------------------------------------
    def _split(self, pairs: Any) -> dict[int, list[Any]]:
        """``(key, item)`` pairs by the worker that owns ``key``."""
        peers = self.peers
        if peers == 1:
            items = list(pairs)
            return {0: items} if items else {}
        out: defaultdict[int, list[Any]] = defaultdict(list)
        for pair in pairs:
            out[stable_hash(pair[0]) % peers].append(pair)
        return out

    def _deliver(self, payloads: list[Any]) -> dict[Any, list[Any]]:
        inbox: dict[Any, Any] = {}
        combine = self.combine
        if combine is None:
            box: defaultdict[Any, list[Any]] = defaultdict(list)
            for payload in payloads:
                for target, message in payload:
                    box[target].append(message)
            inbox = box
        else:
            target = None
            try:
                for payload in payloads:
                    for target, message in payload:
                        old = inbox.get(target, MISSING)
                        inbox[target] = message if old is MISSING else combine(old, message)
            except Exception as exc:
                raise PregelError(
                    f"pregel {self.name!r}: combine raised {type(exc).__name__} on messages for vertex {target!r} "
                    f"in superstep {self.superstep}: {exc}"
                ) from exc
            inbox = {target: [message] for target, message in inbox.items()}
        vertices = self.vertices
        missing = [t for t in inbox if t not in vertices]
        if missing:
            policy = self.program.on_missing_vertex
            if policy == "error":
                shown = ", ".join(repr(t) for t in missing[:5]) + (" ..." if len(missing) > 5 else "")
                raise PregelError(
                    f"pregel {self.name!r}: superstep {self.superstep}: {len(missing)} message(s) sent in "
                    f"superstep {self.superstep - 1} to vertices that do not exist: {shown} "
                    "(set the program's on_missing_vertex to 'drop' or 'create' to allow this)"
                )
            for t in missing:
                if policy == "drop":
                    del inbox[t]
                else:
                    vertices[t] = _Node(self._initial(t, None))
        return inbox

    def aggregate(self, name: str, value: Any, vertex: Any) -> None:
        aggregator = self.program.aggregators.get(name)
        if aggregator is None:
            raise PregelError(
                f"pregel {self.name!r}: vertex {vertex!r} contributed to aggregator {name!r} in superstep "
                f"{self.superstep}, but the program has no aggregator of that name"
            )
        if type(value) not in _PLAIN:
            self.check_message(vertex, value, f"contributed to aggregator {name!r}")
        partial = self._partial
        old = partial.get(name, MISSING)
        partial[name] = value if old is MISSING else aggregator.merge(old, value)

    def check_message(self, sender: Any, message: Any, what: str = "sent") -> None:
        """Refuse, on any number of processes, what the codec could not send between them."""
        t = type(message)
        if t in self._encodable or t in _PLAIN:
            return
        if isinstance(message, (tuple, list, set, frozenset)):
            for part in message:
                self.check_message(sender, part, what)
            return
        if isinstance(message, dict):
            for key, value in message.items():
                self.check_message(sender, key, what)
                self.check_message(sender, value, what)
            return
        try:
            self._codec.encode(message)
        except CodecError as exc:
            raise PregelError(
                f"pregel {self.name!r}: vertex {sender!r} {what} {message!r} in superstep {self.superstep}, "
                f"which cannot be sent between processes ({exc}); send plain data, or register the type "
                "with timely.register_codec"
            ) from exc
        if t is not int:  # a registered type: one encodable instance vouches for the type
            self._encodable.add(t)

    def apply(self, payloads: list[Any]) -> None:
        """Apply mutation requests in Pregel's order, requests of one kind in a fixed order."""
        if not payloads:
            return
        requests = [request for payload in payloads for _, request in payload]
        requests.sort(key=_request_order)
        vertices = self.vertices
        additions: dict[Any, list[Any]] = {}
        for kind, _, _, args in requests:
            if kind == REMOVE_EDGE:
                node = vertices.get(args[0])
                if node is not None:
                    node.edges.pop(args[1], None)
            elif kind == REMOVE_VERTEX:
                vertices.pop(args[0], None)
            elif kind == ADD_VERTEX:
                additions.setdefault(args[0], []).append(args[1])
            else:
                if additions:
                    self._add_vertices(additions)
                    additions = {}
                src, dst, value = args
                node = vertices.get(src)
                if node is None:
                    node = vertices[src] = _Node(self._initial(src, None))
                node.edges[dst] = value
        if additions:
            self._add_vertices(additions)

    def _initial(self, vid: Any, value: Any) -> Any:
        try:
            return self.program.initial_value(vid, value)
        except PregelError:
            raise
        except Exception as exc:
            raise PregelError(
                f"pregel {self.name!r}: initial_value raised {type(exc).__name__} for vertex {vid!r}: {exc}"
            ) from exc

    def _add_vertices(self, additions: dict[Any, list[Any]]) -> None:
        vertices = self.vertices
        resolve = self.program.resolve_add_vertex
        for vid, requested in additions.items():
            node = vertices.get(vid)
            try:
                value = resolve(vid, MISSING if node is None else node.value, requested)
            except Exception as exc:
                raise PregelError(
                    f"pregel {self.name!r}: resolve_add_vertex raised {type(exc).__name__} for vertex {vid!r} "
                    f"before superstep {self.superstep}: {exc}"
                ) from exc
            if node is None:
                vertices[vid] = _Node(self._initial(vid, value))
            else:
                node.value = value


def _request_order(request: tuple[Any, ...]) -> tuple[Any, ...]:
    kind, requester, seq, _ = request
    return (kind, stable_hash(requester), repr(requester), seq)
