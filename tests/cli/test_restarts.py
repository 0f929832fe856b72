"""``timely run --restarts``: a failed process makes the launcher stop the others and start them
all again (fresh ports, ``TIMELY_RESTART`` counting), up to R times; ``--checkpoint-dir`` and
``--checkpoint-every`` reach the processes; Ctrl-C never restarts. With real processes: the
launcher runs as ``python -m timely.cli run ...``, and two of the tests run real timely
computations across processes, one of whose processes SIGKILLs itself on the first attempt."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import clean_env, free_addresses
from tests.support.launcher import SECRET, gone, interrupt, lines_of, main_in_process, running, timely

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the launcher's process handling is tested on POSIX"),
    pytest.mark.timeout(90),
]

LAUNCHER = [sys.executable, "-m", "timely.cli"]
RUN_TIMEOUT = 45.0
"""Seconds a launcher may run before the test kills it and fails."""
RESTART_LINE = re.compile(
    r"timely: p(?P<failed>\d+) (?P<how>exited with status \d+|killed by SIG\w+); "
    r"restarting (?P<who>all \d+ processes|p\d+) \(restart (?P<k>\d+) of (?P<of>\d+)\) after (?P<s>\d+\.\d\d) s"
)


def timely_run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``timely`` with these arguments, given the time a run with restarts needs."""
    return timely(*args, cwd=cwd, env=env, input=input, timeout=RUN_TIMEOUT)


