"""The ``timely`` launcher, with real processes: the cluster's environment variables, prefixed
output, exit statuses, signals, the hosts-file mode; and `cluster_from_env`'s parsing."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import clean_env
from tests.support.launcher import (
    LAUNCHER,
    RUN_TIMEOUT,
    SECRET,
    gone,
    interrupt,
    lines_of,
    main_in_process,
    running,
    script,
    timely,
)
from timely._runtime.config import ClusterConfig, ClusterConfigError, cluster_from_env
from timely._supervisor import Sink

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the launcher's process handling is tested on POSIX")


ENV_PRINTER = """
    import json, os, sys
    keys = ["TIMELY_PROCESSES", "TIMELY_PROCESS_INDEX", "TIMELY_ADDRESSES", "TIMELY_WORKERS",
            "TIMELY_SECRET", "PYTHONHASHSEED", "PYTHONUNBUFFERED"]
    record = {k: os.environ.get(k) for k in keys}
    record["hash"] = hash("timely")
    record["argv"] = sys.argv[1:]
    print(json.dumps(record))
"""


def envs_of(output: str, processes: int) -> list[dict]:
    records = []
    for i in range(processes):
        lines = lines_of(output, i)
        assert len(lines) == 1, output
        records.append(json.loads(lines[0]))
    return records


# The environment ---------------------------------------------------------------------------------


def test_every_process_gets_a_consistent_cluster(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    result = timely("run", "-n", "3", "--workers", "2", prog, "--help", "-n", "9")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    records = envs_of(result.stdout, 3)
    for i, r in enumerate(records):
        assert r["TIMELY_PROCESS_INDEX"] == str(i)
        assert r["TIMELY_PROCESSES"] == "3"
        assert r["TIMELY_WORKERS"] == "2"
        assert r["PYTHONHASHSEED"] == "0"
        assert r["PYTHONUNBUFFERED"] == "1"
        assert r["argv"] == ["--help", "-n", "9"]  # the program's arguments reach it untouched
    assert len({r["TIMELY_ADDRESSES"] for r in records}) == 1
    assert len({r["TIMELY_SECRET"] for r in records}) == 1
    assert len({r["hash"] for r in records}) == 1
    assert len(bytes.fromhex(records[0]["TIMELY_SECRET"])) == 32
    addresses = records[0]["TIMELY_ADDRESSES"].split(",")
    assert len(addresses) == 3
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len({a.rsplit(":", 1)[1] for a in addresses}) == 3
    # and the runtime's parser reads them back
    configs = [cluster_from_env({k: v for k, v in r.items() if isinstance(v, str)}) for r in records]
    assert all(c is not None for c in configs)
    assert [c.process_index for c in configs if c is not None] == [0, 1, 2]
    assert len({str(c.addresses) for c in configs if c is not None}) == 1
    assert {c.workers for c in configs if c is not None} == {2}


WORKER_COUNTER = """
import json

import timely

class Where(timely.Vertex):
    def on_recv(self, edge, records, time):
        self.send_by(self.outputs[0], [(self.worker_index, self.peers)], time)

def build(scope):
    numbers = scope.new_input("numbers")
    seen = []
    numbers.stage("where", Where, exchange=lambda r: r).subscribe(lambda t, recs: seen.extend(recs))
    return numbers, seen

with timely.execute(build, timeout=30) as (comp, (numbers, seen)):
    numbers.send(range(12))
print(json.dumps(sorted(set(seen))))
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_the_workers_option_gives_every_process_that_many_workers(tmp_path: Path, processes: int) -> None:
    # one process included: its cluster of one is dropped, and its worker count once with it
    result = timely("run", "-n", str(processes), "--workers", "3", script(tmp_path, WORKER_COUNTER))
    assert result.returncode == 0, result.stderr
    seen = [json.loads(lines_of(result.stdout, i)[0]) for i in range(processes)]
    peers = 3 * processes
    for i, pairs in enumerate(seen):
        assert pairs == [[w, peers] for w in range(3 * i, 3 * i + 3)], result.stdout


