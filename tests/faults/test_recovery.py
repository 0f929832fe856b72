"""Recovery whatever the inputs' state (issue 18), with real processes over loopback TCP.

Inputs run far ahead of a slow consumer and are closed long before the checkpoints of the
epochs they fed are written; a process is SIGKILLed with many epochs in flight. What every
attempt delivered, merged, must equal the workload's output computed in plain Python: nothing
lost, nothing twice, whatever the inputs' state when the part was written. And a run never
exits 0 with an epoch's output missing: the launcher checks the delivery records.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import timely
from tests.support import ROOT, clean_env, ft_program
from tests.support.ft_harness import delivered, launch
from tests.support.launcher import script
from tests.support.launcher import timely as timely_cli
from timely.checkpoint._store import SEAL, InputLog, completion_path, write_completion

pytestmark = pytest.mark.timeout(300)

EPOCHS = 30
AHEAD = {"FT_EPOCHS": str(EPOCHS), "FT_AHEAD": "0", "FT_SLOW": "0.02"}
"""30 epochs fed and the input closed at once, into a consumer that takes 20 ms a batch: the
checkpoints at epochs 4, 9, ... are written long after every input was closed."""


def check_ahead(tmp_path: Path, kill: str, kills: int = 1) -> None:
    done = launch(
        "sum", tmp_path / "out", kill, processes=3, restarts=2, checkpoints=tmp_path / "ck", every=5, shape=AHEAD
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "restarting all 3 processes" in done.stderr
    got, again, _ = delivered(tmp_path / "out")
    expected = ft_program.reference("sum", EPOCHS)
    assert sorted(got) == sorted(expected), f"epoch outputs missing: {sorted(set(expected) - set(got))}"
    assert got == expected
    assert again <= kills * 3, "more epochs delivered again than the kills explain (one per process)"


@pytest.mark.parametrize(
    "kill",
    [
        "1:delivered:12",  # the case: 12 epochs delivered, 18 in flight, the inputs closed
        "2:delivered:3",  # before the first checkpoint was written
        "0:checkpoint:9",  # inside the second checkpoint, every input long closed
        "1:closed:0",  # just after closing the input, nothing of it processed yet
    ],
)
def test_inputs_closed_before_the_checkpoint_was_written_lose_nothing(tmp_path: Path, kill: str) -> None:
    check_ahead(tmp_path, kill)


def test_a_second_kill_during_the_replay_of_closed_inputs(tmp_path: Path) -> None:
    check_ahead(tmp_path, "1:delivered:12,0:recovery:0", kills=2)


PARTIAL = """
import os, signal, sys
import timely

index = int(os.environ["TIMELY_PROCESS_INDEX"])
attempt = int(os.environ["TIMELY_RESTART"])

def build(scope):
    inp = scope.new_input("values")
    out = inp.map("double", lambda r: 2 * r)
    out.subscribe(lambda t, recs: print("EPOCH", t.epoch, sorted(recs), flush=True), name="out")
    return inp, out.probe()

with timely.execute(build) as (comp, (inp, probe)):
    if attempt == 1:
        print("giving up quietly", flush=True)
        os._exit(0)  # a program that ends well without finishing its computation
    for epoch in range(inp.epoch, 10):
        inp.send([epoch * 10 + index])
        inp.advance_to(epoch + 1)
        comp.wait_passed(probe, epoch)
        if attempt == 0 and index == 1 and epoch == 5:
            os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_that_exits_0_without_delivering_every_epoch_fails(tmp_path: Path) -> None:
    prog = script(tmp_path, PARTIAL)
    ck = tmp_path / "ck"
    done = timely_cli(
        "run", "-n", "2", "--restarts", "1", "--checkpoint-dir", ck, "--checkpoint-every", "3", prog, timeout=90
    )
    assert "giving up quietly" in done.stdout
    assert done.returncode == 1, done.stderr[-3000:]
    assert "every process exited 0, but an output is missing" in done.stderr
    assert "exited without completing its computation" in done.stderr


