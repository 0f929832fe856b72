"""The default run leaves out the slow tests (to stay under 15 minutes); ``-m slow`` runs just
them, as CI does after the default run; a file asked for by path runs whole. Checked by
collecting the real suite in a fresh pytest."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT

SLOW = "tests/test_layers.py::test_mypy_is_clean_over_all_the_code"
QUICK = "tests/test_layers.py::test_the_import_contracts_are_kept"


def collected(*args: str) -> tuple[set[str], str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}, done.stdout


def test_the_default_run_leaves_out_the_slow_tests_and_ci_runs_them() -> None:
    default, out = collected()
    slow, _ = collected("-m", "slow")
    assert QUICK in default and SLOW not in default
    assert SLOW in slow and QUICK not in slow
    assert f"{len(slow)} deselected" in out  # exactly the slow ones, and pytest says so
    named, _ = collected("tests/test_layers.py")
    assert {SLOW, QUICK} <= named
