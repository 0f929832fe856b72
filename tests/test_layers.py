"""The layers of docs/architecture.md, enforced by tools: import-linter's contracts (in
pyproject.toml) and mypy over all the code: timely, libs, jobs, bench, the tests and the examples
(under the names they are imported by; tests/support/typecheck.py).
Both run here, so CI (which runs the README's test command) runs them."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import timely
from tests.support import ROOT
from tests.support.typecheck import checked_names, run_mypy

CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {c["id"]: c for c in CONFIG["tool"]["importlinter"]["contracts"]}


def _tool(name: str) -> str:
    """A console script of this environment (next to its interpreter)."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        pytest.fail(f"{name} is not installed in this environment (pip install -e '.[test]')")
    return str(path)


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [_tool("lint-imports"), "--no-logo", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout, done.stdout


def test_every_module_of_timely_is_placed_in_a_layer() -> None:
    """A new module or package of timely must be given a layer (or it escapes the contracts)."""
    placed = {m.strip() for layer in CONTRACTS["layers"]["layers"] for m in layer.split("|")}
    facade = {"timely"}  # the package's __init__: the public facade, above every layer
    found = {f"timely.{m.name}" for m in pkgutil.iter_modules(timely.__path__)}
    assert sorted(found - placed - facade) == []
    assert sorted(placed - found) == [], "the contract names a module that does not exist"


def test_layers_0_to_3_are_forbidden_asyncio() -> None:
    """The rule the table states for every layer below the runtime, without exception."""
    layers = CONTRACTS["layers"]["layers"]
    runtime = layers.index("timely._runtime")
    below = {m.strip() for layer in layers[runtime + 1 :] for m in layer.split("|")}
    below.discard("timely.net")  # layer 1, but it moves frames over sockets: asyncio is its job
    below.discard("timely._console")  # layer 4 under the runtime (imports none of it): a web server on asyncio
    sources = set(CONTRACTS["no-asyncio-below-the-runtime"]["source_modules"])
    assert below == sources
    assert {"asyncio", "anyio", "uvloop"} <= set(CONTRACTS["no-asyncio-below-the-runtime"]["forbidden_modules"])


def test_libraries_may_use_nothing_of_timely_but_its_facade() -> None:
    forbidden = set(CONTRACTS["libraries-use-the-public-api"]["forbidden_modules"])
    every = {f"timely.{m.name}" for m in pkgutil.iter_modules(timely.__path__)}
    assert forbidden == every


@pytest.mark.slow
def test_mypy_is_clean_over_all_the_code() -> None:
    names = checked_names()
    assert sorted(names.values()) == ["bench", "examples", "jobs", "libs", "tests", "timely"]
    assert "exclude" not in CONFIG["tool"]["mypy"], "mypy covers all of timely, the CLI included"
    done = run_mypy()  # the environment's cache: warm across local runs, fresh in CI
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout, done.stdout
