"""Running `tests.support.ft_program` under the launcher, and reading back what it delivered:
shared by the kill tests, the recovery tests and the chaos suite."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support import ROOT, clean_env


def command(
    workload: str,
    out: Path,
    kill: str,
    processes: int,
    restarts: int,
    checkpoints: Path | None,
    every: int,
    workers: int = 1,
) -> list[str]:
    """``timely run`` of `tests.support.ft_program` (its arguments: see there)."""
    run = [sys.executable, "-m", "timely.cli", "run", "-n", str(processes), "--restarts", str(restarts)]
    run += ["--workers", str(workers)]
    if checkpoints is not None:
        run += ["--checkpoint-dir", str(checkpoints), "--checkpoint-every", str(every)]
    return [*run, "-m", "tests.support.ft_program", workload, str(out), kill]


def launch(
    workload: str,
    out: Path,
    kill: str = "",
    *,
    processes: int = 2,
    workers: int = 1,
    restarts: int = 3,
    checkpoints: Path | None = None,
    every: int = 3,
    timeout: float = 240,
    every_seconds: float | None = None,
    shape: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tests.support.ft_program` under ``timely run --restarts``; ``shape``: its FT_*
    variables (epochs, epochs in flight, a slow consumer)."""
    env = clean_env(**(shape or {}))
    if every_seconds is not None:
        env["FT_EVERY_SECONDS"] = str(every_seconds)
        # epochs paced at 2x the policy's period: whether a checkpoint falls due must not depend
        # on how fast the machine runs the 4 epochs left after the restart
        env["FT_EPOCH_PAUSE"] = str(2 * every_seconds)
    return subprocess.run(
        command(workload, out, kill, processes, restarts, checkpoints, every, workers),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def delivered(out: Path) -> tuple[dict[int, list[Any]], int, set[int]]:
    """Per epoch, what all processes delivered (a (process, epoch) delivered again after a
    restart counts once, and is counted); the attempts seen."""
    per: dict[int, list[Any]] = defaultdict(list)
    seen: dict[tuple[int, int], list[Any]] = {}
    again = 0
    attempts: set[int] = set()
    for path in sorted(out.glob("p*.jsonl")):
        process = int(path.stem[1:])
        for line in path.read_text().splitlines():
            row = json.loads(line)
            attempts.add(row["attempt"])
            key = (process, row["epoch"])
            if key in seen:
                assert seen[key] == row["records"], f"epoch {row['epoch']} delivered twice, differently"
                again += 1
                continue
            seen[key] = row["records"]
            per[row["epoch"]].extend(map(json.dumps, row["records"]))
    return {e: sorted(v) for e, v in per.items()}, again, attempts
