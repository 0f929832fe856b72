"""The checkpoint directory: parts, input logs and delivery marks, written so that a crash at
any instant leaves either the old or the new version of every file, never a torn one that is
believed.

Layout under the directory::

    checkpoints/epoch-000000000009/part-0-of-2   one per process: vertex states, notification
                                                 requests, messages carried past the epoch
    inputs/p0/<input>/seg-000003                 input log segments: sealed epochs, appended
    delivered/p0/<subscription>                  the last epoch a subscription delivered
    complete/p0                                  written when process 0's computation completed

A part is ``MAGIC | length | payload | sha256(payload)``, written to a temporary name,
flushed (and fsynced unless asked not to) and renamed, so it exists whole or not at all; a
checkpoint counts only when every process's part is there and verifies. An input log segment
is ``LOG_MAGIC`` and frames ``length | crc32(payload) | crc32(header) | payload``: the header
checks itself, so a frame cut short by a crash (only ever the last one of the segment that was
being written) is told apart from a corrupt one, which is an error naming the file.

Why over 500 lines in one module: the on-disk formats (parts, log segments, marks) and the
crash rules that keep each of them whole are one contract, checked in one place.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from ..errors import CodecError, TimelyError
from ..net.codec import Codec

MAGIC = b"TIMELY-CHECKPOINT-3\n"
_OLDER = b"TIMELY-CHECKPOINT-"
LOG_MAGIC = b"TIMELY-LOG-3\n"
_LENGTH = struct.Struct(">Q")
_FRAME = struct.Struct(">III")
"""A log frame's header: payload length, CRC-32 of the payload, CRC-32 of the first eight bytes."""
_DIGEST = 32

CODEC = Codec(allow_pickle=True)
"""Checkpoint files are this program's own, so state the codec cannot say natively may be pickled."""
STRUCTURE = Codec(opaque=True)
"""For reading what a log holds without its records: the launcher, checking a run's delivery,
has not imported the program's types (linq's blocks, say) and must not unpickle its objects."""


class CheckpointError(TimelyError):
    """A checkpoint directory that cannot be used as asked (wrong program, unreadable state)."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of state objects are built or encoded:
    with it running, decoding a 1M-edge linq checkpoint took 7x longer (86 s against 12 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _name(text: str) -> str:
    return quote(text, safe="")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, fsync: bool) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


# Checkpoint parts ------------------------------------------------------------------------------


def checkpoint_dir(root: Path, epoch: int) -> Path:
    return root / "checkpoints" / f"epoch-{epoch:012d}"


def part_path(root: Path, epoch: int, process: int, processes: int) -> Path:
    return checkpoint_dir(root, epoch) / f"part-{process}-of-{processes}"


def write_part(
    root: Path, epoch: int, process: int, processes: int, header: dict[str, Any], body: dict[str, Any], fsync: bool
) -> int:
    """Write this process's part of the checkpoint at ``epoch``; the number of bytes written.
    The small ``header`` is encoded apart from the ``body`` (the states), so that recovery
    decodes only the bodies it needs."""
    path = part_path(root, epoch, process, processes)
    try:
        payload = CODEC.encode((CODEC.encode(header), CODEC.encode(body)))
    except CodecError as e:
        raise CheckpointError(f"cannot write the checkpoint part {path}: {_whose_state(body)}{e}") from e
    data = b"".join((MAGIC, _LENGTH.pack(len(payload)), payload, hashlib.sha256(payload).digest()))
    try:
        write_atomic(path, data, fsync)
    except OSError as e:
        raise CheckpointError(f"cannot write the checkpoint part {path} ({len(data)} bytes): {e}") from e
    return len(data)


def _whose_state(body: dict[str, Any]) -> str:
    """Which vertex's state the codec refused, for the error (found only once it has failed)."""
    for name, worker, _, state in body.get("vertices", ()):
        try:
            CODEC.encode(state)
        except CodecError:
            return f"the state of stage {name!r} (worker {worker}): "
    return ""


