"""The chaos suite, short: one run per kind of fault over the keyed multi-epoch workload on 3
real processes, each run's per-epoch outputs compared with an undisturbed run's (which is
itself checked against plain Python). The long, seeded version over this and linq connected
components is ``python -m bench faults.chaos``; the harness is `tests.support.chaos`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import chaos
from tests.support.chaos import Fault, Plan

pytestmark = pytest.mark.timeout(300)

PLANS = {
    # the case: every epoch fed and the input closed, a process killed mid-stream
    "kill_with_every_epoch_in_flight": Plan(1, "sum", 20, 0, 0.02, [Fault("delivered", 1, 8)]),
    # the kill 0.4 s after the process starts: a quiet machine runs all 20 epochs in about a second
    "kill_from_outside_then_while_restoring": Plan(
        2, "sum", 20, 2, 0.02, [Fault("outside_kill", 2, 0.4), Fault("recovery", 0)]
    ),
    "pause_with_sigstop": Plan(3, "sum", 20, 2, 0.01, [Fault("pause", 0, 1.0)]),
    "torn_input_log": Plan(4, "sum", 20, 4, 0.0, [Fault("torn_log", 1, 12)]),
    "corrupt_newest_checkpoint_part": Plan(5, "sum", 20, 0, 0.005, [Fault("corrupt_part", 2, 14)]),
    "disk_full_for_a_moment": Plan(6, "sum", 20, 2, 0.02, [Fault("disk_full", 0, 5)]),
}


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    return chaos.undisturbed("sum", tmp_path_factory.mktemp("undisturbed"))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_chaos(name: str, tmp_path: Path, expected: dict[int, list[str]]) -> None:
    plan = PLANS[name]
    outcome = chaos.execute(plan, tmp_path / "run", expected)
    if outcome.note.startswith("no tmpfs"):
        pytest.skip(outcome.note)
    assert outcome.faults >= 1, f"the fault did not land: {plan.describe()} {outcome.note}"
    assert outcome.returncode == 0, outcome.note
    assert outcome.lost == 0 and outcome.duplicated == 0 and not outcome.silent, outcome.note
    assert outcome.survived == outcome.meant == outcome.faults
    assert outcome.redelivered <= outcome.faults * chaos.PROCESSES  # the documented window only


def test_a_corrupt_input_log_stops_the_run_naming_the_file(tmp_path: Path, expected: dict[int, list[str]]) -> None:
    plan = Plan(7, "sum", 20, 2, 0.0, [Fault("corrupt_log", 0, 12, survive=False)])
    outcome = chaos.execute(plan, tmp_path / "run", expected)
    assert outcome.faults == 1, outcome.note
    assert outcome.returncode != 0 and outcome.loud and not outcome.silent, outcome.note
