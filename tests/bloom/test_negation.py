"""Bud's ``notin`` against a collection of the same program (stratified negation within a
timestep): the negated side may be derived by the timestep's own rules, recursively, and the
answer is read only once that derivation has drained; a cycle through negation is refused when
the program is built. Each timestep's answer is checked against a plain-Python evaluation
(NetworkX for the recursive part), on one process (1 and 3 workers) and on two real processes.
"""

from __future__ import annotations

import random
from typing import Any

import networkx as nx
import pytest

import timely
from tests.bloom.test_timesteps import _refused, notifications, run
from timely_libs import bloom

STEPS = 6
NODES = 12


def workload(seed: int) -> dict[str, list[list[Any]]]:
    """Per timestep: new edges, the asked nodes, blocks and unblocks of nodes (a keyed table)."""
    rng = random.Random(f"bloom-notin/{seed}")
    return {
        "edges": [[(rng.randrange(NODES), rng.randrange(NODES)) for _ in range(4)] for _ in range(STEPS)],
        "roots": [[(0,)]] + [[] for _ in range(STEPS - 1)],
        "asks": [[(rng.randrange(NODES),) for _ in range(5)] for _ in range(STEPS)],
        "blocks": [[(rng.randrange(NODES),) for _ in range(2)] for _ in range(STEPS)],
        "unblocks": [[(rng.randrange(NODES),) for _ in range(2)] for _ in range(STEPS)],
    }


def program(
    edges: timely.Stream, roots: timely.Stream, asks: timely.Stream, blocks: timely.Stream, unblocks: timely.Stream
) -> dict[str, bloom.Output]:
    """``reach`` is derived recursively at every timestep; ``unreached <= ask.notin(reach)`` must
    wait for it. ``free <= ask.notin(blocked)`` negates a table with deletions, and ``quiet <=
    ask.notin(said)`` a scratch of the same timestep."""
    with bloom.Program(edges.scope, "neg", timesteps=True) as p:
        link = p.table("link", edges)
        reach = p.table("reach")
        reach |= p.input("root", roots)
        reach |= reach.join(link, lambda r: r[0], lambda e: e[0], lambda r, e: (e[1],))
        ask = p.input("ask", asks)
        unreached = p.scratch("unreached")
        unreached |= ask.not_in(reach)
        blocked = p.keyed_table("blocked")
        blocked.defer(p.input("block", blocks))
        blocked.delete(p.input("unblock", unblocks).join(blocked, lambda u: u, lambda b: b, lambda u, b: b))
        free = p.scratch("free")
        free |= ask.not_in(blocked)
        even = p.scratch("even")  # Bud's notin(reach, :node => :node) { |a, r| r.node.even? }
        even |= ask.not_in(reach, lambda a: a[0], negated_key=lambda r: r[0], predicate=lambda a, r: r[0] % 2 == 0)
        said = p.scratch("said")
        said |= unreached.select(lambda a: (a[0] + 1,))
        quiet = p.scratch("quiet")
        quiet |= ask.not_in(said)
    named = (("unreached", unreached), ("free", free), ("quiet", quiet), ("even", even))
    return {name: p.output(c) for name, c in named}


def reference(seed: int) -> dict[str, list[set[Any]]]:
    feeds = workload(seed)
    g: nx.DiGraph = nx.DiGraph()
    g.add_node(0)
    blocked: set[Any] = set()
    out: dict[str, list[set[Any]]] = {"unreached": [], "free": [], "quiet": [], "even": []}
    for t in range(STEPS):
        if t:  # Bud's order: the deletions decided at t - 1 first, then the inserts
            blocked = (blocked - set(feeds["unblocks"][t - 1])) | set(feeds["blocks"][t - 1])
        g.add_edges_from(feeds["edges"][t])
        reach = {(n,) for n in nx.descendants(g, 0) | {0}}
        asked = set(feeds["asks"][t])
        unreached = asked - reach
        out["unreached"].append(unreached)
        out["free"].append(asked - blocked)
        out["quiet"].append(asked - {(a + 1,) for (a,) in unreached})
        out["even"].append({(a,) for (a,) in asked if (a,) not in reach or a % 2})
    return out


def test_negation_waits_for_the_timesteps_own_derivation(workers: int) -> None:
    got, comp = run(program, workload(1), STEPS, workers)
    want = reference(1)
    for name in want:
        assert got[name] == want[name], name
    assert any(want["unreached"]) and any(a != u for a, u in zip(want["quiet"], want["unreached"], strict=True))
    assert any(e != u for e, u in zip(want["even"], want["unreached"], strict=True))  # the predicate matters
    asked = notifications(comp, "neg.")
    assert asked["neg.step.reach"] == 0 and asked["neg.step.link"] == 0  # the recursion stays free
    assert sum(n for stage, n in asked.items() if "not_in" in stage) > 0  # the negation waits


def test_a_cycle_through_negation_is_refused() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        ask = p.input("ask", scope.new_input("a"))
        x = p.scratch("x")
        y = p.table("y")
        x |= ask.not_in(y)
        y |= x.select(lambda f: f)

    _refused(body, "cycle through negation: 'x' is derived with not_in\\('y'\\)")


def test_negation_across_timesteps_is_not_a_cycle(workers: int) -> None:
    """``y <+ x`` reads ``x`` one timestep later: stratified by time, as in Bud."""

    def make(asks: timely.Stream) -> dict[str, bloom.Output]:
        with bloom.Program(asks.scope, "later", timesteps=True) as p:
            ask = p.input("ask", asks)
            x = p.scratch("x")
            y = p.table("y")
            x |= ask.not_in(y)
            y.defer(x)
        return {"x": p.output(x)}

    got, _ = run(make, {"asks": [[(1,), (2,)], [(1,), (3,)], [(3,), (4,)]]}, 3, workers)
    assert got["x"] == [{(1,), (2,)}, {(3,)}, {(4,)}]


@pytest.mark.parametrize("seed", [2, 3])
def test_negation_on_two_processes(seed: int) -> None:
    from tests.support import bloom_program
    from tests.support.modes import Mode

    results = Mode("tcp", processes=2).run(bloom_program.negation, seed, lag=0, timeout=60.0)
    want = reference(seed)
    for name, steps in want.items():
        for t, facts in enumerate(steps):
            union = [tuple(f) for r in results for f in r["answers"][name][t]]
            assert len(union) == len(set(union)) and set(union) == facts, (name, t)


def test_negation_in_a_program_without_timesteps(workers: int) -> None:
    """One loop, epochs as timesteps: the stage outside the loop answers each epoch once the loop
    has drained it (a notification at the epoch)."""
    feeds = workload(4)

    def make(edges: timely.Stream, roots: timely.Stream, asks: timely.Stream) -> dict[str, bloom.Output]:
        with bloom.Program(edges.scope, "plain") as p:
            link = p.table("link", edges)
            reach = p.table("reach", roots)
            reach |= reach.join(link, lambda r: r[0], lambda e: e[0], lambda r, e: (e[1],))
            unreached = p.scratch("unreached")
            unreached |= p.scratch("ask", asks).not_in(reach)
        return {"unreached": p.output(unreached)}

    got, _ = run(make, {n: feeds[n] for n in ("edges", "roots", "asks")}, STEPS, workers)
    assert got["unreached"] == reference(4)["unreached"]
