"""The interner frees the values no operator holds any more: a stream of ever-new string keys,
inserted and later retracted, keeps what the interner holds bounded (a count of held values,
never a timing), while every epoch's answer stays exactly the from-scratch recomputation, in
one process and across two real processes (each with its own interner)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

import timely
from tests.support.linq_in_flight import accumulated_reports, replayed
from tests.support.linq_interner_program import EPOCHS, POSTS, SWEEP_MIN, builder, changes, reference
from tests.support.modes import Mode
from timely_libs import linq
from timely_libs.linq._columns import _codes

TIMEOUT = 90.0
BOUND = 8 * SWEEP_MIN
"""Held values allowed at any epoch's end; the stream makes many times more distinct values.
An epoch makes about 850 values (users, posts, tags, joined pairs) and two epochs are live, so
one sweep's slack on top of what is live reaches about 2,500; with three epochs fed ahead
(``lag`` 3) the peaks were 2,200-3,030, hence 8 sweeps' worth, not 6."""


@pytest.fixture(autouse=True)
def clean_interner() -> None:
    """Start without the values of earlier tests' computations (ended, but maybe not collected)."""
    gc.collect()
    _codes.release_unused(force=True)


@pytest.mark.parametrize(
    ("mode", "lag"),
    [(Mode("one", workers=1), 0), (Mode("one", workers=2), 3), (Mode("tcp", processes=2), 0)],
    ids=["one-w1-lockstep", "one-w2-in-flight", "tcp-p2-lockstep"],
)
def test_ever_new_string_keys_keep_the_interner_bounded(mode: Mode, lag: int) -> None:
    """``lag`` 3: sweeps run while later epochs' work is queued (codes are never in messages)."""
    distinct_made = EPOCHS * POSTS * 2  # users and posts alone, before tags and joined pairs
    assert distinct_made >= 4 * BOUND, "the stream must outgrow the bound many times over"
    results = mode.run(builder, lag=lag, timeout=TIMEOUT)
    assert accumulated_reports(results, EPOCHS) == replayed([[changes(e)] for e in range(EPOCHS)], reference)
    for r in results:
        assert len(r["held"]) == EPOCHS
        assert max(r["held"]) <= BOUND, r["held"]


def test_a_finished_computation_leaves_nothing_behind() -> None:
    """Once a computation has ended, a sweep frees every value it interned."""
    gc.collect()
    _codes.release_unused(force=True)
    before = _codes.held_values()

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "words")
        return inp, linq.CollectionOutput(inp.collection.distinct().count(len))

    words = [f"word-{i}" for i in range(3000)]
    with timely.execute(build, timeout=TIMEOUT) as (comp, (inp, out)):
        inp.insert_all(words + words[:100])
        inp.advance_to(1)
        comp.wait_passed(out.probe, 0, timeout=TIMEOUT)
        assert _codes.held_values() >= before + len(words)  # the distinct's arrangement holds them all
        assert dict(out.contents()) == {r: 1 for r in Counter(map(len, words)).items()}
    del comp, inp, out
    gc.collect()
    _codes.release_unused(force=True)
    assert _codes.held_values() <= before


def test_a_sweep_keeps_the_codes_of_another_live_computation() -> None:
    """Two computations alive at once share the process's interner: one's sweeps must keep every
    code the other's arrangements hold, or its later retractions would miss their records."""
    gc.collect()

    def build(scope: timely.Scope) -> tuple[linq.CollectionInput, linq.CollectionOutput]:
        inp = linq.new_input(scope, "words")
        return inp, linq.CollectionOutput(inp.collection.distinct().select(lambda w: (w, len(w))))

    held = [f"kept-{i}" for i in range(2000)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_codes, "SWEEP_MIN", 500)
        with timely.execute(build, timeout=TIMEOUT) as (comp_a, (inp_a, out_a)):
            inp_a.insert_all(held)
            inp_a.advance_to(1)
            comp_a.wait_passed(out_a.probe, 0, timeout=TIMEOUT)
            with timely.execute(build, timeout=TIMEOUT) as (comp_b, (inp_b, out_b)):
                for epoch in range(20):  # fresh words, each epoch's gone the next: many sweeps
                    inp_b.insert_all([f"fresh-{epoch}-{i}" for i in range(500)])
                    if epoch:
                        inp_b.remove_all([f"fresh-{epoch - 1}-{i}" for i in range(500)])
                    inp_b.advance_to(epoch + 1)
                    comp_b.wait_passed(out_b.probe, epoch, timeout=TIMEOUT)
                assert dict(out_b.contents()) == {(f"fresh-19-{i}", len(f"fresh-19-{i}")): 1 for i in range(500)}
            inp_a.remove_all(held[:1000])
            inp_a.insert_all(["new-word"])
            inp_a.advance_to(2)
            comp_a.wait_passed(out_a.probe, 1, timeout=TIMEOUT)
            assert dict(out_a.contents()) == {(w, len(w)): 1 for w in [*held[1000:], "new-word"]}
            assert _codes.held_values() < 2000 + 20 * 500  # B's words were freed meanwhile


def test_data_from_a_plain_timely_input_is_freed_too() -> None:
    """The safe point comes with every message to a stateful operator, not with a linq input:
    ever-new words arriving as ``(record, time, diff)`` triples on a plain timely input."""
    gc.collect()

    def build(scope: timely.Scope) -> tuple[timely.Input, linq.CollectionOutput]:
        words = scope.new_input("words")
        distinct = linq.Collection.from_stream(words).distinct()
        return words, linq.CollectionOutput(distinct.count_all().concat(distinct.where(lambda w: w.endswith("-0"))))

    held = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_codes, "SWEEP_MIN", 500)
        with timely.execute(build, timeout=TIMEOUT) as (comp, (words, out)):
            for epoch in range(100):
                triples = [(f"w-{epoch}-{i}", (epoch,), 1) for i in range(200)]
                if epoch:
                    triples += [(f"w-{epoch - 1}-{i}", (epoch,), -1) for i in range(200)]
                words.send(triples)
                words.advance_to(epoch + 1)
                comp.wait_passed(out.probe, epoch, timeout=TIMEOUT)
                held.append(_codes.held_values())
            assert dict(out.contents()) == {200: 1, "w-99-0": 1}
    made = 100 * 200
    assert made >= 4 * BOUND, "the stream must outgrow the bound many times over"
    assert max(held) <= BOUND, held
