"""The main job and the bridge on a real Spark standalone cluster: a master and two workers,
each its own JVM on loopback, started from the pyspark installation (tests/support/spark_cluster.py).
The applications are real processes too: the job as the README runs it with ``--master``, the
job through ``spark-submit`` with the project shipped as docs/spark.md says, and a program
whose timely process is SIGKILLed from outside mid-run. After the module, the cluster is
stopped and checked to have left no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from tests.support import GENERATED_JOB, ROOT  # noqa: E402
from tests.support import spark_cluster_program as program  # noqa: E402
from tests.support.spark_cluster import StandaloneCluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

GRAPH = GENERATED_JOB
"""The generated graph and changes both modes run (the local run is the session's `generated_job`)."""
APP_TIMEOUT = 360.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.skip("Spark needs Java")
    standalone = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield standalone
    standalone.stop()  # raises if a JVM or a Python worker of the cluster survived


@pytest.fixture
def local_answers(generated_job: tuple[Path, Any]) -> Path:
    """The job's results in ``local[2]`` (tests/jobs/test_graph_analytics.py checks them against NetworkX)."""
    return generated_job[0]


def _options(output: Path) -> list[str]:
    args = ["--output", str(output), "--processes", "2"]
    for key, value in GRAPH.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def _application(args: list[str], cluster: StandaloneCluster, cwd: Path, **env: str) -> None:
    done = subprocess.run(
        args,
        cwd=cwd,
        env={**cluster.environment(), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=APP_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def _table(out: Path, name: str) -> list[tuple[Any, ...]]:
    table = pq.read_table(out / f"{name}.parquet")
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names)))


def assert_same_answers(ours: Path, local: Path) -> None:
    for name in ("components", "changes", "generated_edges"):
        assert _table(ours, name) == _table(local, name), name
    ranks, expected = dict(_table(ours, "pagerank")), dict(_table(local, "pagerank"))
    assert ranks.keys() == expected.keys()
    assert max(abs(ranks[v] - expected[v]) for v in ranks) < 1e-12
    summary, reference = (json.loads((d / "summary.json").read_text()) for d in (ours, local))
    assert summary["counts"] == reference["counts"]
    relabelled = [(e["epoch"], e["nodes_relabelled"]) for e in summary["epochs"]]
    assert relabelled == [(e["epoch"], e["nodes_relabelled"]) for e in reference["epochs"]]
    assert any(any(n.values()) for _, n in relabelled), "no label changed: the comparison proves little"


def _executors_ran(cluster: StandaloneCluster, since: float) -> list[Path]:
    """The executor directories the workers made for applications started after ``since``."""
    return [d for d in cluster.directory.glob("work*/app-*/*") if d.is_dir() and d.stat().st_mtime >= since]


def test_the_job_on_the_cluster_gives_the_answers_of_local_mode(
    cluster: StandaloneCluster, local_answers: Path, tmp_path: Path
) -> None:
    began = time.time() - 1
    out = tmp_path / "out"
    _application(
        [sys.executable, "-m", "timely_jobs.graph_analytics", "--master", cluster.master_url, *_options(out)],
        cluster,
        cwd=ROOT,
    )
    assert len(_executors_ran(cluster, began)) == 2, "the job did not run on the two workers' executors"
    assert_same_answers(out, local_answers)


def _environment_without_the_project(directory: Path) -> Path:
    """A Python environment that has the project's dependencies (those of this one, through a
    path file) but not the project: what a cluster node has before the job ships its code."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    site = Path(
        subprocess.run(
            [str(directory / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return directory / "bin" / "python"


def test_spark_submit_ships_the_project_as_a_zip_of_its_wheel(
    cluster: StandaloneCluster, local_answers: Path, tmp_path: Path
) -> None:
    """docs/spark.md's recipe, step by step: build the wheel, hand it to spark-submit as a .zip,
    run the job's file on executors whose Python has the dependencies but not the project."""
    python = _environment_without_the_project(tmp_path / "node-env")
    missing = subprocess.run([str(python), "-c", "import timely"], capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode != 0, "the bare environment can import timely: the test would prove nothing"
    source = tmp_path / "checkout"  # built from a copy: building writes build/ into the source tree
    for package in ("timely", "libs", "jobs", "examples"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for file in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / file, source / file)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("timely_dataflow-*.whl")
    shipped = shutil.copy(wheel, tmp_path / "timely_dataflow.zip")
    began = time.time() - 1
    out = tmp_path / "out"
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", cluster.master_url]
    _application(
        [*submit, "--py-files", str(shipped), str(ROOT / "jobs" / "graph_analytics.py"), *_options(out)],
        cluster,
        cwd=tmp_path,
        PYSPARK_PYTHON=str(python),
        PYSPARK_DRIVER_PYTHON=str(python),
    )
    assert len(_executors_ran(cluster, began)) == 2
    assert_same_answers(out, local_answers)


def test_a_killed_timely_process_resumes_from_the_checkpoint_on_the_cluster(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """Process 0's Python worker is SIGKILLed in epoch 7, after checkpoints at epochs 2 and 5;
    Spark reruns the barrier stage, which resumes from the checkpoint: every row once."""
    kill_dir, checkpoints, out = tmp_path / "kill", tmp_path / "ck", tmp_path / "rows.json"
    kill_dir.mkdir()
    app = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.spark_cluster_program",
            cluster.master_url,
            str(checkpoints),
            str(out),
            str(kill_dir),
        ],
        cwd=ROOT,
        env=cluster.environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + APP_TIMEOUT
        while not (kill_dir / "pid").exists():
            assert app.poll() is None, (
                f"the application ended before epoch {program.KILL_AT}: {app.stdout.read()[-4000:]}"  # type: ignore[union-attr]
            )
            assert time.monotonic() < deadline, "process 0 never reached the kill point"
            time.sleep(0.1)
        pid = int((kill_dir / "pid").read_text())
        assert cluster.contains(pid), "the doomed process is not one of the cluster's executors'"
        (kill_dir / "killed").touch()
        os.kill(pid, signal.SIGKILL)
        output, _ = app.communicate(timeout=APP_TIMEOUT)
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()
    assert app.returncode == 0, output[-4000:]
    rows = Counter((e, k, t, d) for e, k, t, d in json.loads(out.read_text()))
    expected = Counter((e, *change) for e, changes in program.expected_changes().items() for change in changes)
    assert rows == expected
    for process in (0, 1):
        first, retry = sorted(
            (json.loads(p.read_text()) for p in (checkpoints / "spark-attempts" / f"p{process}").glob("task-*.json")),
            key=lambda r: r["started"],
        )
        assert "seconds" not in first  # killed, or cancelled by Spark when its peer died
        assert retry["resumed"]["epoch"] == 5  # the last checkpoint complete before the kill
        # the runtime replayed the epochs after 5 that every process had sealed in its input log
        # (7 too: the task had fed it whole when the vertex stopped in it)
        assert 6 <= retry["first_epoch"] <= program.KILL_AT + 1
        assert retry["reemitted_epochs"] == list(range(program.KILL_AT))  # delivered before the kill
