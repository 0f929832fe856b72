"""The chaos suite's harness: seeded fault schedules over `tests.support.ft_program` on 3
processes, each run's per-epoch outputs compared with an undisturbed run's.

A `Plan` (from `plan(seed)`) picks a workload (``sum``: running sums by key, a multi-epoch
keyed computation; ``cc``: timely_libs.linq connected components), the shape of the run (how many
epochs in flight, how slow the consumer is) and one or two faults:

- SIGKILL of a process from inside, at a chosen moment: the first epoch, the middle of an
  epoch, inside a checkpoint, after N delivered epochs (many in flight when the input runs
  ahead), just after every input was closed; again while the restarted processes restore;
- SIGKILL from outside at a random moment; SIGSTOP then SIGCONT (a pause to be survived:
  until the runtime has a liveness check, a process stopped for good is only found by the
  computation's timeout);
- between two launches (the first one killed, the second resuming by hand): the newest
  checkpoint's part corrupted, an input log torn mid-frame, an input log corrupted inside;
- the checkpoint directory's file system full for 1.5 s (a tmpfs filled up; needs root).

Every fault but the corrupt input log is meant to be survived: the run exits 0 and what it
delivered equals the undisturbed run. A corrupt input log must stop the run with an error that
names the file. `Outcome` counts what a run lost, delivered twice beyond the documented
window (the one epoch a process was handing over when it died may come again), and whether it
exited 0 with output missing (silent).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import ROOT, clean_env
from tests.support.ft_harness import command

PROCESSES = 3
EVERY = 3
"""Checkpoint every 3 epochs: at epochs 2, 5, 8, ..."""
EPOCHS = {"sum": 20, "cc": 12}

INSIDE = ["first_epoch", "mid_epoch", "checkpoint", "delivered", "closed", "random"]
OUTSIDE = ["outside_kill", "pause"]
BETWEEN = ["corrupt_part", "torn_log", "corrupt_log"]
DISK = ["disk_full"]
KINDS = INSIDE + OUTSIDE + BETWEEN + DISK


@dataclass
class Fault:
    kind: str
    process: int
    arg: float = 0
    survive: bool = True

    def describe(self) -> str:
        return f"{self.kind}@p{self.process}" + (f":{self.arg:g}" if self.arg else "")


@dataclass
class Plan:
    seed: int
    workload: str
    epochs: int
    ahead: int
    """Epochs in flight (0: every epoch fed and the input closed at once)."""
    slow: float
    """Seconds the consumer spends on each batch."""
    faults: list[Fault] = field(default_factory=list)

    def describe(self) -> str:
        faults = " + ".join(f.describe() for f in self.faults)
        return f"seed {self.seed}: {self.workload}, {self.epochs} epochs, ahead {self.ahead or 'all'}, {faults}"


def plan(seed: int, kinds: list[str] | None = None, workloads: tuple[str, ...] = ("sum", "cc")) -> Plan:
    """The seeded schedule of run ``seed``: a workload, a shape, a fault (of ``kinds``), and
    sometimes a second kill while the restarted processes restore."""
    rng = random.Random(seed)
    workload = workloads[seed % len(workloads)]
    epochs = EPOCHS[workload]
    ahead = rng.choice([0, 0, 2, 4])
    slow = rng.choice([0.0, 0.005, 0.02]) if workload == "sum" else 0.0
    p = Plan(seed, workload, epochs, ahead, slow)
    kind = rng.choice(kinds or KINDS)
    process = rng.randrange(PROCESSES)
    if kind == "first_epoch":
        p.faults.append(Fault(kind, process, 0))
    elif kind == "mid_epoch":
        p.faults.append(Fault(kind, process, rng.randrange(1, epochs - 1)))
    elif kind == "checkpoint":
        p.faults.append(Fault(kind, process, rng.choice(range(EVERY - 1, epochs - 1, EVERY))))
    elif kind == "delivered":
        p.faults.append(Fault(kind, process, rng.randrange(1, epochs - 1)))
    elif kind in ("closed",):
        p.faults.append(Fault(kind, process))
    elif kind == "random":
        p.faults.append(Fault(kind, process, rng.randrange(300, 3000)))
    elif kind == "outside_kill":
        p.faults.append(Fault(kind, process, round(rng.uniform(0.2, 2.5), 2)))
    elif kind == "pause":
        p.faults.append(Fault(kind, process, round(rng.uniform(0.3, 1.5), 2)))
    elif kind in BETWEEN:  # the first launch dies after this many epochs delivered: 2 checkpoints by then
        p.faults.append(Fault(kind, process, rng.randrange(8, epochs - 2), survive=kind != "corrupt_log"))
    elif kind == "disk_full":  # filled once the process has delivered this many epochs
        p.faults.append(Fault(kind, process, rng.randrange(1, epochs - 4)))
    if kind in INSIDE and kind != "random" and rng.random() < 0.3:
        p.faults.append(Fault("recovery", rng.randrange(PROCESSES)))  # and again while restoring
    return p


@dataclass
class Outcome:
    plan: Plan
    returncode: int
    faults: int = 0
    """Faults that landed (a kill whose process was still running, a file actually damaged)."""
    survived: int = 0
    """Faults meant to be survived that were: exit 0, output equal to the undisturbed run's."""
    meant: int = 0
    lost: int = 0
    """Epoch outputs missing (in runs whose faults were all meant to be survived)."""
    duplicated: int = 0
    """Epochs delivered again beyond the documented window, or delivered differently."""
    redelivered: int = 0
    """Epochs delivered again within the window (the one a process was handing over as it died)."""
    silent: bool = False
    """Exited 0 with an epoch's output missing or wrong."""
    loud: bool = True
    """A run meant to fail did so with a non-zero status and an error naming the cause."""
    seconds: float = 0.0
    note: str = ""


