"""The logical dataflow graph (layer 2): building, validating, freezing, drawing. No asyncio."""

from .builder import ConnectorSpec, ContextSpec, GraphBuilder, StageKind, StageSpec
from .frozen import FrozenGraph

__all__ = ["ConnectorSpec", "ContextSpec", "FrozenGraph", "GraphBuilder", "StageKind", "StageSpec"]
