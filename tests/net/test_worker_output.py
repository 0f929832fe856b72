"""A worker's long write to a slow pipe arrives whole.

Under ``PYTHONUNBUFFERED=1`` (which the tests and many launchers set), once a uvloop event
loop had run in the process, a write of more than 64 KiB to a pipe that was not read at once
came back short and the text layer dropped the rest: 64 KiB of a 1 MiB line arrived. Timely
must keep the writes whole without replacing the program's ``sys.stdout`` and ``sys.stderr``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.support import clean_env

PROGRAM = """
import sys
import timely

def build(scope):
    inp = scope.new_input("numbers")
    inp.map("inc", lambda r: r + 1).probe("done")
    return inp

streams = (sys.stdout, sys.stderr)
for _ in range(3):  # each run's loop used to be closed at its end, and the last close bit
    with timely.execute(build, timeout=30) as (comp, inp):
        inp.send(range(10))
assert (sys.stdout, sys.stderr) == streams and sys.stdout is sys.__stdout__, "timely replaced sys.stdout"
for _ in range(8):
    sys.stdout.write("x" * (1 << 20) + "\\n")
sys.stderr.write("e" * (1 << 18) + "\\n")
"""


def test_a_long_write_after_a_computation_reaches_a_slow_pipe_whole() -> None:
    env = clean_env(PYTHONUNBUFFERED="1")
    with subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        stdin=subprocess.DEVNULL,  # as a launcher starts its workers: the short writes need it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        time.sleep(1.0)  # the pipe fills while no one reads
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err[-2000:]
    assert len(out) == 8 * ((1 << 20) + 1), len(out)
    assert len(err) == (1 << 18) + 1, len(err)
    assert os.name != "posix" or out.endswith(b"x\n")
