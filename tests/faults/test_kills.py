"""Recovery with real processes: `timely run --restarts` over loopback TCP, processes killed
with SIGKILL at chosen and at random points (tests/support/ft_program.py). What every attempt
delivered, merged, must equal the workload's output computed in plain Python epoch by epoch
(`ft_program.reference`, which an undisturbed run matches in every mode): nothing lost,
nothing twice."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

from tests.support import ft_program
from tests.support.ft_harness import delivered, launch
from tests.support.modes import Mode

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("workload", ["sum", pytest.param("cc", marks=pytest.mark.slow)])
def test_the_workloads_undisturbed_match_plain_python_in_every_mode(mode: Mode, workload: str) -> None:
    """What the kill tests compare with is right: undisturbed, each mode delivers it."""
    per: dict[int, list[str]] = defaultdict(list)
    for result in mode.run(ft_program.workload, workload, timeout=120):
        for epoch, records in result.items():
            per[int(epoch)].extend(json.dumps(r) for r in records)
    assert {e: sorted(r) for e, r in per.items()} == ft_program.reference(workload)


def check(workload: str, kill: str, tmp_path: Path, kills: int = 1) -> set[int]:
    expected = ft_program.reference(workload)
    done = launch(workload, tmp_path / "out", kill, checkpoints=tmp_path / "ck")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "restarting all 2 processes" in done.stderr
    got, again, attempts = delivered(tmp_path / "out")
    assert sorted(got) == sorted(expected), "an epoch's output is missing"
    for epoch in expected:
        assert got[epoch] == expected[epoch], f"epoch {epoch} differs from the undisturbed run"
    assert again <= kills, "more epochs delivered again than there were kills"
    return attempts


KILLS = {
    "first_epoch": "1:epoch:0",
    "mid_epoch": "1:epoch:7",
    "during_checkpoint": "0:checkpoint:5",
    "during_recovery": "1:epoch:7,0:recovery:0",
}


@pytest.mark.parametrize("point", sorted(KILLS))
def test_sums_survive_kills(point: str, tmp_path: Path) -> None:
    attempts = check("sum", KILLS[point], tmp_path, kills=2 if point == "during_recovery" else 1)
    assert max(attempts) == (2 if point == "during_recovery" else 1)  # attempt 1 died restoring


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sums_survive_a_kill_at_a_random_moment(seed: int, tmp_path: Path) -> None:
    check("sum", f"{seed % 2}:random:{400 + 300 * seed}", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["first_epoch", "mid_epoch", "during_checkpoint", "during_recovery"])
def test_connected_components_survive_kills(point: str, tmp_path: Path) -> None:
    check("cc", KILLS[point], tmp_path, kills=2 if point == "during_recovery" else 1)


def assert_labels_match_networkx(out: Path) -> None:
    """The label changes delivered, applied in epoch order, end at NetworkX's components of the
    final graph."""
    got, _, _ = delivered(out)
    labels: dict[int, int] = {}
    for epoch in sorted(got):
        for text in got[epoch]:
            (node, label), diff = json.loads(text)
            if diff > 0:
                labels[node] = label
            elif labels.get(node) == label:
                del labels[node]
    graph = nx.Graph()
    present: set[tuple[int, int]] = set()
    for changes in ft_program.edge_epochs():
        for edge, diff in changes:
            (present.add if diff > 0 else present.discard)((edge[0], edge[1]))
    graph.add_edges_from(present)
    expected = {n: min(c) for c in nx.connected_components(graph) for n in c}
    assert labels == expected


@pytest.mark.slow
def test_connected_components_after_kills_match_networkx(tmp_path: Path) -> None:
    done = launch("cc", tmp_path / "out", "1:epoch:5,0:recovery:0", checkpoints=tmp_path / "ck")
    assert done.returncode == 0, done.stderr[-4000:]
    assert_labels_match_networkx(tmp_path / "out")


@pytest.mark.parametrize(("processes", "workers"), [(3, 1), (1, 11)], ids=["p3", "p1w11"])
def test_connected_components_resume_on_another_worker_count(tmp_path: Path, processes: int, workers: int) -> None:
    """A linq computation checkpointed by 2 processes resumes on 3 processes, and on 11 workers
    (a count that divides no bucket count: every arrangement piece is split by its rows'
    routes); the labels it delivers across both runs end at NetworkX's."""
    stopped = launch("cc", tmp_path / "out", "1:epoch:5", restarts=0, checkpoints=tmp_path / "ck")
    assert stopped.returncode != 0
    done = launch("cc", tmp_path / "out", processes=processes, workers=workers, restarts=0, checkpoints=tmp_path / "ck")
    assert done.returncode == 0, done.stderr[-4000:]
    resumed = [json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT" in line]
    assert len(resumed) == processes and all(r["first_epoch"] > 0 for r in resumed), resumed
    assert_labels_match_networkx(tmp_path / "out")


def test_a_time_policy_checkpoints_where_process_0_decides(tmp_path: Path) -> None:
    expected = ft_program.reference("sum")
    done = launch("sum", tmp_path / "out", "1:epoch:8", checkpoints=tmp_path / "ck", every_seconds=0.05)
    assert done.returncode == 0, done.stderr[-4000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT" in line]
    # one restart, for the one kill: what made any other attempt fail is in the launcher's stderr
    assert [r["attempt"] for r in results] == [1, 1], done.stderr[-4000:]
    assert results[0]["first_epoch"] == results[1]["first_epoch"] == 8  # epochs 0..7 were sealed in the log
    assert results[0]["checkpoints"] == results[1]["checkpoints"] >= 1  # the same decisions everywhere
    got, again, _ = delivered(tmp_path / "out")
    assert got == expected and again <= 1


def test_resume_by_hand_on_more_processes(tmp_path: Path) -> None:
    expected = ft_program.reference("sum")
    stopped = launch("sum", tmp_path / "out", "1:epoch:8", restarts=0, checkpoints=tmp_path / "ck")
    assert stopped.returncode != 0
    done = launch("sum", tmp_path / "out", processes=3, restarts=0, checkpoints=tmp_path / "ck")
    assert done.returncode == 0, done.stderr[-4000:]
    firsts = [
        json.loads(line.split("RESULT ", 1)[1])["first_epoch"] for line in done.stdout.splitlines() if "RESULT" in line
    ]
    assert len(firsts) == 3 and len(set(firsts)) == 1 and 6 <= firsts[0] <= 8
    # partitions differ between 2 and 3 processes: compare each epoch's records as a set
    got: dict[int, set[str]] = defaultdict(set)
    for path in (tmp_path / "out").glob("p*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            got[row["epoch"]].update(map(json.dumps, row["records"]))
    assert {e: sorted(v) for e, v in got.items()} == expected
