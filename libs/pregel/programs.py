"""Pregel programs ported to `timely_libs.pregel`; docs/pregel.md sets each beside the paper's C++.

Every program is a `Program` (or `ArrayProgram`) to pass to `pregel.pregel`. Undirected
algorithms (components, k-core, core numbers) expect each edge in both directions.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from ._aggregators import Max, Sum
from ._array_engine import ArrayProgram, ArrayStep
from ._errors import PregelError
from ._program import Master
from ._vertex_engine import PregelVertex, Program

__all__ = [
    "ArrayPageRank",
    "BipartiteMatching",
    "ConnectedComponents",
    "CoreNumbers",
    "KCore",
    "PageRank",
    "ShortestPaths",
]


def _add(a: Any, b: Any) -> Any:
    return a + b


class PageRank(Program):
    """PageRank (Pregel §5.1), with NetworkX's treatment of dangling vertices: their rank is
    spread evenly over all vertices, through the ``dangling`` aggregator.

    ``supersteps`` rank updates follow superstep 0; with ``tolerance``, the master stops
    earlier once the ranks moved by less than ``num_vertices * tolerance`` in total (the
    test NetworkX uses).
    """

    def __init__(self, supersteps: int = 30, damping: float = 0.85, tolerance: float | None = None) -> None:
        self.supersteps = supersteps
        self.damping = damping
        self.tolerance = tolerance
        super().__init__(combine=_add, aggregators={"dangling": Sum(0.0), "moved": Sum(0.0)})

    def compute(self, vertex: PregelVertex, messages: list[float]) -> None:
        n = vertex.num_vertices
        if vertex.superstep == 0:
            rank = 1.0 / n
        else:
            d = self.damping
            rank = (1.0 - d) / n + d * (sum(messages) + vertex.aggregated("dangling") / n)
            vertex.aggregate("moved", abs(rank - vertex.value))
        vertex.value = rank
        if vertex.superstep < self.supersteps:
            degree = len(vertex.out_edges)
            if degree:
                vertex.send_to_all_neighbors(rank / degree)
            else:
                vertex.aggregate("dangling", rank)
        else:
            vertex.vote_to_halt()

    def master_compute(self, master: Master) -> None:
        _stop_when_settled(master, self.tolerance)


class ArrayPageRank(ArrayProgram):
    """`PageRank`, vectorised: the same numbers, a worker's vertices at once."""

    def __init__(self, supersteps: int = 30, damping: float = 0.85, tolerance: float | None = None) -> None:
        self.supersteps = supersteps
        self.damping = damping
        self.tolerance = tolerance
        self.aggregators = {"dangling": Sum(0.0), "moved": Sum(0.0)}

    def initial_values(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.zeros(len(ids))

    def compute(self, step: ArrayStep) -> None:
        n = step.num_vertices
        if step.superstep == 0:
            step.values = np.full(len(step.ids), 1.0 / n)
        else:
            d = self.damping
            ranks = (1.0 - d) / n + d * (step.messages + step.aggregated("dangling") / n)
            step.aggregate("moved", float(np.abs(ranks - step.values).sum()))
            step.values = ranks
        if step.superstep < self.supersteps:
            degree = step.out_degree
            step.send_to_all_neighbors(step.values / np.maximum(degree, 1))
            step.aggregate("dangling", float(step.values[degree == 0].sum()))
        else:
            step.vote_to_halt()

    def master_compute(self, master: Master) -> None:
        _stop_when_settled(master, self.tolerance)


def _stop_when_settled(master: Master, tolerance: float | None) -> None:
    """Halt once the ranks moved by less than ``num_vertices * tolerance`` in all (NetworkX's test)."""
    if tolerance is not None and master.superstep > 0 and master.aggregated("moved") < master.num_vertices * tolerance:
        master.halt()


class ShortestPaths(Program):
    """Single-source shortest paths (Pregel §5.2). Edge values are lengths (None counts as 1);
    a vertex the source cannot reach keeps ``math.inf``."""

    def __init__(self, source: Any) -> None:
        self.source = source
        super().__init__(combine=min)

    def initial_value(self, vertex_id: Any, value: Any) -> Any:
        return math.inf

    def compute(self, vertex: PregelVertex, messages: list[float]) -> None:
        best = 0 if vertex.id == self.source else math.inf
        for m in messages:
            best = m if m < best else best
        if best < vertex.value:
            vertex.value = best
            for target, length in vertex.out_edges.items():
                vertex.send(target, best + (1 if length is None else length))
        vertex.vote_to_halt()


class ConnectedComponents(Program):
    """HashMin: every vertex ends labelled with the least id in its component (ids must be
    comparable, e.g. all ints or all strings)."""

    def __init__(self) -> None:
        super().__init__(combine=min)

    def initial_value(self, vertex_id: Any, value: Any) -> Any:
        return vertex_id

    def compute(self, vertex: PregelVertex, messages: list[Any]) -> None:
        if vertex.superstep == 0:
            vertex.send_to_all_neighbors(vertex.value)
        elif messages and messages[0] < vertex.value:
            vertex.value = messages[0]
            vertex.send_to_all_neighbors(vertex.value)
        vertex.vote_to_halt()


class BipartiteMatching(Program):
    """Randomized maximal bipartite matching (Pregel §5.3), in cycles of four supersteps:
    unmatched left vertices request their neighbours; unmatched right vertices grant one
    request at random and deny the rest; a left vertex accepts one grant; the right vertex
    notes the acceptance. A left vertex that was only denied tries again next cycle.

    Vertices are loaded with the value ``"L"`` or ``"R"``; edges go from left to right. A
    vertex ends as ``(side, partner)``, partner None if unmatched. ``seed`` fixes the random
    choices, the same on any number of processes.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        super().__init__()

    def initial_value(self, vertex_id: Any, value: Any) -> Any:
        if value not in ("L", "R"):
            raise PregelError(f"BipartiteMatching: vertex {vertex_id!r} must be loaded as 'L' or 'R', not {value!r}")
        return (value, None)

    def compute(self, vertex: PregelVertex, messages: list[Any]) -> None:
        side, partner = vertex.value
        phase = vertex.superstep % 4
        if partner is not None:
            vertex.vote_to_halt()
        elif side == "L":
            if phase == 0:
                vertex.send_to_all_neighbors(vertex.id)  # request
                vertex.vote_to_halt()
            elif phase == 2:
                grants = sorted(right for granted, right in messages if granted)
                if grants:
                    chosen = self._rng(vertex).choice(grants)
                    vertex.value = (side, chosen)
                    vertex.send(chosen, vertex.id)  # accept
                    vertex.vote_to_halt()
                # only denials: stay active, and request again in the next cycle
        else:
            if phase == 1 and messages:
                requests = sorted(messages)
                chosen = self._rng(vertex).choice(requests)
                for left in requests:
                    vertex.send(left, (left == chosen, vertex.id))
            elif phase == 3 and messages:
                vertex.value = (side, messages[0])
            vertex.vote_to_halt()

    def _rng(self, vertex: PregelVertex) -> random.Random:
        return random.Random(f"{self.seed}:{vertex.id!r}:{vertex.superstep}")


class KCore(Program):
    """The k-core: vertices repeatedly leave the graph (``remove_vertex``) while fewer than
    ``k`` neighbours remain; what is left is the output. The ``removed`` aggregator counts the
    departures of each superstep, and the master keeps the history in ``removed_per_superstep``
    (on the process that hosts worker 0)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.removed_per_superstep: list[int] = []
        super().__init__(aggregators={"removed": Sum(0)}, on_missing_vertex="drop")

    def compute(self, vertex: PregelVertex, messages: list[Any]) -> None:
        gone = set(messages)
        degree = sum(1 for t in vertex.out_edges if t not in gone and t != vertex.id)
        for t in gone:
            vertex.remove_edge(vertex.id, t)
        if degree < self.k:
            for t in vertex.out_edges:
                if t not in gone and t != vertex.id:
                    vertex.send(t, vertex.id)
            vertex.remove_vertex()
            vertex.aggregate("removed", 1)
        vertex.vote_to_halt()

    def master_compute(self, master: Master) -> None:
        self.removed_per_superstep.append(master.aggregated("removed"))


class CoreNumbers(Program):
    """Core numbers (the k-core decomposition) by peeling: the master raises ``k`` (an
    aggregated value it sets) whenever a superstep peeled nobody; a vertex with fewer than
    ``k`` remaining neighbours is peeled with core number ``k - 1``, tells its neighbours, and
    its edges are removed from the graph (mutations). Self-loops are ignored."""

    def __init__(self) -> None:
        super().__init__(aggregators={"k": Max(1, persistent=True), "peeled": Sum(0)})

    def compute(self, vertex: PregelVertex, messages: list[Any]) -> None:
        if vertex.value is not None:
            vertex.vote_to_halt()
            return
        me = vertex.id
        gone = set(messages)
        for t in gone:
            vertex.remove_edge(me, t)
        remaining = [t for t in vertex.out_edges if t not in gone and t != me]
        k = vertex.aggregated("k")
        if len(remaining) < k:
            vertex.value = k - 1
            for t in remaining:
                vertex.send(t, me)
                vertex.remove_edge(me, t)
            vertex.aggregate("peeled", 1)
            vertex.vote_to_halt()

    def master_compute(self, master: Master) -> None:
        if master.aggregated("peeled") == 0 and master.messages_sent == 0:
            master.set_aggregated("k", master.aggregated("k") + 1)
