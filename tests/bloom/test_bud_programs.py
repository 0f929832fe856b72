"""Bud's programs ported (`timely_libs.bloom.programs`): the key-value store (bud-sandbox
kvs/kvs.rb, test/tc_kvs.rb), the destructive shopping cart (cart/destructive_cart.rb with
test/cart_workloads.rb), the chat server (bud examples/chat, with leaving) and two-phase
commit, on one process (one and three workers), on two simulated processes and on two real
processes over loopback TCP (tests/support/bloom_program.py's `bud`), with every epoch fed in
lockstep and with all of them in flight at once. Each answer, per timestep, is the union of the
processes' shares (a fact held twice fails) compared with Bud's expected output where its test
has one, and with a plain-Python replay of the same workload throughout.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import bloom_program as program
from tests.support.modes import Mode

TIMEOUT = 60.0
MODES = [
    Mode("one", workers=1),
    Mode("one", workers=3),
    Mode("simulated", processes=2, seed=3),
    Mode("tcp", processes=2),
]


def normal(facts: Any) -> list[Any]:
    """Facts as the processes report them: JSON (tuples as lists), sorted."""
    return sorted(json.loads(json.dumps(list(facts))), key=json.dumps)


@functools.cache
def answers(mode: Mode, name: str, seed: int, lockstep: bool) -> dict[str, list[list[Any]]]:
    """Per output and timestep, the union of every process's share (each fact held once)."""
    results = mode.run(program.bud, name, seed, lag=0 if lockstep else None, timeout=TIMEOUT)
    assert [r["process"] for r in results] == list(range(mode.processes))
    return union_of(results)


def union_of(results: list[dict[str, Any]]) -> dict[str, list[list[Any]]]:
    merged: dict[str, list[list[Any]]] = {}
    for output in results[0]["answers"]:
        merged[output] = []
        for t in range(len(results[0]["answers"][output])):
            union: list[Any] = []
            for r in results:
                for fact in r["answers"][output][t]:
                    assert fact not in union, f"{output} at timestep {t}: {fact} held twice"
                    union.append(fact)
            merged[output].append(sorted(union, key=json.dumps))
    return merged


def notifications(mode: Mode, name: str, seed: int) -> dict[str, int]:
    results = mode.run(program.bud, name, seed, lag=0, timeout=TIMEOUT)
    total: dict[str, int] = {}
    for r in results:
        for stage, n in r["notifications"].items():
            total[stage] = total.get(stage, 0) + n
    return total


RUNS = [
    pytest.param(mode, lockstep, id=f"{mode}-{'lockstep' if lockstep else 'in-flight'}")
    for mode in MODES
    for lockstep in (True, False)
]


# The key-value store -----------------------------------------------------------------------------------
def kvs_reference(seed: int) -> tuple[list[list[Any]], list[list[Any]]]:
    """A dict replaying the workload: a put or delete of epoch e takes effect at timestep e + 1; a
    get of epoch e reads the state at timestep e."""
    feeds, steps = program.kvs_workload(seed)
    state: dict[str, Any] = {}
    responses, states = [], []
    for t in range(steps):
        if t >= 1 and t - 1 < len(feeds["puts"]):
            for key, _ in feeds["dels"][t - 1]:
                state.pop(key, None)
            for _, key, _, value in feeds["puts"][t - 1]:
                state[key] = value
        gets = feeds["gets"][t] if t < len(feeds["gets"]) else []
        responses.append(normal((reqid, key, state[key]) for reqid, key in gets if key in state))
        states.append(normal(state.items()))
    return responses, states


