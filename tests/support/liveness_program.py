"""Worker program for tests/net/test_liveness.py, run under ``timely run -n 3``:
``python liveness_program.py MODE [seconds]``. Prints, one line per fact:

    READY <pid>     every process has seen epoch 0 through (the computation runs across processes)
    RESULT <json>   the computation completed: {"epochs", "sum"} (process 0)
    FAILED <json>   the computation failed: {"type", "message", "info"}; then raised again

Modes:

- ``idle``: after epoch 0 every process waits for epoch 1, which no one closes: the
  computation is idle, its event loops waiting, until the test stops one process.
- ``busy``: epoch after epoch, each waited for across processes, until stopped (or 60 s).
- ``compute S``: after epoch 0, process 1 runs one callback that computes for S seconds
  without returning (pure Python: its event loop does not run); then everyone finishes.
- ``away S``: after epoch 0, process 1's program sleeps for S seconds inside its ``with``
  block, away from timely (its event loop does not run); then everyone finishes.
- ``stop-self``: as ``busy``, but on the first attempt (``TIMELY_RESTART`` 0) process 1
  stops itself with SIGSTOP after epoch 3; on a restart it runs 10 epochs and completes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import timely

INDEX = int(os.environ.get("TIMELY_PROCESS_INDEX", "0"))


def say(*parts: object) -> None:
    print(*parts, flush=True)


class Compute(timely.Vertex):
    """On process 1, the first record ``("compute", S)`` makes the callback compute for S seconds."""

    seconds = 0.0

    def on_recv(self, edge: int, records: list[Any], time_: timely.Timestamp) -> None:
        for r in records:
            if type(r) is tuple and r[0] == "compute":
                deadline = time.perf_counter() + r[1]
                n = 0
                while time.perf_counter() < deadline:  # CPU, never yielding to the event loop
                    n += sum(range(1000))
                self.send_by(self.outputs[0], [n % 7], time_)
            else:
                self.send_by(self.outputs[0], [r], time_)


def build(scope: timely.Scope) -> Any:
    inp = scope.new_input("numbers")
    total: list[int] = []
    out = inp.stage("compute", Compute, exchange=lambda r: 1 if type(r) is tuple else r)
    out.exchange("gather", lambda r: 0).subscribe(lambda t, recs: total.extend(recs), name="collect")
    return inp, out.probe(), total


def main(mode: str, seconds: float) -> None:
    with timely.execute(build, timeout=90) as (comp, (inp, probe, total)):
        inp.send(range(INDEX * 10, INDEX * 10 + 10))
        inp.advance_to(1)
        comp.wait_passed(probe, 0)
        say("READY", os.getpid())
        epochs = 1
        if mode == "idle":
            # no one advances past 1: idle until a process is stopped (with a timeout of its own,
            # a wait runs even though this program's open input keeps it from ever passing)
            comp.wait_passed(probe, 1, timeout=90)
        elif mode in ("busy", "stop-self"):
            restarted = os.environ.get("TIMELY_RESTART", "0") != "0"
            last = 10 if mode == "stop-self" and restarted else 10**6
            deadline = time.monotonic() + 60
            while epochs < last and time.monotonic() < deadline:
                if mode == "stop-self" and not restarted and INDEX == 1 and epochs == 3:
                    os.kill(os.getpid(), signal.SIGSTOP)
                inp.send(range(INDEX * 10, INDEX * 10 + 10))
                epochs += 1
                inp.advance_to(epochs)
                comp.wait_passed(probe, epochs - 1)
        elif mode == "compute":
            if INDEX == 0:
                inp.send([("compute", seconds)])  # goes to process 1's worker
        elif mode == "away":
            if INDEX == 1:
                time.sleep(seconds)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    if INDEX == 0:
        say("RESULT", json.dumps({"epochs": epochs, "sum": sum(total)}))


if __name__ == "__main__":
    try:
        main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
    except timely.TimelyError as err:
        say("FAILED", json.dumps({"type": type(err).__name__, "message": str(err), "info": getattr(err, "info", None)}))
        raise