@dataclass
class Part:
    """One process's part: its header, and its body decoded on demand."""

    header: dict[str, Any]
    _body: bytes
    path: Path

    def body(self) -> dict[str, Any]:
        try:
            with collector_paused():
                content = CODEC.decode(self._body)
        except CodecError as e:
            raise CheckpointError(f"{self.path}: cannot restore from it: {e}") from e
        if not isinstance(content, dict):
            raise CheckpointError(f"{self.path}: corrupt (its body is not a mapping)")
        return content


def read_part(path: Path) -> Part:
    """A part, checksum verified; `CheckpointError` if it is truncated, corrupt or not a part."""
    data = path.read_bytes()
    head = len(MAGIC) + _LENGTH.size
    if data.startswith(_OLDER) and not data.startswith(MAGIC):
        raise CheckpointError(f"{path}: written by an older version of timely (format {data[: len(MAGIC)]!r})")
    if not data.startswith(MAGIC) or len(data) < head + _DIGEST:
        raise CheckpointError(f"{path}: not a timely checkpoint part (bad header or truncated)")
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    if len(data) != head + length + _DIGEST:
        raise CheckpointError(f"{path}: truncated ({len(data)} bytes, the header promises {head + length + _DIGEST})")
    payload = data[head : head + length]
    if hashlib.sha256(payload).digest() != data[head + length :]:
        raise CheckpointError(f"{path}: corrupt (checksum mismatch)")
    try:
        header_bytes, body = CODEC.decode(payload)
        header = CODEC.decode(header_bytes)
    except Exception as e:
        raise CheckpointError(f"{path}: corrupt (payload is not a part: {e})") from e
    if not isinstance(header, dict) or not isinstance(body, bytes):
        raise CheckpointError(f"{path}: corrupt (payload is not a part)")
    return Part(header, body, path)


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: every process's part is present and verifies."""

    epoch: int
    processes: int
    parts: list[Part]
    """Every process's part, in process order."""


def _epochs(root: Path) -> list[int]:
    base = root / "checkpoints"
    if not base.is_dir():
        return []
    epochs = []
    for entry in base.iterdir():
        if entry.name.startswith("epoch-"):
            try:
                epochs.append(int(entry.name[len("epoch-") :]))
            except ValueError:
                continue
    return sorted(epochs)


def _complete(root: Path, epoch: int) -> tuple[int, list[Path]] | None:
    """The process count and part paths of the checkpoint at ``epoch`` if every part is there.
    None too when its directory is gone: another process pruned it after it was listed."""
    try:
        names = [p.name for p in checkpoint_dir(root, epoch).iterdir() if p.name.startswith("part-")]
    except FileNotFoundError:
        return None
    counts = {int(n.rsplit("-of-", 1)[1]) for n in names if "-of-" in n and n.rsplit("-of-", 1)[1].isdigit()}
    for processes in sorted(counts, reverse=True):
        paths = [part_path(root, epoch, i, processes) for i in range(processes)]
        if all(p.exists() for p in paths):
            return processes, paths
    return None


def complete_epochs(root: Path) -> list[int]:
    """Epochs with a part from every process (not yet verified), oldest first."""
    return [e for e in _epochs(root) if _complete(root, e) is not None]


def latest_checkpoint(root: str | os.PathLike[str], fingerprint: str | None = None) -> CheckpointInfo | None:
    """The newest checkpoint under ``root`` whose parts are all present and verify; older ones
    are tried when a newer one is partial or corrupt (each skip is logged). None if there is none."""
    log = logging.getLogger("timely")
    base = Path(root)
    for epoch in reversed(_epochs(base)):
        found = _complete(base, epoch)
        if found is None:
            log.info("checkpoint at epoch %d is partial (not every process wrote its part); skipped", epoch)
            continue
        processes, paths = found
        try:
            parts = [read_part(p) for p in paths]
        except (CheckpointError, OSError) as e:
            log.warning("checkpoint at epoch %d is unusable, trying an older one: %s", epoch, e)
            continue
        if fingerprint is not None:
            theirs = {p.header.get("fingerprint") for p in parts}
            if theirs != {fingerprint}:
                raise CheckpointError(
                    f"the checkpoint at epoch {epoch} in {base} was written by a different dataflow "
                    "(graph fingerprint differs); resume with the same program, or use another directory"
                )
        return CheckpointInfo(epoch, processes, parts)
    return None