@pytest.mark.parametrize(("mode", "lockstep"), RUNS)
def test_kvs_gives_buds_answers_and_a_dicts(mode: Mode, lockstep: bool) -> None:
    got = answers(mode, "kvs", 1, lockstep)
    # tc_kvs.rb test_simple: after workload1 one entry, "bak"; the get answers "bak"
    assert got["kvstate"][4] == [["foo", "bak"]]
    assert got["response"][5] == [[1234, "foo", "bak"]]
    # test_del: the delete empties the store; a later get finds nothing
    assert got["kvstate"][7] == [] and got["response"][7] == []
    responses, states = kvs_reference(1)
    assert got["kvstate"] == states
    assert got["response"] == responses
    assert sum(map(len, responses)) > 10 and any(not r for r in responses[8:])  # gets that hit, and misses


def test_kvs_coordinates_only_the_table() -> None:
    """Deletion is the one non-monotone step: the table waits once per timestep (and answers the
    gets itself, on its key); no other stage waits at all."""
    asked = notifications(Mode("one", workers=2), "kvs", 1)
    assert asked["kvs.step.kvstate"] > 0
    assert {stage: n for stage, n in asked.items() if n and stage != "kvs.step.kvstate"} == {}


# The destructive cart ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "lockstep"), RUNS)
def test_destructive_cart_gives_buds_checkouts(mode: Mode, lockstep: bool) -> None:
    """cart_workloads.rb: the simple workload checks out ``[["beer", 13], ["diapers", 1]]``
    (books at -1 and meat at 0 left out); the two sessions of the multi-session workload check out
    ``[["blue bottle", 1], ["cole", 1]]`` and ``[["remedy", 1], ["sightglass", 2]]``."""
    memo = answers(mode, "cart", 1, lockstep)["memo"]
    assert memo[-1] == normal(
        [
            ("client", "server", 1234, (("beer", 13), ("diapers", 1))),
            ("client", "server", 555, (("remedy", 1), ("sightglass", 2))),
            ("client", "server", 666, (("blue bottle", 1), ("cole", 1))),
        ]
    )
    first = next(t for t, m in enumerate(memo) if m)
    feeds, _ = program.cart_workload(1)
    checkout_epoch = next(e for e, c in enumerate(feeds["checkouts"]) if c)
    assert first == checkout_epoch + 2  # to the server at +1, the response back at +2


# The chat server ---------------------------------------------------------------------------------------------
def chat_reference(seed: int) -> list[list[Any]]:
    """What each client's inbox holds per timestep: a line said at epoch e reaches the server at
    e + 1 and is relayed to every client connected there (connected at epoch c <= e: stored at
    c + 1; left at epoch l: deleted at l + 2), arriving at e + 2."""
    feeds, steps = program.chat_workload(seed)
    connected = {c: e for e, batch in enumerate(feeds["connects"]) for c, _ in batch}
    left = {c: e for e, batch in enumerate(feeds["leaves"]) for (c,) in batch}
    nick = {c: n for batch in feeds["connects"] for c, n in batch}
    inbox: set[Any] = set()
    out = []
    for t in range(steps):
        e = t - 2
        if 0 <= e < len(feeds["messages"]):
            for sender, text in feeds["messages"][e]:
                for c, ce in connected.items():
                    if ce + 1 <= e + 1 and not (c in left and left[c] + 2 <= e + 1):
                        inbox.add((c, (nick[sender], text)))
        out.append(normal(inbox))
    return out


@pytest.mark.parametrize(("mode", "lockstep"), RUNS)
def test_chat_relays_to_the_clients_connected_then(mode: Mode, lockstep: bool) -> None:
    got = answers(mode, "chat", 1, lockstep)["inbox"]
    want = chat_reference(1)
    assert got == want
    relayed_to = {fact[0] for fact in want[-1]}
    assert "c1" in relayed_to and len(relayed_to) == 5  # everyone heard something, c1 before leaving


