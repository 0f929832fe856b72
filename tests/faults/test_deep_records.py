"""A record nested past the codec's limit (`timely.net.codec.NESTING_LIMIT`) in a checkpoint:
refused when the checkpoint is written, and — in a part made by hand, as a corrupted or
foreign file could be — refused cleanly when it is read back, never a crash of the process.
Through the public API: `timely.execute` with `timely.Checkpoints`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import pytest

import timely
from tests.support.net_programs import nested_frozensets
from timely.checkpoint._store import checkpoint_dir, read_part, write_part
from timely.net.codec import NESTING_LIMIT


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = frozenset([value])
    return value


class Holder(timely.Vertex):
    """Keeps one value, nested ``DEPTH`` deep, as its state."""

    depth = NESTING_LIMIT

    def __init__(self) -> None:
        self.state: Any = None
        self.seen = 0

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.seen += len(records)
        self.send_by(self.outputs[0], [(self.seen, self.state == nested(self.depth))], time)

    def checkpoint(self) -> Any:
        return {"value": nested(self.depth), "seen": self.seen}

    def restore(self, state: Any) -> None:
        self.state = state["value"]
        self.seen = state["seen"]


def build(scope: timely.Scope) -> Any:
    inp = scope.new_input("values")
    out = inp.stage("holder", Holder)
    got: list[Any] = []
    out.subscribe(lambda t, recs: got.extend(recs), name="holder.out")
    return inp, out.probe(), got


class Crash(Exception):
    pass


def run(directory: Path, epochs: range, crash: bool = False) -> list[Any]:
    """Feed ``epochs`` (from where the input stands); with ``crash``, abandon the run at the end
    (its checkpoint files stay, as after a kill)."""
    policy = timely.Checkpoints(directory, every_epochs=2, fsync=False)
    with timely.execute(build, timeout=30, checkpoints=policy) as (comp, (inp, probe, got)):
        for epoch in range(inp.epoch, epochs.stop):
            inp.send([epoch])
            inp.advance_to(epoch + 1)
            comp.wait_passed(probe, epoch)
        if crash:
            raise Crash
    return got


def crashed_run(directory: Path) -> None:
    with pytest.raises(Crash):
        run(directory, range(3), crash=True)


def test_state_at_the_nesting_limit_is_checkpointed_and_restored(tmp_path: Path) -> None:
    crashed_run(tmp_path)
    got = run(tmp_path, range(6))
    # Resumed with the state at the limit, whole: every record after the resume sees it, and the
    # count carried in the same state ends at the six records fed across both runs.
    assert got and all(whole for _, whole in got), got
    assert got[-1] == (6, True)


def test_state_one_past_the_nesting_limit_fails_the_checkpoint_clearly(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(Holder, "depth", NESTING_LIMIT + 1)
    with pytest.raises(timely.CheckpointError) as failed:
        run(tmp_path, range(3))
    message = str(failed.value)
    assert f"nested more than {NESTING_LIMIT} levels deep" in message, message
    assert "the state of stage 'holder' (worker 0)" in message and "part-0-of-1" in message, message


def test_a_part_holding_a_record_past_the_limit_is_refused_on_restore(tmp_path: Path) -> None:
    crashed_run(tmp_path)
    path = checkpoint_dir(tmp_path, 1) / "part-0-of-1"
    part = read_part(path)
    body = part.body()
    # 200 nested frozensets, as raw extension values the encoder passes through untouched.
    deep = msgpack.ExtType(*msgpack.unpackb(nested_frozensets(200), ext_hook=lambda c, d: (c, d))[0])
    body["vertices"] = [
        [name, worker, keyed, {"value": deep, "seen": 1}] for name, worker, keyed, _ in body["vertices"]
    ]
    write_part(tmp_path, 1, 0, 1, part.header, body, fsync=False)
    with pytest.raises(timely.CheckpointError) as failed:
        run(tmp_path, range(6))
    message = str(failed.value)
    assert re.search(rf"refusing a frozenset \(\d+ bytes\): nested more than {NESTING_LIMIT}", message), message
    assert message.startswith(f"{path}: cannot restore from it"), message
