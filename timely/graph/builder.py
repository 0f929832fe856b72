"""The logical dataflow graph while it is being built: stages, ports, connectors, loop contexts.

This layer knows nothing about vertices' code or about running: a stage is a name, a
place (its loop context), a kind, ports and, per output port, the path summary from the
times the stage holds to the times it sends. `GraphBuilder.freeze` validates the graph and
turns it into a `FrozenGraph` with locations and could-result-in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CycleError, GraphError
from ..progress import PathSummary
from .frozen import FrozenGraph
from .specs import ConnectorSpec, ContextSpec, StageKind, StageSpec

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Collects stages and connectors; `freeze` checks and seals the graph."""

    def __init__(self) -> None:
        self.contexts: list[ContextSpec] = [ContextSpec(0, "", None, 0)]
        self.stages: list[StageSpec] = []
        self.connectors: list[ConnectorSpec] = []
        self._names: set[str] = set()
        self.frozen = False

    def add_context(self, parent: int, name: str) -> int:
        self._check_open()
        p = self.contexts[parent]
        full = _join(p.name, name)
        if full in self._names:
            raise GraphError(f"the name {full!r} is already used")
        self._names.add(full)
        index = len(self.contexts)
        self.contexts.append(ContextSpec(index, full, parent, p.depth + 1))
        return index

    def add_stage(
        self,
        name: str,
        kind: str,
        context: int,
        factory: Callable[[], Any] | None,
        inputs: int,
        output_summaries: list[PathSummary],
        partitions: list[Callable[[Any], int] | None] | None = None,
        depth: int | None = None,
    ) -> int:
        """Add a stage; its index. ``depth``: the loop depth of the times it holds, when not its
        context's (an ingress holds the enclosing scope's times)."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise GraphError(f"a stage needs a non-empty name, got {name!r}")
        full = _join(self.contexts[context].name, name)
        if full in self._names:
            raise GraphError(f"the stage name {full!r} is already used; stage names must be unique")
        self._names.add(full)
        partitions = list(partitions) if partitions is not None else [None] * inputs
        if len(partitions) != inputs:
            raise GraphError(f"stage {full!r}: {len(partitions)} partition functions for {inputs} inputs")
        index = len(self.stages)
        if depth is None:
            depth = self.contexts[context].depth
        self.stages.append(
            StageSpec(index, full, kind, context, factory, inputs, list(output_summaries), partitions, depth)
        )
        return index

    def connect(self, source: int, source_port: int, target: int, target_port: int) -> int:
        self._check_open()
        src, dst = self.stages[source], self.stages[target]
        if not 0 <= source_port < len(src.output_summaries):
            raise GraphError(f"stage {src.name!r} has no output {source_port}")
        if not 0 <= target_port < dst.inputs:
            raise GraphError(f"stage {dst.name!r} has no input {target_port}")
        for c in self.connectors:
            if c.target == target and c.target_port == target_port:
                raise GraphError(f"input {target_port} of stage {dst.name!r} is already connected")
        depth = src.output_summaries[source_port].output_length - 1
        if depth != dst.depth:
            raise GraphError(
                f"cannot connect {src.name!r} (sends times of loop depth {depth}) to "
                f"{dst.name!r} (expects loop depth {dst.depth})"
            )
        index = len(self.connectors)
        self.connectors.append(
            ConnectorSpec(index, source, source_port, target, target_port, depth, dst.partitions[target_port])
        )
        return index

    def freeze(self) -> FrozenGraph:
        """Validate (every input connected, no cycle without feedback) and seal the graph."""
        self._check_open()
        connected = {(c.target, c.target_port) for c in self.connectors}
        for s in self.stages:
            for port in range(s.inputs):
                if (s.index, port) not in connected:
                    if s.kind == StageKind.FEEDBACK:
                        raise GraphError(f"feedback {s.name!r} was never connected (call .connect(stream))")
                    raise GraphError(f"input {port} of stage {s.name!r} is not connected")
        self._check_cycles()
        self.frozen = True
        return FrozenGraph(self.contexts, self.stages, self.connectors)

    def _check_cycles(self) -> None:
        """Refuse any cycle that does not pass through a feedback stage."""
        succ: dict[int, list[int]] = {s.index: [] for s in self.stages}
        for c in self.connectors:
            if self.stages[c.source].kind != StageKind.FEEDBACK:
                succ[c.source].append(c.target)
        color = dict.fromkeys(succ, 0)  # 0 new, 1 on stack, 2 done
        stack: list[int] = []
        for root in succ:
            if color[root]:
                continue
            work = [(root, iter(succ[root]))]
            color[root] = 1
            stack.append(root)
            while work:
                node, it = work[-1]
                nxt = next(it, None)
                if nxt is None:
                    work.pop()
                    stack.pop()
                    color[node] = 2
                elif color[nxt] == 1:
                    cycle = stack[stack.index(nxt) :]
                    names = [self.stages[i].name for i in cycle]
                    raise CycleError(
                        "cycle without a feedback: "
                        + " -> ".join([*names, names[0]])
                        + " (loops must go through LoopContext.feedback)",
                        names,
                    )
                elif color[nxt] == 0:
                    color[nxt] = 1
                    stack.append(nxt)
                    work.append((nxt, iter(succ[nxt])))

    def _check_open(self) -> None:
        if self.frozen:
            raise GraphError("the graph is frozen: stages can only be added while building")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
