"""``faults.chaos``: seeded fault schedules over real 3-process runs; is everything survived?

Each run (seed 1, 2, ...; ``FAULTSBENCH_CHAOS_RUNS`` or 60, ``--quick`` 10) takes its plan
from `tests.support.chaos.plan`: a workload alternating between running sums by key (20 epochs,
a multi-epoch keyed computation) and timely_libs.linq connected components (12 epochs), a shape (0, 2
or 4 epochs in flight; a consumer taking 0 to 20 ms a batch) and one or two faults: SIGKILL at
the first epoch, mid-epoch, inside a checkpoint, after N delivered epochs, after every input
closed, at a random moment, from outside, and again while the restarted processes restore;
SIGSTOP then SIGCONT; the newest checkpoint's part corrupted, an input log torn or corrupted
between two launches; the checkpoint directory's file system full for 1.5 s. Runs go under
``timely run -n 3 --restarts 3 --checkpoint-every 3``; each one's per-epoch outputs are compared
with an undisturbed run's, measured in the same benchmark and checked against plain Python.

Records: ``faults.chaos.runs``; ``.faults`` (faults that landed); ``.survived`` (of those
meant to be survived, against their number as the baseline); ``.lost`` (epoch outputs missing
or wrong, in runs meant to survive); ``.duplicated`` (epochs delivered again beyond the
documented window, or differently); ``.silent`` (runs that exited 0 with output missing);
``.loud`` (corrupt input logs that stopped the run naming the file, against their number);
``.redelivered`` (the documented window: the one epoch a process was handing over as it died).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

from bench._harness import Context, benchmark

RUNS = 60
QUICK_RUNS = 10


@benchmark("faults.chaos", "seeded SIGKILL/SIGSTOP/corruption/full-disk schedules on 3 processes, vs undisturbed runs")
def chaos_suite(ctx: Context) -> None:
    from tests.support import chaos

    runs = int(os.environ.get("FAULTSBENCH_CHAOS_RUNS", QUICK_RUNS if ctx.quick else RUNS))
    totals: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="timely-chaos-") as tmp:
        work = Path(tmp)
        expected = {w: chaos.undisturbed(w, work / f"undisturbed-{w}") for w in ("sum", "cc")}
        ctx.progress("undisturbed runs of sum and cc match plain Python")
        for seed in range(1, runs + 1):
            plan = chaos.plan(seed)
            outcome = chaos.execute(plan, work / f"run-{seed}", expected[plan.workload])
            loud_meant = sum(1 for f in plan.faults if not f.survive) if outcome.meant == 0 and outcome.faults else 0
            totals.update(
                runs=1,
                faults=outcome.faults,
                meant=outcome.meant,
                survived=outcome.survived,
                lost=outcome.lost,
                duplicated=outcome.duplicated,
                redelivered=outcome.redelivered,
                silent=int(outcome.silent),
                loud_meant=loud_meant,
                loud=int(loud_meant > 0 and outcome.loud),
            )
            for fault in plan.faults:
                kinds[fault.kind] += 1
            bad = outcome.survived < outcome.meant or outcome.lost or outcome.duplicated or outcome.silent
            bad = bad or (loud_meant and not outcome.loud)
            if bad:
                failed.append(f"{plan.describe()}: {outcome.note[:500]}")
            ctx.progress(
                f"run {seed}/{runs} {'FAILED' if bad else 'ok'} in {outcome.seconds:.1f}s: {plan.describe()}"
                + (f" ({outcome.note[:120]})" if outcome.note and not bad else "")
            )
    ctx.progress("faults scheduled by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for line in failed:
        ctx.progress("FAILED " + line)
    ctx.record("faults.chaos.runs", totals["runs"], "runs", target=">= 50", met=totals["runs"] >= 50)
    ctx.record("faults.chaos.faults", totals["faults"], "faults")
    ctx.record(
        "faults.chaos.survived",
        totals["survived"],
        "faults",
        "meant to be survived",
        totals["meant"],
        target="all",
        met=totals["survived"] == totals["meant"],
    )
    ctx.record("faults.chaos.lost", totals["lost"], "epochs", target="0", met=totals["lost"] == 0)
    ctx.record("faults.chaos.duplicated", totals["duplicated"], "epochs", target="0", met=totals["duplicated"] == 0)
    ctx.record("faults.chaos.silent", totals["silent"], "runs", target="0", met=totals["silent"] == 0)
    ctx.record(
        "faults.chaos.loud",
        totals["loud"],
        "runs",
        "corrupt input logs",
        totals["loud_meant"],
        target="all",
        met=totals["loud"] == totals["loud_meant"],
    )
    ctx.record("faults.chaos.redelivered", totals["redelivered"], "epochs")
