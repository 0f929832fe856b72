"""Runs a test program module in N real OS processes (``timely run -n N -m MODULE``) and gathers
their results.

A program prints one line ``RESULT <json>`` per process; `run` returns them parsed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support import ROOT, clean_env


def run(module: str, *args: Any, processes: int, timeout: float) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "timely.cli", "run", "-n", str(processes), "-m", module, *map(str, args)],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT " in line]
    assert len(results) == processes, done.stdout[-3000:]
    return results
