"""Checkpoints, input logs and recovery (Naiad §3.4), in one process.

A run is "crashed" by raising out of the ``with`` block after some epochs (the computation is
abandoned where it stands, its files stay), then started again on the same directory. Every
test compares what the disturbed runs delivered, epoch by epoch, with an undisturbed run;
tests/faults/test_kills.py does the same with real processes killed by SIGKILL.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import pytest

import timely
from tests.support.ft_program import Sums
from timely.checkpoint import latest_checkpoint
from timely.checkpoint._store import checkpoint_dir, log_dir

EPOCHS = 12


class Crash(Exception):
    pass


class PlainSums(Sums):
    def checkpoint(self) -> Any:
        return dict(self.sums)

    def restore(self, state: Any) -> None:
        self.sums.update(state)


class SumsPiece(timely.RoutedPiece):
    """All of a `PieceSums` instance's sums in one piece: keys and sums side by side (a key is
    its own route, as the stage's exchange says)."""

    splits = 0
    """How many times the runtime asked a piece to split (the test checks it did)."""

    def __init__(self, keys: list[int], sums: list[int]) -> None:
        self.keys = keys
        self.sums = sums

    def split(self, peers: int, workers: Collection[int]) -> Iterable[tuple[int, Any]]:
        SumsPiece.splits += 1
        for worker in workers:
            mine = [i for i, k in enumerate(self.keys) if k % peers == worker]
            yield worker, SumsPiece([self.keys[i] for i in mine], [self.sums[i] for i in mine])


CODEC_CODE = timely.register_codec(SumsPiece, lambda p: (p.keys, p.sums), lambda v: SumsPiece(list(v[0]), list(v[1])))


class PieceSums(Sums):
    def checkpoint(self) -> Any:
        return timely.KeyedState([(0, SumsPiece(list(self.sums), list(self.sums.values())))])

    def restore(self, state: Any) -> None:
        for _, piece in state.pieces:
            assert isinstance(piece, SumsPiece)
            for k, v in zip(piece.keys, piece.sums):
                self.sums[k] = v


