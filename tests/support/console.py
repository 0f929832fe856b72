"""Watching a computation's console from the tests: `watched` starts
`tests.support.console_program` under ``timely run --console`` and gives its URL, its output
so far, and JSON from its endpoints."""

from __future__ import annotations

import contextlib
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
