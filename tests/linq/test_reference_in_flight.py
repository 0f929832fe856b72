"""Every general operator against recomputation with several epochs in flight, in each forced
tier, on 1 and 2 workers and on 2 real processes (differential dataflow's reference tests are
the model: random graphs, random changes, the answer recomputed after every epoch).

One dataflow holds every operator (join, each reducer, distinct, count_all, semijoin,
antijoin, reachability and BFS by `fixed_point`, a loop cut at 3 iterations, `prioritize`
around a reducer and around a `fixed_point`, SCC; tests/support/linq_reference_program.py).
Epochs are fed all at once or at most 2 ahead of the output, so every operator holds the
differences of several epochs at once, and inside loops meets times the product order leaves
incomparable. The union of what every process reports, accumulated up to each epoch, must be
the from-scratch answer at that epoch.
"""

from __future__ import annotations

import json

import pytest

from tests.support.linq_in_flight import accumulated_reports, replayed
from tests.support.linq_reference_program import EPOCHS, TIERS, builder, inputs, reference
from tests.support.modes import Mode
from timely_libs.linq._columns import _kernels

TIMEOUT = 120.0
SEED = 12


def first_difference(got: list[dict[str, int]], want: list[dict[str, int]]) -> str:
    for epoch, (g, w) in enumerate(zip(got, want)):
        if g != w:
            extra = {k: v for k, v in g.items() if w.get(k) != v}
            missing = {k: v for k, v in w.items() if g.get(k) != v}
            return f"epoch {epoch}: reported but wrong {extra}; expected {missing}"
    return "equal"


def run(mode: Mode, tier: str, lag: int | None) -> None:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("FEW_KEYS", "COMPILED_KEYS", "LOADED_KEYS"):  # restored after: the program forces them
            patch.setattr(_kernels, name, getattr(_kernels, name))
        results = mode.run(builder, SEED, tier, lag=lag, timeout=TIMEOUT)
    want = replayed(list(zip(*inputs(SEED), strict=True)), reference)
    assert len({json.dumps(w, sort_keys=True) for w in want}) == EPOCHS, "every epoch should change the answer"
    parts = [{json.loads(k)[0] for k in w} for w in want]
    assert all(p == parts[0] and len(p) == 16 for p in parts), "every operator should answer in every epoch"
    got = accumulated_reports(results, EPOCHS)
    assert got == want, first_difference(got, want)
    if mode.processes > 1:
        assert all(r["changes"] for r in results), "every process should hold part of the answer"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize(("workers", "lag"), [(1, 2), (2, None)], ids=["w1-lag2", "w2-all-at-once"])
def test_every_operator_in_one_process(tier: str, workers: int, lag: int | None) -> None:
    run(Mode("one", workers=workers), tier, lag)


@pytest.mark.slow
@pytest.mark.parametrize("tier", TIERS)
def test_every_operator_on_two_processes(tier: str) -> None:
    run(Mode("tcp", processes=2), tier, lag=2)
