"""What a graph is made of: loop contexts, stages and connectors, as plain records.

`GraphBuilder` creates them while the dataflow is built and `FrozenGraph` reads them once it
is sealed; both import them from here, so neither depends on the other's module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..progress import PathSummary

__all__ = ["ConnectorSpec", "ContextSpec", "StageKind", "StageSpec"]


class StageKind:
    """What a stage is, for the runtime and for drawing the graph."""

    VERTEX = "vertex"
    INPUT = "input"
    INGRESS = "ingress"
    EGRESS = "egress"
    FEEDBACK = "feedback"
    PROBE = "probe"


@dataclass
class ContextSpec:
    """A loop context (or the root scope, index 0, depth 0)."""

    index: int
    name: str  # full dotted name; "" for the root
    parent: int | None
    depth: int


@dataclass
class StageSpec:
    index: int
    name: str  # full dotted name, e.g. "cc.loop.min"
    kind: str
    context: int  # the context whose times the stage holds
    factory: Callable[[], Any] | None
    inputs: int
    output_summaries: list[PathSummary]  # one per output port
    partitions: list[Callable[[Any], int] | None] = field(default_factory=list)
    depth: int = 0  # loop depth of the times the stage holds


@dataclass
class ConnectorSpec:
    index: int
    source: int  # stage index
    source_port: int
    target: int  # stage index
    target_port: int
    depth: int  # loop depth of the times carried
    partition: Callable[[Any], int] | None
