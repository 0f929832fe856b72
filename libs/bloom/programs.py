"""Bloom's and BloomL's example programs, written with `Program` (docs/bloom.md walks through them).

Each takes root-scope streams and returns `Output`s (or a stream), so a test or a user can feed
epochs and read the answer of each. None of them requests a notification inside its loop
except where the comments say coordination is needed.
"""

from __future__ import annotations

from typing import Any

from timely import Stream

from ._functions import monotone
from ._lattice import LMin, LSet
from ._operators import apply
from ._program import Output, Program

__all__ = ["at_least", "quorum", "reachability", "shopping_cart", "shortest_paths", "transitive_closure"]


def transitive_closure(edges: Stream, name: str = "tc") -> Output:
    """Every ``(a, b)`` with a path of one or more edges from ``a`` to ``b`` (Datalog's ``path``)."""
    with Program(edges.scope, name) as p:
        link = p.table("link", edges)
        path = p.table("path")
        path |= link
        path |= link.join(path, _target, _source, _compose)
    return p.output(path)


def reachability(edges: Stream, sources: Stream, name: str = "reach", *, coordinated: bool = False) -> Output:
    """Every ``(source, node)`` with ``node`` reachable from ``source`` (itself included).

    ``coordinated`` makes the ``reach`` table wait for each iteration to complete before sending
    what it derived (a notification per iteration): the same answer, for comparison."""
    with Program(edges.scope, name) as p:
        link = p.table("link", edges)
        start = p.table("start", sources)
        reach = p.table("reach", coordinated=coordinated, partition=_target)  # kept where the join needs it
        reach |= start.select(_loop)
        reach |= reach.join(link, _target, _source, _extend)
    return p.output(reach)


def shortest_paths(edges: Stream, sources: Stream, name: str = "sssp") -> Output:
    """Per node, the length of a shortest path from the nearest source, as an `LMin`; edges are
    ``(u, v, weight)`` with non-negative weights. Each improvement is sent on at once; superseded
    distances are dropped by the lattice, so the loop ends when no distance improves."""
    with Program(edges.scope, name) as p:
        link = p.table("link", edges)
        start = p.table("start", sources)
        dist = p.lattice("dist", LMin)
        dist |= start.select(_at_zero)
        dist |= dist.join(link, _key, _source, _relax)
    return p.output(dist)


def quorum(votes: Stream, size: int, name: str = "quorum") -> tuple[Output, Output]:
    """BloomL's vote counting: ``votes`` carries ``(request, voter)``; a request commits once
    ``size`` distinct voters have voted for it. Returns (committed requests, tallies).

    Votes travel on a channel to the worker that owns the request, where an `LSet` per request
    grows; the threshold ``size(votes) >= n`` is monotone, so a request commits the moment its
    quorum is seen, without waiting for the epoch's other votes (no coordination)."""
    with Program(votes.scope, name) as p:
        vote = p.channel("vote", votes, address=_first)
        tally = p.lattice("tally", LSet)
        tally |= vote.select(_ballot)
        committed = p.table("committed")
        committed |= tally.when(at_least(size))
    return p.output(committed), p.output(tally)


def at_least(n: int) -> Any:
    """The monotone threshold ``len(votes) >= n`` of an `LSet`."""

    @monotone
    def reached(votes: LSet) -> Any:
        return votes.size().gt_eq(n)

    return reached


def shopping_cart(actions: Stream, name: str = "cart") -> Stream:
    """BloomL's replicated cart: ``actions`` carries ``(session, action_id, item, delta)``.

    Accumulating a session's actions is monotone (an `LSet` per session, merged in any order, no
    coordination); the checkout summary (item -> quantity, dropping items at zero) is not: an
    action arriving later could change it. So the summary waits for the epoch to be complete
    (`apply` of an unmarked function: a notification per epoch) and is sent once per epoch for
    each session that changed: ``(session, ((item, quantity), ...))`` sorted by item."""
    with Program(actions.scope, name) as p:
        cart = p.lattice("cart", LSet, actions.map(f"{name}_actions", _action_set))
    return apply(p.output(cart).stream, _summary, f"{name}_checkout")


# Small named functions (records cross processes; names read better in errors than lambdas) --------
def _source(edge: tuple[Any, ...]) -> Any:
    return edge[0]


def _target(edge: tuple[Any, ...]) -> Any:
    return edge[1]


def _first(record: tuple[Any, ...]) -> Any:
    return record[0]


def _key(record: tuple[Any, Any]) -> Any:
    return record[0]


def _compose(edge: tuple[Any, Any], path: tuple[Any, Any]) -> tuple[Any, Any]:
    return (edge[0], path[1])


def _loop(source: Any) -> tuple[Any, Any]:
    return (source, source)


def _extend(reach: tuple[Any, Any], edge: tuple[Any, Any]) -> tuple[Any, Any]:
    return (reach[0], edge[1])


def _at_zero(source: Any) -> tuple[Any, LMin]:
    return (source, LMin(0))


def _relax(dist: tuple[Any, LMin], edge: tuple[Any, Any, Any]) -> tuple[Any, LMin]:
    return (edge[1], dist[1].add(edge[2]))


def _ballot(vote: tuple[Any, Any]) -> tuple[Any, LSet]:
    return (vote[0], LSet((vote[1],)))


def _action_set(action: tuple[Any, Any, Any, int]) -> tuple[Any, LSet]:
    return (action[0], LSet((action[1:],)))


def _summary(actions: LSet) -> tuple[tuple[Any, int], ...]:
    totals: dict[Any, int] = {}
    for _, item, delta in actions:
        totals[item] = totals.get(item, 0) + delta
    return tuple(sorted((i, q) for i, q in totals.items() if q))
