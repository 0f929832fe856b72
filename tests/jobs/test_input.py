"""timely_jobs._input: the job's reading and checking of the user's files, on real files, against
plain-Python readings of the same rows (no Spark: all of this happens before Spark starts)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timely_jobs._input import InputError, apply_changes, read_changes, read_edges


def as_set(pairs: np.ndarray) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in pairs}


@pytest.mark.parametrize("header", [True, False])
def test_csv_rows_are_read_as_written_with_or_without_a_header(tmp_path: Path, header: bool) -> None:
    rng = random.Random(3)
    rows = [(rng.randrange(-5, 40), rng.randrange(10**15)) for _ in range(300)]
    text = ("dst,src\n" if header else "") + "".join(
        f"{b},{a}\n" if header else f" {a} ,+{b}\n" for a, b in rows
    )  # a header may order the columns; cells may have spaces and a sign
    (tmp_path / "e.csv").write_text(text)
    edges = read_edges(tmp_path / "e.csv")
    assert as_set(edges.pairs) == set(rows)
    assert edges.rows == len(rows) and edges.duplicates == len(rows) - len(set(rows))


def test_blank_lines_are_not_rows_and_bad_rows_are_counted_with_their_lines(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text('src,dst\n1,2\n\n"3",4\n5,six\n7\n8,9,10\n11,12\n')
    with pytest.raises(InputError, match=r"e\.csv, line 5: '5,six': dst 'six' is not an integer"):
        read_edges(tmp_path / "e.csv")
    edges = read_edges(tmp_path / "e.csv", skip_bad=True)
    assert as_set(edges.pairs) == {(1, 2), (3, 4), (11, 12)}
    assert edges.skipped.count == 3 and edges.skipped.first is not None and "line 5" in edges.skipped.first


def test_a_directory_of_parts_is_one_edge_list(tmp_path: Path) -> None:
    parts = tmp_path / "edges.parquet"
    parts.mkdir()
    pq.write_table(pa.table({"src": [1, 2], "dst": [2, 3]}), parts / "part-0.parquet")
    pq.write_table(pa.table({"src": [3, 1], "dst": [4, 2]}), parts / "part-1.parquet")
    (parts / "_SUCCESS").write_text("")
    edges = read_edges(parts)
    assert as_set(edges.pairs) == {(1, 2), (2, 3), (3, 4)} and edges.duplicates == 1


def test_parquet_nulls_are_bad_rows(tmp_path: Path) -> None:
    pq.write_table(pa.table({"src": [1, None, 3], "dst": [2, 3, 4]}), tmp_path / "e.parquet")
    with pytest.raises(InputError, match=r"e\.parquet, row 2: 'src=None, dst=3': a missing value"):
        read_edges(tmp_path / "e.parquet")
    assert as_set(read_edges(tmp_path / "e.parquet", skip_bad=True).pairs) == {(1, 2), (3, 4)}


def test_change_epochs_from_a_column_from_files_and_from_a_spark_directory(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("epoch,src,dst,diff\n3,1,2,-1\n1,5,6,1\n")
    epochs, _ = read_changes(tmp_path / "c.csv")
    assert [[r.values.tolist() for r in e] for e in epochs] == [[[[5, 6, 1]]], [[]], [[[1, 2, -1]]]]  # epoch 2: none

    d = tmp_path / "by_file"
    d.mkdir()
    (d / "b.csv").write_text("2,3,1\n")
    (d / "a.csv").write_text("1,2,-1\n")
    epochs, _ = read_changes(d)
    assert [[r.values.tolist() for r in e] for e in epochs] == [[[[1, 2, -1]]], [[[2, 3, 1]]]]  # in order of name

    spark = tmp_path / "spark.parquet"
    spark.mkdir()
    for k in range(2):
        pq.write_table(pa.table({"src": [k], "dst": [9], "diff": [1]}), spark / f"part-{k}.parquet")
    (spark / "_SUCCESS").write_text("")
    epochs, _ = read_changes(spark)
    assert len(epochs) == 1 and sorted(v for r in epochs[0] for v in r.values.tolist()) == [[0, 9, 1], [1, 9, 1]]


def test_applied_changes_give_the_graph_a_set_would() -> None:
    rng = random.Random(11)
    start = {(rng.randrange(30), rng.randrange(30)) for _ in range(200)}
    from timely_jobs._input import Edges, Rows

    edges = Edges(np.array(sorted(start), dtype=np.int64))
    present = set(start)
    epochs = []
    for _ in range(6):
        rows = []
        for _ in range(40):
            edge = (rng.randrange(30), rng.randrange(30))
            rows.append((*edge, -1 if edge in present else 1))
            (present.discard if edge in present else present.add)(edge)
        epochs.append([Rows(Path("x"), np.array(rows, dtype=np.int64), np.arange(1, len(rows) + 1))])
    changes, final = apply_changes(edges, epochs)
    assert as_set(final) == present and changes.rows == 240
    with pytest.raises(InputError, match="removes edge"):
        apply_changes(edges, [[Rows(Path("x"), np.array([[99, 98, -1]]), np.array([1]))]])


@pytest.mark.parametrize(("delimiter", "header"), [("\t", True), ("\t", False), (";", True), ("|", False)])
def test_a_csv_separated_by_tabs_semicolons_or_bars_reads_as_its_comma_twin(
    tmp_path: Path, delimiter: str, header: bool
) -> None:
    rng = random.Random(11)
    rows = [(rng.randrange(1000), rng.randrange(1000)) for _ in range(200)]
    (tmp_path / "e.csv").write_text(
        (f"src{delimiter}dst\n" if header else "") + "".join(f"{a}{delimiter} {b}\n" for a, b in rows)
    )
    edges = read_edges(tmp_path / "e.csv")
    assert as_set(edges.pairs) == set(rows) and edges.rows == len(rows)
    (tmp_path / "bad.csv").write_text(f"src{delimiter}dst\n1{delimiter}2\n3{delimiter}x\n")
    bad_row = re.escape(repr(f"3{delimiter}x"))
    with pytest.raises(InputError, match=rf"bad\.csv, line 3: {bad_row}: dst 'x' is not an integer"):
        read_edges(tmp_path / "bad.csv")


def test_a_first_line_with_two_kinds_of_separator_is_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("src\tdst,\n1\t2\n")
    with pytest.raises(InputError, match=r"e\.csv, line 1: 'src\\tdst,' has commas and tabs; separate the columns"):
        read_edges(tmp_path / "e.csv")
