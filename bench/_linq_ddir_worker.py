"""The program the ``linq.ddir`` benchmark runs, one fresh process per workload (private).

Started by `bench.linq_ddir` as ``python -m timely.cli run -n P -m bench._linq_ddir_worker SPEC``
(``SPEC`` a `bench.linq_ddir.Spec` as JSON, P its ``processes``). It loads linq's compiled loops (untimed), builds
the workload's program, feeds the seeded initial window of edges (timed to the first answer,
as DDIR's "initial epoch": load plus first computation), then closed-loop rounds: each retracts
the oldest ``churn`` edges and inserts ``churn`` fresh ones, timed until the output has passed
the round. The output is gathered as columns (`Collection.to_columns`), no Python object per
record; after the first answer and after the last round it is consolidated and saved to
``SPEC.out/WORKLOAD-first-pI.npz`` and ``-final-pI.npz`` (I the process), which the parent
adds up and checks against SciPy or plain Python. On P processes each feeds every P-th edge
of the window and of each round's changes (process 0 the roots), as a user splitting the
input would. Each process prints one line ``LINQDDIR {json}``: the seconds to load the compiled loops,
to the first answer, the milliseconds of each round (wall, and this process's CPU: on a
shared machine the CPU figure is the one to compare), and peak resident memory (at the first
answer, and at the end, each read before the answer is saved), and the scheduler steps and
notifications it ran during the rounds (on several processes also the frames it sent).

With ``LINQ_DDIR_PROFILE=FILE`` in the environment the rounds (not the first answer) run
under cProfile, its statistics written to ``FILE`` (``FILE.pI`` on several processes): run the worker directly for that,
``python -m bench._linq_ddir_worker '{"workload": "reach", "nodes": 100000, ...}'``.
"""

from __future__ import annotations

import cProfile
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import timely
from bench.linq_ddir import MARK, PROGRAMS, Spec, window
from timely_libs import linq

PROFILE_ENV = "LINQ_DDIR_PROFILE"


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Gathered:
    """The output's differences as they arrive, column blocks with their diffs."""

    def __init__(self) -> None:
        self.columns: list[np.ndarray] = []
        self.diffs: list[np.ndarray] = []

    def receive(self, time: Any, records: list[Any]) -> None:
        for columns, diffs in records:
            fields = columns if isinstance(columns, tuple) else (columns,)
            self.columns.append(np.stack([np.asarray(f, dtype=np.int64) for f in fields], axis=1))
            self.diffs.append(np.asarray(diffs, dtype=np.int64))

    def consolidated(self) -> tuple[np.ndarray, np.ndarray]:
        """The accumulated rows (sorted, distinct) and their counts, zeros dropped."""
        if not self.columns:
            return np.zeros((0, 1), dtype=np.int64), np.zeros(0, dtype=np.int64)
        rows = np.concatenate(self.columns)
        diffs = np.concatenate(self.diffs)
        self.columns, self.diffs = [rows], [diffs]
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), weights=diffs, minlength=len(unique)).astype(np.int64)
        keep = counts != 0
        return unique[keep], counts[keep]


def main(argv: list[str]) -> None:
    spec = Spec.from_json(argv[0])
    out_dir = Path(spec.out)
    load_seconds = linq.preload()
    src, dst = window(spec)
    program = PROGRAMS[spec.workload]
    gathered = Gathered()
    where: list[int] = []

    def build(scope: timely.Scope) -> tuple[Any, ...]:
        where[:] = [scope.process_index, scope.processes]
        edges = linq.new_input(scope, "edges")
        roots = linq.new_input(scope, "roots")
        result = program(edges.collection, roots.collection)
        probe = result.to_columns(name="result_columns").subscribe(gathered.receive, name="result")
        return edges, roots, probe

    n, c = spec.edges, spec.churn
    with timely.execute(build, timeout=3600, stall_log_after=None) as (comp, (edges, roots, probe)):
        me, processes = where
        share = slice(me, None, processes)  # every P-th edge
        started, started_cpu = time.perf_counter(), time.process_time()
        edges.update_columns((src[:n][share], dst[:n][share]))
        if me == 0:
            roots.insert(0)
        edges.advance_to(1)
        roots.advance_to(1)
        comp.wait_passed(probe, 0)
        initial = time.perf_counter() - started
        initial_cpu = time.process_time() - started_cpu
        peak_first = _peak_mib()
        _save(out_dir / f"{spec.workload}-first-p{me}.npz", gathered)
        stats_before = comp.statistics()
        sent_before = dict(stats_before.network)
        rounds, cpu = [], []
        profile = os.environ.get(PROFILE_ENV)
        if profile and processes > 1:
            profile = f"{profile}.p{me}"  # one file per process
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        for r in range(1, spec.rounds + 1):
            old = slice((r - 1) * c, r * c)
            new = slice(n + (r - 1) * c, n + r * c)
            changes = (np.concatenate([src[old], src[new]]), np.concatenate([dst[old], dst[new]]))
            diffs = np.concatenate([np.full(c, -1, dtype=np.int64), np.ones(c, dtype=np.int64)])
            mine = np.concatenate([np.arange(me, c, processes), np.arange(c + me, 2 * c, processes)])
            began, began_cpu = time.perf_counter(), time.process_time()
            edges.update_columns((changes[0][mine], changes[1][mine]), diffs[mine])
            edges.advance_to(r + 1)
            roots.advance_to(r + 1)
            comp.wait_passed(probe, r)
            rounds.append((time.perf_counter() - began) * 1000)
            cpu.append((time.process_time() - began_cpu) * 1000)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile))
        peak_end = _peak_mib()
        stats_after = comp.statistics()
        network = stats_after.network
        frames = {k: network[k] - sent_before[k] for k in ("progress_frames_sent", "data_frames_sent") if k in network}
        steps = stats_after.scheduler_steps - stats_before.scheduler_steps
        notifications = stats_after.notifications_delivered - stats_before.notifications_delivered
        _save(out_dir / f"{spec.workload}-final-p{me}.npz", gathered)
    report = {
        "process": me,
        "load_seconds": load_seconds,
        "initial_seconds": initial,
        "round_ms": rounds,
        "initial_cpu_seconds": initial_cpu,
        "round_cpu_ms": cpu,
        "peak_mib_first": peak_first,
        "peak_mib": peak_end,
        "frames_in_rounds": frames,
        "steps_in_rounds": steps,
        "notifications_in_rounds": notifications,
    }
    print(f"{MARK} {json.dumps(report)}", flush=True)


def _save(path: Path, gathered: Gathered) -> None:
    rows, counts = gathered.consolidated()
    np.savez(path, rows=rows, counts=counts)


if __name__ == "__main__":
    main(sys.argv[1:])