class Delay(timely.Vertex):
    """Sends each record two epochs later, and asks for a notification three epochs later:
    both cross checkpoints, so the runtime must carry them."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        later = timely.Timestamp(time.epoch + 2)
        self.send_by(self.outputs[0], [("late", r) for r in records], later)
        self.notify_at(timely.Timestamp(time.epoch + 3))

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], [("tick", time.epoch)], time)


def data(epoch: int) -> list[tuple[int, int]]:
    return [((epoch * 7 + i * 3) % 11, epoch * 100 + i) for i in range(15)]


def sums_build(vertex: type[timely.Vertex] = Sums, delay: bool = False) -> Any:
    def build(scope: timely.Scope) -> Any:
        inp = scope.new_input("values")
        stream: timely.Stream = inp
        if delay:
            late = inp.stage("delay", Delay)
            stream = scope.concat(
                "both", [inp, late.filter("ticks", lambda r: r[0] == "tick").map("zero", lambda r: (0, 0))]
            )
            delivered: list[tuple[int, list[Any]]] = []
            late.subscribe(lambda t, recs: delivered.append((t.epoch, sorted(recs, key=repr))), name="late.out")
        else:
            delivered = []
        sums = stream.stage("sums", vertex, exchange=lambda r: r[0])
        sums.subscribe(lambda t, recs: delivered.append((t.epoch, sorted(recs))), name="sums.out")
        return inp, sums.probe(), delivered

    return build


def run(
    directory: Path | None,
    *,
    crash_after: int | None = None,
    workers: int = 2,
    every: int = 3,
    build: Any = None,
    fsync: bool = False,
) -> tuple[int, list[tuple[int, list[Any]]], dict[str, Any]]:
    """Feed epochs from where the input stands to EPOCHS; with ``crash_after``, abandon the run
    once that epoch has passed. Returns the first epoch fed, what was delivered, the stats."""
    policy = None if directory is None else timely.Checkpoints(directory, every_epochs=every, fsync=fsync)
    build = build or sums_build()
    with timely.execute(build, workers=workers, timeout=30, checkpoints=policy) as (comp, (inp, probe, delivered)):
        first = inp.epoch
        for epoch in range(first, EPOCHS):
            inp.send(data(epoch))
            inp.advance_to(epoch + 1)
            comp.wait_passed(probe, epoch)
            if crash_after is not None and epoch == crash_after:
                raise Crash
        stats = comp.statistics().checkpoints
    return first, delivered, stats


def undisturbed(build: Any = None) -> dict[int, list[Any]]:
    _, delivered, _ = run(None, build=build)
    return merged(delivered)


def merged(delivered: list[tuple[int, list[Any]]]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for epoch, records in delivered:
        out[epoch].extend(records)
    return {e: sorted(r, key=repr) for e, r in out.items()}


class Recorder:
    """Runs a crash and a resume, keeping what both delivered."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.delivered: list[tuple[int, list[Any]]] = []

    def crash(self, after: int, **kw: Any) -> None:
        build = kw.pop("build", None) or sums_build(**kw.pop("build_kw", {}))
        captured: list[Any] = []

        def capture(scope: timely.Scope) -> Any:
            inp, probe, delivered = build(scope)
            captured.append(delivered)
            return inp, probe, delivered

        with pytest.raises(Crash):
            run(self.directory, crash_after=after, build=capture, **kw)
        self.delivered.extend(captured[0])

    def finish(self, **kw: Any) -> tuple[int, dict[str, Any]]:
        build = kw.pop("build", None) or sums_build(**kw.pop("build_kw", {}))
        first, delivered, stats = run(self.directory, build=build, **kw)
        self.delivered.extend(delivered)
        return first, stats

    def epochs(self) -> list[int]:
        return sorted(e for e, _ in self.delivered)


@pytest.mark.parametrize("crash_after", [0, 1, 4, 7, 10])
def test_resume_delivers_every_epoch_once_and_equal(tmp_path: Path, crash_after: int) -> None:
    expected = undisturbed()
    rec = Recorder(tmp_path)
    rec.crash(crash_after)
    first, stats = rec.finish()
    assert first == crash_after + 1  # the log sealed every epoch fed before the crash
    assert rec.epochs() == list(range(EPOCHS)), "an epoch was lost or delivered twice"
    assert merged(rec.delivered) == expected
    if crash_after >= 2:
        assert stats["resumed"]["epoch"] == (crash_after + 1) // 3 * 3 - 1  # the newest checkpoint
        assert stats["resumed"]["replayed_epochs"] == crash_after - stats["resumed"]["epoch"]


def test_checkpoints_are_taken_every_k_epochs_and_old_ones_pruned(tmp_path: Path) -> None:
    _, _, stats = run(tmp_path, every=2)
    assert stats["checkpoints"] == EPOCHS // 2  # after epochs 1, 3, ..., 11
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == [f"epoch-{e:012d}" for e in (9, 11)]  # keep=2
    assert all(len(list(d.iterdir())) == 1 for d in (tmp_path / "checkpoints").iterdir())


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
def test_resume_on_another_worker_count_reroutes_keyed_state(tmp_path: Path, before: int, after: int) -> None:
    expected = undisturbed()
    rec = Recorder(tmp_path)
    rec.crash(6, workers=before)
    first, stats = rec.finish(workers=after)
    assert first == 7 and stats["resumed"]["epoch"] == 5
    assert rec.epochs() == list(range(EPOCHS))
    assert merged(rec.delivered) == expected


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (2, 5)])
def test_routed_pieces_are_split_by_the_new_worker_count(tmp_path: Path, before: int, after: int) -> None:
    """A vertex saves all its keys in one `timely.RoutedPiece`; resumed on another count, the
    runtime has each piece split, and every key's sum goes on from where it stood."""
    build = sums_build(PieceSums)
    expected = undisturbed(build)
    rec = Recorder(tmp_path)
    rec.crash(6, workers=before, build=sums_build(PieceSums))
    SumsPiece.splits = 0
    first, stats = rec.finish(workers=after, build=sums_build(PieceSums))
    assert first == 7 and stats["resumed"]["epoch"] == 5
    assert SumsPiece.splits == before  # each old instance's one piece, in this one process
    assert merged(rec.delivered) == expected