def history_lost(root: Path) -> bool:
    """Checkpoints were written here and input log segments pruned: without a usable checkpoint
    the epochs before the pruned ones cannot be replayed."""
    if not _epochs(root):
        return False
    return any(
        not (d / "seg-000001").exists() and not any(d.glob("seg-000001.upto-*"))
        for d in (root / "inputs").glob("p*/*")
        if d.is_dir()
    )


def prune(root: Path, process: int, keep: int) -> None:
    """Delete this process's parts of checkpoints older than the ``keep`` newest complete ones,
    and its input log segments that only those older checkpoints needed."""
    complete = complete_epochs(root)
    if len(complete) <= keep:
        return
    oldest_kept = complete[-keep]
    for epoch in _epochs(root):
        if epoch >= oldest_kept:
            break
        d = checkpoint_dir(root, epoch)
        try:
            # another process may prune the same epoch and remove its directory meanwhile
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(f"part-{process}-of-"):
                (d / name).unlink(missing_ok=True)
        try:
            d.rmdir()  # the last process to prune removes the directory
        except OSError:
            pass
    prune_logs(root, process, oldest_kept)


# Input logs ------------------------------------------------------------------------------------
#
# A log is a stream of frames over numbered segment files ``seg-000001``, ``seg-000002``, ...:
#   (SEAL, epoch, records, next)   the records of a finished epoch; the input went on to
#                                  epoch ``next`` (None: it was closed)
#   (RESUME, epoch, retired)       a restart resumed this input at ``epoch``: frames before it
#                                  at ``epoch`` or later are void (the program feeds them
#                                  again); ``retired``: no process writes this log any more
#   (AT, epoch, processes)         the input is at ``epoch`` (first frame of a new segment), in
#                                  a run of ``processes`` processes (older logs: (AT, epoch))

SEAL, RESUME, AT = 0, 1, 2


def log_dir(root: Path, process: int, input_name: str) -> Path:
    return root / "inputs" / f"p{process}" / _name(input_name)


def _segments(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("seg-*") if not p.name.endswith(".tmp"))


