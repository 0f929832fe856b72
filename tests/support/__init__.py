"""What the tests share: references, harnesses, the programs that real processes run, and the
runner that takes a test dataflow through every mode (`tests.support.modes`).

Programs for real processes are modules of this package, started as ``timely run -m
tests.support.NAME`` from the repository's root, so they import it without touching
``sys.path``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
"""The repository: where programs for real processes are started from."""

TIMEOUT = 30.0
"""Seconds any single test computation may take before it fails with an explanation."""


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment for a child process: without timely's variables (the launcher
    sets them), and with the repository importable wherever the child starts."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TIMELY_") and k not in ("PYTHONHASHSEED", "PYTHONUNBUFFERED")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def free_addresses(count: int) -> list[tuple[str, int]]:
    """``count`` loopback addresses whose ports were free a moment ago (bound, then let go), for
    processes a test starts to listen on."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [("127.0.0.1", s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


GENERATED_JOB: dict[str, Any] = {"nodes": 300, "edges": 700, "epochs": 3, "changes_per_epoch": 20, "seed": 5}
"""The main job's generated graph and changes in the ``generated_job`` fixture (tests/conftest.py):
small, with labels that change."""