def test_state_that_is_not_keyed_cannot_move_to_another_worker_count(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.crash(6, workers=2, build=sums_build(PlainSums))
    with pytest.raises(timely.CheckpointError, match="not keyed.*cannot be resumed on 3 workers"):
        rec.finish(workers=3, build=sums_build(PlainSums))
    # with the same worker count it resumes
    rec.finish(workers=2, build=sums_build(PlainSums))
    assert merged(rec.delivered) == undisturbed(sums_build(PlainSums))


def test_messages_and_notifications_past_the_checkpoint_are_carried(tmp_path: Path) -> None:
    build = sums_build(delay=True)
    expected = undisturbed(build)
    rec = Recorder(tmp_path)
    rec.crash(6, build=sums_build(delay=True))
    _, stats = rec.finish(build=sums_build(delay=True))
    assert stats["resumed"]["epoch"] == 5
    assert merged(rec.delivered) == expected
    # the carried records (sent at epochs 6 and 7 by callbacks at 4 and 5) did arrive
    assert any(r[0] == "late" for e, recs in rec.delivered if e in (6, 7) for r in recs)


def test_a_corrupt_checkpoint_is_detected_and_the_previous_one_used(tmp_path: Path) -> None:
    expected = undisturbed()
    rec = Recorder(tmp_path)
    rec.crash(9)
    newest = checkpoint_dir(tmp_path, 8) / "part-0-of-1"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    info = latest_checkpoint(tmp_path)
    assert info is not None and info.epoch == 5
    _, stats = rec.finish()
    assert stats["resumed"]["epoch"] == 5
    assert merged(rec.delivered) == expected


def test_a_partial_checkpoint_is_ignored(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.crash(9)
    # a checkpoint some other process of a 2-process run never finished
    shutil.copy(checkpoint_dir(tmp_path, 8) / "part-0-of-1", tmp_path / "x")
    partial = checkpoint_dir(tmp_path, 11)
    partial.mkdir()
    (partial / "part-0-of-2").write_bytes((tmp_path / "x").read_bytes())
    info = latest_checkpoint(tmp_path)
    assert info is not None and info.epoch == 8


def test_a_torn_input_log_resumes_at_the_last_whole_frame(tmp_path: Path) -> None:
    expected = undisturbed()
    rec = Recorder(tmp_path)
    rec.crash(9)
    segments = sorted(log_dir(tmp_path, 0, "values").glob("seg-*"))
    last = segments[-1]
    last.write_bytes(last.read_bytes()[:-5])  # the frame of epoch 9 is torn
    first, _ = rec.finish()
    assert first == 9  # epoch 9 was not sealed whole: the program feeds it again
    assert merged(rec.delivered) == expected
    assert rec.epochs() == list(range(EPOCHS))


def test_a_checkpoint_of_another_dataflow_is_refused(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.crash(6)
    with pytest.raises(timely.CheckpointError, match="different dataflow"):
        rec.finish(build=sums_build(delay=True))


def test_an_error_in_checkpoint_fails_the_computation_clearly(tmp_path: Path) -> None:
    class Broken(Sums):
        def checkpoint(self) -> Any:
            raise RuntimeError("disk full of opinions")

    with pytest.raises(timely.VertexError, match="raised RuntimeError in checkpoint at epoch 2"):
        run(tmp_path, build=sums_build(Broken))


def test_without_checkpoints_the_input_log_alone_replays_from_the_start(tmp_path: Path) -> None:
    expected = undisturbed()
    delivered: list[Any] = []
    policy = timely.Checkpoints(tmp_path, every_epochs=None, fsync=False)
    build = sums_build()
    with pytest.raises(Crash):
        with timely.execute(build, workers=2, timeout=30, checkpoints=policy) as (comp, (inp, probe, got)):
            for epoch in range(5):
                inp.send(data(epoch))
                inp.advance_to(epoch + 1)
                comp.wait_passed(probe, epoch)
            delivered.extend(got)
            raise Crash
    assert not (tmp_path / "checkpoints").exists()
    with timely.execute(build, workers=2, timeout=30, checkpoints=policy) as (comp, (inp, probe, got)):
        assert inp.epoch == 5
        for epoch in range(inp.epoch, EPOCHS):
            inp.send(data(epoch))
            inp.advance_to(epoch + 1)
    delivered.extend(got)
    assert merged(delivered) == expected
    assert sorted(e for e, _ in delivered) == list(range(EPOCHS))


def test_an_input_jumping_past_several_fences_does_not_stall(tmp_path: Path) -> None:
    policy = timely.Checkpoints(tmp_path, every_epochs=2, fsync=False)
    with timely.execute(sums_build(), workers=2, timeout=20, checkpoints=policy) as (comp, (inp, probe, got)):
        for epoch in (0, 5, 10):
            inp.send(data(epoch))
            inp.advance_to(epoch + 5)
            comp.wait_passed(probe, epoch)
        taken = comp.statistics().checkpoints["checkpoints"]
    assert sorted(e for e, _ in got) == [0, 5, 10]
    assert taken >= 3


def test_no_usable_checkpoint_and_pruned_logs_is_an_error_not_a_silent_restart(tmp_path: Path) -> None:
    policy = timely.Checkpoints(tmp_path, every_epochs=2, keep=1, fsync=False)
    with pytest.raises(Crash):
        with timely.execute(sums_build(), workers=2, timeout=20, checkpoints=policy) as (comp, (inp, probe, _)):
            for epoch in range(10):
                inp.send(data(epoch))
                inp.advance_to(epoch + 1)
                comp.wait_passed(probe, epoch)
            raise Crash
    (newest,) = (tmp_path / "checkpoints").iterdir()
    part = next(newest.iterdir())
    part.write_bytes(part.read_bytes()[:-10])  # truncated: unusable, and the older ones are pruned
    with pytest.raises(timely.CheckpointError, match="cannot be rebuilt"):
        with timely.execute(sums_build(), workers=2, timeout=20, checkpoints=policy):
            pass


def test_a_part_of_an_older_format_is_named_as_such(tmp_path: Path) -> None:
    from timely.checkpoint._store import read_part

    old = tmp_path / "part-0-of-1"
    old.write_bytes(b"TIMELY-CHECKPOINT-1\n" + b"\0" * 64)
    with pytest.raises(timely.CheckpointError, match="older version"):
        read_part(old)


def _frame_offsets(segment: Path) -> list[int]:
    """Where each frame of a log segment starts (read with the log's own header layout)."""
    import struct

    from timely.checkpoint._store import LOG_MAGIC

    data = segment.read_bytes()
    at, found = len(LOG_MAGIC), []
    while at < len(data):
        found.append(at)
        (length,) = struct.unpack_from(">I", data, at)
        at += 12 + length
    return found


def test_a_corrupt_frame_inside_an_input_log_is_an_error_naming_the_file(tmp_path: Path) -> None:
    """A flipped byte in the middle of a log must not end the log there (the epochs after it
    would be lost): resuming stops with an error that names the segment."""
    rec = Recorder(tmp_path)
    rec.crash(10, every=100)  # no checkpoint: the log alone holds epochs 0..10
    (segment,) = sorted(log_dir(tmp_path, 0, "values").glob("seg-*"))
    offsets = _frame_offsets(segment)
    data = bytearray(segment.read_bytes())
    data[offsets[4] + 20] ^= 0x40  # inside the payload of epoch 3's frame
    segment.write_bytes(bytes(data))
    with pytest.raises(timely.CheckpointError, match=rf"{segment.name}: input log corrupt at byte {offsets[4]}"):
        rec.finish(every=100)
    data[offsets[4] + 20] ^= 0x40
    data[offsets[6] + 2] ^= 0x01  # now a frame's length field: it must not swallow the rest
    segment.write_bytes(bytes(data))
    with pytest.raises(timely.CheckpointError, match="frame header checksum mismatch"):
        rec.finish(every=100)


def test_a_corrupt_log_segment_that_only_older_epochs_need_is_ignored(tmp_path: Path) -> None:
    expected = undisturbed()
    rec = Recorder(tmp_path)
    rec.crash(10)  # checkpoints at 2, 5, 8: the log is rotated at each
    finished = sorted(log_dir(tmp_path, 0, "values").glob("seg-*.upto-*"))
    oldest = finished[0]
    assert int(oldest.name.split(".upto-")[1]) <= 8  # only epochs the newest checkpoint holds
    data = bytearray(oldest.read_bytes())
    data[-3] ^= 0xFF
    oldest.write_bytes(bytes(data))
    first, stats = rec.finish()
    assert stats["resumed"]["epoch"] == 8 and first == 11
    assert merged(rec.delivered) == expected


def test_an_input_closed_after_its_epochs_ran_ahead_is_replayed(tmp_path: Path) -> None:
    """The part of a checkpoint written after the input was closed says the input was open at
    the checkpoint's epoch: the epochs after it are replayed, then the input is closed."""
    expected = undisturbed()
    policy = timely.Checkpoints(tmp_path, every_epochs=3, fsync=False)
    delivered: list[Any] = []
    with pytest.raises(Crash):
        with timely.execute(sums_build(), workers=2, timeout=30, checkpoints=policy) as (comp, (inp, probe, got)):
            for epoch in range(EPOCHS):  # every epoch fed and the input closed before any checkpoint
                inp.send(data(epoch))
                inp.advance_to(epoch + 1)
            inp.close()
            comp.wait_passed(probe, 6)
            delivered.extend(got)
            raise Crash
    info = latest_checkpoint(tmp_path)
    assert info is not None and info.epoch >= 5
    assert info.parts[0].header["inputs_closed_at"] == [("values", None)]  # open at its epoch
    with timely.execute(sums_build(), workers=2, timeout=30, checkpoints=policy) as (comp, (inp, probe, got)):
        assert inp.closed and inp.epoch == EPOCHS  # replayed to the end, then closed, as logged
    delivered.extend(got)
    assert merged(delivered) == expected
    assert sorted(e for e, _ in delivered) == list(range(EPOCHS))


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 512 KiB tmpfs (a real file system that fills up); skipped where it cannot be mounted."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> None:
    """Write to ``directory`` until its file system has no room left."""
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 1024)
        except OSError:
            pass


def test_a_full_disk_at_the_delivery_mark_is_reported_as_such(small_disk: Path) -> None:
    policy = timely.Checkpoints(small_disk / "ck", every_epochs=None, fsync=False)
    with pytest.raises(Exception) as raised:
        with timely.execute(sums_build(), workers=1, timeout=30, checkpoints=policy) as (comp, (inp, probe, _)):
            inp.send(data(0))
            inp.advance_to(1)  # the log frame of epoch 0 is written here
            fill(small_disk)
            comp.wait_passed(probe, 0)  # the output of epoch 0 is delivered, its mark written
    chain = [raised.value, *(e for e in (raised.value.__cause__, raised.value.__context__) if e)]
    text = " | ".join(str(e) for e in chain)
    assert "cannot record that subscription 'sums.out' delivered epoch 0" in text, text
    assert "No space left on device" in text and "subscriber raised" not in text


def test_a_full_disk_at_the_input_log_is_reported_as_such(small_disk: Path) -> None:
    policy = timely.Checkpoints(small_disk / "ck", every_epochs=None, fsync=False)
    with pytest.raises(timely.CheckpointError, match=r"cannot append epoch 0 to the input log .*No space left"):
        with timely.execute(sums_build(), workers=1, timeout=30, checkpoints=policy) as (comp, (inp, probe, _)):
            inp.send([(1, 2)] * 5000)
            fill(small_disk)
            inp.advance_to(1)


def test_prune_goes_on_when_another_process_removes_a_checkpoint_it_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes prune the same directory at the same time: the last to leave a checkpoint's
    directory removes it, possibly between another's listing and its look inside (a real
    2-process run failed there with FileNotFoundError and restarted for nothing)."""
    from timely.checkpoint import _store

    for epoch in (1, 3, 5, 7):
        checkpoint_dir(tmp_path, epoch).mkdir(parents=True)
        for process in (0, 1):
            _store.part_path(tmp_path, epoch, process, 2).write_bytes(b"")
    listed = _store._epochs
    listings = []

    def listed_then_removed_by_the_other_process(root: Path) -> list[int]:
        epochs = listed(root)
        listings.append(epochs)
        if len(listings) == 2:  # prune's own walk over old epochs, after it found the complete ones
            shutil.rmtree(checkpoint_dir(root, 3))  # process 1 pruned epoch 3 just now
        return epochs

    monkeypatch.setattr(_store, "_epochs", listed_then_removed_by_the_other_process)
    _store.prune(tmp_path, 0, keep=2)
    assert listings[-1] == [1, 3, 5, 7]  # epoch 3 was listed, then vanished before prune looked inside
    left = {d.name: sorted(p.name for p in d.iterdir()) for d in (tmp_path / "checkpoints").iterdir()}
    assert left == {
        "epoch-000000000001": ["part-1-of-2"],  # process 0's part pruned; process 1 removes the rest
        "epoch-000000000005": ["part-0-of-2", "part-1-of-2"],
        "epoch-000000000007": ["part-0-of-2", "part-1-of-2"],
    }


def test_input_log_frames_are_forced_to_disk_off_the_event_loop_and_a_failure_is_raised(tmp_path: Path) -> None:
    """The thread that fsyncs an input log: after `wait`, every write requested before it was
    forced (one fsync may cover several); an fsync that fails (here on a pipe, which cannot be
    synced: EINVAL) is raised by the next wait and the next request, not lost in the thread."""
    import os
    import threading

    from timely.checkpoint._store import _Syncer

    with open(tmp_path / "segment", "ab", buffering=0) as f:
        syncer = _Syncer(f.fileno())
        for i in range(50):
            f.write(b"frame %d\n" % i)
            syncer.request()
        syncer.wait()
        assert syncer.done == syncer.wanted == 50
        syncer.stop()
        assert syncer.thread is not None and not syncer.thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "timely-input-log-fsync"]

    read, write = os.pipe()
    try:
        broken = _Syncer(write)
        broken.request()
        with pytest.raises(OSError):
            broken.wait()
        with pytest.raises(OSError):
            broken.request()
    finally:
        os.close(read)
        os.close(write)


def test_a_logged_run_with_fsync_resumes_from_its_logs(tmp_path: Path) -> None:
    """The default policy (fsync on) through a crash and a resume: what the logs hold after the
    crash (written, forced by the thread) is replayed, and the run matches an undisturbed one."""
    expected = undisturbed()
    rec = Recorder(tmp_path)
    import threading

    def syncing() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "timely-input-log-fsync"]

    rec.crash(7, fsync=True)
    assert not syncing(), "the abandoned run left its log's fsync thread running"
    first, stats = rec.finish(fsync=True)
    assert not syncing()
    assert first == 8 and stats["resumed"]["epoch"] == 5  # epochs 6 and 7 replayed from the log
    assert stats["resumed"]["replayed_epochs"] == 2
    assert rec.epochs() == list(range(EPOCHS))
    assert merged(rec.delivered) == expected
