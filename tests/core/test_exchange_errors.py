"""An exchange function that raises (or returns something other than an int) fails with an
error naming the stage whose input it partitions, the record and the time — whether the
records come from `Input.send` or from another stage's callback — and stops the computation."""

from __future__ import annotations

from typing import Any

import pytest

import timely


def broken(r: Any) -> int:
    if r == 7:
        raise KeyError("no partition for 7")
    return int(r)


def build_from_input(scope: timely.Scope) -> Any:
    inp = scope.new_input("numbers")
    inp.exchange("spread", broken).probe("done")
    return inp


def build_from_a_stage(scope: timely.Scope) -> Any:
    inp = scope.new_input("numbers")
    inp.map("inc", lambda r: r + 1).exchange("spread", broken).probe("done")
    return inp


def test_an_exchange_function_raising_in_input_send_names_the_stage() -> None:
    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build_from_input, workers=2, timeout=30) as (comp, inp):
            inp.send(range(5))
            with pytest.raises(timely.VertexError) as raised:
                inp.send(range(5, 10))
            err = raised.value
            assert err.stage == "spread" and err.callback == "exchange", err
            assert str(err) == (
                "stage 'spread': the exchange function of its input 0 raised KeyError on the record 7 "
                "at time (0): 'no partition for 7'"
            )
            assert isinstance(err.__cause__, KeyError)
            # Part of the batch went before the failure: the computation stops, nothing half-done runs on.
            with pytest.raises(timely.ComputationFailed) as later:
                inp.send([1])
            assert later.value.__cause__ is err
            raise err
    assert info.value.stage == "spread"


def test_an_exchange_function_raising_after_a_callback_names_its_stage_not_the_sender() -> None:
    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build_from_a_stage, workers=2, timeout=30) as (comp, inp):
            inp.send(range(10))  # 6 + 1 reaches `spread` from `inc`'s callback
    err = info.value
    assert err.stage == "spread" and err.callback == "exchange", err
    assert "raised KeyError on the record 7 at time (0)" in str(err)


def test_an_exchange_function_returning_no_int_says_so() -> None:
    def build(scope: timely.Scope) -> Any:
        inp = scope.new_input("words")
        inp.exchange("by_word", lambda w: w).probe("done")
        return inp

    pattern = r"stage 'by_word': the exchange function of its input 0 returned str 'a', not an int, on the record 'a'"
    with pytest.raises(timely.VertexError, match=pattern):
        with timely.execute(build, workers=2, timeout=30) as (comp, inp):
            inp.send(["a", "b"])


# The failure that escapes a `with` block -----------------------------------------------------------
# test_a_peer_killed_mid_run_fails_every_other_process (tests/net) was flaky: a process whose
# failure landed between two sends saw ComputationFailed, one whose failure landed during a wait
# saw the PeerError itself. The block now always ends in the failure itself.


def test_a_failure_landing_between_two_sends_escapes_the_block_as_itself() -> None:
    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build_from_a_stage, workers=2, timeout=30) as (comp, inp):
            inp.send(range(10))
            comp.explain()  # runs the computation: it fails here, between two sends
            inp.send([1])  # raises ComputationFailed inside the block
    assert info.value.stage == "spread" and info.value.callback == "exchange"
