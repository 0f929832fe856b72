"""What a Pregel program is: `Program` (compute one vertex at a time, in Python) and the
`Master` a program's ``master_compute`` sees between supersteps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._aggregators import Aggregator
from ._errors import PregelError

if TYPE_CHECKING:
    from ._vertex_engine import PregelVertex

__all__ = ["MISSING", "ON_MISSING_VERTEX", "Master", "Program", "ProgramBase"]

ON_MISSING_VERTEX = ("error", "drop", "create")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""``current`` in `Program.resolve_add_vertex` when the vertex does not exist."""


class ProgramBase:
    """What every program has, whichever way it computes: aggregators, the missing-vertex
    policy and the master compute."""

    aggregators: Mapping[str, Aggregator] = {}
    on_missing_vertex: str = "error"

    def check(self) -> None:
        """Refuse a program that cannot run, before the dataflow starts."""
        if self.on_missing_vertex not in ON_MISSING_VERTEX:
            raise PregelError(
                f"{type(self).__name__}: on_missing_vertex must be one of {ON_MISSING_VERTEX}, "
                f"got {self.on_missing_vertex!r}"
            )
        for name, agg in self.aggregators.items():
            if not isinstance(agg, Aggregator):
                raise PregelError(f"{type(self).__name__}: aggregator {name!r} is {agg!r}, not an Aggregator")

    def master_compute(self, master: Master) -> None:
        """Runs once between supersteps, after all of superstep ``master.superstep``: read and
        set aggregated values, or `Master.halt` the program."""


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


class Master:
    """What ``master_compute`` sees after superstep `superstep` has ended everywhere."""

    def __init__(
        self,
        superstep: int,
        num_vertices: int,
        active_vertices: int,
        messages_sent: int,
        aggregated: dict[str, Any],
    ) -> None:
        self.superstep = superstep
        self.num_vertices = num_vertices
        """Vertices at the end of the superstep, on all workers."""
        self.active_vertices = active_vertices
        """Vertices that did not vote to halt."""
        self.messages_sent = messages_sent
        """Messages sent in the superstep, counted after combining on the sending worker."""
        self._aggregated = aggregated
        self.halted = False

    def aggregated(self, name: str) -> Any:
        """The merged contributions to aggregator ``name`` in this superstep."""
        try:
            return self._aggregated[name]
        except KeyError:
            raise PregelError(
                f"master_compute after superstep {self.superstep} read aggregator {name!r}, "
                "but the program has no aggregator of that name"
            ) from None

    def set_aggregated(self, name: str, value: Any) -> None:
        """Replace what vertices read from aggregator ``name`` in the next superstep."""
        if name not in self._aggregated:
            raise PregelError(
                f"master_compute after superstep {self.superstep} set aggregator {name!r}, "
                "but the program has no aggregator of that name"
            )
        self._aggregated[name] = value

    def halt(self) -> None:
        """End the program after this superstep (pending mutations are still applied)."""
        self.halted = True
