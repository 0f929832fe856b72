"""What every benchmark shares: the registry, result records, progress lines, the table, the JSON.

A benchmark is a function ``fn(ctx)`` registered with ``@benchmark(name, description)``. It
reads ``ctx.quick``, reports with ``ctx.record(...)`` (as many records as it likes) and says
how far it got with ``ctx.progress(...)``. `run_benchmarks` runs a selection, prints one table
per benchmark and writes the records as a JSON list of
``{"name", "value", "unit", "baseline", "baseline_value"}``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import pkgutil
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Benchmark",
    "BenchmarkError",
    "Context",
    "IMPORT_ERRORS",
    "Record",
    "RESULTS_DIR",
    "benchmark",
    "discover",
    "format_table",
    "machine_context",
    "percentile",
    "run_benchmarks",
    "select",
    "write_json",
]

RESULTS_DIR = Path(__file__).resolve().parent.parent / "bench-results"
"""Where results go without ``--json`` (git-ignored)."""

PROGRESS_INTERVAL = 2.0
"""Seconds between two rate-limited progress lines."""


class BenchmarkError(Exception):
    """A benchmark found something wrong (e.g. timely's result differs from the baseline's)."""


# Records ---------------------------------------------------------------------------------------


@dataclass
class Record:
    """One measured number, with the baseline it is compared with (if any).

    ``target`` describes what the number should reach and ``met`` whether it does; both are
    shown in the table only (never asserted, not written to the JSON).
    """

    name: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    target: str | None = None
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value``, or None without a usable baseline."""
        if self.baseline_value is None or not self.baseline_value:
            return None
        return self.value / self.baseline_value

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_value": self.baseline_value,
        }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, by the nearest-rank method."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# The registry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Benchmark:
    name: str
    fn: Callable[[Context], None]
    description: str
    module: str


_REGISTRY: dict[str, Benchmark] = {}
IMPORT_ERRORS: dict[str, BaseException] = {}
"""Modules of the package that failed to import (by module name): reported, not fatal."""


def benchmark(name: str, description: str = "") -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    """Register ``fn(ctx)`` as the benchmark ``name`` (dotted, e.g. ``core.throughput``)."""
    if not name or name == "all" or " " in name:
        raise ValueError(f"bad benchmark name {name!r}")

    def register(fn: Callable[[Context], None]) -> Callable[[Context], None]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.module != fn.__module__:
            raise ValueError(f"benchmark {name!r} is registered by both {existing.module} and {fn.__module__}")
        doc = description or next(iter((fn.__doc__ or "").strip().splitlines()), "")
        _REGISTRY[name] = Benchmark(name, fn, doc, fn.__module__)
        return fn

    return register


def discover() -> dict[str, Benchmark]:
    """Import every public module of the ``bench`` package; return the registry, by name."""
    package = importlib.import_module("bench")
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            module = f"bench.{info.name}"
            try:
                importlib.import_module(module)
            except Exception as exc:
                IMPORT_ERRORS[module] = exc
    return dict(sorted(_REGISTRY.items()))


def select(names: Sequence[str], registry: dict[str, Benchmark]) -> list[Benchmark]:
    """The benchmarks ``names`` asks for: exact names, ``all``, or a group prefix (``core``)."""
    chosen: list[Benchmark] = []
    for name in names:
        if name == "all":
            matches = list(registry.values())
        elif name in registry:
            matches = [registry[name]]
        else:
            matches = [b for n, b in registry.items() if n.startswith(name.rstrip(".") + ".")]
        if not matches:
            raise KeyError(f"no benchmark named {name!r}; known: {', '.join(registry) or '(none)'}")
        chosen.extend(b for b in matches if b not in chosen)
    return chosen


# Running ------------------------------------------------------------------------------------------


@dataclass
class Context:
    """What a running benchmark gets: its mode, where to put records, how to report progress."""

    name: str
    quick: bool = False
    scale: str | None = None
    """``--scale``: the size a benchmark that has several should run at (None: its default)."""
    records: list[Record] = field(default_factory=list)
    out: Any = None
    started: float = field(default_factory=time.perf_counter)
    _last_progress: float = field(default=0.0, repr=False)

    def record(
        self,
        name: str,
        value: float,
        unit: str,
        baseline: str | None = None,
        baseline_value: float | None = None,
        *,
        target: str | None = None,
        met: bool | None = None,
    ) -> Record:
        rec = Record(name, float(value), unit, baseline, None if baseline_value is None else float(baseline_value))
        rec.target, rec.met = target, met
        self.records.append(rec)
        return rec

    def progress(self, message: str, force: bool = True) -> bool:
        """Print a progress line. With ``force=False`` print only if the last line is older than
        `PROGRESS_INTERVAL` (cheap enough to call from a hot loop now and then). True if printed."""
        now = time.perf_counter()
        if not force and now - self._last_progress < PROGRESS_INTERVAL:
            return False
        self._last_progress = now
        print(f"  [{self.name} +{now - self.started:6.1f}s] {message}", file=self.out or sys.stdout, flush=True)
        return True

    def check(self, condition: bool, message: str) -> None:
        """Raise `BenchmarkError` unless ``condition``."""
        if not condition:
            raise BenchmarkError(f"{self.name}: {message}")


