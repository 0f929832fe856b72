"""Every test dataflow in every mode, with equal results: one process (one and several
workers), several simulated processes in one event loop (seeded interleavings), and real
processes over loopback TCP started by `timely run`. The typed cases (lists, registered
types, pickled types) compare the ``repr`` of each record as it arrives, so a record that
changed type on the way (a list become a tuple) fails them."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import timely
import timely.testing
from tests.support import ROOT, clean_env
from tests.support.dataflows import CASES, PICKLED


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
@pytest.mark.parametrize("workers", [1, 3])
def test_one_process_matches_the_reference(name: str, workers: int) -> None:
    build, expected = CASES[name]
    with timely.execute(build, workers=workers, timeout=30) as (comp, case):
        case.feed()
    assert canonical(case.result()) == canonical(expected())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize(("processes", "workers", "seed"), [(2, 1, 1), (3, 2, 7), (4, 1, 42)])
async def test_simulated_processes_match_the_reference(name: str, processes: int, workers: int, seed: int) -> None:
    build, expected = CASES[name]
    async with timely.testing.simulated(
        build, processes=processes, workers=workers, seed=seed, timeout=30, pickle=name in PICKLED
    ) as runs:
        for _, case in runs:
            case.feed()
    assert merge([case.result() for _, case in runs]) == canonical(expected())


def run_cluster_driver(name: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "timely",
            "run",
            "-n",
            "3",
            "--workers",
            "2",
            *options,
            "-m",
            "tests.support.cluster_driver",
            name,
        ],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_processes_over_tcp_match_the_reference(name: str) -> None:
    _, expected = CASES[name]
    done = run_cluster_driver(name, *(["--pickle"] if name in PICKLED else []))
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT " in line]
    assert len(results) == 3, done.stdout
    assert merge(results) == canonical(expected())


def test_a_type_without_codec_fails_across_processes_naming_the_options() -> None:
    # Without --pickle the same program fails in the sending stage, and the message says how to
    # fix it with options that exist (and the launcher option really does fix it: see above).
    done = run_cluster_driver("pickled_records")
    assert done.returncode != 0
    assert "cannot encode a record of type 'Opaque'" in done.stderr
    assert "timely.register_codec(Opaque, encode, decode)" in done.stderr
    assert "timely.execute(..., pickle=True) or timely run --pickle" in done.stderr
    assert "input 'records' at epoch 0: cannot encode" in done.stderr, done.stderr
