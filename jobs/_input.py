"""The user's edge list and edge changes, read and checked on the driver before Spark starts.

The job never changes or drops the user's data without saying so: every value is parsed with
an explicit schema (integers; ``diff`` +1 or -1; ``epoch`` >= 1), a CSV header is detected or
given, and a row that does not fit stops the job with its file, line and text — or, when the
user asks, is skipped and counted. A change must make sense where it applies (no removal of an
absent edge, no second copy of a present one). All of this happens before Spark starts, so a
bad input costs a second, not a JVM start-up.

Local files only: ``.csv`` or ``.parquet`` files, or directories of them (such as Spark writes).
A CSV file's columns may be separated by commas, tabs, semicolons or vertical bars (told apart
by its first line; a first line with several of them is refused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

__all__ = [
    "CHANGE_COLUMNS",
    "EDGE_COLUMNS",
    "Changes",
    "Edges",
    "InputError",
    "Rows",
    "apply_changes",
    "dataset_files",
    "read_changes",
    "read_edges",
    "synthetic",
    "unique_pairs",
]

EDGE_COLUMNS = ("src", "dst")
CHANGE_COLUMNS = ("src", "dst", "diff")
"""A change row: ``diff`` +1 adds the edge ``(src, dst)``, -1 removes it; an optional ``epoch``
column (a header must name it) says which epoch of changes the row belongs to (1, 2, ...)."""
FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
MAX_EPOCHS = 1000
"""Epochs of changes one run takes (each is a Spark DataFrame in one union)."""
_INTEGER = r"^\s*[+-]?[0-9]{1,18}\s*$"
DELIMITERS = {",": "commas", "\t": "tabs", ";": "semicolons", "|": "vertical bars"}
"""What may separate a CSV file's columns, told apart by its first line (whatever the file is named)."""


class InputError(Exception):
    """An input the job cannot use as it stands; the message is one line that says where and why."""


@dataclass
class Rows:
    """Integer rows read from one file, with where each came from (for messages)."""

    file: Path
    values: np.ndarray
    """``(n, k)`` int64, columns in the order asked for."""
    lines: np.ndarray
    """Per row, its line in a CSV file or its row number (from 1) in a Parquet file."""
    unit: str = "line"


@dataclass
class Skipped:
    """Rows skipped by ``--skip-bad-rows``: how many, and the first one's description."""

    count: int = 0
    first: str | None = None

    def add(self, description: str, count: int = 1) -> None:
        if self.first is None:
            self.first = description
        self.count += count


@dataclass
class Edges:
    """The distinct edges of a graph, lexicographically sorted, and what reading them found."""

    pairs: np.ndarray
    """``(n, 2)`` int64, sorted and distinct."""
    rows: int = 0
    """Rows read (a header and blank lines are not rows)."""
    duplicates: int = 0
    """Rows that repeat an edge read before (the graph has each edge once)."""
    skipped: Skipped = field(default_factory=Skipped)

    @property
    def nodes(self) -> int:
        return int(np.unique(self.pairs).size)