# Two-phase commit ---------------------------------------------------------------------------------------------
def commit_reference(
    seed: int, delay: Callable[[Any], int] = lambda fact: 1, steps: int | None = None
) -> tuple[list[list[Any]], list[list[Any]]]:
    """Each message takes ``delay(fact)`` timesteps. Begun at epoch e, participant p gets its
    prepare at ``a = e + delay(prepare)`` (prepared from a + 1), its vote reaches the coordinator
    at ``v = a + delay(vote)``; the coordinator decides at D, the last vote's arrival if all are
    yes, else the first no's; p's decision leaves once both D and v have come, arrives after
    ``delay(decide)``, and holds one timestep later. With every delay 1: prepared at e + 2,
    decided at e + 2, the participants' outcome from e + 4."""
    feeds, default_steps = program.commit_workload(seed)
    votes = {(p, x): v for batch in feeds["policies"] for p, x, v in batch}
    decided: dict[str, tuple[int, str]] = {}  # xact -> (D, outcome)
    lives: list[tuple[str, str, int, int]] = []  # (participant, xact, prepared from, outcome from)
    for e, batch in enumerate(feeds["requests"]):
        for x, who in batch:
            arrive = {p: e + delay((p, "coordinator", x)) for p in who}
            heard = {p: arrive[p] + delay(("coordinator", x, p, votes[(p, x)])) for p in who}
            if all(votes[(p, x)] == "yes" for p in who):
                decided[x] = (max(heard.values()), "commit")
            else:
                decided[x] = (min(heard[p] for p in who if votes[(p, x)] != "yes"), "abort")
            at, outcome = decided[x]
            for p in who:
                lives.append((p, x, arrive[p] + 1, max(at, heard[p]) + delay((p, x, outcome)) + 1))
    decisions, states = [], []
    for t in range(default_steps if steps is None else steps):
        decisions.append(normal(("coordinator", x, outcome) for x, (at, outcome) in decided.items() if t >= at))
        state = []
        for p, x, prepared, final in lives:
            if t >= final:
                state.append((p, x, decided[x][1]))
            elif t >= prepared:
                state.append((p, x, "prepared"))
        states.append(normal(state))
    return decisions, states


@pytest.mark.parametrize(("mode", "lockstep"), RUNS)
def test_two_phase_commit_decides_as_the_votes_say(mode: Mode, lockstep: bool) -> None:
    got = answers(mode, "2pc", 1, lockstep)
    decisions, states = commit_reference(1)
    assert got["decision"] == decisions
    assert got["state"] == states
    outcomes = {d[2] for d in decisions[-1]}
    assert outcomes == {"commit", "abort"}  # the workload has both


@pytest.mark.parametrize("mode", [MODES[0], MODES[3]], ids=str)
def test_two_phase_commit_decides_the_same_whatever_the_messages_delays(mode: Mode) -> None:
    """Bud's ``<~`` arrives at *some* later timestep. Under 3 timesteps a message, and under 1, 2
    or 3 by the message (`program.message_delay`), every transaction gets the decision it gets
    with a delay of 1, and every participant ends in it; only the timesteps move, each exactly
    as the delays say."""
    decisions, states = commit_reference(1)
    for name, delay in (("2pc-late", lambda fact: 3), ("2pc-delayed", program.message_delay)):
        got = answers(mode, name, 1, True)
        want = commit_reference(1, delay, steps=len(got["decision"]))
        assert got["decision"] == want[0]
        assert got["state"] == want[1]
        assert got["decision"][-1] == decisions[-1] and got["state"][-1] == states[-1]
        assert got["decision"][:8] != decisions[:8]  # the delays did move the decisions
    assert {program.message_delay(("coordinator", f"x{x}", "commit")) for x in range(9)} == {1, 2, 3}


def test_the_comparison_can_fail() -> None:
    """A share held twice is caught; a reference with one fact off differs."""
    responses, _ = kvs_reference(1)
    changed = [list(r) for r in responses]
    changed[5] = [[1234, "foo", "bam"]]
    assert changed != answers(MODES[0], "kvs", 1, True)["response"]
    results = MODES[0].run(program.bud, "kvs", 1, lag=0, timeout=TIMEOUT)
    assert union_of(results)["response"] == responses
    with pytest.raises(AssertionError, match="held twice"):
        union_of([results[0], dict(results[0], process=1)])
