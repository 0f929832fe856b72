"""The sealed logical graph: locations, could-result-in, a fingerprint and pictures.

Locations (Naiad §2.3): every stage is a location (where its notifications and
capabilities live) and every connector is one (where its messages in flight live).
Stage ``i`` is location ``i``; connector ``j`` is location ``len(stages) + j``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ..errors import CycleError
from ..progress import PathSummary, Reachability, Step
from .specs import ConnectorSpec, ContextSpec, StageKind, StageSpec

__all__ = ["FrozenGraph"]


class FrozenGraph:
    def __init__(
        self, contexts: Sequence[ContextSpec], stages: Sequence[StageSpec], connectors: Sequence[ConnectorSpec]
    ) -> None:
        self.contexts = list(contexts)
        self.stages = list(stages)
        self.connectors = list(connectors)
        self.by_name = {s.name: s for s in self.stages}
        n = len(self.stages)
        depths = [s.depth for s in self.stages] + [c.depth for c in self.connectors]
        steps: list[Step] = []
        for c in self.connectors:
            loc = n + c.index
            summary = self.stages[c.source].output_summaries[c.source_port]
            steps.append(Step(c.source, loc, summary))
            steps.append(Step(loc, c.target, PathSummary.identity(c.depth)))
        self.reachability = Reachability(depths, steps)
        self._check_cycles_advance()
        self.outgoing: list[list[list[ConnectorSpec]]] = [[[] for _ in s.output_summaries] for s in self.stages]
        self.incoming: list[list[ConnectorSpec | None]] = [[None] * s.inputs for s in self.stages]
        for c in self.connectors:
            self.outgoing[c.source][c.source_port].append(c)
            self.incoming[c.target][c.target_port] = c

    def _check_cycles_advance(self) -> None:
        """Refuse a cycle that does not advance a loop counter: one that goes through a
        feedback but leaves that feedback's loop (egress, then ingress back in) and so
        restarts the counter at 0. Its path summary from a stage back to itself keeps the
        prefix of the time unchanged (``inc == 0``), and times could go round for ever."""
        bad = []
        for s in self.stages:
            identity = PathSummary.identity(s.depth)
            for summary in self.reachability.summaries[s.index][s.index]:
                if summary != identity and summary.inc == 0:
                    bad.append(s.name)
                    break
        if bad:
            raise CycleError(
                "cycle through a feedback that leaves the feedback's loop, so its counter never advances: "
                + ", ".join(bad)
                + " (a loop's feedback must be fed from inside that loop, without egress and ingress on the way)",
                bad,
            )

    def stage_location(self, stage: int) -> int:
        return stage

    def connector_location(self, connector: int) -> int:
        return len(self.stages) + connector

    def describe_location(self, location: int) -> str:
        """A human name for a location, for explanations and errors."""
        n = len(self.stages)
        if location < n:
            s = self.stages[location]
            return f"{s.kind} {s.name!r}" if s.kind != StageKind.VERTEX else f"stage {s.name!r}"
        c = self.connectors[location - n]
        return f"edge {self.stages[c.source].name}[{c.source_port}] -> {self.stages[c.target].name}[{c.target_port}]"

    def fingerprint(self) -> str:
        """A digest of the graph's shape, equal in every process running the same program."""
        h = hashlib.sha256()
        for s in self.stages:
            h.update(f"s|{s.name}|{s.kind}|{s.context}|{s.inputs}|{s.output_summaries}|".encode())
            h.update(",".join("x" if p is not None else "-" for p in s.partitions).encode())
        for c in self.connectors:
            h.update(f"c|{c.source}|{c.source_port}|{c.target}|{c.target_port}".encode())
        return h.hexdigest()[:16]

    # Pictures ----------------------------------------------------------------------------
    def _nest(
        self,
        lines: list[str],
        stage: Callable[[StageSpec], str],
        open_loop: Callable[[ContextSpec, str], list[str]],
        close_loop: str,
    ) -> None:
        """Append every stage as ``s<index><stage(s)>``, each loop context wrapped in
        ``open_loop``/``close_loop`` lines and indented by depth: the one walk both pictures share."""
        children: dict[int | None, list[ContextSpec]] = {}
        for ctx in self.contexts:
            children.setdefault(ctx.parent, []).append(ctx)

        def emit(ctx: ContextSpec, indent: str) -> None:
            lines.extend(f"{indent}s{s.index}{stage(s)}" for s in self.stages if s.context == ctx.index)
            for child in children.get(ctx.index, []):
                lines.extend(open_loop(child, indent))
                emit(child, indent + "  ")
                lines.append(f"{indent}{close_loop}")

        emit(self.contexts[0], "  ")

    def to_dot(self, detail: str = "") -> str:
        """The graph in Graphviz dot; loop contexts are clusters, exchanges are dashed. With
        ``detail``, every stage's box has it as a second line (the live console writes its
        figures there, so the box is laid out wide enough)."""
        second = f"\\n{detail}" if detail else ""
        lines = ["digraph timely {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
        self._nest(
            lines,
            stage=lambda s: f' [label="{s.name}{second}", {_dot_style(s.kind)}];',
            open_loop=lambda c, ind: [
                f"{ind}subgraph cluster_{c.index} {{",
                f'{ind}  label="loop {c.name}"; style=rounded;',
            ],
            close_loop="}",
        )
        for c in self.connectors:
            style = ', style=dashed, label="exchange"' if c.partition is not None else ""
            lines.append(f"  s{c.source} -> s{c.target} [taillabel={c.source_port}{style}];")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_mermaid(self) -> str:
        """The graph as a Mermaid flowchart; loop contexts are subgraphs."""
        lines = ["flowchart LR"]
        self._nest(
            lines,
            stage=lambda s: _mermaid_shape(s.kind, s.name),
            open_loop=lambda c, ind: [f'{ind}subgraph c{c.index}["loop {c.name}"]'],
            close_loop="end",
        )
        for c in self.connectors:
            arrow = "-. exchange .->" if c.partition is not None else "-->"
            lines.append(f"  s{c.source} {arrow} s{c.target}")
        return "\n".join(lines) + "\n"


def _dot_style(kind: str) -> str:
    return {
        StageKind.INPUT: "shape=invhouse",
        StageKind.INGRESS: "shape=cds",
        StageKind.EGRESS: "shape=cds",
        StageKind.FEEDBACK: "shape=circle",
        StageKind.PROBE: "shape=house",
    }.get(kind, "shape=box")


def _mermaid_shape(kind: str, name: str) -> str:
    if kind == StageKind.INPUT:
        return f'[/"{name}"/]'
    if kind == StageKind.FEEDBACK:
        return f'(("{name}"))'
    if kind in (StageKind.INGRESS, StageKind.EGRESS):
        return f'>"{name}"]'
    if kind == StageKind.PROBE:
        return f'[["{name}"]]'
    return f'["{name}"]'
