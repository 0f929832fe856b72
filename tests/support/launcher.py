"""Running the ``timely`` launcher as a child process, for the tests of the launcher, restarts
and failure reports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import clean_env
from timely.cli import main

LAUNCHER = [sys.executable, "-c", "import sys; from timely.cli import main; sys.exit(main())"]
"""``timely`` without relying on the console script being on PATH."""

RUN_TIMEOUT = 20.0
"""Seconds a launcher may run before the test kills it and fails (unless told otherwise)."""
SECRET = "00112233445566778899aabbccddeeff" * 2


def timely(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = RUN_TIMEOUT,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``timely`` with these arguments, run to its end; its stdin is ``input``, or empty."""
    return subprocess.run(
        [*LAUNCHER, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env() if env is None else env,
        cwd=cwd,
        **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
    )


@contextlib.contextmanager
def running(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A launcher started in the background (empty stdin, output captured), killed on the way
    out whatever happened."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean_env() if env is None else env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as launcher:
        try:
            yield launcher
        finally:
            launcher.kill()


def interrupt(launcher: subprocess.Popen[str], sig: signal.Signals = signal.SIGINT) -> str:
    """Send ``sig`` to a running launcher and wait for it to end; its stderr."""
    launcher.send_signal(sig)
    _, err = launcher.communicate(timeout=RUN_TIMEOUT)
    return err


def script(tmp_path: Path, body: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def lines_of(output: str, index: int) -> list[str]:
    prefix = f"[p{index}] "
    return [line[len(prefix) :] for line in output.splitlines() if line.startswith(prefix)]


def gone(pid: int, within: float = 3.0) -> bool:
    """Whether process `pid` has ended (polls: a kernel-delivered kill is asynchronous). A zombie
    counts as ended: an orphan's zombie waits for init, which may reap it late."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):  # PermissionError: the pid was reused
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def main_in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``timely`` in this process (for errors found before anything starts): status, out, err."""
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
