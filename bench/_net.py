"""What the ``net.*`` benchmarks share: starting `bench/_net_worker.py` in N real processes.

`launch` runs ``python -m timely.cli run -n N -m bench._net_worker MODE ...`` (N OS processes
talking over loopback TCP, ports chosen by the launcher), waits for it, and returns the one
result line of every process, parsed, in process order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._harness import BenchmarkError

__all__ = ["WORKER", "launch", "load"]

ROOT = Path(__file__).resolve().parent.parent
WORKER = "bench._net_worker"
"""The module each process runs (``timely run -m``, from the repository's root)."""
MARK = "NETBENCH "


def launch(
    processes: int,
    mode: str,
    *args: Any,
    timeout: float = 300.0,
    worker: str = WORKER,
    mark: str = MARK,
    options: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Run the module ``worker`` (by default `bench._net_worker`) in ``processes`` processes (with the
    launcher's ``options``); their results (each printed on a line after ``mark``), by process index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIMELY_")}  # the launcher sets them
    cmd = [
        sys.executable,
        "-m",
        "timely.cli",
        "run",
        "-n",
        str(processes),
        *options,
        "-m",
        worker,
        mode,
        *map(str, args),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkError(f"{mode} with {processes} processes did not finish within {timeout:.0f} s") from exc
    results: dict[int, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        _, sep, payload = line.partition(mark)
        if sep:
            result = json.loads(payload)
            results[result["process"]] = result
    if done.returncode != 0 or len(results) != processes:
        tail = "\n".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-25:])
        raise BenchmarkError(
            f"{mode} with {processes} processes: exit status {done.returncode}, "
            f"{len(results)}/{processes} results; output ends with:\n{tail}"
        )
    return [results[i] for i in range(processes)]


def load() -> str:
    """The 1-minute load average, as a hint of other work on the machine."""
    try:
        return f"load {os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover - not available
        return "load ?"
