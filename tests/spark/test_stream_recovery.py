"""`run_stream` with ``checkpoint_dir`` resumes after a real kill: the driver SIGKILLs its whole
process group (itself, Spark's JVM, the timely process) while it writes an epoch, the worst
moment: the computation has taken the micro-batch in, Spark may have committed it (it commits
a micro-batch once its epoch is computed, or with ``pipeline`` sealed, and writes it during the
next one), and the computation may have taken the next one in. Started again on the same
directories, the stream must not feed any micro-batch twice, must write the cut-short epoch's
changes again exactly as before (from the output log), and must compute every later epoch on
the restored state: each epoch's written label changes are checked against labels recomputed
from scratch with NetworkX before and after it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from tests.spark.test_stream import change_batches, drop_file, expected_changes  # noqa: E402
from tests.support import ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]  # two Spark drivers, one after the other

KILL_AT = 2


def driver(tmp_path: Path, epochs: int, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tests.support.stream_resume_program", str(tmp_path / "incoming")]
    argv += [str(tmp_path / "out"), str(tmp_path / "ck"), str(epochs), *extra]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)


def drop_all(tmp_path: Path, batches: list[list[tuple[int, int, int]]]) -> None:
    (tmp_path / "incoming").mkdir()
    now = time.time()
    for epoch, batch in enumerate(batches):
        drop_file(tmp_path / "incoming", f"epoch-{epoch:03d}.parquet", batch)
        # Spark takes the oldest files first: a second apart, they come in epoch order
        os.utime(tmp_path / "incoming" / f"epoch-{epoch:03d}.parquet", (now - 60 + epoch, now - 60 + epoch))


def check_written(out: Path, batches: list[list[tuple[int, int, int]]]) -> None:
    rows = pq.read_table(out).to_pylist()
    for epoch, expected in enumerate(expected_changes(batches)):
        got = [(r["node"], r["label"], r["diff"]) for r in rows if r["epoch"] == epoch]
        assert len(got) == len(set(got)), f"epoch {epoch}: a change written twice"
        assert set(got) == expected, f"epoch {epoch}"


@pytest.mark.parametrize("pipeline", [False, True], ids=["sequential", "pipelined"])
def test_a_driver_killed_while_writing_resumes_without_feeding_twice_or_losing_the_epoch(
    tmp_path: Path, pipeline: bool
) -> None:
    batches = change_batches()
    drop_all(tmp_path, batches)
    mode = ["--pipeline"] if pipeline else []
    first = driver(tmp_path, len(batches), "--kill", str(KILL_AT), *mode)
    assert first.returncode == -9, first.stdout[-2000:] + first.stderr[-3000:]
    assert f"wrote {KILL_AT}" in first.stdout and f"wrote {KILL_AT + 1}" not in first.stdout
    second = driver(tmp_path, len(batches), *mode)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    # timely had sealed epoch KILL_AT, perhaps the next too; epoch KILL_AT is written again,
    # whether Spark runs its micro-batch again or had committed it, then the rest
    resumed = int(second.stdout.split("resumed at ")[1].split()[0])
    assert resumed in (KILL_AT + 1, KILL_AT + 2)
    assert [int(x.split()[1]) for x in second.stdout.splitlines() if x.startswith("wrote")] == list(
        range(KILL_AT, len(batches))
    )
    assert not [
        p for p in os.listdir(tmp_path / "ck" / "timely" / "stream-output" / "p0") if p < f"epoch-{KILL_AT:012d}"
    ]
    check_written(tmp_path / "out", batches)
    # Spark's checkpoint lost, timely's kept: refused with both positions, not run from scratch
    shutil.rmtree(tmp_path / "ck" / "spark")
    third = driver(tmp_path, len(batches), *mode)
    assert third.returncode == 1
    assert "Spark's checkpoint resumes at micro-batch 0 but timely's at epoch 4" in third.stderr, third.stderr[-3000:]


def test_a_killed_timely_process_fails_the_stream_which_then_resumes(tmp_path: Path) -> None:
    """The timely process SIGKILLed as epoch 2 reaches it: the stream fails (no hang) with
    Spark's word for it, and started again it resumes where the input log ends."""
    batches = change_batches()
    drop_all(tmp_path, batches)
    first = driver(tmp_path, len(batches), "--kill-process", "2")
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-3000:]
    assert "SparkBridgeError" in first.stderr and "wrote 1" in first.stdout and "wrote 2" not in first.stdout
    second = driver(tmp_path, len(batches), "--kill-process", "2")  # the same dataflow; it kills once
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    resumed = int(second.stdout.split("resumed at ")[1].split()[0])
    assert resumed in (2, 3)  # epoch 2 sealed (logged) before the kill, or not
    check_written(tmp_path / "out", batches)
