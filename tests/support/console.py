"""Watching a computation's console from the tests: `watched` starts
`tests.support.console_program` under ``timely run --console`` and gives its URL, its output
so far, and JSON from its endpoints."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support import ROOT, clean_env
from tests.support.launcher import LAUNCHER, running

START_SECONDS = 30.0


class Watched:
    """A running console program: its console's URL and the lines its processes printed."""

    def __init__(self, launcher: subprocess.Popen[str], stop: Path) -> None:
        self.launcher = launcher
        self.stop = stop
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(launcher.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(launcher.stderr, self.errors), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self.url = self.wait_for(lambda: next((ln.split()[-1] for ln in self.lines if " URL " in f" {ln}"), None))

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n").split("] ", 1)[-1])

    def wait_for(self, found: Callable[[], Any], seconds: float = START_SECONDS, what: str = "") -> Any:
        """Poll ``found()`` until it gives something other than None (or fail, with the output)."""
        deadline = time.monotonic() + seconds
        while True:
            value = found()
            if value is not None:
                return value
            if self.launcher.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"gave up waiting {what or 'for the console'}; the program printed:\n"
                    + "\n".join(self.lines + self.errors)
                )
            time.sleep(0.1)

    def get(self, path: str, token: str | None = None, raw: bool = False) -> Any:
        """GET ``path`` from the console (the token of the printed URL, or ``token``)."""
        base, _, query = self.url.partition("?")
        url = base.rstrip("/") + path
        if token is not None:
            url += f"?token={token}" if token else ""
        elif query:
            url += "?" + query
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
        return body.decode() if raw else json.loads(body)

    def status(self, path: str, token: str | None) -> int:
        try:
            self.get(path, token, raw=True)
        except urllib.error.HTTPError as e:
            return e.code
        return 200

    def printed(self, tag: str) -> list[Any]:
        return [json.loads(ln.split(" ", 1)[1]) for ln in self.lines if ln.startswith(tag + " ")]


@contextlib.contextmanager
def watched(
    mode: str, tmp_path: Path, processes: int = 1, workers: int = 1, console: str = "127.0.0.1:0", **env: str
) -> Iterator[Watched]:
    """``timely run -n processes --workers workers --console console`` of the console program in
    ``mode``; stopped (and, if need be, killed) on the way out."""
    stop = tmp_path / f"stop-{mode}"
    argv = [
        *LAUNCHER,
        "run",
        "-n",
        str(processes),
        "--workers",
        str(workers),
        "--console",
        console,
        "-m",
        "tests.support.console_program",
        mode,
        str(stop),
    ]
    with running(argv, ROOT, clean_env(**env)) as launcher:
        try:
            yield Watched(launcher, stop)
            stop.touch()
            launcher.wait(timeout=30)
        finally:
            stop.touch()  # the launcher is killed on the way out if it has not ended


@dataclasses.dataclass
class JobRun:
    """What a job run under ``--console`` left: its exit code, what it printed, and the consoles
    it announced on stderr, in order."""

    returncode: int
    printed: str
    errors: list[str]
    urls: list[str]


def run_job_watching_consoles(
    argv: list[str], visit: Callable[[str], None], seconds: float = 240, env: dict[str, str] | None = None
) -> JobRun:
    """Run a job (``argv``, from the repository root) that prints ``console at <url>`` on stderr
    for each computation, calling ``visit(url)`` on every console announced so far about ten
    times a second until the job ends (a visit that finds the console gone is skipped)."""
    job = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    urls: list[str] = []
    errors: list[str] = []

    def read() -> None:
        assert job.stderr is not None
        for line in job.stderr:
            errors.append(line)
            if "console at http://" in line:
                urls.append(line.split("console at ", 1)[1].strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + seconds
        while job.poll() is None and time.monotonic() < deadline:
            for url in list(urls):
                with contextlib.suppress(OSError, ValueError):
                    visit(url)
            time.sleep(0.1)
        printed, _ = job.communicate(timeout=60)
    finally:
        job.kill()
    reader.join(5)
    return JobRun(job.returncode, printed, errors, urls)


def read_json(url: str) -> Any:
    """GET ``url`` and parse its JSON body."""
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())