OWN_TYPES = """
import sys
import timely
from timely_libs import linq

class Point:
    def __init__(self, x):
        self.x = x

class Local:  # no codec: travels pickled (timely run --pickle)
    def __init__(self, x):
        self.x = x

timely.register_codec(Point, lambda p: p.x, Point)

def build(scope):
    points = scope.new_input("points")
    locals_ = scope.new_input("locals")
    edges = linq.new_input(scope, "edges")  # its log holds linq's blocks
    seen = []
    points.map("x", lambda p: p.x).subscribe(lambda t, recs: seen.extend(recs))
    locals_.map("y", lambda p: p.x).subscribe(lambda t, recs: seen.extend(recs))
    out = linq.CollectionOutput(linq.connected_components(edges.collection))
    return points, locals_, edges, out, seen

with timely.execute(build, timeout=60) as (comp, (points, locals_, edges, out, seen)):
    for epoch in range(6):
        points.send([Point(epoch)])
        locals_.send([Local(epoch)])
        edges.insert_all([(epoch, epoch + 1)])
        for i in (points, locals_, edges):
            i.advance_to(epoch + 1)
        comp.wait_passed(out.probe, epoch)
print("SEEN", sorted(seen))
"""


def test_the_delivery_check_reads_logs_of_the_programs_own_types(tmp_path: Path) -> None:
    """The launcher checks a run's delivery against its input logs without the program's types:
    records of a type the program registered (linq's blocks, a class of its own) and pickled
    ones stay opaque to it, and a run that delivered everything passes."""
    prog = script(tmp_path, OWN_TYPES)
    ck = tmp_path / "ck"
    done = timely_cli("run", "-n", "2", "--pickle", "--checkpoint-dir", ck, "--checkpoint-every", "2", prog, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("SEEN") == 2
    assert any((ck / "inputs").rglob("seg-*")), "nothing was logged: the test checks nothing"


def test_verify_delivery_holds_the_inputs_ends_against_their_logs(tmp_path: Path) -> None:
    """After a complete run the check passes; a completion record whose input ended before the
    epochs its log holds (what a skipped replay leaves) fails, naming the input and the log."""
    ck = tmp_path / "ck"
    done = launch("sum", tmp_path / "out", processes=2, restarts=0, checkpoints=ck, every=3)
    assert done.returncode == 0, done.stderr[-3000:]
    timely.verify_delivery(ck, 2)
    assert completion_path(ck, 0).exists() and completion_path(ck, 1).exists()
    write_completion(ck, 1, {"processes": 2, "inputs": {"values": 7}, "delivered": {}})
    with pytest.raises(
        timely.CheckpointError, match=r"input 'values' of process 1 ended at epoch 7, but .*p1.*up to 12"
    ):
        timely.verify_delivery(ck, 2)
    completion_path(ck, 1).unlink()
    with pytest.raises(timely.CheckpointError, match="process 1 exited without completing"):
        timely.verify_delivery(ck, 2)
    timely.verify_delivery(tmp_path / "never-used", 2)  # nothing written: nothing to check


def test_the_summary_names_the_process_that_died_first(tmp_path: Path) -> None:
    """One of three processes is SIGKILLed from outside; the others fail because of it (their
    peer is lost) and exit 1 a moment later. The summary marks the killed one "(first)"."""
    out = tmp_path / "out"
    shape = {"FT_EPOCHS": "200", "FT_SLOW": "0.01"}
    command = [sys.executable, "-m", "timely.cli", "run", "-n", "3", "--checkpoint-dir", str(tmp_path / "ck")]
    with subprocess.Popen(
        [*command, "-m", "tests.support.ft_program", "sum", str(out)],
        cwd=ROOT,
        env=clean_env(**shape),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as launcher:
        try:
            pid_file = out / "pid-p2-a0"
            deadline = time.monotonic() + 60
            while not (pid_file.exists() and (out / "p2.jsonl").exists() and (out / "p2.jsonl").stat().st_size):
                assert time.monotonic() < deadline, "the run did not start"
                time.sleep(0.05)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            _, err = launcher.communicate(timeout=60)
        finally:
            launcher.kill()
    summary = err.strip().splitlines()[-1]
    assert "p2 killed by SIGKILL (first)" in summary, summary


PRELOGGED = """
import os, sys
import timely

index = int(os.environ["TIMELY_PROCESS_INDEX"])

def build(scope):
    inp = scope.new_input("values")
    out = inp.map("same", lambda r: r)
    out.subscribe(lambda t, recs: print("EPOCH", t.epoch, *sorted(recs), flush=True), name="out")
    return inp, out.probe()

with timely.execute(build, timeout=60) as (comp, (inp, probe)):
    print("INPUT", inp.epoch, inp.closed, flush=True)
    for epoch in range(inp.epoch, 6):
        inp.send([epoch * 10 + index])
        inp.advance_to(epoch + 1)
    if not inp.closed:
        inp.close()
"""


def prelogged(ck: Path, process: int, processes: int, closed_at: int) -> dict[int, list[int]]:
    """Write the input log process ``process`` of a run of ``processes`` processes leaves when
    it fed the program's records for epochs 0 to ``closed_at - 1`` and closed its input there
    (written by the runtime's own log writer). Returns its records by epoch."""
    fed = {epoch: [epoch * 10 + process] for epoch in range(closed_at)}
    log = InputLog(ck, process, "values", fsync=False, processes=processes)
    log.rotate(0)
    for epoch, records in fed.items():
        log.write((SEAL, epoch, records, epoch + 1))
    log.write((SEAL, closed_at, [], None))
    log.close()
    return fed


def outputs(stdout: str) -> tuple[dict[int, list[int]], set[str]]:
    """What the run delivered (records by epoch, merged over its processes) and how its inputs
    stood when the program took over."""
    delivered: dict[int, list[int]] = {}
    for line in stdout.splitlines():
        words = line.split()
        if "EPOCH" in words:
            at = words.index("EPOCH")
            delivered.setdefault(int(words[at + 1]), []).extend(int(w) for w in words[at + 2 :])
    inputs = {" ".join(line.split()[-3:]) for line in stdout.splitlines() if "INPUT" in line}
    return {e: sorted(r) for e, r in delivered.items()}, inputs


def test_a_process_that_died_before_its_first_log_frame_holds_the_replay_at_the_start(tmp_path: Path) -> None:
    """Process 1 of three fed every epoch and closed its input; processes 0 and 2 were killed
    between the join and their first log frame (a restart found only process 1's log, and every
    process then failed sending to an input the replay had closed). Their records were never
    logged: every process feeds again from epoch 0, and each epoch is delivered once, whole."""
    ck = tmp_path / "ck"
    prelogged(ck, 1, 3, closed_at=6)
    prog = script(tmp_path, PRELOGGED)
    done = timely_cli("run", "-n", "3", "--checkpoint-dir", ck, prog, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    delivered, inputs = outputs(done.stdout)
    assert inputs == {"INPUT 0 False"}
    assert delivered == {epoch: [epoch * 10, epoch * 10 + 1, epoch * 10 + 2] for epoch in range(6)}


def test_inputs_logged_closed_at_different_epochs_are_all_closed_at_the_last(tmp_path: Path) -> None:
    """Three processes closed their inputs at epochs 4, 6 and 5; two processes resume from their
    logs. Each replays the logs it was dealt and closes its input at epoch 6, the last: a
    program that feeds ``range(inp.epoch, 6)`` feeds nothing more, on either process."""
    ck = tmp_path / "ck"
    expected: dict[int, list[int]] = {}
    for process, closed_at in enumerate((4, 6, 5)):
        for epoch, records in prelogged(ck, process, 3, closed_at).items():
            expected.setdefault(epoch, []).extend(records)
    prog = script(tmp_path, PRELOGGED)
    done = timely_cli("run", "-n", "2", "--checkpoint-dir", ck, prog, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    delivered, inputs = outputs(done.stdout)
    assert inputs == {"INPUT 6 True"}
    assert delivered == {e: sorted(r) for e, r in expected.items()}