WORKERS_IN_PROGRAM = WORKER_COUNTER.replace(
    "timely.execute(build, timeout=30)", "timely.execute(build, workers=2, timeout=30)"
)


@pytest.mark.parametrize(("option", "expected"), [([], 2), (["--workers", "2"], 2)])
def test_the_programs_workers_stand_unless_the_launcher_says_otherwise(
    tmp_path: Path, option: list[str], expected: int
) -> None:
    result = timely("run", "-n", "2", *option, script(tmp_path, WORKERS_IN_PROGRAM))
    assert result.returncode == 0, result.stderr
    for i in range(2):
        pairs = json.loads(lines_of(result.stdout, i)[0])
        assert pairs == [[w, 2 * expected] for w in range(expected * i, expected * i + expected)], result.stdout


def test_workers_that_disagree_with_the_program_fail_at_once_naming_both(tmp_path: Path) -> None:
    # the program would wait 30 s for its peers; the launcher's 20 s limit fails a late error
    result = timely("run", "-n", "2", "--workers", "3", script(tmp_path, WORKERS_IN_PROGRAM))
    assert result.returncode != 0
    assert "timely run --workers 3" in result.stderr and "execute(..., workers=2)" in result.stderr, result.stderr
    assert lines_of(result.stdout, 0) == [] and lines_of(result.stdout, 1) == []


