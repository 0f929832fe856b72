"""One way to run a test dataflow in every mode: one process (one or several workers), several
simulated processes in one event loop (seeded interleavings of their channels), and real OS
processes over loopback TCP started by ``timely run``.

A *program* is a module-level function ``program(*args) -> build`` (arguments JSON-able), whose
``build(scope)`` returns a `Run`: this process's handles, how it feeds its share of each epoch,
and what it observed. Epochs are fed at most ``lag`` ahead of the run's probes (0: in
lockstep, each epoch awaited everywhere before the next is fed; None: all at once). `Mode.run` runs the same program in its mode and returns every process's
`Run.result`, JSON round-tripped (tuples become lists), in process order; the test merges them
and compares with an independent reference. For real processes the program is named by module
and qualified name, and every process runs this module as ``timely run -m tests.support.modes``,
which drives the program exactly as the one-process mode does and prints its result.

    def test_it(mode: Mode) -> None:              # the ``mode`` fixture: every mode
        results = mode.run(my_program, 3)
        assert merged(results) == reference(3)
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import timely
import timely.testing
from tests.support import ROOT, clean_env

__all__ = ["EVERY_MODE", "Mode", "Run", "drive"]

Program = Callable[..., Callable[[timely.Scope], "Run"]]
RESULT = "RESULT "


class Run:
    """What a program's build returns. Override `feed` and `result`; `probes` and `observe` for
    programs that wait, epoch by epoch, for their outputs (a ``lag``)."""

    epochs = 1
    """How many times `feed` is called (epochs 0 .. epochs-1)."""

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch`` (and advance its inputs past it)."""

    def probes(self) -> Sequence[timely.Probe]:
        """What must have passed an epoch before epochs more than ``lag`` later are fed."""
        return ()

    def observe(self, epoch: int) -> None:
        """Called, epoch after epoch, once every probe has passed ``epoch`` in every process
        (never when all epochs are fed at once)."""

    def result(self, comp: Any) -> Any:
        """What this process saw, JSON-able; called once the computation has completed.
        ``comp`` is its `timely.Computation` (or `timely.AsyncComputation`)."""
        raise NotImplementedError


def drive(comp: timely.Computation, run: Run, lag: int | None, wait: float) -> None:
    """Feed every epoch of ``run``, at most ``lag`` ahead of its probes (None: all at once)."""
    passed = -1
    for epoch in range(run.epochs):
        run.feed(epoch)
        while lag is not None and passed < epoch - lag:
            passed += 1
            for probe in run.probes():
                comp.wait_passed(probe, passed, timeout=wait)
            run.observe(passed)
    while lag is not None and passed < run.epochs - 1:
        passed += 1
        for probe in run.probes():
            comp.wait_passed(probe, passed, timeout=wait)
        run.observe(passed)


@dataclass(frozen=True)
class Mode:
    """Where a test dataflow runs: ``one`` process, ``simulated`` processes or real ones over ``tcp``."""

    kind: str
    processes: int = 1
    workers: int = 1
    seed: int = 0
    """The seed of the simulated network's interleavings."""

    def __str__(self) -> str:
        shape = f"p{self.processes}" if self.kind != "one" else ""
        shape += f"w{self.workers}" if self.workers != 1 or self.kind == "one" else ""
        return f"{self.kind}-{shape}" + (f"-s{self.seed}" if self.kind == "simulated" else "")

    def run(
        self, program: Program, *args: Any, lag: int | None = 0, pickle: bool = False, timeout: float = 60.0
    ) -> list[Any]:
        """Every process's `Run.result` of ``program(*args)``, in process order, its epochs fed
        at most ``lag`` ahead of its probes (0: lockstep; None: all at once)."""
        if self.kind == "one":
            results = [_one(program(*args), self.workers, lag, pickle, timeout)]
        elif self.kind == "simulated":
            results = asyncio.run(
                _simulated(program(*args), self.processes, self.workers, self.seed, lag, pickle, timeout)
            )
        elif self.kind == "tcp":
            return _tcp(program, args, self.processes, self.workers, lag, pickle, timeout)
        else:
            raise ValueError(f"unknown mode {self.kind!r}")
        return [json.loads(json.dumps(r)) for r in results]


EVERY_MODE = [
    Mode("one", workers=1),
    Mode("one", workers=3),
    Mode("simulated", processes=2, seed=1),
    Mode("simulated", processes=3, workers=2, seed=7),
    Mode("simulated", processes=4, seed=42),
    Mode("tcp", processes=3, workers=2),
]
"""The modes the ``mode`` fixture runs a test in."""


def _one(build: Callable[[timely.Scope], Run], workers: int, lag: int | None, pickle: bool, timeout: float) -> Any:
    with timely.execute(build, workers=workers, timeout=timeout, pickle=pickle) as (comp, run):
        drive(comp, run, lag, timeout)
    return run.result(comp)


async def _simulated(
    build: Callable[[timely.Scope], Run],
    processes: int,
    workers: int,
    seed: int,
    lag: int | None,
    pickle: bool,
    timeout: float,
) -> list[Any]:
    async with timely.testing.simulated(
        build, processes=processes, workers=workers, seed=seed, timeout=timeout, pickle=pickle
    ) as runs:

        async def passes(epoch: int) -> None:
            await asyncio.gather(
                *(comp.wait_passed(p, epoch, timeout=timeout) for comp, run in runs for p in run.probes())
            )
            for _, run in runs:
                run.observe(epoch)

        epochs = runs[0][1].epochs
        passed = -1
        for epoch in range(epochs):
            for _, run in runs:
                run.feed(epoch)
            while lag is not None and passed < epoch - lag:
                passed += 1
                await passes(passed)
        while lag is not None and passed < epochs - 1:
            passed += 1
            await passes(passed)
    return [run.result(comp) for comp, run in runs]


def _tcp(
    program: Program,
    args: Sequence[Any],
    processes: int,
    workers: int,
    lag: int | None,
    pickle: bool,
    timeout: float,
) -> list[Any]:
    name = f"{program.__module__}:{program.__qualname__}"
    options = ["--pickle"] if pickle else []
    command = [sys.executable, "-m", "timely.cli", "run", "-n", str(processes), "--workers", str(workers), *options]
    command += ["-m", __name__, name, json.dumps(list(args)), json.dumps(lag), str(timeout)]
    done = subprocess.run(command, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=timeout + 30)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results: dict[int, Any] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\[p(\d+)\] " + RESULT + "(.*)", line)
        if found:
            results[int(found.group(1))] = json.loads(found.group(2))
    assert sorted(results) == list(range(processes)), done.stdout[-3000:]
    return [results[i] for i in range(processes)]


def main(argv: list[str]) -> None:
    """One process of a real cluster: ``MODULE:NAME ARGS_JSON LAG_JSON TIMEOUT`` (LAG null: all at once)."""
    module, _, name = argv[0].partition(":")
    program: Any = import_module(module)
    for part in name.split("."):
        program = getattr(program, part)
    args, lag, timeout = json.loads(argv[1]), json.loads(argv[2]), float(argv[3])
    with timely.execute(program(*args), timeout=timeout) as (comp, run):
        drive(comp, run, lag, timeout)
    print(RESULT + json.dumps(run.result(comp)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