# Running ---------------------------------------------------------------------------------------


def launch(
    plan_: Plan, out: Path, ck: Path, kill: str = "", restarts: int = 3, again: int = 0
) -> subprocess.Popen[str]:
    """The plan's workload under ``timely run``; ``again``: the how-manieth launch on the same
    directory (a resume by hand)."""
    env = clean_env(
        FT_EPOCHS=str(plan_.epochs), FT_AHEAD=str(plan_.ahead), FT_SLOW=str(plan_.slow), FT_LAUNCH=str(again)
    )
    return subprocess.Popen(
        command(plan_.workload, out, kill, PROCESSES, restarts, ck, EVERY),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 150) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -999, err + "\n(chaos: the launcher did not finish in time)"
    return proc.returncode, err


def _pid(out: Path, process: int, attempt: int = 0, within: float = 60) -> int | None:
    path = out / f"pid-p{process}-a{attempt}"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.02)
    return None


def _signal_later(out: Path, fault: Fault, landed: list[bool]) -> threading.Thread:
    """SIGKILL (outside_kill) or SIGSTOP then SIGCONT (pause) a process of the first attempt,
    ``fault.arg`` seconds after it started; ``landed`` gets whether it was still running."""

    def act() -> None:
        pid = _pid(out, fault.process)
        if pid is None:
            return
        time.sleep(fault.arg if fault.kind == "outside_kill" else 0.3)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                if fault.kind == "outside_kill":
                    os.kill(pid, signal.SIGKILL)
                    landed.append(True)
                else:
                    os.kill(pid, signal.SIGSTOP)
                    landed.append(True)
                    time.sleep(fault.arg)
                    os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def small_disk(where: Path, size: str = "8m") -> Iterator[Path | None]:
    """A tmpfs of ``size`` at ``where`` (None where it cannot be mounted: not root)."""
    where.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if made.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill_for_a_while(disk: Path, sink: Path, after: int, hold: float = 1.5) -> threading.Thread:
    """Fill ``disk`` once ``sink`` (a process's output) holds ``after`` epochs; free it ``hold``
    seconds later."""

    def act() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if sink.read_text().count("\n") >= after:
                    break
            time.sleep(0.01)
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
        time.sleep(hold)
        with contextlib.suppress(OSError):  # the run may be over and the disk unmounted
            filler.unlink()

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def _spec(plan_: Plan) -> str:
    kinds = {"first_epoch": "epoch", "mid_epoch": "epoch", "checkpoint": "checkpoint", "delivered": "delivered"}
    items = []
    for f in plan_.faults:
        if f.kind in kinds:
            items.append(f"{f.process}:{kinds[f.kind]}:{int(f.arg)}")
        elif f.kind in ("closed", "recovery"):
            items.append(f"{f.process}:{f.kind}:0")
        elif f.kind == "random":
            items.append(f"{f.process}:random:{int(f.arg)}")
    return ",".join(items)


