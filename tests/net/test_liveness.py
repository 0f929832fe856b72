"""Liveness between real processes: a process stopped with SIGSTOP (as a hung or cut-off one
looks to its peers) is detected within the peer timeout, on an idle computation as on a busy
one, and every other process fails naming it; under ``--restarts`` the launcher then restarts
the run. A process that computes in one long callback, or whose program is away from timely,
is not mistaken for a hung one: its heartbeats come from a thread of their own.

Every run goes through ``timely run -n 3 --peer-timeout 2`` with
``tests/support/liveness_program.py`` (see its docstring for the modes)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.net.test_failures import LAUNCHER, Proc, clean_env
from tests.support import liveness_program
from tests.support.launcher import lines_of

pytestmark = pytest.mark.skipif(os.name != "posix", reason="real processes and signals are tested on POSIX")

PROGRAM = Path(liveness_program.__file__)
PEER_TIMEOUT = 2.0
"""The peer timeout the tests run with (the default is 30 s)."""
REPORTED_WITHIN = 2.0
"""Seconds a process may take, once it has detected a silent peer, to fail and print that."""
GRACE = 3.0
"""The launcher's --grace: longer than a failed process's bounded flush of its ERROR frame to a
stopped peer (about a second), so that each live process ends by itself, as the summary checks."""


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(argv, env, name)``: start a process; every one is killed at teardown."""
    started: list[Proc] = []

    def start(argv: list[str], env: dict[str, str], name: str) -> Proc:
        started.append(Proc(argv, env, tmp_path, name))
        return started[-1]

    yield start
    for proc in started:
        proc.kill()


def launch(spawn: Callable[..., Proc], mode: str, *args: str, options: tuple[str, ...] = ()) -> Proc:
    argv = [
        *LAUNCHER,
        "-n",
        "3",
        "--peer-timeout",
        str(PEER_TIMEOUT),
        "--grace",
        str(GRACE),
        "--kill-after",
        "1",
        *options,
    ]
    return spawn([*argv, str(PROGRAM), mode, *args], clean_env(), "launcher")  # type: ignore[no-any-return]


def ready_pids(launcher: Proc) -> dict[int, int]:
    return {int(i): int(pid) for i, pid in launcher.wait_for(r"^\[p(\d)\] READY (\d+)$", count=3)}


def failure_of(out: str, process: int) -> dict[str, Any]:
    (record,) = [json.loads(line[len("FAILED ") :]) for line in lines_of(out, process) if line.startswith("FAILED ")]
    return record  # type: ignore[no-any-return]


def result(out: str) -> dict[str, Any]:
    (record,) = [json.loads(line[len("RESULT ") :]) for line in lines_of(out, 0) if line.startswith("RESULT ")]
    return record  # type: ignore[no-any-return]


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("mode", ["idle", "busy"])
def test_a_stopped_process_is_detected_within_the_peer_timeout_and_every_other_names_it(
    spawn: Callable[..., Proc], mode: str
) -> None:
    launcher = launch(spawn, mode)
    pids = ready_pids(launcher)
    try:
        os.kill(pids[1], signal.SIGSTOP)
        stopped = time.monotonic()
        launcher.wait_for(r"^\[p0\] FAILED ", timeout=PEER_TIMEOUT + REPORTED_WITHIN + 5)
        launcher.wait_for(r"^\[p2\] FAILED ", timeout=PEER_TIMEOUT + REPORTED_WITHIN + 5)
        detected = time.monotonic() - stopped
        code = launcher.wait(timeout=30)
    finally:
        kill(pids[1])
    assert detected < PEER_TIMEOUT + REPORTED_WITHIN, f"{detected:.1f} s\n{launcher.describe()}"
    assert code == 1, launcher.describe()
    for i in (0, 2):
        err = failure_of(launcher.out, i)
        assert err["type"] == "PeerError", err
        assert err["info"]["process"] == 1, err  # the silent one is named, by both
        assert "process 1 fell silent" in err["message"], err
        # Each detected it itself, or was told by the other; either way within the timeout.
        silence = re.search(r"nothing heard from process 1 for ([\d.]+) s", err["message"])
        assert silence is not None and float(silence.group(1)) <= PEER_TIMEOUT, err
    summary = launcher.err.strip().splitlines()[-1]
    assert "p0 exited with status 1" in summary and "p2 exited with status 1" in summary, summary
    assert "p1 stopped with" in summary, summary  # the launcher stopped the silent one


@pytest.mark.parametrize("mode", ["compute", "away"])
def test_a_process_busy_in_a_long_callback_or_away_from_timely_is_not_mistaken_for_a_hung_one(
    spawn: Callable[..., Proc], mode: str
) -> None:
    # Process 1's event loop does not run for three peer timeouts: a callback computing without
    # returning, or its program sleeping inside the `with` block.
    launcher = launch(spawn, mode, str(3 * PEER_TIMEOUT))
    code = launcher.wait(timeout=60)
    assert code == 0, launcher.describe()
    assert "FAILED" not in launcher.out, launcher.describe()
    extra = result(launcher.out)["sum"] - sum(range(30))  # every record arrived; compute adds one in 0..6
    assert extra == 0 if mode == "away" else 0 <= extra < 7, launcher.out


def test_under_restarts_a_hung_process_is_a_failure_and_the_run_restarts(spawn: Callable[..., Proc]) -> None:
    # Process 1 stops itself (SIGSTOP) in epoch 3 of the first attempt; the others detect it,
    # the launcher stops it and restarts all three, and the second attempt completes.
    launcher = launch(spawn, "stop-self", options=("--restarts", "1"))
    code = launcher.wait(timeout=60)
    assert code == 0, launcher.describe()
    assert re.search(r"restarting all 3 processes \(restart 1 of 1\)", launcher.err), launcher.describe()
    assert result(launcher.out)["epochs"] == 10
    assert "process 1 fell silent" in launcher.out, launcher.describe()
