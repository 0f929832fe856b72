"""differential-dataflow's DDIR benchmark suite on linq: cc, scc, reach, kcore, triangles.

differential-dataflow's ``interactive/bench/`` (2026) runs each workload on a seeded uniform
random graph with a standing window of edges: the initial epoch loads the window and computes
(``initial``, seconds), then closed-loop rounds each retract the oldest ``churn`` edges and
insert ``churn`` fresh ones, waiting for the answer before the next (``round``, milliseconds,
the median over the rounds). Scales (nodes, edges, churn, rounds), as DDIR's: small 10K / 20K
/ 10 / 20, medium 100K / 200K / 100 / 50, large 1M / 2M / 1,000 / 20. ``--scale`` picks one
(default large; ``--quick`` is small). ``LINQ_DDIR_WORKLOADS=kcore,triangles`` in the
environment runs only those workloads (large kcore and scc take minutes each).

The programs are DDIR's (``interactive/examples/programs/``) written as a linq user would:
``reach``, ``kcore`` and ``triangles`` from public operators only (`fixed_point`, `join`,
`distinct`, `count`, `where`, `select`), ``cc`` and ``scc`` with the library functions. kcore
is a real 2-core peel: an edge stays while both its ends have degree at least 2 among the
edges that stay (DDIR's program tests the source only). Each workload runs in a fresh
process (`bench/_linq_ddir_worker.py`), so its peak memory is its own; the output is gathered
as columns and checked exactly, after the first epoch and after the last round, against a
recomputation from scratch: SciPy's connected components, strong components and breadth-first
order, a vectorised peel, and a sparse-matrix triangle count.

``linq.ddir.p2`` runs cc and reach (default scale medium; ``LINQ_DDIR_WORKLOADS=reach`` for
one) on one process and then on two (``timely run -n 2``, each process feeding every other
edge), and records each two-process figure against the one-process figure of the same run.

Baselines: DDIR's interpreted ("corgi") backend, one worker, as its reports give them:
``2026-09-04-b06adbc5-large.md`` and ``2026-09-04-69ac25ff-large-kcore.md`` (kcore without its
``INSPECT`` tap) for large, ``2026-09-06-27a7ec47-medium.md`` for medium,
``2026-09-04-d875d6e0-small.md`` for small (it predates cc and triangles, which have no small
baseline, and its kcore still printed every row). DDIR's round is the mean of a ``tick R``;
ours is the median. Those figures are from an M-series laptop, ours from this machine: the
progress lines print the load average.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from bench._harness import Context, benchmark
from bench._net import launch, load

MARK = "LINQDDIR"
SEED = 2026

SCALES = {
    # scale: (nodes, edges, churn, rounds), DDIR's `bench.py` SCALES
    "small": (10_000, 20_000, 10, 20),
    "medium": (100_000, 200_000, 100, 50),
    "large": (1_000_000, 2_000_000, 1_000, 20),
}

WORKLOADS = ("cc", "reach", "kcore", "triangles", "scc")
WORKLOADS_ENV = "LINQ_DDIR_WORKLOADS"

DDIR = {
    # scale: workload: (initial s, round ms), corgi backend, 1 worker
    "large": {
        "cc": (7.93, 177.5),
        "reach": (2.23, 124.2),
        "kcore": (4.55, 25.9),
        "triangles": (1.22, 5.4),
        "scc": (25.24, 699.5),
    },
    "medium": {
        "cc": (0.5321, 14.6),
        "reach": (0.1719, 9.6),
        "kcore": (0.2704, 2.1),
        "triangles": (0.1022, 0.431),
        "scc": (1.71, 54.0),
    },
    "small": {
        "reach": (0.0163, 1.2),
        "kcore": (0.0872, 0.938),
        "scc": (0.1615, 10.9),
    },
}
BASELINE = "ddir_corgi_w1"

MEMORY_TARGET_MIB = {("large", "scc"): 3 * 1024}


@dataclass(frozen=True)
class Spec:
    """One run: the workload, its graph and churn, and where the answers go."""

    workload: str
    nodes: int
    edges: int
    churn: int
    rounds: int
    out: str = ""
    processes: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls(**json.loads(text))


def window(spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """Every edge the run will see, ``(src, dst)`` int64 arrays: the first ``edges`` are the
    initial window, round ``r`` retracts edges ``[(r-1)c, rc)`` and inserts ``[E+(r-1)c, E+rc)``."""
    rng = np.random.default_rng(SEED)
    total = spec.edges + spec.rounds * spec.churn
    return rng.integers(0, spec.nodes, total, dtype=np.int64), rng.integers(0, spec.nodes, total, dtype=np.int64)


def present(spec: Spec, after_rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """The window after ``after_rounds`` rounds."""
    src, dst = window(spec)
    at = slice(after_rounds * spec.churn, spec.edges + after_rounds * spec.churn)
    return src[at], dst[at]


# The programs, as a user writes them ------------------------------------------------------------


def _cc(edges: Any, roots: Any) -> Any:
    from timely_libs import linq

    return linq.connected_components(edges)


def _scc(edges: Any, roots: Any) -> Any:
    from timely_libs import linq

    return linq.strongly_connected_components(edges)


def _reach(edges: Any, roots: Any) -> Any:
    """The nodes reachable from ``roots`` (DDIR's ``reach.ddp``): ``roots + reach ⋈ edges``,
    distinct, to a fixed point."""
    from timely_libs import linq

    node = linq.columns(lambda n: n)

    def step(reach: Any) -> Any:
        inner_edges, inner_roots = edges.enter(reach.scope), roots.enter(reach.scope)
        proposals = reach.join(inner_edges, node, itemgetter(0), linq.columns(lambda n, s, d: d), name="proposals")
        return inner_roots.concat(proposals, name="with_roots").distinct(name="reached")

    return roots.fixed_point(step, name="reach")


def _kcore(edges: Any, roots: Any) -> Any:
    """``(node, degree)`` in the 2-core: both directions of every edge, peeled to a fixed point
    (an edge stays while both ends keep degree at least 2), then each node's degree."""
    from timely_libs import linq

    node = linq.columns(lambda n: n)
    edge = linq.columns(lambda s, d, n: (s, d))
    symmetric = edges.concat(edges.select(itemgetter(1, 0), name="reversed"), name="symmetric")

    def peel(active: Any) -> Any:
        degree = active.count(itemgetter(0), name="degree")
        alive = degree.where(linq.columns(lambda n, k: k >= 2), name="at_least_two").select(itemgetter(0), name="alive")
        from_alive = active.join(alive, itemgetter(0), node, edge, name="source_alive")
        return from_alive.join(alive, itemgetter(1), node, edge, name="both_alive")

    core = symmetric.fixed_point(peel, name="peel")
    return core.count(itemgetter(0), name="core_degree")


def _triangles(edges: Any, roots: Any) -> Any:
    """``(0, n)``: the number of triangles ``a < b < c`` among the edges ``a -> b`` with
    ``a < b`` (DDIR's ``triangles.ddp``: distinct, two joins, a count)."""
    from timely_libs import linq

    forward = edges.where(linq.columns(lambda s, d: s < d), name="forward").distinct(name="once")
    paths = forward.join(
        forward, itemgetter(1), itemgetter(0), linq.columns(lambda a, b, b2, c: (a, c, b)), name="paths"
    )
    closed = paths.join(
        forward, itemgetter(0, 1), itemgetter(0, 1), linq.columns(lambda a, c, b, a2, c2: (a, b, c)), name="closed"
    )
    return closed.count(linq.columns(lambda a, b, c: np.zeros(len(a), dtype=np.int64)), name="total")


PROGRAMS: dict[str, Callable[[Any, Any], Any]] = {
    "cc": _cc,
    "scc": _scc,
    "reach": _reach,
    "kcore": _kcore,
    "triangles": _triangles,
}


# The oracles: from scratch, SciPy or vectorised plain Python ------------------------------------


def _multiset(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(rows):
        return np.zeros((0, rows.shape[1] if rows.ndim == 2 else 1), dtype=np.int64), np.zeros(0, dtype=np.int64)
    unique, counts = np.unique(rows, axis=0, return_counts=True)
    return unique, counts.astype(np.int64)


def _graph(nodes: int, src: np.ndarray, dst: np.ndarray) -> Any:
    from scipy.sparse import csr_matrix

    return csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(nodes, nodes))


def _least_per_label(labels: np.ndarray) -> np.ndarray:
    """For each node, the least node id with the same label."""
    least = np.full(labels.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(least, labels, np.arange(len(labels), dtype=np.int64))
    return least[labels]


def oracle(workload: str, nodes: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The answer on the edges ``(src, dst)``, as the worker saves it: sorted distinct rows, counts."""
    from scipy.sparse.csgraph import breadth_first_order, connected_components

    if workload == "cc":
        _, labels = connected_components(_graph(nodes, src, dst), directed=False)
        at = np.unique(np.concatenate([src, dst]))
        return _multiset(np.stack([at, _least_per_label(labels)[at]], axis=1))
    if workload == "scc":
        _, labels = connected_components(_graph(nodes, src, dst), directed=True, connection="strong")
        same = labels[src] == labels[dst]
        return _multiset(np.stack([src[same], dst[same]], axis=1))
    if workload == "reach":
        reached = breadth_first_order(_graph(nodes, src, dst), 0, directed=True, return_predecessors=False)
        return _multiset(np.sort(reached).reshape(-1, 1))
    if workload == "kcore":
        a, b = np.concatenate([src, dst]), np.concatenate([dst, src])
        while True:
            degree = np.bincount(a, minlength=nodes)
            keep = (degree[a] >= 2) & (degree[b] >= 2)
            if keep.all():
                break
            a, b = a[keep], b[keep]
        degree = np.bincount(a, minlength=nodes)
        at = np.flatnonzero(degree)
        return np.stack([at, degree[at]], axis=1), np.ones(len(at), dtype=np.int64)
    if workload == "triangles":
        forward = src < dst
        upper = _graph(nodes, src[forward], dst[forward])
        upper.data[:] = 1  # distinct edges
        upper = upper.astype(np.int64)
        total = int((upper @ upper).multiply(upper).sum())
        if not total:  # a count of nothing is no record, not a zero
            return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.array([[0, total]], dtype=np.int64), np.ones(1, dtype=np.int64)
    raise ValueError(f"unknown workload {workload!r}")


def _saved(out: Path, workload: str, which: str) -> tuple[np.ndarray, np.ndarray]:
    """The answer the worker processes saved (``which``: first or final), added up: sorted
    distinct rows and their counts, zeros dropped."""
    parts = [np.load(path) for path in sorted(out.glob(f"{workload}-{which}-p*.npz"))]
    rows = [part["rows"] for part in parts if len(part["rows"])]
    counts = [part["counts"] for part in parts if len(part["rows"])]
    if len(rows) <= 1:
        return (rows[0], counts[0]) if rows else (np.zeros((0, 1), dtype=np.int64), np.zeros(0, dtype=np.int64))
    unique, inverse = np.unique(np.concatenate(rows), axis=0, return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=np.concatenate(counts), minlength=len(unique)).astype(np.int64)
    keep = total != 0
    return unique[keep], total[keep]


def check(ctx: Context, spec: Spec, after_rounds: int, out: Path, which: str) -> None:
    """The worker processes' saved answer must equal the oracle's, row for row and count for count."""
    rows, counts = _saved(out, spec.workload, which)
    want_rows, want_counts = oracle(spec.workload, spec.nodes, *present(spec, after_rounds))
    if not len(rows) and not len(want_rows):
        return
    same = rows.shape == want_rows.shape and np.array_equal(rows, want_rows) and np.array_equal(counts, want_counts)
    ctx.check(
        same,
        f"{spec.workload}: the answer after {after_rounds} rounds differs from the recomputation "
        f"({len(rows)} rows against {len(want_rows)})",
    )


# The benchmark ------------------------------------------------------------------------------------


def run(ctx: Context, scale: str, workload: str, processes: int = 1) -> dict[str, Any]:
    """Run one workload in fresh processes; check both answers; return the processes' report:
    each round as long as the slowest process took, CPU and peak memory added up."""
    nodes, edges, churn, rounds = SCALES[scale]
    with tempfile.TemporaryDirectory(prefix="linq-ddir-") as out:
        spec = Spec(workload, nodes, edges, churn, rounds, out, processes)
        ctx.progress(
            f"{workload} at {scale} on {processes} process(es): {nodes:,} nodes, {edges:,} edges, "
            f"{rounds} rounds of {churn} ({load()})"
        )
        reports = launch(processes, spec.to_json(), timeout=3600, worker="bench._linq_ddir_worker", mark=MARK)
        check(ctx, spec, 0, Path(out), "first")
        check(ctx, spec, rounds, Path(out), "final")
    report = {
        "initial_seconds": max(r["initial_seconds"] for r in reports),
        "round_ms": [max(each) for each in zip(*(r["round_ms"] for r in reports))],
        "initial_cpu_seconds": sum(r["initial_cpu_seconds"] for r in reports),
        "round_cpu_ms": [sum(each) for each in zip(*(r["round_cpu_ms"] for r in reports))],
        "peak_mib": sum(r["peak_mib"] for r in reports),
    }
    steps = max(r["steps_in_rounds"] for r in reports) / rounds
    notifications = max(r["notifications_in_rounds"] for r in reports) / rounds
    frames = f", {steps:.1f} scheduler steps and {notifications:.1f} notifications a round (the most of any process)"
    if processes > 1:
        sent = [r["frames_in_rounds"] for r in reports]
        progress = max(x.get("progress_frames_sent", 0) for x in sent) / (processes - 1) / rounds
        data = max(x.get("data_frames_sent", 0) for x in sent) / (processes - 1) / rounds
        frames += f", {progress:.1f} progress and {data:.1f} data frames to each peer a round"
    ctx.progress(
        f"{workload} on {processes}: first answer {report['initial_seconds']:.2f} s, round median "
        f"{statistics.median(report['round_ms']):.2f} ms (CPU {report['initial_cpu_seconds']:.2f} s, "
        f"{statistics.median(report['round_cpu_ms']):.2f} ms), peak {report['peak_mib']:,.0f} MiB{frames} (verified; {load()})"
    )
    return report


def record(ctx: Context, scale: str, workload: str, report: dict[str, Any]) -> None:
    ddir = DDIR.get(scale, {}).get(workload)
    initial, median = report["initial_seconds"], statistics.median(report["round_ms"])
    name = f"linq.ddir.{workload}"
    for suffix, value, unit, theirs in (
        ("initial", initial, "s", ddir and ddir[0]),
        ("round", median, "ms", ddir and ddir[1]),
    ):
        target = {"target": f"<= DDIR ({theirs:g} {unit})", "met": value <= theirs} if theirs else {}
        ctx.record(f"{name}.{suffix}", value, unit, BASELINE if theirs else None, theirs or None, **target)
    limit = MEMORY_TARGET_MIB.get((scale, workload))
    memory = report["peak_mib"]
    ctx.record(
        f"{name}.memory", memory, "MiB", **({"target": f"<= {limit:,} MiB", "met": memory <= limit} if limit else {})
    )


@benchmark("linq.ddir", "differential-dataflow's DDIR workloads (cc, scc, reach, kcore, triangles) vs DDIR's figures")
def ddir(ctx: Context) -> None:
    scale = ctx.scale or ("small" if ctx.quick else "large")
    if scale not in SCALES:
        raise ValueError(f"linq.ddir: unknown scale {scale!r}; one of {', '.join(SCALES)}")
    workloads = chosen("linq.ddir", WORKLOADS)
    ctx.progress(f"scale {scale}")
    for workload in workloads:
        record(ctx, scale, workload, run(ctx, scale, workload))


def chosen(bench: str, among: tuple[str, ...]) -> tuple[str, ...]:
    """The workloads ``LINQ_DDIR_WORKLOADS`` names (all of ``among`` without it)."""
    named = os.environ.get(WORKLOADS_ENV)
    workloads = tuple(w.strip() for w in named.split(",") if w.strip()) if named else among
    unknown = sorted(set(workloads) - set(among))
    if unknown:
        raise ValueError(f"{bench}: unknown workload(s) {', '.join(unknown)} in {WORKLOADS_ENV}; of {among}")
    return workloads


P2_WORKLOADS = ("cc", "reach")
"""The workloads ``linq.ddir.p2`` runs on one process and on two."""


@benchmark("linq.ddir.p2", "DDIR's cc and reach (default scale medium) on 2 processes against 1, same run")
def ddir_two_processes(ctx: Context) -> None:
    """Each workload on one process, then on two (each feeding half of every round's changes):
    ``linq.ddir.WORKLOAD.round.p2`` is the two processes' round median (each round as long as
    the slower process took) with the one process's median of the same run as its baseline,
    and should be the lower; ``.initial.p2`` likewise for the first answer."""
    scale = ctx.scale or ("small" if ctx.quick else "medium")
    if scale not in SCALES:
        raise ValueError(f"linq.ddir.p2: unknown scale {scale!r}; one of {', '.join(SCALES)}")
    ctx.progress(f"scale {scale}")
    for workload in chosen("linq.ddir.p2", P2_WORKLOADS):
        one = run(ctx, scale, workload, 1)
        two = run(ctx, scale, workload, 2)
        name = f"linq.ddir.{workload}"
        for suffix, unit, value, baseline in (
            ("initial", "s", two["initial_seconds"], one["initial_seconds"]),
            ("round", "ms", statistics.median(two["round_ms"]), statistics.median(one["round_ms"])),
        ):
            ctx.record(
                f"{name}.{suffix}.p2",
                value,
                unit,
                f"{name}.{suffix} (1 process, same run)",
                baseline,
                target="< 1 process",
                met=value < baseline,
            )
        ctx.record(
            f"{name}.round_cpu.p2",
            statistics.median(two["round_cpu_ms"]),
            "ms",
            f"{name}.round_cpu (1 process, same run)",
            statistics.median(one["round_cpu_ms"]),
        )