def _corrupt_between(kind: str, ck: Path, fault: Fault, rng: random.Random) -> Path | None:
    """Damage the checkpoint directory a killed run left: the newest complete checkpoint's part
    of ``fault.process``, or that process's input log. The file damaged (None: nothing to damage)."""
    if kind == "corrupt_part":
        complete = sorted(d for d in (ck / "checkpoints").glob("epoch-*") if len(list(d.glob("part-*"))) == PROCESSES)
        if len(complete) < 2:
            return None  # only the newest is meant to be bad: an older one must stay to fall back on
        part = complete[-1] / f"part-{fault.process}-of-{PROCESSES}"
        data = bytearray(part.read_bytes())
        data[rng.randrange(40, len(data) - 40)] ^= 0xFF
        part.write_bytes(bytes(data))
        return part
    from timely.checkpoint._store import LOG_MAGIC

    for process in [fault.process, *(p for p in range(PROCESSES) if p != fault.process)]:
        active = [s for s in sorted((ck / "inputs" / f"p{process}").glob("*/seg-*")) if ".upto-" not in s.name]
        if not active:
            continue
        segment = active[-1]
        data = bytearray(segment.read_bytes())
        offsets = []
        at = len(LOG_MAGIC)
        while at + 12 <= len(data):
            offsets.append(at)
            at += 12 + int.from_bytes(data[at : at + 4], "big")
        if kind == "torn_log" and offsets:
            cut = offsets[-1] + rng.randrange(1, max(2, len(data) - offsets[-1]))  # inside the last frame
            segment.write_bytes(bytes(data[:cut]))
            return segment
        if kind == "corrupt_log" and len(offsets) >= 2:
            k = rng.randrange(len(offsets) - 1)  # a frame with another after it: not a torn tail
            data[offsets[k] + rng.randrange(offsets[k + 1] - offsets[k])] ^= 0x5A  # header or payload
            segment.write_bytes(bytes(data))
            return segment
    return None


def execute(plan_: Plan, workdir: Path, expected: dict[int, list[str]]) -> Outcome:
    """Run ``plan_`` in ``workdir`` and judge it against ``expected`` (the undisturbed output)."""
    started = time.monotonic()
    out, ck = workdir / "out", workdir / "ck"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    fault = plan_.faults[0]
    rng = random.Random(plan_.seed)
    note = ""
    damaged: Path | None = None
    landed: list[bool] = []
    if fault.kind in BETWEEN:
        # first launch: killed mid-run, no restart; then the damage; then a resume by hand
        first = launch(plan_, out, ck, f"{fault.process}:delivered:{int(fault.arg)}", restarts=0)
        code, err = finish(first)
        damaged = _corrupt_between(fault.kind, ck, fault, rng)
        if damaged is None:
            note = "nothing to damage (the first launch ended too early); resumed undamaged"
        landed.append(damaged is not None)
        code, err = finish(launch(plan_, out, ck, restarts=1, again=1))
    elif fault.kind == "disk_full":
        with small_disk(workdir / "disk") as disk:
            if disk is None:
                note = "no tmpfs (not root): the disk was not filled"
                code, err = finish(launch(plan_, out, ck))
            else:
                ck = disk / "ck"
                proc = launch(plan_, out, ck, restarts=8)
                fill_for_a_while(disk, out / f"p{fault.process}.jsonl", int(fault.arg))
                code, err = finish(proc)
                landed += [True] * min(1, err.count("restarting all"))
    else:
        proc = launch(plan_, out, ck, _spec(plan_))
        if fault.kind in OUTSIDE:
            _signal_later(out, fault, landed)
        code, err = finish(proc)
        if fault.kind not in OUTSIDE:  # a kill from inside shows as a restart
            landed += [True] * min(len(plan_.faults), err.count("restarting all"))
    outcome = Outcome(plan_, code, faults=sum(landed), seconds=time.monotonic() - started, note=note)
    judge(outcome, out, expected, err, damaged)
    return outcome