class _Syncer:
    """Forces one file's writes to disk off the event loop: `request` after a write returns at
    once, and a thread fsyncs (one fsync for every write made while the last one ran); `wait`
    returns once everything written before it is on disk. An fsync that failed is raised by
    the next `request` or `wait`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.cond = threading.Condition()
        self.wanted = self.done = 0
        self.error: OSError | None = None
        self.stopping = False
        self.thread: threading.Thread | None = None

    def request(self) -> None:
        with self.cond:
            if self.error is not None:
                raise self.error
            self.wanted += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="timely-input-log-fsync", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def _run(self) -> None:
        cond = self.cond
        while True:
            with cond:
                while self.done == self.wanted and not self.stopping:
                    cond.wait()
                if self.done == self.wanted:
                    return
                target = self.wanted
            try:
                os.fsync(self.fd)
            except OSError as e:
                with cond:
                    self.error, self.done = e, self.wanted
                    cond.notify_all()
                return
            with cond:
                self.done = target
                cond.notify_all()

    def wait(self) -> None:
        with self.cond:
            target = self.wanted
            while self.done < target and self.error is None:
                self.cond.wait()
            if self.error is not None:
                raise self.error

    def stop(self) -> None:
        """Wait for the writes so far, then end the thread (before the file is closed)."""
        try:
            self.wait()
        finally:
            with self.cond:
                self.stopping = True
                self.cond.notify_all()
            if self.thread is not None:
                self.thread.join()


class InputLog:
    """Appends frames to one process's log of one input.

    With ``fsync``, each frame is forced to disk by a thread (`_Syncer`) while the computation
    goes on: an fsync an epoch on the event loop cost more than a small epoch's whole work.
    `sync` waits for it; a checkpoint part is written only after its process's logs are synced
    (a checkpoint on disk is never ahead of the logs it relies on), and a segment is synced
    before it is closed."""

    def __init__(self, root: Path, process: int, input_name: str, fsync: bool, processes: int) -> None:
        self.dir = log_dir(root, process, input_name)
        self.fsync = fsync
        self.processes = processes
        """How many processes the run has: each segment says so, so that a restart knows whose
        log is missing (a process that died before it wrote one sealed nothing)."""
        self._file: Any = None
        self._syncer: _Syncer | None = None
        self.last_epoch = -1

    def rotate(self, epoch: int) -> None:
        """Start a new segment, at ``epoch``, so that segments older checkpoints alone need can
        be deleted whole. The finished segment is renamed to say its last epoch."""
        try:
            if self._file is not None:
                self._stop_syncer()
                self._file.close()
                old = Path(self._file.name)
                self._file = None
                old.rename(old.with_name(f"{old.name}.upto-{self.last_epoch:012d}"))
            self.dir.mkdir(parents=True, exist_ok=True)
            segments = _segments(self.dir)
            number = int(segments[-1].name[4:10]) + 1 if segments else 1
            self._file = open(self.dir / f"seg-{number:06d}", "ab", buffering=0)  # noqa: SIM115 - kept open
            self._file.write(LOG_MAGIC)
            if self.fsync:
                self._syncer = _Syncer(self._file.fileno())
        except OSError as e:
            self.close()
            raise CheckpointError(f"cannot start a new segment of the input log {self.dir}: {e}") from e
        self.last_epoch = -1
        self.write((AT, epoch, self.processes))

    def write(self, frame: tuple[Any, ...]) -> None:
        if self._file is None:
            raise CheckpointError(f"input log {self.dir} is not open")
        if frame[0] == SEAL:
            self.last_epoch = max(self.last_epoch, frame[1])
        try:
            data = memoryview(log_frame(CODEC.encode(frame)))
            while data:  # an unbuffered write may take only part (a disk filling up): the rest, or ENOSPC
                data = data[self._file.write(data) :]
            if self._syncer is not None:
                self._syncer.request()
        except OSError as e:
            name = self._file.name
            self.close()  # a frame may be half written: nothing more goes into this segment
            raise CheckpointError(f"cannot append epoch {frame[1]} to the input log {name}: {e}") from e

    def sync(self) -> None:
        """Return once every frame written so far is on disk (at once without ``fsync``)."""
        if self._syncer is None:
            return
        try:
            self._syncer.wait()
        except OSError as e:
            name = self._file.name if self._file is not None else self.dir
            self.close()
            raise CheckpointError(f"cannot force the input log {name} to disk: {e}") from e

    def _stop_syncer(self) -> None:
        syncer, self._syncer = self._syncer, None
        if syncer is not None:
            syncer.stop()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._stop_syncer()
            except OSError:
                pass  # closing after a failure, or at the end: the failure is already raised or moot
            self._file.close()
            self._file = None


def log_frame(payload: bytes) -> bytes:
    """``payload`` as one log frame, its header checked by a CRC of its own."""
    head = struct.pack(">II", len(payload), zlib.crc32(payload))
    return head + struct.pack(">I", zlib.crc32(head)) + payload


def append_frame(root: Path, process: int, input_name: str, frame: tuple[Any, ...], processes: int) -> None:
    """Append one frame to another (retired) process's log, in a segment of its own, written
    by a run of ``processes`` processes."""
    log = InputLog(root, process, input_name, fsync=True, processes=processes)
    log.rotate(frame[1])
    log.write(frame)
    log.close()


@dataclass
class LogState:
    """What one log says: the records of its valid sealed epochs, and where the input is."""

    records: dict[int, list[Any]]
    position: int | None
    """The epoch the input is at after the last valid frame; None: closed."""
    retired: bool
    closed_at: int | None = None
    """The epoch the input was at when it was closed (None: open)."""
    processes: int = 0
    """The most processes a run that wrote this log had (0: its segments do not say)."""


def _upto(segment: Path) -> int | None:
    """The last epoch a finished segment holds (its name says it); None for an active one."""
    return int(segment.name.split(".upto-")[1]) if ".upto-" in segment.name else None


def segment_frames(segment: Path, codec: Codec = CODEC) -> list[Any]:
    """The frames of one log segment, checked. A frame cut short at the end of a segment that
    was being written (not yet renamed ``.upto-``) is where a crash stopped it: the frames
    before it are the segment. Anything else that does not verify raises `CheckpointError`
    naming the file: a log that lost frames must not be replayed as if it were whole."""
    data = segment.read_bytes()
    active = _upto(segment) is None

    def corrupt(at: int, why: str) -> CheckpointError:
        return CheckpointError(
            f"{segment}: input log corrupt at byte {at} ({why}); the epochs it logs cannot be replayed: "
            "restore the file, or start over in a fresh checkpoint directory"
        )

    if not data.startswith(LOG_MAGIC):
        if active and LOG_MAGIC.startswith(data):
            return []  # cut short before its first frame
        if data.startswith(b"TIMELY-LOG-"):
            raise CheckpointError(f"{segment}: written by an older version of timely ({data[:16]!r})")
        raise corrupt(0, "not a timely input log segment")
    frames = []
    at = len(LOG_MAGIC)
    while at < len(data):
        header = data[at : at + _FRAME.size]
        if len(header) < _FRAME.size:
            if active:
                break  # torn: the crash came while the header was written
            raise corrupt(at, "a frame header cut short in a finished segment")
        length, crc, head_crc = _FRAME.unpack(header)
        if zlib.crc32(header[:8]) != head_crc:
            raise corrupt(at, "frame header checksum mismatch")
        payload = data[at + _FRAME.size : at + _FRAME.size + length]
        if len(payload) < length:
            if active:
                break  # torn: the crash came while the payload was written
            raise corrupt(at, f"a frame of {length} bytes cut short in a finished segment")
        if zlib.crc32(payload) != crc:
            if active and at + _FRAME.size + length == len(data):
                break  # the last frame, its bytes not all on disk when the machine stopped
            raise corrupt(at, "frame checksum mismatch")
        try:
            frames.append(codec.decode(payload))
        except Exception as e:
            raise corrupt(at, f"a frame that does not decode: {e}") from e
        at += _FRAME.size + length
    return frames


def read_log(root: Path, process: int, input_name: str, needed_from: int = 0, codec: Codec = CODEC) -> LogState | None:
    """One process's log of one input; None if there is none. A torn tail ends a segment; a
    corrupt segment raises `CheckpointError`, unless it holds only epochs before ``needed_from``
    (the first epoch to replay), which nothing reads any more. ``codec``: `STRUCTURE` where only
    the epochs matter (records of types this process has not registered stay opaque)."""
    d = log_dir(root, process, input_name)
    if not d.is_dir():
        return None
    state = LogState({}, 0, False)
    for seg in _segments(d):
        try:
            frames = segment_frames(seg, codec)
        except CheckpointError as e:
            upto = _upto(seg)
            if upto is not None and upto < needed_from:
                logging.getLogger("timely").warning(
                    "%s; it holds only epochs before %d, so it is ignored", e, needed_from
                )
                continue
            raise
        for frame in frames:
            if frame[0] == SEAL:
                _, epoch, records, next_epoch = frame
                state.records.setdefault(epoch, []).extend(records)
                state.position = next_epoch
                state.closed_at = epoch if next_epoch is None else None
            elif frame[0] == RESUME:
                _, epoch, retired = frame
                for voided in [e for e in state.records if e >= epoch]:
                    del state.records[voided]
                state.position, state.retired, state.closed_at = epoch, bool(retired), None
            elif frame[0] == AT:
                if state.position is not None:
                    state.position = frame[1]
                if len(frame) > 2:
                    state.processes = max(state.processes, frame[2])
    return state


def log_processes(root: Path, input_name: str) -> list[int]:
    """The processes that ever logged ``input_name``."""
    base = root / "inputs"
    if not base.is_dir():
        return []
    found = []
    for d in base.iterdir():
        if d.name.startswith("p") and d.name[1:].isdigit() and (d / _name(input_name)).is_dir():
            found.append(int(d.name[1:]))
    return sorted(found)


def prune_logs(root: Path, process: int, oldest_kept: int) -> None:
    """Delete this process's finished log segments whose epochs are all at or before
    ``oldest_kept`` (no kept checkpoint replays them)."""
    logs = root / "inputs" / f"p{process}"
    if not logs.is_dir():
        return
    for input_dir in logs.iterdir():
        for seg in _segments(input_dir):
            if ".upto-" in seg.name and int(seg.name.split(".upto-")[1]) <= oldest_kept:
                seg.unlink(missing_ok=True)


# Delivery marks -----------------------------------------------------------------------------------


def delivered_path(root: Path, process: int, subscription: str) -> Path:
    return root / "delivered" / f"p{process}" / _name(subscription)


def write_delivered(root: Path, process: int, subscription: str, epoch: int) -> None:
    write_atomic(delivered_path(root, process, subscription), str(epoch).encode(), fsync=False)


def read_delivered(root: Path, process: int, subscription: str) -> int:
    """The last epoch this process's subscription delivered; -1 if none."""
    try:
        return int(delivered_path(root, process, subscription).read_text())
    except (OSError, ValueError):
        return -1


