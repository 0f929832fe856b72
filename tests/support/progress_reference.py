"""A brute-force reference for the progress layer, and a Hypothesis strategy for logical graphs.

The reference knows nothing of `PathSummary` or `Reachability`: it reads the frozen graph's
stages and connectors, gives every one-step move its concrete meaning from the stage kind
(ingress appends a 0, egress drops the last counter, feedback adds 1 to it, anything else
keeps the time) and answers could-result-in by breadth-first search over concrete states
``(time, location)``.

To keep the state space finite every loop counter saturates at a cap ``C``. If every
coordinate of the target time is below ``C`` the answers are exact: a saturated coordinate
(true value ``>= C``) compares with the target exactly as the true value does, ``min(x + 1, C)``
commutes with saturation, ingress appends an exact 0 and egress only drops. The epoch never
changes along a path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from hypothesis import strategies as st

from timely.graph import FrozenGraph, GraphBuilder, StageKind
from timely.progress import PathSummary

Time = tuple[int, ...]
Pointstamp = tuple[Time, int]

__all__ = ["ReferenceModel", "builders", "describe", "graphs", "le", "minimal", "pointstamps", "times_of_depth"]


def le(a: Time, b: Time) -> bool:
    """The product order, written independently of `timely.timestamp.product_le`."""
    assert len(a) == len(b), (a, b)
    return all(x <= y for x, y in zip(a, b))


def minimal(times: Iterable[Time]) -> set[Time]:
    """The minimal elements of a finite set of times under the product order."""
    ts = set(times)
    return {t for t in ts if not any(u != t and le(u, t) for u in ts)}


def _identity(t: Time, cap: int) -> Time:
    return t


def _ingress(t: Time, cap: int) -> Time:
    return (*t, 0)


def _egress(t: Time, cap: int) -> Time:
    return t[:-1]


def _feedback(t: Time, cap: int) -> Time:
    return (*t[:-1], min(t[-1] + 1, cap))


_OP_WEIGHTS = ["vertex"] * 3 + ["ingress"] * 2 + ["egress"] + ["feedback"] * 2 + ["reenter"] * 2 + ["input"]
"""Which kind of stage to add next, with repeats as weights (the first is Hypothesis's shrink target)."""

_MOVES = {StageKind.INGRESS: _ingress, StageKind.EGRESS: _egress, StageKind.FEEDBACK: _feedback}


class ReferenceModel:
    """Could-result-in by exhaustive search over concrete (saturated) states."""

    def __init__(self, graph: FrozenGraph | GraphBuilder, min_cap: int = 1) -> None:
        n = len(graph.stages)
        self.depths = [s.depth for s in graph.stages] + [c.depth for c in graph.connectors]
        self.locations = len(self.depths)
        # succ[loc]: (target location, concrete move) for each one-step move out of loc
        self.succ: list[list[tuple[int, object]]] = [[] for _ in range(self.locations)]
        for c in graph.connectors:
            loc = n + c.index
            self.succ[c.source].append((loc, _MOVES.get(graph.stages[c.source].kind, _identity)))
            self.succ[loc].append((c.target, _identity))
        self.min_cap = min_cap
        self._cache: dict[tuple[Pointstamp, int], list[set[Time]]] = {}

    def move(self, move: object, t: Time, cap: int | None = None) -> Time:
        """Apply one concrete move (``cap=None``: no saturation)."""
        return move(t, 10**9 if cap is None else cap)  # type: ignore[operator]

    def cap_for(self, *times: Time) -> int:
        """A cap under which questions about these times are answered exactly."""
        return max(self.min_cap, 1 + max(max(t) for t in times))

    def minimal_reached(self, p: Pointstamp, cap: int) -> list[set[Time]]:
        """Per location, the minimal saturated times reachable from ``p`` (a set per location)."""
        key = (p, cap)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        t0, l0 = p
        assert len(t0) == self.depths[l0] + 1, f"time {t0} has the wrong depth for location {l0}"
        start = (tuple(min(c, cap) for c in t0), l0)
        seen = {start}
        work = deque([start])
        while work:
            t, loc = work.popleft()
            for target, move in self.succ[loc]:
                state = (move(t, cap), target)  # type: ignore[operator]
                if state not in seen:
                    seen.add(state)
                    work.append(state)
        per_loc: list[set[Time]] = [set() for _ in range(self.locations)]
        for t, loc in seen:
            per_loc[loc].add(t)
        result = [minimal(ts) for ts in per_loc]
        self._cache[key] = result
        return result

    def could_result_in(self, p: Pointstamp, q: Pointstamp) -> bool:
        cap = self.cap_for(p[0], q[0])
        return any(le(t, q[0]) for t in self.minimal_reached(p, cap)[q[1]])

    def reaches(self, a: int, b: int) -> bool:
        """Some path leads from location ``a`` to location ``b`` (reflexive)."""
        start = ((0,) * (self.depths[a] + 1), a)
        return bool(self.minimal_reached(start, self.min_cap)[b])

    def minimal_results(self, sources: Sequence[Pointstamp], location: int, cap: int) -> set[Time]:
        """Minimal saturated times at ``location`` reachable from any of ``sources``.

        Exact (equal to the true minimal times) when ``cap`` exceeds every coordinate of the
        sources and of the true minimal times; callers pick ``cap`` above the coordinates of
        the answer under test, which makes the comparison exact either way."""
        found: set[Time] = set()
        for p in sources:
            found |= self.minimal_reached(p, cap)[location]
        return minimal(found)

    def frontier(self, active: Iterable[Pointstamp]) -> set[Pointstamp]:
        """Active pointstamps that no *other* active pointstamp could result in."""
        act = set(active)
        return {p for p in act if not any(q != p and self.could_result_in(q, p) for q in act)}

    def blocked(self, active: Iterable[Pointstamp], p: Pointstamp, exclude_self: bool) -> bool:
        return any(self.could_result_in(q, p) for q in active if not (exclude_self and q == p))


# Strategies -------------------------------------------------------------------------------


def times_of_depth(depth: int, max_coord: int) -> st.SearchStrategy[Time]:
    return st.tuples(*[st.integers(0, max_coord)] * (depth + 1))


def pointstamps(depths: Sequence[int], max_coord: int) -> st.SearchStrategy[Pointstamp]:
    """A pointstamp at any location, with a time of that location's depth."""
    return st.integers(0, len(depths) - 1).flatmap(
        lambda loc: times_of_depth(depths[loc], max_coord).map(lambda t: (t, loc))
    )


def graphs(max_depth: int = 3, max_loops: int = 4, max_ops: int = 12) -> st.SearchStrategy[FrozenGraph]:
    """Random valid logical graphs built through `GraphBuilder` and frozen."""
    return builders(max_depth, max_loops, max_ops).map(lambda b: b.freeze())


@st.composite
def builders(
    draw: st.DrawFn, max_depth: int = 3, max_loops: int = 4, max_ops: int = 12, any_feedback: bool = False
) -> GraphBuilder:
    """Random logical graphs, built through `GraphBuilder` and not yet frozen.

    Loop contexts nest up to ``max_depth``. Stages are added one at a time and read only
    streams that already exist (so every non-feedback edge goes forward); feedback stages are
    connected last, each to a stream of its own loop from which no path leads back to the
    feedback through a shallower scope. That keeps Naiad's rule (§2.1): every cycle stays
    inside one loop context and passes through a feedback of that context. With
    ``any_feedback`` a feedback may read any stream of its loop, which can make cycles that
    leave the loop and so never advance its counter.
    """
    b = GraphBuilder()
    n_loops = draw(st.sampled_from([n for n in (2, 3, 1, 4) if n <= max_loops]))
    for k in range(n_loops):
        parents = [c.index for c in reversed(b.contexts) if c.depth < max_depth]  # nest by default
        b.add_context(draw(st.sampled_from(parents)), f"loop{k}")
    parent = {c.index: c.parent for c in b.contexts}
    depth = {c.index: c.depth for c in b.contexts}
    streams: dict[int, list[tuple[int, int]]] = {c.index: [] for c in b.contexts}
    feedbacks: list[tuple[int, int]] = []  # (stage, loop context)
    counter = iter(range(10**6))

    def add(kind: str, ctx: int, inputs: int, summaries: list[PathSummary]) -> int:
        return b.add_stage(f"{kind}{next(counter)}", kind, ctx, None, inputs, summaries)

    def add_input() -> tuple[int, int]:
        s = add(StageKind.INPUT, 0, 0, [PathSummary.identity(0)])
        streams[0].append((s, 0))
        return (s, 0)

    def add_vertex(ctx: int, ins: list[tuple[int, int]], outs: int) -> list[tuple[int, int]]:
        s = add(StageKind.VERTEX if outs else StageKind.PROBE, ctx, len(ins), [PathSummary.identity(depth[ctx])] * outs)
        for port, (src, src_port) in enumerate(ins):
            b.connect(src, src_port, s, port)
        streams[ctx].extend((s, p) for p in range(outs))
        return [(s, p) for p in range(outs)]

    def add_ingress(loop: int, source: tuple[int, int]) -> tuple[int, int]:
        s = add(StageKind.INGRESS, loop, 1, [PathSummary.ingress(depth[loop] - 1)])
        b.stages[s].depth = depth[loop] - 1  # as LoopContext.ingress does
        b.connect(*source, s, 0)
        streams[loop].append((s, 0))
        return (s, 0)

    def add_egress(loop: int, source: tuple[int, int]) -> tuple[int, int]:
        s = add(StageKind.EGRESS, loop, 1, [PathSummary.egress(depth[loop])])
        b.connect(*source, s, 0)
        streams[parent[loop]].append((s, 0))  # type: ignore[index]
        return (s, 0)

    def add_feedback(loop: int) -> tuple[int, int]:
        s = add(StageKind.FEEDBACK, loop, 1, [PathSummary.feedback(depth[loop])])
        streams[loop].append((s, 0))
        return (s, 0)

    def reenter(loop: int) -> None:
        """Leave the loop and come back in, through a feedback of the enclosing loop or not,
        then join the stream that left: two paths (with incomparable summaries when the way
        round passes the outer feedback)."""
        (inside,) = add_vertex(loop, [draw(st.sampled_from(streams[loop]))], 1)  # a fork at the loop's depth
        outside = add_egress(loop, inside)
        outer = parent[loop]
        if outer and draw(st.sampled_from([True, False, True])):
            fb = add_feedback(outer)  # type: ignore[arg-type]
            b.connect(*outside, fb[0], 0)  # its output has no readers yet: no cycle
            outside = fb
        back = add_ingress(loop, outside)
        add_vertex(loop, draw(st.permutations([inside, back])), 1)

    def escape(loop: int) -> None:
        """A feedback whose cycle leaves the loop and comes back in: it advances only if it
        passes a feedback of the enclosing loop on the way round."""
        fb = add_feedback(loop)
        (fork,) = add_vertex(loop, [fb], 1)
        outside = add_egress(loop, fork)
        outer = parent[loop]
        if outer and draw(st.booleans()):
            outer_fb = add_feedback(outer)  # type: ignore[arg-type]
            b.connect(*outside, outer_fb[0], 0)
            outside = outer_fb
        b.connect(*add_ingress(loop, outside), fb[0], 0)

    add_input()
    for c in b.contexts[1:]:  # parents come before children: every loop gets a way in
        add_ingress(c.index, draw(st.sampled_from(streams[parent[c.index]])))  # type: ignore[index]
        if draw(st.booleans()):
            reenter(c.index)
        if any_feedback and draw(st.booleans()):
            escape(c.index)
    for _ in range(draw(st.integers(1, max_ops))):
        options: dict[str, list[int]] = {k: [] for k in _OP_WEIGHTS}
        options["input"].append(0)
        for c in b.contexts:
            ci = c.index
            if streams[ci]:
                options["vertex"].append(ci)
            if ci:
                if streams[parent[ci]]:  # type: ignore[index]
                    options["ingress"].append(ci)
                if streams[ci]:
                    options["egress"].append(ci)
                    options["reenter"].append(ci)
                options["feedback"].append(ci)
        op = draw(st.sampled_from([k for k in _OP_WEIGHTS if options[k]]))
        ctx = draw(st.sampled_from(options[op]))
        if op == "input":
            add_input()
        elif op == "vertex":
            ins = draw(st.lists(st.sampled_from(streams[ctx]), min_size=1, max_size=3))
            add_vertex(ctx, ins, draw(st.sampled_from([1, 2, 0, 1])))
        elif op == "ingress":
            add_ingress(ctx, draw(st.sampled_from(streams[parent[ctx]])))  # type: ignore[index]
        elif op == "egress":
            add_egress(ctx, draw(st.sampled_from(streams[ctx])))
        elif op == "feedback":
            feedbacks.append((add_feedback(ctx)[0], ctx))
        else:
            reenter(ctx)
    for f, ctx in draw(st.permutations(feedbacks)):
        bad = _reachable_through_shallower(b, f, depth[ctx])
        candidates = [(s, p) for s, p in streams[ctx] if s not in bad]  # never empty: f itself qualifies
        if any_feedback:  # half the time, close a cycle that leaves the loop, if there is one
            leaving = [(s, p) for s, p in streams[ctx] if s in bad]
            flip: bool = draw(st.booleans())
            if leaving and flip:
                candidates = leaving
        src, src_port = draw(st.sampled_from(candidates))
        b.connect(src, src_port, f, 0)
    return b


def _reachable_through_shallower(b: GraphBuilder, start: int, d: int) -> set[int]:
    """Stages reachable from ``start`` by a path that visits a stage of depth below ``d``."""
    succ: dict[int, list[int]] = {s.index: [] for s in b.stages}
    for c in b.connectors:
        succ[c.source].append(c.target)

    def closure(roots: Iterable[int]) -> set[int]:
        seen = set(roots)
        work = list(seen)
        while work:
            for t in succ[work.pop()]:
                if t not in seen:
                    seen.add(t)
                    work.append(t)
        return seen

    dipped = {s for s in closure([start]) if b.stages[s].depth < d}
    return closure(dipped)


def describe(graph: FrozenGraph | GraphBuilder) -> str:
    """The graph as text, for Hypothesis to print with a failing example."""
    n = len(graph.stages)
    lines = [f"stage {s.index}: {s.kind} {s.name!r} depth={s.depth} outputs={s.output_summaries}" for s in graph.stages]
    lines += [
        f"connector {n + c.index}: {c.source}[{c.source_port}] -> {c.target}[{c.target_port}] depth={c.depth}"
        for c in graph.connectors
    ]
    return "\n".join(lines)
