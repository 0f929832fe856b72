"""What every Pregel program has, whichever way it computes (`ProgramBase`: aggregators, the
missing-vertex policy, ``master_compute``), and the `Master` that ``master_compute`` sees between
supersteps. The two ways to compute build on it: `Program` with `PregelVertex`, one vertex at a
time (_vertex_engine.py), and `ArrayProgram` with `ArrayStep`, a worker's vertices as arrays
(_array_engine.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._aggregators import Aggregator
from ._errors import PregelError

__all__ = ["MISSING", "ON_MISSING_VERTEX", "Master", "ProgramBase"]

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