# Completion records ------------------------------------------------------------------------------
#
# A process whose computation completed (every input closed, every epoch through every
# subscription) writes ``complete/p<i>``: where each of its inputs ended and the last epoch
# each subscription delivered. `verify_delivery` holds these against the input logs, so that a
# run cannot end well with logged epochs that were never fed again after a restart.


def completion_path(root: Path, process: int) -> Path:
    return root / "complete" / f"p{process}"


def write_completion(root: Path, process: int, record: dict[str, Any]) -> None:
    path = completion_path(root, process)
    try:
        write_atomic(path, CODEC.encode(record), fsync=False)
    except OSError as e:
        raise CheckpointError(f"cannot record that process {process} completed, at {path}: {e}") from e


def clear_completion(root: Path, process: int) -> None:
    """This process is running again: what it completed before no longer stands."""
    completion_path(root, process).unlink(missing_ok=True)


def _read_completion(root: Path, process: int) -> dict[str, Any] | None:
    try:
        record = CODEC.decode(completion_path(root, process).read_bytes())
    except FileNotFoundError:
        return None
    except Exception as e:
        raise CheckpointError(f"{completion_path(root, process)}: unreadable completion record ({e})") from e
    return record if isinstance(record, dict) else None


def _input_names(root: Path) -> set[str]:
    base = root / "inputs"
    if not base.is_dir():
        return set()
    return {unquote(d.name) for p in base.iterdir() if p.is_dir() for d in p.iterdir() if d.is_dir()}


