"""The logical dataflow graph (layer 2): building, validating, freezing, drawing. No asyncio."""

from .builder import GraphBuilder
from .frozen import FrozenGraph
from .specs import ConnectorSpec, ContextSpec, StageKind, StageSpec

__all__ = ["ConnectorSpec", "ContextSpec", "FrozenGraph", "GraphBuilder", "StageKind", "StageSpec"]