def script(tmp_path: Path, body: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def restart_lines(stderr: str) -> list[re.Match[str]]:
    return [m for line in stderr.splitlines() if (m := RESTART_LINE.fullmatch(line))]


def wait_for_pids(tmp_path: Path, processes: int, attempt: int, within: float = 20.0) -> list[int]:
    """The pids the PLAN program wrote for `attempt`, once every process has."""
    deadline = time.monotonic() + within
    files = [tmp_path / f"pid{i}-{attempt}" for i in range(processes)]
    while not all(f.exists() and f.read_text() for f in files):
        assert time.monotonic() < deadline, f"the processes of attempt {attempt} did not start"
        time.sleep(0.02)
    return [int(f.read_text()) for f in files]


# A real timely computation -----------------------------------------------------------------------

SUM = """
    import os, signal, sys, time
    import timely

    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    processes = int(os.environ["TIMELY_PROCESSES"])
    attempt = int(os.environ["TIMELY_RESTART"])
    victim = int(sys.argv[1])                 # the process that kills itself on the first attempt

    def build(scope):
        results = []
        numbers = scope.new_input("numbers")
        doubled = numbers.exchange("spread", lambda r: r).map("double", lambda r: 2 * r)
        doubled.exchange("gather", lambda r: 0).subscribe(lambda t, batch: results.extend(batch), name="collect")
        return numbers, results

    with timely.execute(build, timeout=30) as (comp, (numbers, results)):
        print("attempt", attempt, flush=True)
        numbers.send(range(index, 1000, processes))      # epoch 0: 0..999, spread over the processes
        numbers.advance_to(1)
        if index == victim and attempt == 0:
            time.sleep(0.2)                              # the others are in the middle of it
            os.kill(os.getpid(), signal.SIGKILL)
        numbers.send(range(index, 1000, processes))      # epoch 1: the same again
    if index == 0:
        print("RESULT", sum(results), len(results), flush=True)
"""
EXPECTED_SUM = f"RESULT {2 * 2 * sum(range(1000))} 2000"


def test_a_killed_process_restarts_the_computation(tmp_path: Path) -> None:
    prog = script(tmp_path, SUM)
    result = timely_run("run", "-n", "3", "--restarts", "2", prog, "1", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # one restart, although the survivors fail too (peer lost) or are stopped: one failure, and
    # one line — the survivors' PeerErrors are the launcher's to report, not theirs to print
    (line,) = restart_lines(result.stderr)
    assert result.stderr.splitlines() == [line.group(0)]
    assert line["failed"] == "1" and line["how"] == "killed by SIGKILL", result.stderr
    assert (line["who"], line["k"], line["of"]) == ("all 3 processes", "1", "2")
    assert float(line["s"]) < 5.0  # SIGTERM ends the survivors at once: no --kill-after wait
    assert "restarts used" not in result.stderr  # a clean end prints no summary
    for i in range(3):
        assert lines_of(result.stdout, i)[-1 if i else -2] == "attempt 1"
        assert "attempt 0" in lines_of(result.stdout, i)  # every process joined before the kill
    assert lines_of(result.stdout, 0)[-1] == EXPECTED_SUM
    assert lines_of(result.stdout, 0).count(EXPECTED_SUM) == 1  # only the second attempt finished


def test_without_restarts_the_killed_process_fails_the_run(tmp_path: Path) -> None:
    prog = script(tmp_path, SUM)
    result = timely_run("run", "-n", "3", "--restarts", "0", "--grace", "5", prog, "1", cwd=tmp_path)
    assert result.returncode == 128 + signal.SIGKILL
    assert "restarting" not in result.stderr
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("timely: p1 killed by SIGKILL"), summary
    assert summary.endswith("exit status 137")
    assert "restarts used" not in summary
    assert EXPECTED_SUM not in result.stdout


def test_hosts_mode_each_launcher_restarts_its_own_process(tmp_path: Path) -> None:
    """Two launchers, one per "machine": process 1 kills itself; process 0 loses its peer and
    fails; each launcher restarts its process at the same address, and they finish together."""
    prog = script(tmp_path, SUM)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("".join(f"{host}:{port}\n" for host, port in free_addresses(2)))
    env = clean_env(TIMELY_SECRET=SECRET)
    launchers = [
        subprocess.Popen(
            [*LAUNCHER, "run", "--hosts", str(hosts), "--process", str(i), "--restarts", "2", str(prog), "1"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for launcher in launchers:
            outputs.append(launcher.communicate(timeout=RUN_TIMEOUT))
    finally:
        for launcher in launchers:
            launcher.kill()
            launcher.wait()
    for i, (launcher, (out, err)) in enumerate(zip(launchers, outputs, strict=True)):
        assert launcher.returncode == 0, out[-3000:] + err[-3000:]
        (line,) = restart_lines(err)
        assert (line["failed"], line["who"], line["k"], line["of"]) == (str(i), f"p{i}", "1", "2")
        assert lines_of(out, i)[:2] == ["attempt 0", "attempt 1"]
    assert restart_lines(outputs[1][1])[0]["how"] == "killed by SIGKILL"
    assert lines_of(outputs[0][0], 0)[-1] == EXPECTED_SUM


# What the launcher does, with a scripted program ---------------------------------------------------

PLAN = """
    import json, os, signal, sys, time
    from pathlib import Path

    i = int(os.environ["TIMELY_PROCESS_INDEX"])
    attempt = int(os.environ["TIMELY_RESTART"])
    keys = ["TIMELY_PROCESSES", "TIMELY_ADDRESSES", "TIMELY_SECRET", "TIMELY_RESTART",
            "TIMELY_CHECKPOINT_DIR", "TIMELY_CHECKPOINT_EVERY"]
    print(json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
    Path(f"pid{i}-{attempt}").write_text(str(os.getpid()))
    # arguments ATTEMPT.INDEX=ACTION, ATTEMPT may be *; the default action is exit:0
    plan = dict(arg.split("=", 1) for arg in sys.argv[1:])
    action = plan.get(f"{attempt}.{i}", plan.get(f"*.{i}", "exit:0"))
    if action == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        action = "sleep"
    name, *values = action.split(":")
    if name == "exit":                       # exit:CODE[:DELAY]
        time.sleep(float(values[1]) if len(values) > 1 else 0)
        sys.exit(int(values[0]))
    if name == "exit-at":                    # exit-at:CODE:TIME (time.time())
        time.sleep(max(0.0, float(values[1]) - time.time()))
        sys.exit(int(values[0]))
    if name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if name == "sleep":
        time.sleep(100)
"""


def records_of(output: str, index: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines_of(output, index)]


def test_restarts_exhausted_report_the_last_failure(tmp_path: Path) -> None:
    prog = script(tmp_path, PLAN)
    result = timely_run(
        "run", "-n", "3", "--restarts", "2", "--grace", "0.5", prog, "*.1=exit:3", "*.0=sleep", cwd=tmp_path
    )
    assert result.returncode == 3
    lines = restart_lines(result.stderr)
    assert [(m["failed"], m["how"], m["k"], m["of"]) for m in lines] == [
        ("1", "exited with status 3", "1", "2"),
        ("1", "exited with status 3", "2", "2"),
    ]
    summary = result.stderr.strip().splitlines()[-1]
    # the last attempt ends as a run without restarts does: a grace period, then SIGTERM
    assert summary == (
        "timely: p1 exited with status 3; still running after the 0.5s grace period: p0 stopped with SIGTERM; "
        "restarts used: 2 of 2; exit status 3"
    )
    assert [r["TIMELY_RESTART"] for r in records_of(result.stdout, 1)] == ["0", "1", "2"]
    for pid in wait_for_pids(tmp_path, 3, 2):
        assert gone(pid)


def test_restarts_zero_is_the_old_behaviour(tmp_path: Path) -> None:
    prog = script(tmp_path, PLAN)
    for option in (["--restarts", "0"], []):
        result = timely_run(
            "run", "-n", "2", "--grace", "0.5", *option, prog, "*.1=sigkill", "*.0=exit:0:0.3", cwd=tmp_path
        )
        assert result.returncode == 128 + signal.SIGKILL
        assert result.stderr.strip().splitlines() == ["timely: p1 killed by SIGKILL; exit status 137"]
        assert [r["TIMELY_RESTART"] for r in records_of(result.stdout, 1)] == ["0"]


def test_the_environment_of_every_attempt(tmp_path: Path) -> None:
    """TIMELY_RESTART counts; the checkpoint settings reach every attempt; ports and secret are fresh."""
    prog = script(tmp_path, PLAN)
    result = timely_run(
        "run",
        "-n",
        "2",
        "--restarts",
        "3",
        "--checkpoint-dir",
        "ckpt",
        "--checkpoint-every",
        "7",
        prog,
        "0.1=exit:3:0.2",
        "1.0=exit:5:0.3",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = restart_lines(result.stderr)
    assert [(m["failed"], m["how"], m["k"], m["of"]) for m in lines] == [
        ("1", "exited with status 3", "1", "3"),
        ("0", "exited with status 5", "2", "3"),
    ]
    by_attempt: dict[str, list[dict[str, Any]]] = {}
    for i in range(2):
        for r in records_of(result.stdout, i):
            by_attempt.setdefault(r["TIMELY_RESTART"], []).append(r)
    assert [r["TIMELY_RESTART"] for r in records_of(result.stdout, 1)] == ["0", "1", "2"]
    assert len(by_attempt["2"]) == 2  # the last attempt: both processes
    for records in by_attempt.values():
        for r in records:
            assert r["TIMELY_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")
            assert r["TIMELY_CHECKPOINT_EVERY"] == "7"
            assert r["TIMELY_PROCESSES"] == "2"
        assert len({(r["TIMELY_ADDRESSES"], r["TIMELY_SECRET"]) for r in records}) == 1  # one cluster
    clusters = {k: (rs[0]["TIMELY_ADDRESSES"], rs[0]["TIMELY_SECRET"]) for k, rs in by_attempt.items()}
    assert len({addresses for addresses, _ in clusters.values()}) == 3  # fresh ports every time
    assert len({secret for _, secret in clusters.values()}) == 3


def test_no_checkpoint_settings_unless_asked(tmp_path: Path) -> None:
    prog = script(tmp_path, PLAN)
    result = timely_run("run", "-n", "2", prog, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for i in range(2):
        (record,) = records_of(result.stdout, i)
        assert record["TIMELY_CHECKPOINT_DIR"] is None and record["TIMELY_CHECKPOINT_EVERY"] is None
        assert record["TIMELY_RESTART"] == "0"


def test_simultaneous_failures_are_one_restart(tmp_path: Path) -> None:
    """Processes failing together (as the peers of a failed process do) make one restart."""
    prog = script(tmp_path, PLAN)
    at = time.time() + 2.0  # every process has started by then
    plan = [f"0.0=exit-at:3:{at}", f"0.1=exit-at:4:{at}", f"0.2=exit-at:5:{at}"]
    result = timely_run("run", "-n", "3", "--restarts", "2", prog, *plan, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = restart_lines(result.stderr)
    assert line["k"] == "1"
    assert result.stderr.strip().splitlines() == [line.group(0)]
    for i in range(3):
        assert [r["TIMELY_RESTART"] for r in records_of(result.stdout, i)] == ["0", "1"]


def test_survivors_that_ignore_sigterm_are_killed_before_the_restart(tmp_path: Path) -> None:
    prog = script(tmp_path, PLAN)
    result = timely_run(
        "run",
        "-n",
        "2",
        "--restarts",
        "1",
        "--kill-after",
        "0.5",
        prog,
        "0.0=ignore-term",
        "0.1=exit:3:0.2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (line,) = restart_lines(result.stderr)
    assert line["failed"] == "1"
    assert 0.5 <= float(line["s"]) < 5.0  # SIGTERM, --kill-after, SIGKILL, then the restart
    assert [r["TIMELY_RESTART"] for r in records_of(result.stdout, 0)] == ["0", "1"]


def test_hosts_mode_restarts_this_process_at_the_same_address(tmp_path: Path) -> None:
    prog = script(tmp_path, PLAN)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("host-a:7000\nhost-b:7001\n")
    result = timely_run(
        "run",
        "--hosts",
        hosts,
        "--process",
        "1",
        "--restarts",
        "2",
        "--checkpoint-dir",
        tmp_path / "ckpt",
        prog,
        "0.1=exit:3",
        env=clean_env(TIMELY_SECRET=SECRET),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (line,) = restart_lines(result.stderr)
    assert (line["failed"], line["how"], line["who"], line["k"], line["of"]) == (
        "1",
        "exited with status 3",
        "p1",
        "1",
        "2",
    )
    records = records_of(result.stdout, 1)
    assert [r["TIMELY_RESTART"] for r in records] == ["0", "1"]
    for r in records:
        assert r["TIMELY_ADDRESSES"] == "host-a:7000,host-b:7001"
        assert r["TIMELY_SECRET"] == SECRET
        assert r["TIMELY_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")


STDIN_READER = """
    import os, sys, time
    from pathlib import Path
    i = int(os.environ["TIMELY_PROCESS_INDEX"])
    attempt = int(os.environ["TIMELY_RESTART"])
    print(attempt, repr(sys.stdin.read()), flush=True)
    Path(f"read{i}-{attempt}").write_text("done")
    if i == 1 and attempt == 0:
        deadline = time.monotonic() + 20
        while not Path("read0-0").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        sys.exit(3)
"""


def test_stdin_goes_to_the_first_attempt_only(tmp_path: Path) -> None:
    prog = script(tmp_path, STDIN_READER)
    result = timely_run("run", "-n", "2", "--restarts", "1", prog, cwd=tmp_path, input="data\n")
    assert result.returncode == 0, result.stderr
    assert lines_of(result.stdout, 0) == ["0 'data\\n'", "1 ''"]
    assert lines_of(result.stdout, 1) == ["0 ''", "1 ''"]


@pytest.mark.parametrize("attempt", [0, 1], ids=["first-attempt", "after-a-restart"])
def test_ctrl_c_does_not_restart(tmp_path: Path, attempt: int) -> None:
    prog = script(tmp_path, PLAN)
    plan = ["*.0=sleep", "*.1=sleep", "*.2=sleep"] + (["0.1=exit:3"] if attempt else [])
    argv = [*LAUNCHER, "run", "-n", "3", "--restarts", "3", "--kill-after", "10", str(prog), *plan]
    with running(argv, tmp_path) as launcher:  # --kill-after 10: a loaded machine is not a failure
        children = wait_for_pids(tmp_path, 3, attempt)
        err = interrupt(launcher)
    assert launcher.returncode == 128 + signal.SIGINT
    assert len(restart_lines(err)) == attempt
    used = f"restarts used: {attempt} of 3; " if attempt else ""
    assert err.strip().splitlines()[-1] == (
        f"timely: interrupted by SIGINT; p0, p1, p2 stopped with SIGINT; {used}exit status 130"
    )
    assert all(gone(pid) for pid in children)
    time.sleep(0.3)
    assert not (tmp_path / f"pid0-{attempt + 1}").exists()  # nothing started after the interrupt


# The command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--restarts", "-1"], "must be at least 0"),
        (["--restarts", "x"], "is not an integer"),
        (["--checkpoint-every", "0", "--checkpoint-dir", "d"], "must be at least 1"),
        (["--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint-dir"),
        (["--checkpoint-dir", "x.py"], "--checkpoint-dir x.py: not a directory"),
        (["--checkpoint-dir", ""], "--checkpoint-dir: expected a directory"),
        (["--console-linger", "5"], "--console-linger needs --console"),
        (["--console", "0", "--console-linger", "soon"], "expected seconds (0 or more), got 'soon'"),
    ],
)
def test_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIMELY_CHECKPOINT_DIR", raising=False)
    (tmp_path / "x.py").write_text("print('ran')")
    code, out, err = main_in_process(["run", *args, "x.py"], capsys)
    assert code == 2
    assert message in err
    assert out == ""


def test_help_shows_the_options() -> None:
    run = subprocess.run(
        [*LAUNCHER, "run", "--help"], capture_output=True, text=True, timeout=RUN_TIMEOUT, env=clean_env()
    )
    assert run.returncode == 0
    for text in ("--restarts R", "--checkpoint-dir DIR", "--checkpoint-every K", "TIMELY_RESTART", "fault tolerance"):
        assert text in run.stdout
