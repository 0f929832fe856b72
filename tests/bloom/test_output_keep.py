"""What an `Output` keeps (``keep="all" | "latest" | "changes" | "none"``): the KVS fed a seeded
stream one timestep at a time, each output read as its mode allows after every timestep and
compared with a Python dict replaying the same stream. The bounded modes must also stay bounded
(no history kept), and asking a mode for what it does not keep is a clear error.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import bloom

KEYS = 12
STEPS = 9


def stream(seed: int) -> list[tuple[list[Any], list[Any], list[Any]]]:
    """Per timestep (puts ``(client, key, reqid, value)``, deletes ``(key, reqid)``, gets
    ``(reqid, key)``), each key used at most once per timestep."""
    rng = random.Random(seed)
    steps, reqid = [], 0
    for _ in range(STEPS):
        puts, dels, gets = [], [], []
        for key in rng.sample(range(KEYS), 8):
            reqid += 1
            r = rng.random()
            if r < 0.45:
                puts.append(("c", key, reqid, rng.randrange(100)))
            elif r < 0.8:
                gets.append((reqid, key))
            else:
                dels.append((key, reqid))
        steps.append((puts, dels, gets))
    return steps


def replay(steps: list[tuple[list[Any], list[Any], list[Any]]]) -> tuple[list[set[Any]], list[set[Any]]]:
    """The answers per timestep (responses, kvstate): puts and deletes of ``t`` hold from ``t + 1``."""
    state: dict[Any, Any] = {}
    responses, states = [], []
    for puts, dels, gets in steps:
        states.append(set(state.items()))
        responses.append({(reqid, key, state[key]) for reqid, key in gets if key in state})
        for key, _ in dels:
            state.pop(key, None)
        for _, key, _, value in puts:
            state[key] = value
    return responses, states


def run(keep: bloom.Keep, workers: int, read: Any) -> None:
    """Feed the stream a timestep at a time; after each is complete, ``read(t, response, kvstate)``."""
    steps = stream(7)

    def build(scope: timely.Scope) -> Any:
        puts, dels, gets = scope.new_input("puts"), scope.new_input("dels"), scope.new_input("gets")
        return (puts, dels, gets), bloom.programs.kvs(puts, dels, gets, keep=keep)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, (response, kvstate))):
        for t, batches in enumerate(steps):
            for inp, batch in zip(inputs, batches, strict=True):
                inp.send(batch)
                inp.advance_to(t + 1)
            comp.wait_passed(response.probe, t)
            comp.wait_passed(kvstate.probe, t)
            read(t, response, kvstate)


def test_all_keeps_every_timestep() -> None:
    responses, states = replay(stream(7))
    outputs: list[bloom.Output] = []
    run("all", 1, lambda t, r, s: outputs.extend([r, s]) if t == 0 else None)
    response, kvstate = outputs
    assert [response.answer(t) for t in range(STEPS)] == responses
    assert [kvstate.answer(t) for t in range(STEPS)] == states
    assert len(kvstate.batches) >= STEPS - 1  # the whole history: every timestep's changes


def test_latest_keeps_the_answer_at_the_latest_timestep_and_no_history(workers: int) -> None:
    responses, states = replay(stream(7))
    seen: list[int] = []

    def read(t: int, response: bloom.Output, kvstate: bloom.Output) -> None:
        # every worker runs in this process, so its output holds the whole answer
        assert response.answer() == responses[t] and response.answer(t) == responses[t]
        assert kvstate.answer() == states[t] and kvstate.answer(t) == states[t]
        assert kvstate.settled == t and all(e > t for e in kvstate.batches)  # only what is in flight
        if t > 0:
            with pytest.raises(bloom.BloomError, match="keeps only the latest answer"):
                kvstate.answer(t - 1)
        seen.append(t)

    run("latest", workers, read)
    assert seen == list(range(STEPS))


def test_changes_hands_over_what_arrived_since_the_last_read(workers: int) -> None:
    responses, states = replay(stream(7))
    count: dict[Any, int] = {}
    got: list[set[Any]] = []

    def read(t: int, response: bloom.Output, kvstate: bloom.Output) -> None:
        for step, changes in sorted(kvstate.changes().items()):
            assert step <= t + 1  # a timestep's records never come before its epoch is fed
            for fact, diff in changes:
                count[fact] = count.get(fact, 0) + diff
        assert kvstate.batches == {} and kvstate.changes() == {}  # nothing kept once read
        assert {fact for fact, n in count.items() if n > 0} == states[t]
        got.append({r for rs in response.changes().values() for r in rs})

    run("changes", workers, read)
    assert got == responses


def test_none_keeps_nothing_and_says_where_to_read() -> None:
    def read(t: int, response: bloom.Output, kvstate: bloom.Output) -> None:
        assert response.batches == {} and kvstate.batches == {}
        assert response.probe.passed(t)
        with pytest.raises(bloom.BloomError, match="read it with its stream"):
            kvstate.answer(t)
        with pytest.raises(bloom.BloomError, match="changes\\(\\) needs keep='changes'"):
            kvstate.changes()

    run("none", 1, read)


def test_an_unknown_keep_is_refused() -> None:
    def build(scope: timely.Scope) -> Any:
        puts, dels, gets = scope.new_input("puts"), scope.new_input("dels"), scope.new_input("gets")
        return bloom.programs.kvs(puts, dels, gets, keep="last")  # type: ignore[arg-type]

    with pytest.raises(bloom.BloomError, match="keep must be one of 'all', 'latest', 'changes', 'none'"):
        timely.execute(build, timeout=TIMEOUT).__enter__()