def test_fresh_secret_per_run(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    secrets = {envs_of(timely("run", prog).stdout, 1)[0]["TIMELY_SECRET"] for _ in range(2)}
    assert len(secrets) == 2


def free_port_pair() -> int:
    """A port P with P and P + 1 free right now (tests run in parallel: no fixed port is safe)."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two consecutive free ports")


def test_base_port_existing_secret_and_user_settings(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    env = clean_env(TIMELY_SECRET=SECRET, PYTHONHASHSEED="123", PYTHONUNBUFFERED="")
    port = free_port_pair()
    result = timely("run", "-n", "2", "--base-port", str(port), prog, env=env)
    assert result.returncode == 0, result.stderr
    for r in envs_of(result.stdout, 2):
        assert r["TIMELY_ADDRESSES"] == f"127.0.0.1:{port},127.0.0.1:{port + 1}"
        assert r["TIMELY_SECRET"] == SECRET
        assert r["PYTHONHASHSEED"] == "123"  # the user's choice is kept
        assert r["PYTHONUNBUFFERED"] == ""
        assert r["TIMELY_WORKERS"] is None  # without --workers, the program's execute(workers=) decides


def test_secret_file_wins_over_the_environment(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    secret_file = tmp_path / "secret.hex"
    secret_file.write_text("AABBCCDDEEFF00112233445566778899\n")
    secret_file.chmod(0o600)
    result = timely("run", "-n", "2", "--secret-file", secret_file, prog, env=clean_env(TIMELY_SECRET=SECRET))
    assert result.returncode == 0, result.stderr
    assert {r["TIMELY_SECRET"] for r in envs_of(result.stdout, 2)} == {"aabbccddeeff00112233445566778899"}


def test_bad_secrets_are_refused(tmp_path: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    result = timely("run", "-n", "2", prog, env=clean_env(TIMELY_SECRET="not hex"))
    assert result.returncode == 2
    assert "TIMELY_SECRET is not hex" in result.stderr
    assert result.stdout == ""
    bad = tmp_path / "bad.secret"
    bad.write_text("zz")
    result = timely("run", "-n", "2", "--secret-file", bad, prog)
    assert result.returncode == 2
    assert "secret file" in result.stderr and "not hex" in result.stderr


# Output ------------------------------------------------------------------------------------------


def test_output_is_prefixed_whole_lines(tmp_path: Path) -> None:
    prog = script(
        tmp_path,
        """
        import os, sys, time
        i = int(os.environ["TIMELY_PROCESS_INDEX"])
        for k in range(2000):
            sys.stdout.write(f"p{i}-{k}-")          # a line in three writes
            sys.stdout.write("x" * 150)
            sys.stdout.write("\\n")
            if k % 500 == 0:
                print(f"err{i}-{k}", file=sys.stderr)
        sys.stdout.write(f"slow-{i}-")
        sys.stdout.flush()
        time.sleep(0.2)
        sys.stdout.write("end\\n")
        sys.stdout.write(f"last-{i}")             # no newline at the end
        sys.stderr.write(f"lasterr-{i}")
        """,
    )
    result = timely("run", "-n", "3", prog)
    assert result.returncode == 0, result.stderr
    pattern = re.compile(r"\[p(\d)\] (?:p\1-(\d+)-x{150}|slow-\1-end|last-\1)")
    counters = [0, 0, 0]
    for line in result.stdout.splitlines():
        m = pattern.fullmatch(line)
        assert m, f"mangled line: {line[:80]!r}"
        i = int(m.group(1))
        if m.group(2) is not None:
            assert int(m.group(2)) == counters[i]  # each process's lines in order, none lost
            counters[i] += 1
    assert counters == [2000, 2000, 2000]
    for i in range(3):
        assert lines_of(result.stdout, i)[-2:] == [f"slow-{i}-end", f"last-{i}"]
        assert lines_of(result.stderr, i) == [f"err{i}-{k}" for k in range(0, 2000, 500)] + [f"lasterr-{i}"]


def test_output_streams_live(tmp_path: Path) -> None:
    prog = script(
        tmp_path,
        """
        import time
        print("first", flush=True)
        time.sleep(30)
        """,
    )
    with subprocess.Popen(
        [*LAUNCHER, "run", str(prog)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=clean_env()
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"[p0] first\n"  # before the program ends
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 128 + signal.SIGTERM


def test_module_mode(tmp_path: Path) -> None:
    script(
        tmp_path,
        """
        import os, sys
        print(__name__, os.environ["TIMELY_PROCESS_INDEX"], *sys.argv[1:])
        """,
        name="launched_module.py",
    )
    result = timely("run", "-n", "2", "-m", "launched_module", "a", "-m", "--grace", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert lines_of(result.stdout, 0) == ["__main__ 0 a -m --grace"]
    assert lines_of(result.stdout, 1) == ["__main__ 1 a -m --grace"]


def test_stdin_goes_to_process_zero(tmp_path: Path) -> None:
    prog = script(
        tmp_path,
        """
        import sys
        print(repr(sys.stdin.read()))
        """,
    )
    result = subprocess.run(
        [*LAUNCHER, "run", "-n", "2", str(prog)],
        input="data\n",
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    assert lines_of(result.stdout, 0) == ["'data\\n'"]
    assert lines_of(result.stdout, 1) == ["''"]


# Failure -----------------------------------------------------------------------------------------

SLEEPER = """
    import os, signal, sys, time
    from pathlib import Path
    i = int(os.environ["TIMELY_PROCESS_INDEX"])
    plan = dict(arg.split("=") for arg in sys.argv[1:])   # index=action
    action = plan.get(str(i), "sleep")
    if action == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(f"pid{i}").write_text(str(os.getpid()))
    if action.startswith("exit"):
        time.sleep(float(action.split(":")[2]) if action.count(":") == 2 else 0)
        sys.exit(int(action.split(":")[1]))
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(100)
"""


def pids(tmp_path: Path, processes: int, within: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within
    files = [tmp_path / f"pid{i}" for i in range(processes)]
    while not all(f.exists() and f.read_text() for f in files):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.02)
    return [int(f.read_text()) for f in files]


def test_failure_propagates_and_the_others_are_stopped(tmp_path: Path) -> None:
    prog = script(tmp_path, SLEEPER)
    start = time.monotonic()
    result = timely("run", "-n", "3", "--grace", "1", prog, "1=exit:3", cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert result.returncode == 3
    assert 1.0 <= elapsed < 1.0 + 3.0 + 3.0  # the grace period, but not the SIGKILL delay
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("timely: p1 exited with status 3;")
    assert "grace period: p0, p2 stopped with SIGTERM" in summary
    assert summary.endswith("exit status 3")
    assert all(gone(pid) for pid in pids(tmp_path, 3))


def test_a_process_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    prog = script(tmp_path, SLEEPER)
    result = timely(
        "run", "-n", "3", "--grace", "0.2", "--kill-after", "0.5", prog, "2=exit:4", "0=ignore-term", cwd=tmp_path
    )
    assert result.returncode == 4
    summary = result.stderr.strip().splitlines()[-1]
    assert "p0 stopped with SIGTERM then SIGKILL after 0.5s" in summary
    assert "p1 stopped with SIGTERM" in summary
    assert all(gone(pid) for pid in pids(tmp_path, 3))


def test_a_process_killed_by_a_signal_is_reported(tmp_path: Path) -> None:
    prog = script(tmp_path, SLEEPER)
    result = timely("run", "-n", "2", "--grace", "0.5", prog, "1=sigkill", "0=exit:0:0.3", cwd=tmp_path)
    assert result.returncode == 128 + signal.SIGKILL
    assert result.stderr.strip().splitlines()[-1] == "timely: p1 killed by SIGKILL; exit status 137"


def test_the_first_failure_sets_the_status(tmp_path: Path) -> None:
    # p1 fails first; p0 fails by itself within the grace period (as a peer of a failed process does)
    prog = script(tmp_path, SLEEPER)
    result = timely("run", "-n", "3", "--grace", "5", prog, "1=exit:3", "0=exit:1:0.5", "2=exit:0:0.2", cwd=tmp_path)
    assert result.returncode == 3
    summary = result.stderr.strip().splitlines()[-1]
    assert summary == "timely: p1 exited with status 3 (first); p0 exited with status 1; exit status 3"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_launcher_stops_everything(tmp_path: Path, sig: signal.Signals) -> None:
    prog = script(tmp_path, SLEEPER)
    with running([*LAUNCHER, "run", "-n", "3", str(prog)], tmp_path) as launcher:
        children = pids(tmp_path, 3)
        err = interrupt(launcher, sig)
    assert launcher.returncode == 128 + sig
    assert err.strip().splitlines()[-1] == (
        f"timely: interrupted by {sig.name}; p0, p1, p2 stopped with {sig.name}; exit status {128 + sig}"
    )
    assert all(gone(pid) for pid in children)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_no_orphans_when_the_launcher_is_killed(tmp_path: Path) -> None:
    prog = script(tmp_path, SLEEPER)
    with subprocess.Popen(
        [*LAUNCHER, "run", "-n", "2", str(prog)],
        cwd=tmp_path,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as launcher:
        try:
            children = pids(tmp_path, 2)
        finally:
            launcher.kill()
        launcher.wait(timeout=RUN_TIMEOUT)
    assert all(gone(pid) for pid in children)


# Hosts-file mode ---------------------------------------------------------------------------------


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.txt"
    path.write_text("# the cluster\n\nhost-a:7000   # the first\n  host-b:7001\n[::1]:7002\n")
    return path


def test_hosts_mode_runs_one_process(tmp_path: Path, hosts: Path) -> None:
    prog = script(tmp_path, ENV_PRINTER)
    secret_file = tmp_path / "secret.hex"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    result = timely(
        "run", "--hosts", hosts, "--process", "1", "--workers", "4", "--secret-file", secret_file, prog, "x"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[p1] ")
    (record,) = [json.loads(line) for line in lines_of(result.stdout, 1)]
    assert record["TIMELY_PROCESSES"] == "3"
    assert record["TIMELY_PROCESS_INDEX"] == "1"
    assert record["TIMELY_ADDRESSES"] == "host-a:7000,host-b:7001,[::1]:7002"
    assert record["TIMELY_WORKERS"] == "4"
    assert record["TIMELY_SECRET"] == SECRET
    assert record["PYTHONHASHSEED"] == "0"
    assert record["argv"] == ["x"]


def test_hosts_mode_secret_from_env_and_exit_status(tmp_path: Path, hosts: Path) -> None:
    prog = script(tmp_path, "import sys; print('bye'); sys.exit(5)")
    result = timely("run", "--hosts", hosts, "--process", "2", prog, env=clean_env(TIMELY_SECRET=SECRET))
    assert result.returncode == 5
    assert result.stdout == "[p2] bye\n"
    assert result.stderr.strip().splitlines()[-1] == "timely: p2 exited with status 5; exit status 5"


@pytest.mark.parametrize(
    ("hosts_text", "args", "message"),
    [
        ("a:1\nb:2\n", ["--process", "0"], "needs a shared secret"),
        ("a:1\nb:2\n", ["--process", "2", "--secret-file", "S"], "--process 2, but"),
        ("a:1\nb:2\n", ["--secret-file", "S"], "--hosts needs --process"),
        ("a:1\nb\n", ["--process", "0", "--secret-file", "S"], "hosts.txt:2: expected host:port, got 'b'"),
        ("a:1\na:1\n", ["--process", "0", "--secret-file", "S"], "processes 0 and 1 both have the address a:1"),
        ("# nothing\n", ["--process", "0", "--secret-file", "S"], "no host:port lines"),
        ("a:1\nb:2\n", ["--process", "0", "--secret-file", "S", "--base-port", "5000"], "--base-port"),
        ("a:1\nb:2\n", ["--process", "0", "--secret-file", "S", "-n", "3"], "-n 3 but"),
    ],
)
def test_hosts_mode_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    hosts_text: str,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIMELY_SECRET", raising=False)
    script(tmp_path, "print('ran')")
    (tmp_path / "hosts.txt").write_text(hosts_text)
    (tmp_path / "S").write_text(SECRET)
    (tmp_path / "S").chmod(0o600)
    code, out, err = main_in_process(["run", "--hosts", "hosts.txt", *args, "prog.py"], capsys)
    assert code == 2
    assert message in err
    assert out == ""


# The command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "give the program to run"),
        (["run", "-n", "2", "missing.py"], "cannot find the program 'missing.py'"),
        (["run", "-n", "0", "x.py"], "must be at least 1"),
        (["run", "--process", "1", "x.py"], "--process is for a multi-machine cluster"),
        (["run", "--grace", "soon", "x.py"], "is not a number of seconds"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("print('ran')")
    code, out, err = main_in_process(args, capsys)
    assert code == 2
    assert message in err
    assert out == ""


def test_help() -> None:
    command = [shutil.which("timely")] if shutil.which("timely") else LAUNCHER
    top = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert top.returncode == 0
    assert "usage: timely" in top.stdout and "run" in top.stdout
    run = subprocess.run([*command, "run", "--help"], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0
    for option in ("-n N", "--workers", "--hosts", "--process", "--secret-file", "--base-port", "--grace", "-m MODULE"):
        assert option in run.stdout


# cluster_from_env --------------------------------------------------------------------------------

GOOD = {
    "TIMELY_PROCESSES": "3",
    "TIMELY_PROCESS_INDEX": "2",
    "TIMELY_ADDRESSES": "10.0.0.1:7000, host-b:7001,[::1]:7002",
    "TIMELY_WORKERS": "4",
    "TIMELY_SECRET": "deadBEEF" * 4,
}


def test_cluster_from_env_parses() -> None:
    config = cluster_from_env(GOOD)
    assert config == ClusterConfig(
        processes=3,
        process_index=2,
        addresses=[("10.0.0.1", 7000), ("host-b", 7001), ("::1", 7002)],
        workers=4,
        secret=bytes.fromhex("deadbeef" * 4),
    )
    assert config is not None
    assert config.address == ("::1", 7002)
    assert "dead" not in repr(config).lower()  # the secret stays out of logs
    assert cluster_from_env(config.to_env()) == config


def test_cluster_from_env_unset_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cluster_from_env({}) is None
    for key in GOOD:
        monkeypatch.delenv(key, raising=False)
    assert cluster_from_env() is None
    monkeypatch.setenv("TIMELY_PROCESSES", "1")
    monkeypatch.setenv("TIMELY_PROCESS_INDEX", "0")
    monkeypatch.setenv("TIMELY_ADDRESSES", "127.0.0.1:5000")
    config = cluster_from_env()
    assert config is not None
    assert config.workers == 1
    assert len(config.secret) == 32  # one process needs no shared secret: a random one


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"TIMELY_PROCESSES": "4"}, "TIMELY_ADDRESSES has 3 entries but TIMELY_PROCESSES is 4"),
        ({"TIMELY_PROCESSES": "three"}, "TIMELY_PROCESSES='three' is not an integer"),
        ({"TIMELY_PROCESSES": "0"}, "TIMELY_PROCESSES='0' must be at least 1"),
        ({"TIMELY_PROCESS_INDEX": None}, "TIMELY_PROCESS_INDEX is not set"),
        ({"TIMELY_PROCESS_INDEX": "3"}, "TIMELY_PROCESS_INDEX is 3 but TIMELY_PROCESSES is 3"),
        ({"TIMELY_PROCESS_INDEX": "-1"}, "TIMELY_PROCESS_INDEX='-1' must be at least 0"),
        ({"TIMELY_ADDRESSES": None}, "TIMELY_ADDRESSES is not set"),
        ({"TIMELY_ADDRESSES": "a:1,b:2,"}, "TIMELY_ADDRESSES entry 2: expected host:port, got ''"),
        ({"TIMELY_ADDRESSES": "a:1,b:x,c:3"}, "TIMELY_ADDRESSES entry 1: the port in 'b:x' is not a number"),
        ({"TIMELY_ADDRESSES": "a:1,b:70000,c:3"}, "not in 1..65535"),
        ({"TIMELY_ADDRESSES": "a:1,::1:2,c:3"}, "an IPv6 host needs brackets"),
        ({"TIMELY_ADDRESSES": "a:1,:2,c:3"}, "the host is missing"),
        ({"TIMELY_ADDRESSES": "a:1,b:2,a:1"}, "processes 0 and 2 both have the address a:1"),
        ({"TIMELY_WORKERS": "0"}, "TIMELY_WORKERS='0' must be at least 1"),
        ({"TIMELY_SECRET": None}, "TIMELY_SECRET is not set"),
        ({"TIMELY_SECRET": "xyz"}, "TIMELY_SECRET is not hex"),
        ({"TIMELY_SECRET": " "}, "TIMELY_SECRET is empty"),
    ],
)
def test_cluster_from_env_errors(changes: dict[str, str | None], message: str) -> None:
    env = dict(GOOD)
    for key, value in changes.items():
        if value is None:
            del env[key]
        else:
            env[key] = value
    with pytest.raises(ClusterConfigError) as info:
        cluster_from_env(env)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_cluster_config_validates() -> None:
    with pytest.raises(ClusterConfigError, match="2 addresses for 3 processes"):
        ClusterConfig(3, 0, [("a", 1), ("b", 2)], 1, b"k")
    with pytest.raises(ClusterConfigError, match="needs a strong secret: the shared secret is 0 bytes"):
        ClusterConfig(2, 0, [("a", 1), ("b", 2)], 1, b"")
    with pytest.raises(ClusterConfigError, match="process_index 2 is not in 0..1"):
        ClusterConfig(2, 2, [("a", 1), ("b", 2)], 1, b"k")


def test_the_launcher_writes_a_long_line_whole_when_signals_interrupt_it() -> None:
    """Under PYTHONUNBUFFERED the launcher's stdout is a raw FileIO: a signal arriving while a
    long line waits on a full pipe makes write() return short, and the rest must still go out."""
    read_end, write_end = os.pipe()
    raw = open(write_end, "wb", buffering=0)  # noqa: SIM115 - closed below, after the write

    class Stream:
        buffer = raw

    data = b"y" * 500_000 + b"\n"
    got = bytearray()

    def slow_reader() -> None:
        while chunk := os.read(read_end, 4096):
            got.extend(chunk)
            time.sleep(0.0005)

    def pester(stop: threading.Event) -> None:
        while not stop.wait(0.002):
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    stop = threading.Event()
    reader, pesterer = threading.Thread(target=slow_reader), threading.Thread(target=pester, args=(stop,))
    reader.start()
    pesterer.start()
    try:
        Sink(Stream).write(data)  # type: ignore[arg-type]
    finally:
        stop.set()
        pesterer.join()
        raw.close()
        reader.join(timeout=30)
        os.close(read_end)
        signal.signal(signal.SIGUSR1, previous)
    assert bytes(got) == data
