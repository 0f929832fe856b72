"""The streaming job resumes after a real kill: its driver (with Spark's JVM and the timely
process in its Spark task) is SIGKILLed mid-stream, started again on the same
``--checkpoint-dir`` and ``--output``, and then every query of the stream has exactly one
answer per mode, each right against a recomputation from the posts of its window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support import ROOT
from timely_jobs._posts import Second, StreamSpec, generate
from timely_jobs._stream_check import Checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # two Spark drivers, one after the other

SECONDS = 10
WINDOW = 3
SPEC = StreamSpec(seed=11, rate=500, query_rate=6.0, users=1_500, hashtags=150, malformed=0.002)


def write_stream(root: Path) -> list[Second]:
    """Every second of the stream as a Parquet file per source, written before the job starts."""
    (root / "posts").mkdir(parents=True)
    (root / "queries").mkdir(parents=True)
    seconds = [generate(SPEC, s) for s in range(SECONDS)]
    now = time.time()
    for s, data in enumerate(seconds):
        for table, path in (
            (data.posts, root / "posts" / f"p-{s:08d}.parquet"),
            (data.queries, root / "queries" / f"q-{s:08d}.parquet"),
        ):
            pq.write_table(table, path)
            os.utime(path, (now - 60 + s, now - 60 + s))  # Spark takes the oldest first: in order
    return seconds


def job(root: Path, duration: float) -> list[str]:
    argv = [sys.executable, "-m", "timely_jobs.streaming_analytics", "--posts", str(root / "posts")]
    argv += ["--queries", str(root / "queries"), "--output", str(root / "out"), "--window", str(WINDOW)]
    argv += ["--checkpoint-dir", str(root / "ck"), "--checkpoint-every", "2", "--files-per-batch", "1"]
    return [*argv, "--trigger", "0.2", "--duration", str(duration)]


def epochs_written(out: Path) -> int:
    answers = out / "answers"
    return sum(1 for d in answers.iterdir() if (d / "_SUCCESS").exists()) if answers.is_dir() else 0


def test_a_killed_driver_resumes_with_every_query_answered_once_and_right(tmp_path: Path) -> None:
    seconds = write_stream(tmp_path)
    # The first run: killed (SIGKILL, its whole process group) once it has written a few epochs.
    first = subprocess.Popen(
        job(tmp_path, 0), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while epochs_written(tmp_path / "out") < 4:
            assert first.poll() is None, first.stdout.read().decode()[-3000:] if first.stdout else ""
            assert time.monotonic() < deadline, "the first run wrote no epochs"
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        if first.stdout:
            first.stdout.close()
    killed_at = epochs_written(tmp_path / "out")
    assert killed_at < SECONDS, "the whole stream went through before the kill"
    # The second run, on the same directories: resumes and takes in the rest.
    second = subprocess.run(job(tmp_path, 60), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout
    written = pq.read_table(tmp_path / "out" / "answers").to_pylist()
    queries = {
        (q, u)
        for data in seconds
        for q, u in zip(
            data.queries.column("query_id").to_pylist(), data.queries.column("user").to_pylist(), strict=True
        )
    }
    keys = [(r["query_id"], r["mode"]) for r in written]
    assert len(keys) == len(set(keys)), "a query answered twice"
    assert set(keys) == {(q, mode) for q, _ in queries for mode in ("fresh", "stale")}, "a query lost"
    by_second = dict(enumerate(seconds))
    checker = Checker(WINDOW, by_second.get)
    for r in written:
        checker.add(r["query_id"], r["user"], r["component"], r["hashtag"], r["count"], r["as_of"])
    checker.close()
    assert checker.checked == len(written) and checker.wrong == 0, checker.examples
