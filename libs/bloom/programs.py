"""Bloom's and BloomL's example programs, written with `Program` (docs/bloom.md walks through them).

Each takes root-scope streams and returns `Output`s (or a stream), so a test or a user can feed
epochs and read the answer of each. None of them requests a notification inside its loop
except where the comments say coordination is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from timely import Stream

from ._functions import monotone
from ._lattice import LMin, LSet
from ._operators import apply
from ._program import Keep, Output, Program

__all__ = [
    "at_least",
    "chat",
    "destructive_cart",
    "kvs",
    "quorum",
    "reachability",
    "shopping_cart",
    "shortest_paths",
    "transitive_closure",
    "two_phase_commit",
]


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


# Bud's programs with timesteps (bud-sandbox kvs/kvs.rb, cart/destructive_cart.rb; bud examples/chat) --
def kvs(puts: Stream, dels: Stream, gets: Stream, name: str = "kvs", *, keep: Keep = "all") -> tuple[Output, Output]:
    """Bud's ``BasicKVS``: ``puts`` carries ``(client, key, reqid, value)``, ``dels`` ``(key,
    reqid)``, ``gets`` ``(reqid, key)``; returns (``kvget_response``: ``(reqid, key, value)`` at
    the get's timestep, ``kvstate``: ``(key, value)`` per timestep). ::

        kvstate <+- kvput {|s| [s.key, s.value]}
        kvget_response <= (kvget * kvstate).pairs(:key => :key) {|g, t| [g.reqid, t.key, t.value]}
        kvstate <- (kvstate * kvdel).lefts(:key => :key)

    A put or a delete takes effect at the next timestep; a get sees the table as it is at its own.
    ``keep``: what both outputs store (`Program.output`); a server that reads the responses off
    ``.stream`` wants ``"none"`` (``"all"`` keeps every change of the table)."""
    with Program(puts.scope, name, timesteps=True) as p:
        kvput = p.input("kvput", puts)
        kvdel = p.input("kvdel", dels)
        kvget = p.input("kvget", gets)
        kvstate = p.keyed_table("kvstate", key=_first)
        kvstate.upsert(kvput.select(_key_value))
        kvstate.delete(kvstate.join(kvdel, _first, _first, _left))
        response = p.temp("kvget_response", kvget.join(kvstate, _second, _first, _get_response))
    return p.output(response, keep=keep), p.output(kvstate, keep=keep)


def chat(connects: Stream, messages: Stream, leaves: Stream, server: str = "server", name: str = "chat") -> Output:
    """Bud's chat (examples/chat): clients connect to ``server`` and send it lines, which it
    multicasts to every connected client; here a client may also leave, and the server forgets
    it. ``connects``: ``(client, nick)``; ``messages``: ``(client, text)``; ``leaves``: ``(client,)``.
    Returns what each client received: ``(client, (sender nick, text))`` facts, kept (a table). ::

        connect <~ [[server, ip_port, nick]]            # each client
        mcast <~ stdio { |s| [server, [ip_port, nick, s.line]] }
        nodelist <= connect { |c| [c.client, c.nick] }  # the server
        nodelist <- (nodelist * leave).lefts(:key => :client)
        mcast <~ (mcast * nodelist).pairs { |m, n| [n.key, m.val] }

    Every fact is addressed (its first field): the server's facts live where ``server`` hashes."""
    with Program(connects.scope, name, timesteps=True) as p:
        said = p.scratch("said", messages)
        hello = p.scratch("hello", connects)
        bye = p.scratch("bye", leaves)
        connect = p.channel("connect", address=_first)
        leave = p.channel("leave", address=_first)
        mcast = p.channel("mcast", address=_first)
        nick = p.table("nick")
        nick |= hello
        connect.send(hello.select(_to(server)))
        leave.send(bye.select(_to(server)))
        mcast.send(said.join(nick, _first, _first, _to_server(server)))
        nodelist = p.keyed_table("nodelist")  # (server, client, nick)
        nodelist |= connect
        nodelist.delete(nodelist.join(leave, _address_and_client, _address_and_client, _left))
        mcast.send(mcast.join(nodelist, _first, _first, _forward))
        inbox = p.table("inbox")
        inbox |= mcast.where(_not_at(server))
    return p.output(inbox)


def destructive_cart(actions: Stream, checkouts: Stream, name: str = "cart") -> Output:
    """Bud's ``DestructiveCart`` (bud-sandbox cart/destructive_cart.rb) with its client: a
    server keeps each session's cart in a table with deletions and overwrites it on every
    action. ``actions``: ``(server, client, session, reqid, item, count)``; ``checkouts``:
    ``(server, client, session, reqid)``. Returns the client's ``memo``: ``(client, server,
    session, ((item, count), ...))`` per checkout, the items with a positive count, sorted. ::

        action_msg <~ client_action;  checkout_msg <~ client_checkout
        kvput <= (action_msg * kvget_response).outer(:reqid => :reqid) {|a, r| [.., merged counts]}
        response_msg <~ (kvget_response * checkout_msg).pairs(:reqid => :reqid) {|r, c| [..]}
        memo <= response_msg

    (Bud routes the cart through its KVS's ``kvget``/``kvput``; the table is the KVS's state.)
    Actions of one session must come at different timesteps, as in Bud's workload: two at once
    would write two values for one key (a key-constraint error, in Bud too)."""
    with Program(actions.scope, name, timesteps=True) as p:
        client_action = p.scratch("client_action", actions)
        client_checkout = p.scratch("client_checkout", checkouts)
        action_msg = p.channel("action_msg", address=_first)
        checkout_msg = p.channel("checkout_msg", address=_first)
        action_msg.send(client_action)
        checkout_msg.send(client_checkout)
        carts = p.keyed_table("kvstate", key=_first)  # (session, ((item, count), ...))
        carts.upsert(action_msg.left_join(carts, _session, _first, _add_action))
        response_msg = p.channel("response_msg", address=_first)
        response_msg.send(checkout_msg.join(carts, _session, _first, _checkout))
        memo = p.table("memo")
        memo |= response_msg
    return p.output(memo)


def two_phase_commit(
    requests: Stream,
    policies: Stream,
    coordinator: str = "coordinator",
    name: str = "2pc",
    *,
    delay: int | Callable[[Any], int] = 1,
) -> tuple[Output, Output]:
    """Two-phase commit. ``requests``: ``(xact, participants)`` (a tuple of names), at the
    coordinator; ``policies``: ``(participant, xact, vote)`` with vote ``"yes"`` or ``"no"``, what
    each participant will answer. Returns (the coordinator's ``(xact, "commit" | "abort")``
    decisions, each participant's ``(participant, xact, state)`` over timesteps: ``"prepared"``
    once asked, then ``"commit"`` or ``"abort"``).

    Phase 1: ``prepare <~`` every participant; each votes ``<~`` back. Phase 2 is monotone at the
    coordinator: a transaction commits once the set of yes votes (an `LSet` per transaction)
    reaches its size (a threshold, no coordination) and aborts at the first no; the decision
    goes ``<~`` to each participant whose vote it has heard (so it never arrives before the
    prepare did), whose state is a table with deletions (``<+-``).

    ``delay``: the timesteps each message takes (`Program.channel`). Which transactions commit,
    and every participant's final state, do not depend on it; only when they are decided does."""
    with Program(requests.scope, name, timesteps=True) as p:
        begin = p.scratch("begin", requests.map(f"{name}.at", _at_coordinator(coordinator)))
        request = p.table("request")  # (coordinator, xact, participants)
        request |= begin
        policy = p.table("policy", policies)
        prepare = p.channel("prepare", address=_first, delay=delay)  # (participant, coordinator, xact)
        prepare.send(begin.select_many(_prepares))
        vote = p.channel("vote", address=_first, delay=delay)  # (coordinator, xact, participant, vote)
        vote.send(prepare.join(policy, _prepare_key, _first_two, _ballot_of))
        yes = p.lattice("yes", LSet)  # (coordinator, xact, n) -> participants that voted yes
        yes |= vote.where(_is_yes).join(request, _first_two, _first_two, _yes_vote)
        committed = yes.when(_all_voted, keyed=True)  # (coordinator, xact, n), once: a threshold
        decided = p.scratch("decided")  # (coordinator, xact, outcome), at the timestep it is decided
        decided |= vote.join(committed, _first_two, _first_two, _commit_of)
        decided |= vote.where(_is_no).select(_aborted)
        decision = p.table("decision")
        decision |= decided
        ballots = p.table("ballots")  # the votes the coordinator has heard
        ballots |= vote
        decide = p.channel("decide", address=_first, delay=delay)  # (participant, xact, outcome)
        # To each participant once its vote is in (the decision and the voters heard so far; a vote
        # heard after the decision, at once): a decision never overtakes its prepare, whatever
        # the delays, so "prepared" cannot overwrite it.
        decide.send(decided.join(ballots, _first_two, _first_two, _to_voter))
        decide.send(vote.join(decision, _first_two, _first_two, _to_late_voter))
        state = p.keyed_table("state", key=_first_two)
        state.upsert(prepare.select(_prepared))
        state.upsert(decide)
    return p.output(decision), p.output(state)


# Small named functions (records cross processes; names read better in errors than lambdas) --------
def _source(edge: tuple[Any, ...]) -> Any:
    return edge[0]


_target = itemgetter(1)
"""An edge's target. The key and field functions are `operator.itemgetter`s: C calls, run
once per record by the joins and exchanges of every timestep."""


_first = itemgetter(0)


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


_second = itemgetter(1)


def _left(left: Any, right: Any) -> Any:
    return left


_key_value = itemgetter(1, 3)
"""A put's ``(key, value)``."""


def _get_response(get: tuple[Any, Any], stored: tuple[Any, Any]) -> tuple[Any, Any, Any]:
    return (get[0], stored[0], stored[1])


def _to(address: Any) -> Any:
    return lambda record: (address, *record)


def _to_server(server: Any) -> Any:
    return lambda said, nick: (server, (nick[1], said[1]))


def _address_and_client(record: tuple[Any, ...]) -> tuple[Any, Any]:
    return (record[0], record[1])


def _forward(message: tuple[Any, Any], node: tuple[Any, Any, Any]) -> tuple[Any, Any]:
    return (node[1], message[1])


def _not_at(server: Any) -> Any:
    return lambda record: record[0] != server


def _session(message: tuple[Any, ...]) -> Any:
    return message[2]


def _add_action(action: tuple[Any, ...], cart: tuple[Any, Any] | None) -> tuple[Any, Any]:
    counts = dict(cart[1]) if cart is not None else {}
    item, count = action[4], action[5]
    counts[item] = counts.get(item, 0) + count
    return (action[2], tuple(sorted(counts.items())))


def _checkout(checkout: tuple[Any, ...], cart: tuple[Any, Any]) -> tuple[Any, ...]:
    server, client, session = checkout[0], checkout[1], checkout[2]
    return (client, server, session, tuple((i, c) for i, c in cart[1] if c > 0))


def _at_coordinator(coordinator: Any) -> Any:
    return lambda request: (coordinator, request[0], tuple(request[1]))


def _prepares(request: tuple[Any, Any, Any]) -> list[tuple[Any, Any, Any]]:
    return [(participant, request[0], request[1]) for participant in request[2]]


def _prepare_key(prepare: tuple[Any, Any, Any]) -> tuple[Any, Any]:
    return (prepare[0], prepare[2])


def _first_two(record: tuple[Any, ...]) -> tuple[Any, Any]:
    return (record[0], record[1])


def _ballot_of(prepare: tuple[Any, Any, Any], policy: tuple[Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    return (prepare[1], prepare[2], prepare[0], policy[2])


def _is_yes(vote: tuple[Any, ...]) -> bool:
    return vote[3] == "yes"


def _is_no(vote: tuple[Any, ...]) -> bool:
    return vote[3] != "yes"


def _yes_vote(vote: tuple[Any, ...], request: tuple[Any, Any, Any]) -> tuple[Any, LSet]:
    return ((vote[0], vote[1], len(request[2])), LSet((vote[2],)))


@monotone
def _all_voted(key: tuple[Any, Any, int], voters: LSet) -> Any:
    return voters.size().gt_eq(key[2])


def _commit_of(vote: tuple[Any, ...], key: tuple[Any, Any, int]) -> tuple[Any, Any, str]:
    return (key[0], key[1], "commit")


def _aborted(vote: tuple[Any, ...]) -> tuple[Any, Any, str]:
    return (vote[0], vote[1], "abort")


def _to_voter(decision: tuple[Any, Any, str], vote: tuple[Any, ...]) -> tuple[Any, Any, str]:
    return (vote[2], decision[1], decision[2])


def _to_late_voter(vote: tuple[Any, ...], decision: tuple[Any, Any, str]) -> tuple[Any, Any, str]:
    return (vote[2], decision[1], decision[2])


def _prepared(prepare: tuple[Any, Any, Any]) -> tuple[Any, Any, str]:
    return (prepare[0], prepare[2], "prepared")


def _action_set(action: tuple[Any, Any, Any, int]) -> tuple[Any, LSet]:
    return (action[0], LSet((action[1:],)))


def _summary(actions: LSet) -> tuple[tuple[Any, int], ...]:
    totals: dict[Any, int] = {}
    for _, item, delta in actions:
        totals[item] = totals.get(item, 0) + delta
    return tuple(sorted((i, q) for i, q in totals.items() if q))