def judge(outcome: Outcome, out: Path, expected: dict[int, list[str]], err: str, damaged: Path | None) -> None:
    plan_ = outcome.plan
    got, again, redelivered = delivered(out)
    outcome.redelivered = redelivered
    outcome.duplicated = again
    missing = [e for e in expected if got.get(e) != expected[e]]
    extra = [e for e in got if e not in expected]
    meant_to_survive = all(f.survive for f in plan_.faults) or damaged is None
    if meant_to_survive:
        outcome.meant = outcome.faults
        ok = outcome.returncode == 0 and not missing and not extra
        outcome.survived = outcome.meant if ok else 0
        outcome.lost = len(missing) + len(extra)
        if not ok:
            outcome.note = (
                outcome.note + f" | rc {outcome.returncode}, wrong/missing {missing[:8]}: {err[-600:]}"
            ).strip()
    else:
        # meant to stop loudly, naming the damaged file
        outcome.loud = outcome.returncode != 0 and damaged is not None and damaged.name in err
        if not outcome.loud:
            outcome.note = f"rc {outcome.returncode}, the error does not name {damaged}: {err[-600:]}"
    outcome.silent = outcome.returncode == 0 and bool(missing or extra)


def delivered(out: Path) -> tuple[dict[int, list[str]], int, int]:
    """Per epoch, what all processes delivered; how many (process, epoch) deliveries came again
    beyond the documented window or differently; and how many came again within it (the last
    epoch a process delivered in an attempt that did not finish may come again in the next)."""
    per: dict[int, list[str]] = defaultdict(list)
    again = window = 0
    for path in sorted(out.glob("p*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        last_of: dict[int, int] = {}
        for row in rows:
            last_of[row["attempt"]] = row["epoch"]
        seen: dict[int, tuple[int, list[Any]]] = {}
        for row in rows:
            epoch, attempt = row["epoch"], row["attempt"]
            if epoch in seen:
                before_attempt, records = seen[epoch]
                if records == row["records"] and before_attempt < attempt and last_of.get(before_attempt) == epoch:
                    window += 1
                else:
                    again += 1
                continue
            seen[epoch] = (attempt, row["records"])
            per[epoch].extend(json.dumps(r) for r in row["records"])
    return {e: sorted(v) for e, v in per.items()}, again, window


_UNDISTURBED: dict[tuple[str, int], dict[int, list[str]]] = {}


def undisturbed(workload: str, workdir: Path) -> dict[int, list[str]]:
    """What an undisturbed 3-process run of ``workload`` delivers (run once per workload);
    checked against the plain-Python reference, so that the suite compares with a right answer."""
    from tests.support import ft_program

    epochs = EPOCHS[workload]
    key = (workload, epochs)
    if key not in _UNDISTURBED:
        quiet = Plan(0, workload, epochs, 2, 0.0)
        shutil.rmtree(workdir, ignore_errors=True)
        code, err = finish(launch(quiet, workdir / "out", workdir / "ck", restarts=0))
        if code != 0:
            raise AssertionError(f"the undisturbed {workload} run failed: {err[-2000:]}")
        got, again, window = delivered(workdir / "out")
        if got != ft_program.reference(workload, epochs) or again or window:
            raise AssertionError(f"the undisturbed {workload} run differs from the plain-Python reference")
        _UNDISTURBED[key] = got
    return _UNDISTURBED[key]
