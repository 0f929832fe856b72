"""Checkpoints of timestep programs through the runtime (`timely.Checkpoints`): Bud's KVS, chat,
destructive cart and two-phase commit run with a checkpoint every few epochs, are abandoned
mid-stream, and resume from the directory (logged epochs replayed, the rest fed on). What both
runs delivered must give, at every timestep, the undisturbed run's answer and the plain-Python
replay's.

What makes this more than the tables of tests/bloom/test_checkpoint.py: at a checkpoint after
epoch F, a timestep program holds work for timesteps after F that no replay will send again —
the puts and deletions of F waiting at the table with deletions for timestep F + 1, scratch facts
and channel messages sent ahead by ``<+`` and ``<~``, the scratch side of a join holding them.
"""

from __future__ import annotations

from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest

import timely
from tests.bloom.test_bud_programs import chat_reference, commit_reference, kvs_reference, normal
from tests.support import bloom_program as program
from timely_libs import bloom

TIMEOUT = 60.0
SCHEDULE = {"kvs": (3, 7), "cart": (3, 7), "chat": (3, 6), "2pc": (2, 1), "ahead": (3, 2)}
"""Per program, (checkpoint every k epochs, abandon after epoch c). The fence is ``k - 1``,
``2k - 1``, ...: the KVS resumes from epoch 5's checkpoint and replays epochs 6 and 7 from the
input logs; two-phase commit (three epochs of input, eight timesteps) from epoch 1's, with
every decision still to be made by messages in flight."""


class Crash(Exception):
    pass


def run(name: str, directory: Path | None, workers: int, crash_after: int | None = None) -> dict[str, Any]:
    """Feed Bud program ``name`` from where its inputs stand; with ``crash_after``, abandon the run
    once every output has passed that epoch. Returns per output what it delivered, by timestep."""
    build = ahead_build() if name == "ahead" else program.bud(name, 1)
    every = SCHEDULE[name][0]
    policy = None if directory is None else timely.Checkpoints(directory, every_epochs=every, fsync=False)
    kept: dict[str, Any] = {}
    try:
        with timely.execute(build, workers=workers, timeout=TIMEOUT, checkpoints=policy) as (comp, bud):
            kept.update(bud.outputs)
            first = min(inp.epoch for inp in bud.inputs.values())
            kept["first"] = first
            for epoch in range(first, bud.epochs):
                bud.feed(epoch)
                if epoch == crash_after:
                    for probe in bud.probes():
                        comp.wait_passed(probe, epoch, timeout=TIMEOUT)
                    raise Crash
    except Crash:
        pass
    return kept


def per_timestep(outputs: list[dict[str, Any]], name: str, steps: int) -> dict[str, list[list[Any]]]:
    """Each output's answer at every timestep, from the batches of all the runs together."""
    answers = {}
    for output in outputs[0]:
        if output == "first":
            continue
        merged = outputs[-1][output]
        for earlier in outputs[:-1]:
            for step, records in earlier[output].batches.items():
                merged.batches.setdefault(step, []).extend(records)
        answers[output] = [normal(merged.answer(t)) for t in range(steps)]
    return answers


# Scratch facts sent ahead -------------------------------------------------------------------------------
AHEAD_EPOCHS = 6


def ahead_build() -> Any:
    """``next <+ early``; ``both <= next * late``: the fact ``(e, "a")`` of epoch ``e`` reaches the
    join at timestep ``e + 1`` while epoch ``e`` runs, and its match ``(e, "b")`` comes with epoch
    ``e + 1``'s input. A checkpoint after ``e`` must keep the join's scratch side for ``e + 1``."""
    feeds = {
        "early": [[(e, "a")] for e in range(AHEAD_EPOCHS)],
        "late": [[(e - 1, "b")] if e else [] for e in range(AHEAD_EPOCHS)],
    }

    def build(scope: timely.Scope) -> program.BudRun:
        inputs = {name: scope.new_input(name) for name in feeds}
        with bloom.Program(scope, "ahead", timesteps=True) as p:
            early = p.input("early", inputs["early"])
            ahead = p.scratch("ahead")
            ahead.defer(early)
            late = p.table("late", inputs["late"])
            both = p.temp("both", ahead.join(late, itemgetter(0), itemgetter(0)))
        outputs = {"both": p.output(both), "ahead": p.output(ahead)}
        return program.BudRun(inputs, outputs, feeds, AHEAD_EPOCHS + 1, scope.process_index, scope.processes)

    return build


def ahead_reference() -> dict[str, list[list[Any]]]:
    steps = range(AHEAD_EPOCHS + 1)
    return {
        "both": [normal([((t - 1, "a"), (t - 1, "b"))] if 1 <= t < AHEAD_EPOCHS else []) for t in steps],
        "ahead": [normal([(t - 1, "a")] if 1 <= t <= AHEAD_EPOCHS else []) for t in steps],
    }


REFERENCES = {
    "ahead": ahead_reference,
    "kvs": lambda: dict(zip(("response", "kvstate"), kvs_reference(1), strict=True)),
    "chat": lambda: {"inbox": chat_reference(1)},
    "2pc": lambda: dict(zip(("decision", "state"), commit_reference(1), strict=True)),
    "cart": None,
}


@pytest.mark.parametrize("resume_workers", [2, 3], ids=["2-to-2", "2-to-3"])
@pytest.mark.parametrize("name", ["kvs", "chat", "cart", "2pc", "ahead"])
def test_a_timestep_program_resumed_mid_stream_gives_the_undisturbed_answers(
    tmp_path: Path, name: str, resume_workers: int
) -> None:
    steps = AHEAD_EPOCHS + 1 if name == "ahead" else program.BUD_PROGRAMS[name][0](1)[1]
    crash_after = SCHEDULE[name][1]
    undisturbed = per_timestep([run(name, None, 2)], name, steps)
    first = run(name, tmp_path, 2, crash_after=crash_after)
    assert (tmp_path / "checkpoints").exists()
    second = run(name, tmp_path, resume_workers)
    assert second["first"] == crash_after + 1  # the epochs after the checkpoint were replayed
    got = per_timestep([first, second], name, steps)
    assert got == undisturbed
    reference = REFERENCES[name]
    if reference is not None:
        assert got == reference()
    assert any(got[o][t] != got[o][t - 1] for o in got for t in range(crash_after + 1, steps))  # it changed after
