"""timely_libs.spark: timely computations as Spark barrier stages, one local Spark session for the file.

Spark starts slowly (a JVM, then Python workers), so every test shares one ``local[2]``
session, and runs at most 2 timely processes (the machine has 2 cores). The builds below are
shipped to Spark's Python workers by value (this module is not importable there).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import networkx as nx  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import timely  # noqa: E402
from tests.support import ROOT  # noqa: E402
from timely_libs import linq  # noqa: E402
from timely_libs import spark as tspark  # noqa: E402
from timely_libs.spark._progress import NOTES  # noqa: E402

pytestmark = pytest.mark.slow

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 60.0
"""Seconds for any one timely computation."""


@pytest.fixture
def session(spark_session: SparkSession) -> SparkSession:
    """The run's shared session (tests/conftest.py)."""
    return spark_session


def _hashable(row: Any) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def _bag(df: DataFrame) -> Counter[tuple[Any, ...]]:
    return Counter(_hashable(r) for r in df.collect())


# Builds (run in Spark's Python workers) -------------------------------------------------------


def identity(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """Every row moves to the worker its first column picks: rows cross processes."""
    return inputs["rows"].exchange("shuffle", lambda r: r[0])


def components(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """``(node, label, diff)`` changes of connected components over ``(src, dst, diff)`` rows."""
    edges = linq.Collection(inputs["edges"].map("as_changes", lambda r: ((r[0], r[1]), r[2])))
    labels = linq.connected_components(edges).consolidate()
    return labels.stream.map("as_rows", lambda change: (*change[0], change[1]))


def joined(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """``(key, name, score)`` for people and scores with the same key."""
    people = linq.Collection(inputs["people"].map("people_rows", lambda r: (r, 1)))
    scores = linq.Collection(inputs["scores"].map("score_rows", lambda r: (r, 1)))
    pairs = people.join(scores, lambda p: p[0], lambda s: s[0], lambda p, s: (p[0], p[1], s[1]))
    return pairs.consolidate().stream.flat_map("rows", lambda change: [change[0]] * change[1])


def failing(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    def check(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[0] == 77:
            raise ValueError(f"record {row[0]} is cursed")
        return row

    return inputs["rows"].map("checker", check)


# Tests ---------------------------------------------------------------------------------------

TYPES = "id long, small int, ratio double, name string, flag boolean, blob binary, tags array<long>"


def _typed_rows(n: int) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(n):
        rows.append(
            (
                i,
                None if i % 7 == 0 else i % 100,
                i / 3,
                None if i % 5 == 0 else f"name-{i}-é",
                i % 2 == 0,
                bytes([i % 256, 0]),
                [i, i + 1] if i % 3 else [],
            )
        )
    return rows


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [1, 2])
def test_round_trip_keeps_schema_and_rows(session: SparkSession, processes: int) -> None:
    df = session.createDataFrame(_typed_rows(500), TYPES)
    out = tspark.run(session, identity, {"rows": df}, TYPES, processes=processes, timeout=TIMEOUT)
    assert out.schema == df.schema
    assert _bag(out) == _bag(df)
    assert out.count() == 500
    out.unpersist()


@pytest.mark.timeout(120)
def test_a_sealed_run_moves_every_row_whole(session: SparkSession) -> None:
    # encrypt=True seals the connections between the two processes (local mode would leave them
    # in clear); the rows that cross them (identity exchanges by id) arrive whole, with nothing
    # to set up: the keys come from the secret the driver ships to the tasks.
    df = session.createDataFrame(_typed_rows(500), TYPES)
    out = tspark.run(session, identity, {"rows": df}, TYPES, processes=2, timeout=TIMEOUT, encrypt=True)
    assert _bag(out) == _bag(df)
    out.unpersist()


@pytest.mark.timeout(60)
def test_empty_input_gives_an_empty_output(session: SparkSession) -> None:
    df = session.createDataFrame([], "a long, b string")
    out = tspark.run(session, identity, {"rows": df}, "a long, b string", processes=2, timeout=TIMEOUT)
    assert out.collect() == []
    assert out.columns == ["a", "b"]


def _random_edges(session: SparkSession, nodes: int, edges: int, seed: int) -> DataFrame:
    """A seeded random graph generated by Spark (deterministic: rand over a fixed plan)."""
    return (
        session.range(edges, numPartitions=2)
        .select(
            (F.rand(seed) * nodes).cast("long").alias("src"),
            (F.rand(seed + 1) * nodes).cast("long").alias("dst"),
            F.lit(1).cast("long").alias("diff"),
        )
        .persist()
    )


def _networkx_labels(edges: list[tuple[int, int]]) -> set[tuple[int, int]]:
    graph = nx.Graph(edges)
    return {(node, min(part)) for part in nx.connected_components(graph) for node in part}


@pytest.mark.timeout(120)
def test_connected_components_of_a_spark_graph_match_networkx(session: SparkSession) -> None:
    edges = _random_edges(session, nodes=400, edges=300, seed=11)
    out = tspark.run(session, components, {"edges": edges}, "node long, label long, diff long", timeout=TIMEOUT)
    rows = [tuple(r) for r in out.collect()]
    expected = _networkx_labels([(r.src, r.dst) for r in edges.collect()])
    assert len(expected) > 100
    assert {r[2] for r in rows} == {1}
    assert {(node, label) for node, label, _ in rows} == expected
    assert len(rows) == len(expected)


def _write_epochs(directory: str, changes: list[list[tuple[int, int, int]]]) -> None:
    os.makedirs(directory)
    for e, batch in enumerate(changes):
        columns: list[Any] = list(zip(*batch)) if batch else [[], [], []]
        table = pa.table([pa.array(c, pa.int64()) for c in columns], names=["src", "dst", "diff"])
        pq.write_table(table, os.path.join(directory, f"epoch-{e:03d}.parquet"))
    with open(os.path.join(directory, "_SUCCESS"), "w"):
        pass


@pytest.mark.timeout(120)
def test_epochs_stream_the_changes_of_one_running_computation(session: SparkSession, tmp_path: Any) -> None:
    rng = random.Random(5)
    current: set[tuple[int, int]] = set()
    changes: list[list[tuple[int, int, int]]] = []
    for e in range(4):
        batch = []
        if e:  # remove some edges: components split
            for edge in rng.sample(sorted(current), 25):
                current.discard(edge)
                batch.append((*edge, -1))
        for _ in range(120 if e == 0 else 30):
            edge = (rng.randrange(150), rng.randrange(150))
            if edge not in current:
                current.add(edge)
                batch.append((*edge, 1))
        changes.append(batch)
    directory = str(tmp_path / "edges")
    _write_epochs(directory, changes)

    epochs = tspark.epochs_from_directory(session, directory, name="edges")
    assert len(epochs) == 4 and all(list(e) == ["edges"] for e in epochs)
    epochs.insert(2, {})  # an epoch in which the input does not change: no output changes
    changes.insert(2, [])
    out = tspark.run_epochs(session, components, epochs, "node long, label long, diff long", timeout=TIMEOUT)
    assert out.columns == ["epoch", "node", "label", "diff"]
    got = Counter((r.epoch, r.node, r.label, r.diff) for r in out.collect())

    expected: Counter[tuple[int, int, int, int]] = Counter()
    edges: Counter[tuple[int, int]] = Counter()
    before: set[tuple[int, int]] = set()
    for e, batch in enumerate(changes):
        for src, dst, diff in batch:
            edges[(src, dst)] += diff
        now = _networkx_labels([edge for edge, count in edges.items() if count > 0])
        expected.update({(e, *row, 1): 1 for row in now - before})
        expected.update({(e, *row, -1): 1 for row in before - now})
        before = now
    assert not any(e == 2 for e, *_ in got)
    assert got == expected


@pytest.mark.timeout(120)
def test_two_inputs_of_different_shapes_in_one_run(session: SparkSession) -> None:
    people = session.createDataFrame([(k, f"person{k}") for k in range(60)], "key long, name string")
    scores = session.createDataFrame([(k % 80, float(k)) for k in range(200)], "key long, score double")
    out = tspark.run(
        session,
        joined,
        {"people": people, "scores": scores},
        "key long, name string, score double",
        processes=2,
        timeout=TIMEOUT,
    )
    expected = Counter((k % 80, f"person{k % 80}", float(k)) for k in range(200) if k % 80 < 60)
    assert Counter(tuple(r) for r in out.collect()) == expected


@pytest.mark.timeout(120)
def test_a_failing_vertex_fails_the_spark_job_with_the_timely_error(session: SparkSession) -> None:
    df = session.range(200).toDF("n")
    with pytest.raises(tspark.SparkBridgeError) as failed:
        tspark.run(session, failing, {"rows": df}, "n long", processes=2, timeout=TIMEOUT)
    text = str(failed.value)
    assert "record 77 is cursed" in text
    assert "'checker'" in text and "ValueError" in text


@pytest.mark.timeout(120)
def test_a_stage_retry_reruns_the_computation_cleanly(session: SparkSession, tmp_path: Any) -> None:
    marker = str(tmp_path / "failed-once")

    def flaky(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        def once(row: tuple[Any, ...]) -> tuple[Any, ...]:
            if scope.process_index == 0 and not os.path.exists(marker):
                open(marker, "w").close()  # the first attempt dies after rows have moved
                os._exit(3)  # no timely error frame: the peer sees a lost connection
            return row

        return identity(scope, inputs).map("flaky", once)

    df = session.range(5000).toDF("n")
    out = tspark.run(session, flaky, {"rows": df}, "n long", processes=2, timeout=TIMEOUT)
    assert os.path.exists(marker)
    assert sorted(r.n for r in out.collect()) == list(range(5000))  # each row once: no output of attempt 0


@pytest.mark.timeout(30)
def test_more_processes_than_slots_is_refused_at_once(session: SparkSession) -> None:
    df = session.range(10).toDF("n")
    start = time.monotonic()
    with pytest.raises(tspark.SparkBridgeError, match=r"3 timely processes need 3 Spark task slots.*has 2"):
        tspark.run(session, identity, {"rows": df}, "n long", processes=3, timeout=TIMEOUT)
    assert time.monotonic() - start < 5
    assert tspark.task_slots(session.sparkContext) == 2


@pytest.mark.timeout(120)
def test_output_rows_that_do_not_fit_the_schema_are_reported(session: SparkSession) -> None:
    df = session.range(20).toDF("n")
    with pytest.raises(tspark.SparkBridgeError, match=r"tuples of 2 values \(n, m\), got \(\d+,\)"):
        tspark.run(session, identity, {"rows": df}, "n long, m long", processes=1, timeout=TIMEOUT)


def test_bad_arguments_are_refused_before_spark_runs(session: SparkSession) -> None:
    df = session.range(3).toDF("n")
    with pytest.raises(ValueError, match="at least one input"):
        tspark.run(session, identity, {}, "n long")
    with pytest.raises(ValueError, match="'epoch'"):
        tspark.run_epochs(session, identity, [{"rows": df}], "epoch long")
    with pytest.raises(ValueError, match="has columns"):
        tspark.run_epochs(session, identity, [{"rows": df}, {"rows": df.selectExpr("n", "n as m")}], "n long")
    with pytest.raises(ValueError, match="processes"):
        tspark.run(session, identity, {"rows": df}, "n long", processes=0)
    with pytest.raises(FileNotFoundError):
        tspark.epochs_from_directory(session, "/nonexistent/timely-spark")


def test_the_output_is_computed_once_not_once_per_action(session: SparkSession, tmp_path: Any) -> None:
    runs = str(tmp_path / "runs")
    os.makedirs(runs)

    def counted(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        open(os.path.join(runs, f"{time.monotonic_ns()}-{scope.process_index}"), "w").close()
        return inputs["rows"]

    out = tspark.run(session, counted, {"rows": session.range(50).toDF("n")}, "n long", processes=1, timeout=TIMEOUT)
    assert out.count() == 50
    assert out.filter("n > 10").count() == 39
    assert len(os.listdir(runs)) == 1


# Progress --------------------------------------------------------------------------------------------


def waits_for_the_driver(flag: str) -> Any:
    """Every row passes through; epoch 2's rows wait (up to 30 s) for ``flag`` to exist, which
    the driver's progress callback makes once it has seen epochs done while the run runs."""

    def slow_identity(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
        def pause(at: timely.Timestamp, batch: list[Any]) -> None:
            deadline = time.monotonic() + 30.0
            while at.epoch == 2 and not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.05)

        return inputs["rows"].inspect_batch("pause", pause).map("same", lambda r: r)

    return slow_identity


def test_progress_reports_what_the_processes_did_while_they_run(session: SparkSession, tmp_path: Any) -> None:
    rows = [[(e, i) for i in range(50)] for e in range(5)]
    epochs = [{"rows": session.createDataFrame(batch, "e long, i long")} for batch in rows]
    flag = tmp_path / "seen-mid-run"
    seen: list[tspark.Progress] = []

    def callback(p: tspark.Progress) -> None:
        seen.append(p)
        if 0 < p.epochs_done < 5 and not p.done:
            flag.touch()

    build = waits_for_the_driver(str(flag))
    out = tspark.run_epochs(session, build, epochs, "e long, i long", timeout=TIMEOUT, progress=callback)
    assert out.count() == 250
    assert flag.exists(), "no snapshot while the epochs were running"
    last = seen[-1]
    assert last.done and last.label == "slow_identity" and last.processes == 2 and last.reporting == 2
    assert (last.epochs, last.epochs_done, last.rows_in, last.rows_out) == (5, 5, 250, 250)
    # Each record is received by the inspect_batch and the map stages, then by the output.
    assert last.records == 3 * 250
    live = [p for p in seen if not p.done and p.reporting == 2]
    assert [p.epochs_done for p in live] == sorted(p.epochs_done for p in live)
    assert all(p.rows_in <= 250 and p.records <= last.records for p in live)
    assert "5/5 epochs done · 250 rows in" in last.describe()


def announces(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """Every row passes through; each process's first batch announces a pause on the notes
    logger, as linq's first compile of its numba loops does."""
    index = scope.process_index

    def announce(at: timely.Timestamp, batch: list[Any]) -> None:
        if at.epoch == 0:
            logging.getLogger(NOTES).warning("process %d: compiling, once per machine", index)

    return inputs["rows"].inspect_batch("announce", announce)


def test_what_a_process_announces_reaches_the_driver_once(session: SparkSession) -> None:
    """A task's announcement (a first compile pauses a process for seconds) is shown by the
    driver, once, not left in an executor's log while the figures stand still."""
    seen: list[tspark.Progress] = []
    lines: list[str] = []
    console = tspark.ConsoleProgress(say=lines.append)

    def callback(p: tspark.Progress) -> None:
        seen.append(p)
        console(p)

    epochs = [{"rows": session.createDataFrame([(e, i) for i in range(20)], "e long, i long")} for e in range(3)]
    out = tspark.run_epochs(session, announces, epochs, "e long, i long", timeout=TIMEOUT, progress=callback)
    assert out.count() == 60
    expected = {f"process {p}: compiling, once per machine" for p in range(2)}
    assert set(seen[-1].notes) == expected and len(seen[-1].notes) == 2
    assert sorted(line for line in lines if "compiling" in line) == sorted(f"announces: {n}" for n in expected)


# The compiled loops' cache on executors -------------------------------------------------------------


def numba_probe(scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """For each row, what linq's compiled loops did in this executor's Python worker: its pid,
    how many loops it compiled and loaded from the cache, and where the cache is."""

    def probe(row: Any) -> tuple[int, int, int, int, str]:
        from numba.core.dispatcher import Dispatcher

        import timely_libs.linq._columns._compiled as compiled

        loops = [v for v in vars(compiled).values() if isinstance(v, Dispatcher)]
        where = sorted({str(f.stats.cache_path) for f in loops})
        return (
            os.getpid(),
            sum(bool(f.stats.cache_misses) for f in loops),
            sum(bool(f.stats.cache_hits) for f in loops),
            len(loops),
            ",".join(where),
        )

    return inputs["rows"].map("probe", probe)


@pytest.mark.timeout(600)  # a first compile on a loaded machine: a minute
def test_executors_share_one_per_user_cache_and_a_second_job_does_not_compile(session: SparkSession) -> None:
    from timely_libs import _numba_cache

    schema = "pid long, compiled long, loaded long, loops long, cache string"
    rows = session.createDataFrame([(i,) for i in range(8)], "i long")
    first = tspark.run(session, numba_probe, {"rows": rows}, schema, timeout=540).collect()
    second = tspark.run(session, numba_probe, {"rows": rows}, schema, timeout=540).collect()
    expected = _numba_cache.cache_dir()
    for r in first + second:
        assert r.loops >= 10 and r.compiled + r.loaded == r.loops, r
        assert Path(r.cache).is_relative_to(expected) and not Path(r.cache).is_relative_to(ROOT), r
    # The second job's workers either are the first's (their loops still in memory) or loaded
    # every loop from the cache: none compiled again.
    pids = {r.pid for r in first}
    assert all(r.pid in pids or r.compiled == 0 for r in second), second