def verify_delivery(directory: str | os.PathLike[str], processes: int, indices: list[int] | None = None) -> None:
    """Check that a run over the checkpoint ``directory`` with ``processes`` processes delivered
    everything its inputs logged; raise `CheckpointError` saying what is missing otherwise.

    Every process (or those of ``indices``, for a launcher that runs only some) must have
    written its completion record (its computation ran to the end: every input closed, every
    epoch through every subscription), and each input must have ended at or after the last
    epoch its log holds (also the logs of processes a smaller run took over): an epoch logged
    but never fed again after a restart would otherwise be an output missing from a run that
    exited 0. A directory that no checkpointing computation wrote to passes."""
    root = Path(directory)
    names = _input_names(root)
    wrote = names or _epochs(root) or (root / "delivered").is_dir() or (root / "complete").is_dir()
    if not wrote:
        return
    ended: dict[int, dict[str, Any]] = {}
    for i in range(processes) if indices is None else indices:
        record = _read_completion(root, i)
        if record is None:
            raise CheckpointError(
                f"process {i} exited without completing its computation (no completion record at "
                f"{completion_path(root, i)}): epoch outputs may be missing"
            )
        ended[i] = dict(record.get("inputs", {}))
    for name in sorted(names):
        for j in log_processes(root, name):
            if j % processes not in ended:
                continue
            state = read_log(root, j, name, codec=STRUCTURE)
            if state is None or not state.records:
                continue
            last = max(state.records)
            at = ended[j % processes].get(name)
            if at is None or at < last:
                where = "was not fed" if at is None else f"ended at epoch {at}"
                raise CheckpointError(
                    f"input {name!r} of process {j % processes} {where}, but {log_dir(root, j, name)} logs epochs "
                    f"up to {last}: the outputs of the epochs after it are missing"
                )
