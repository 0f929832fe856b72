"""Running the ``timely`` launcher as a child process, for the tests of the launcher, restarts
and failure reports."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.support import clean_env

LAUNCHER = [sys.executable, "-c", "import sys; from timely.cli import main; sys.exit(main())"]
"""``timely`` without relying on the console script being on PATH."""

RUN_TIMEOUT = 20.0
SECRET = "00112233445566778899aabbccddeeff" * 2


@contextlib.contextmanager
def running(argv: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A launcher started in the background (empty stdin, output captured), killed on the way
    out whatever happened."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean_env(),
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
