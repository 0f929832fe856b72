"""Every test dataflow of the core in every mode (the ``mode`` fixture, tests/support/modes.py),
with results equal to plain Python's: one process (one and several workers), several simulated
processes in one event loop (seeded interleavings), and real processes over loopback TCP. The
typed cases (lists, registered types, pickled types) compare the ``repr`` of each record as it
arrives, so a record that changed type on the way (a list become a tuple) fails them."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support import ROOT, clean_env
from tests.support.dataflows import CASES, PICKLED, program
from tests.support.modes import Mode


def canonical(result: Any) -> Any:
    """JSON round trip, then every list of results sorted: order across workers is free."""
    data = json.loads(json.dumps(result))
    return {k: sorted(v, key=json.dumps) for k, v in data.items()}


def merge(results: list[Any]) -> Any:
    merged: dict[str, list[Any]] = {}
    for r in results:
        for k, v in json.loads(json.dumps(r)).items():
            merged.setdefault(k, []).extend(v)
    return canonical(merged)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_matches_the_reference_in_every_mode(mode: Mode, name: str) -> None:
    _, expected = CASES[name]
    results = mode.run(program, name, pickle=name in PICKLED, timeout=30)
    assert len(results) == mode.processes
    assert merge(results) == canonical(expected())


def test_the_merge_notices_a_missing_or_duplicated_share() -> None:
    """The comparison can fail: a process's share dropped, or counted twice, is a difference."""
    _, expected = CASES["distinct_count"]
    results = Mode("simulated", processes=2, seed=3).run(program, "distinct_count", timeout=30)
    assert merge(results) == canonical(expected())
    assert merge(results[:1]) != canonical(expected())
    assert merge([*results, results[1]]) != canonical(expected())


def test_a_type_without_codec_fails_across_processes_naming_the_options() -> None:
    # Without --pickle the same program fails in the sending stage, and the message says how to
    # fix it with options that exist (and the launcher option really does fix it: see above).
    launcher = [sys.executable, "-m", "timely", "run", "-n", "3", "--workers", "2"]
    case = f"{program.__module__}:{program.__qualname__}"
    done = subprocess.run(
        [*launcher, "-m", "tests.support.modes", case, '["pickled_records"]', "0", "60"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode != 0
    assert "cannot encode a record of type 'Opaque'" in done.stderr
    assert "timely.register_codec(Opaque, encode, decode)" in done.stderr
    assert "timely.execute(..., pickle=True) or timely run --pickle" in done.stderr
    assert "input 'records' at epoch 0: cannot encode" in done.stderr, done.stderr