@dataclass
class Changes:
    """Epochs of edge changes, each ``(n, 3)`` int64 rows ``(src, dst, diff)`` that apply cleanly."""

    epochs: list[np.ndarray]
    rows: int = 0
    skipped: Skipped = field(default_factory=Skipped)
    source: str = "none"


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """The distinct rows of an ``(n, 2)`` int64 array, sorted (``np.unique(pairs, axis=0)``, which
    sorts rows as opaque records and took 0.7 s on 1M edges; a lexsort takes 0.15 s)."""
    if len(pairs) == 0:
        return pairs.reshape(0, 2)
    ordered = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    fresh = np.ones(len(ordered), dtype=bool)
    fresh[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    return ordered[fresh]


# Files -------------------------------------------------------------------------------------------
def _visible(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if not p.name.startswith(("_", ".")))


def _format(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


def dataset_files(path: Path, what: str) -> tuple[str, list[Path]]:
    """``(format, files)`` of a ``.csv``/``.parquet`` file, or of a directory of such files
    (``_*`` and ``.*`` entries, such as Spark's ``_SUCCESS``, are not data)."""
    if not path.exists():
        raise InputError(f"{what} {path}: no such file or directory")
    if path.is_file():
        fmt = _format(path)
        if fmt is None:
            raise InputError(f"{what} {path}: not a .csv or .parquet file")
        return fmt, [path]
    files = _visible(path)
    if not files:
        raise InputError(f"{what} {path}: an empty directory")
    formats = {_format(f) if f.is_file() else None for f in files}
    if len(formats) != 1 or None in formats:
        names = ", ".join(f.name + ("/" if f.is_dir() else "") for f in files[:5])
        raise InputError(f"{what} {path}: a directory must hold only .csv or only .parquet files, not {names}")
    return formats.pop(), files  # type: ignore[return-value]


# Reading one file ----------------------------------------------------------------------------------
def _delimiter(file: Path, first: str) -> str:
    """The one of `DELIMITERS` that the first line uses (a comma when it uses none: one column);
    a line that uses several is refused, naming them, rather than read wrong."""
    used = [d for d in DELIMITERS if d in first]
    if len(used) > 1:
        raise InputError(
            f"{file}, line 1: {first!r} has {' and '.join(DELIMITERS[d] for d in used)}; "
            "separate the columns with one of them"
        )
    return used[0] if used else ","


class _Reader:
    """Reads files into integer `Rows`, failing on or skipping bad rows."""

    def __init__(self, header: bool | None, skip_bad: bool, skipped: Skipped) -> None:
        self.header = header
        self.skip_bad = skip_bad
        self.skipped = skipped

    def bad(self, file: Path, where: str, text: str, why: str, count: int = 1) -> None:
        description = f"{file}, {where}: {text!r}: {why}"
        if not self.skip_bad:
            raise InputError(f"{description} (--skip-bad-rows skips such rows and counts them)")
        self.skipped.add(description, count)

    def read(self, fmt: str, file: Path, required: Sequence[str], optional: Sequence[str] = ()) -> Rows:
        """Columns ``required`` then whichever of ``optional`` the file has, as int64."""
        if fmt == "csv":
            return self._csv(file, required, optional)
        return self._parquet(file, required, optional)

    def _columns(
        self, file: Path, where: str, names: list[str], required: Sequence[str], optional: Sequence[str]
    ) -> list[str]:
        allowed = [*required, *optional]
        missing = [c for c in required if c not in names]
        extra = [c for c in names if c not in allowed]
        if missing or extra or len(set(names)) != len(names):
            raise InputError(
                f"{file}, {where}: columns {','.join(names)}; expected {','.join(required)}"
                + (f" (and optionally {','.join(optional)})" if optional else "")
            )
        return [c for c in allowed if c in names]

    def _csv(self, file: Path, required: Sequence[str], optional: Sequence[str]) -> Rows:
        with open(file, "rb") as f:
            first_bytes = f.readline()
        try:
            first = first_bytes.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise InputError(f"{file}, line 1: not UTF-8 text (is it a CSV file?)") from None
        if not first_bytes:
            return Rows(file, np.empty((0, len(required)), np.int64), np.empty(0, np.int64))
        delimiter = _delimiter(file, first)
        cells = [c.strip() for c in first.split(delimiter)]
        numeric = all(re.fullmatch(_INTEGER, c) for c in cells)
        header = (not numeric) if self.header is None else self.header
        if header:
            names = self._columns(file, "line 1 (the header)", cells, required, optional)
            order = cells
        else:
            order = list(required)
            names = order
        bad_lines: list[tuple[int, str, str]] = []

        def wrong_width(row: pcsv.InvalidRow) -> str:
            bad_lines.append((row.number, row.text, f"{row.actual_columns} values, expected {row.expected_columns}"))
            return "skip"

        table = pcsv.read_csv(
            file,
            read_options=pcsv.ReadOptions(use_threads=False, column_names=order, skip_rows=1 if header else 0),
            parse_options=pcsv.ParseOptions(
                delimiter=delimiter, invalid_row_handler=wrong_width, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types=dict.fromkeys(order, pa.string()),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        # The line of each row of the table: the lines after the header, less those skipped.
        skipped = np.array(sorted(n for n, _, _ in bad_lines), dtype=np.int64)
        first_line = 2 if header else 1
        candidates = np.arange(first_line, first_line + table.num_rows + len(skipped), dtype=np.int64)
        lines = candidates[~np.isin(candidates, skipped)]
        strings = {name: table.column(name) for name in order}
        blank = np.ones(table.num_rows, dtype=bool)
        for column in strings.values():
            blank &= pc.equal(pc.utf8_trim_whitespace(column), "").to_numpy(zero_copy_only=False)
        valid = ~blank
        for column in strings.values():
            valid &= pc.match_substring_regex(column, _INTEGER).to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(~valid & ~blank):
            row = [strings[n][int(i)].as_py() for n in order]
            why = next(f"{n} {v!r} is not an integer" for n, v in zip(order, row) if not re.fullmatch(_INTEGER, v))
            bad_lines.append((int(lines[i]), delimiter.join(row), why))
        for number, text, why in sorted(bad_lines):  # the first in the file first
            self.bad(file, f"line {number}", text, why)
        keep = pa.array(valid)
        values = (
            np.column_stack(
                [
                    pc.cast(pc.utf8_trim(pc.utf8_trim_whitespace(strings[n].filter(keep)), "+"), pa.int64()).to_numpy()
                    for n in names
                ]
            )
            if valid.any()
            else np.empty((0, len(names)), np.int64)
        )
        return Rows(file, values.astype(np.int64).reshape(-1, len(names)), lines[valid])

    def _parquet(self, file: Path, required: Sequence[str], optional: Sequence[str]) -> Rows:
        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{file}: not a readable Parquet file ({e})") from None
        names = self._columns(file, "its schema", table.column_names, required, optional)
        for n in names:
            t = table.schema.field(n).type
            if not pa.types.is_integer(t):
                raise InputError(f"{file}: column {n} holds {t}, not integers")
        valid = np.ones(table.num_rows, dtype=bool)
        for n in names:
            valid &= table.column(n).is_valid().to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(~valid):
            row = ", ".join(f"{n}={table.column(n)[int(i)].as_py()}" for n in names)
            self.bad(file, f"row {i + 1}", row, "a missing value")
        kept = table.filter(pa.array(valid))
        values = (
            np.column_stack([kept.column(n).to_numpy().astype(np.int64) for n in names])
            if kept.num_rows
            else np.empty((0, len(names)), np.int64)
        )
        return Rows(file, values.reshape(-1, len(names)), np.flatnonzero(valid) + 1, unit="row")


def _checked(reader: _Reader, rows: Rows, names: Sequence[str]) -> Rows:
    """Rows whose ``diff`` is +1 or -1 and whose ``epoch`` is >= 1 (others are bad rows)."""
    good = np.ones(len(rows.values), dtype=bool)
    for k, name in enumerate(names):
        column = rows.values[:, k]
        if name == "diff":
            wrong = (column != 1) & (column != -1)
            why = "diff must be 1 (add the edge) or -1 (remove it)"
        elif name == "epoch":
            wrong = (column < 1) | (column > MAX_EPOCHS)
            why = f"epoch must be from 1 to {MAX_EPOCHS} (epoch 0 is the input graph)"
        else:
            continue
        for i in np.flatnonzero(wrong & good):
            reader.bad(rows.file, f"{rows.unit} {rows.lines[i]}", ",".join(map(str, rows.values[i])), why)
        good &= ~wrong
    return Rows(rows.file, rows.values[good], rows.lines[good], rows.unit)


# The edge list and the changes -----------------------------------------------------------------------
def read_edges(path: Path, header: bool | None = None, skip_bad: bool = False) -> Edges:
    """The distinct edges of the file or directory ``path`` (columns ``src``, ``dst``)."""
    fmt, files = dataset_files(path, "--input")
    skipped = Skipped()
    reader = _Reader(header, skip_bad, skipped)
    parts = [reader.read(fmt, f, EDGE_COLUMNS).values for f in files]
    pairs = np.concatenate(parts) if parts else np.empty((0, 2), np.int64)
    if len(pairs) == 0:
        raise InputError(
            f"--input {path}: no edges" + (f" ({skipped.count} bad rows skipped)" if skipped.count else "")
        )
    distinct = unique_pairs(pairs)
    return Edges(distinct, rows=len(pairs), duplicates=len(pairs) - len(distinct), skipped=skipped)


def read_changes(path: Path, header: bool | None = None, skip_bad: bool = False) -> tuple[list[list[Rows]], Skipped]:
    """Epochs of change rows from ``path``: a file is one epoch, or as many as its ``epoch``
    column names; a directory is one epoch per entry (a file, or a directory of parts), in
    order of name, unless Spark wrote it (it has ``_SUCCESS``): then it is one data set. Rows are ``(src, dst, diff)``, checked for form only (see `apply_changes`)."""
    if not path.exists():
        raise InputError(f"--changes {path}: no such file or directory")
    skipped = Skipped()
    reader = _Reader(header, skip_bad, skipped)
    spark_wrote = (path / "_SUCCESS").exists()  # a directory Spark wrote is one data set, not epochs
    if path.is_dir() and not spark_wrote and any(p.is_dir() or _format(p) for p in _visible(path)):
        entries = _visible(path)
    else:
        entries = [path]
    epochs: list[list[Rows]] = []
    for entry in entries:
        fmt, files = dataset_files(entry, "--changes")
        epoch: list[Rows] = []
        numbered: list[Rows] = []
        for f in files:
            rows = reader.read(fmt, f, CHANGE_COLUMNS, ("epoch",))
            names = [*CHANGE_COLUMNS, "epoch"][: rows.values.shape[1]]
            rows = _checked(reader, rows, names)
            if len(names) == 4:
                if len(entries) > 1:
                    raise InputError(
                        f"--changes {path}: {f} has an epoch column, but in a directory each entry is one epoch"
                    )
                numbered.append(rows)
            else:
                epoch.append(rows)
        if numbered and epoch:
            raise InputError(f"--changes {entry}: some files have an epoch column and some do not")
        if numbered:
            last = max((int(r.values[:, 3].max()) for r in numbered if len(r.values)), default=0)
            for e in range(1, last + 1):
                epochs.append(
                    [
                        Rows(r.file, r.values[r.values[:, 3] == e, :3], r.lines[r.values[:, 3] == e], r.unit)
                        for r in numbered
                    ]
                )
        else:
            epochs.append(epoch)
    if len(epochs) > MAX_EPOCHS:
        raise InputError(f"--changes {path}: {len(epochs)} epochs; the job takes at most {MAX_EPOCHS}")
    return epochs, skipped


def _contains(pairs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """For each row of ``edges``, whether the sorted, distinct ``pairs`` holds it."""
    if len(pairs) == 0 or len(edges) == 0:
        return np.zeros(len(edges), dtype=bool)
    lo = np.searchsorted(pairs[:, 0], edges[:, 0], "left")
    hi = np.searchsorted(pairs[:, 0], edges[:, 0], "right")
    found = np.zeros(len(edges), dtype=bool)
    for i in np.flatnonzero(hi > lo):
        j = lo[i] + np.searchsorted(pairs[lo[i] : hi[i], 1], edges[i, 1])
        found[i] = j < hi[i] and pairs[j, 1] == edges[i, 1]
    return found


def apply_changes(
    edges: Edges, epochs: Sequence[Sequence[Rows]], skip_bad: bool = False, skipped: Skipped | None = None
) -> tuple[Changes, np.ndarray]:
    """Check each change where it applies, in epoch and row order — a removal needs the edge
    present, an addition needs it absent — and return the epochs of changes that apply and the
    graph after the last epoch (sorted, distinct pairs)."""
    skipped = skipped if skipped is not None else Skipped()
    reader = _Reader(None, skip_bad, skipped)
    touched = np.concatenate([r.values[:, :2] for epoch in epochs for r in epoch] or [np.empty((0, 2), np.int64)])
    initially = _contains(edges.pairs, touched)
    present = {(int(a), int(b)): bool(p) for (a, b), p in zip(touched, initially)}
    out: list[np.ndarray] = []
    applied = 0
    for e, epoch in enumerate(epochs, start=1):
        rows: list[tuple[int, int, int]] = []
        for part in epoch:
            for (a, b, diff), line in zip(part.values.tolist(), part.lines.tolist()):
                if present[(a, b)] == (diff > 0):
                    why = (
                        f"adds edge ({a}, {b}), which the graph has"
                        if diff > 0
                        else f"removes edge ({a}, {b}), which the graph does not have"
                    )
                    reader.bad(part.file, f"{part.unit} {line}", f"{a},{b},{diff}", f"{why} at epoch {e}")
                    continue
                present[(a, b)] = diff > 0
                rows.append((a, b, diff))
        applied += len(rows)
        out.append(np.array(rows, dtype=np.int64).reshape(-1, 3))
    removed = np.array([k for k, p in present.items() if not p], dtype=np.int64).reshape(-1, 2)
    added = np.array(sorted(k for k, p in present.items() if p), dtype=np.int64).reshape(-1, 2)
    final = edges.pairs[~_contains(_sorted(removed), edges.pairs)] if len(removed) else edges.pairs
    final = unique_pairs(np.concatenate([final, added])) if len(added) else final
    return Changes(out, rows=applied, skipped=skipped), final


def _sorted(pairs: np.ndarray) -> np.ndarray:
    return unique_pairs(pairs)


def synthetic(pairs: Sequence[Sequence[tuple[int, int, int]]]) -> list[list[Rows]]:
    """Generated change batches as epochs of `Rows` (their 'lines' number the batch's rows)."""
    generated = Path("<generated>")
    return [
        [Rows(generated, np.array(batch, dtype=np.int64).reshape(-1, 3), np.arange(1, len(batch) + 1))]
        for batch in pairs
    ]