def run_benchmarks(
    benchmarks: Sequence[Benchmark],
    *,
    quick: bool = False,
    scale: str | None = None,
    json_path: Path | None = None,
    out: Any = None,
) -> int:
    """Run ``benchmarks`` in order, print their tables, write their JSON; return an exit code.

    With ``json_path`` every record of the run goes into that one file; without it each
    benchmark writes ``RESULTS_DIR/NAME.json``. A benchmark that raises is reported and the
    others still run; the exit code is then 1.
    """
    out = out or sys.stdout
    print(format_context(machine_context()), file=out)
    print(f"mode: {'quick' if quick else 'full'}" + (f", scale {scale}" if scale else ""), file=out, flush=True)
    failed: list[str] = []
    everything: list[Record] = []
    for bench in benchmarks:
        print(f"\n=== {bench.name}: {bench.description}", file=out, flush=True)
        ctx = Context(bench.name, quick=quick, scale=scale, out=out)
        try:
            bench.fn(ctx)
        except Exception:
            failed.append(bench.name)
            print(f"!!! {bench.name} FAILED after {time.perf_counter() - ctx.started:.1f} s:", file=out)
            traceback.print_exc(file=out)
        elapsed = time.perf_counter() - ctx.started
        if ctx.records:
            print(format_table(ctx.records), file=out)
        print(f"({bench.name} took {elapsed:.1f} s)", file=out, flush=True)
        everything.extend(ctx.records)
        if json_path is None and ctx.records and bench.name not in failed:
            path = write_json(RESULTS_DIR / f"{bench.name}.json", ctx.records)
            print(f"wrote {_shown(path)}", file=out)
    if json_path is not None:
        path = write_json(json_path, everything)
        print(f"\nwrote {_shown(path)}", file=out)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}", file=out)
        return 1
    return 0


def write_json(path: Path, records: Sequence[Record]) -> Path:
    """Write ``records`` as a JSON list (atomically: a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps([r.to_json() for r in records], indent=2) + "\n")
    os.replace(tmp, path)
    return path


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# The machine ------------------------------------------------------------------------------------


def machine_context() -> dict[str, Any]:
    """Python, CPUs and the event loop timely actually runs on (found by running a tiny dataflow)."""
    import timely

    try:
        from importlib.metadata import version

        timely_version = version("timely-dataflow")
    except Exception:  # pragma: no cover - not installed as a distribution
        timely_version = "?"
    try:
        cpus_usable: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus_usable = None
    try:
        loop = _event_loop_class(timely)
    except Exception as exc:  # report the machine even when timely cannot run
        loop = f"? (timely failed: {type(exc).__name__}: {exc})"
    uvloop_version = None
    if loop.startswith("uvloop"):
        import uvloop

        uvloop_version = getattr(uvloop, "__version__", "?")
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": cpus_usable,
        "timely": timely_version,
        "event_loop": loop,
        "uvloop": uvloop_version,
    }


def _event_loop_class(timely: Any) -> str:
    seen: list[str] = []

    class LoopType(timely.Vertex):  # type: ignore[misc,name-defined]
        def on_recv(self, edge: int, records: list[Any], t: Any) -> None:
            cls = type(asyncio.get_running_loop())
            seen.append(f"{cls.__module__}.{cls.__qualname__}")

    def build(scope: Any) -> Any:
        inp = scope.new_input("numbers")
        inp.stage("loop_type", LoopType)
        return inp

    with timely.execute(build, workers=1, timeout=30) as (_, inp):
        inp.send([0])
    return seen[0] if seen else "?"


def format_context(info: dict[str, Any]) -> str:
    cpus = f"{info['cpu_count']}" + (
        f" ({info['cpus_usable']} usable)" if info["cpus_usable"] not in (None, info["cpu_count"]) else ""
    )
    uv = f"yes (uvloop {info['uvloop']})" if info["uvloop"] else "no"
    return (
        f"python: {info['python']}  |  cpus: {cpus}  |  uvloop: {uv} ({info['event_loop']})\n"
        f"timely: {info['timely']}  |  platform: {info['platform']}"
    )


# The table ----------------------------------------------------------------------------------------


def format_value(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def format_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:,.0f}x"
    return f"{r:.2f}x"


def format_table(records: Sequence[Record]) -> str:
    """The records as an aligned text table (ratio = value / baseline value)."""
    header = ("name", "value", "unit", "baseline", "baseline value", "ratio", "target")
    rows = [header]
    for r in records:
        target = "-"
        if r.target:
            target = r.target + ("" if r.met is None else ("  [met]" if r.met else "  [MISSED]"))
        rows.append(
            (
                r.name,
                format_value(r.value),
                r.unit,
                r.baseline or "-",
                format_value(r.baseline_value),
                format_ratio(r.ratio),
                target,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {1, 4, 5}  # numbers

    def line(row: Sequence[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])]) + "\n(ratio = value / baseline value)"
