"""The runtime's side of the network: what goes into frames, and what frames do.

Frames (msgpack arrays; record batches are encoded by the `Codec` when they are sent, so
an unencodable record fails in the sending stage's callback):

    [DATA, [[connector, worker, time, records_bytes], ...]]   messages for this process's workers
    [DATA, [...], [[time, location, delta], ...]]              the same, with a progress batch first
    [PROGRESS, [[time, location, delta], ...]]                 one atomic batch, positives first
    [ERROR, {process, stage, worker, time, kind, message}]     the sender failed: stop
    [BYE]                                                      the sender is complete
    [SAMPLE, {...}]                                            to process 0: the sender's console sample

Progress: every batch this process applies to its own tracker is also merged into
``progress_out``, a `ProgressAccumulator`; peers see an atomic union of this process's
batches in order (Naiad's per-process accumulation). A flush while the process is still busy
may hold the merged batch back, when the accumulator says that is safe (`flush`), and no
longer than `HOLD_SECONDS`; otherwise it goes to every peer, inside the peer's first DATA
frame of that flush when there is one (one frame, one wakeup for both), else as a PROGRESS
frame. Data and progress from one process travel on one FIFO connection per peer.
"""

from __future__ import annotations

import asyncio
import logging
import time as _time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgpack

from ..errors import FrameError, PeerError, TimelyError
from ..net.codec import OBJECT_BYTES, Codec, PackerPool, decoded_size_bound
from ..net.transport import SilentPeerError, Transport
from ..progress import ChangeBatch, Pointstamp, ProgressAccumulator, ProgressTracker
from ..timestamp import Timestamp, _from_flat
from .config import decode_budget_from_env

__all__ = ["ClusterLink", "LinkHost", "DATA", "PROGRESS", "ERROR", "BYE"]

log = logging.getLogger("timely")

DATA, PROGRESS, ERROR, BYE, CHECKPOINT, SAMPLE = 1, 2, 3, 4, 5, 6
RECEIVE_HIGH = 256
"""Queued messages above which this process stops reading from peers (they slow down)."""
RECEIVE_LOW = 64
RECEIVE_HIGH_RECORDS = 256 * 1024
"""Queued records above which this process stops reading from peers: a message may hold up to
65,536 records (merged, or sent by a busy stage), so counting messages alone let a slow
consumer's queues grow with its input."""
RECEIVE_LOW_RECORDS = 64 * 1024
DATA_FRAME_BYTES = 1 << 20
"""The encoded records one DATA frame holds at most (unless one message alone is larger: a
single record), so that a receiver can stop reading between frames (one frame is taken whole)
and every frame stays well inside its decode budget; a larger batch goes as several messages."""
HOLD_SECONDS = 0.01
"""How long a busy process may hold its progress back from its peers (`ClusterLink.flush`): a
loop iteration's updates go as one round instead of one per time slice, and a peer waiting
for them waits at most this long more than it would have."""
SETTLE_SECONDS = 0.1
"""How long a process may hold a batch whose retirements are all of pointstamps something
else still holds back (`ClusterLink.flush`). They unblock nothing until that something retires, so the
limit is not what makes the protocol live (`docs/progress.md` has the argument); it bounds
the cost of a case the argument missed. Longer than `HOLD_SECONDS`: on a loaded machine a
peer's part of an iteration often comes tens of milliseconds after the first."""
_DATA, _PROGRESS = msgpack.packb(DATA), msgpack.packb(PROGRESS)


class LinkHost(Protocol):
    """What the link needs of the process it connects (`ProcessRuntime` implements it)."""

    def deliver_remote(self, connector: int, worker: int, time: Timestamp, records: list[Any]) -> None: ...

    def backlog(self) -> int: ...

    def queued_records(self) -> int: ...

    def fail(self, err: BaseException) -> None: ...

    def wake(self) -> None: ...

    def checkpoint_decided(self, epoch: int, take: bool) -> None:
        """Process 0's decision whether to checkpoint at a fence epoch (time policy)."""


class ClusterLink:
    """This process's side of the frames it exchanges with every peer: records, progress,
    errors, goodbyes and checkpoint decisions. Remote progress waits in ``arrived`` for the
    runtime's next step."""

    def __init__(self, host: LinkHost, tracker: ProgressTracker, transport: Transport, codec: Codec) -> None:
        self.host = host
        self.tracker = tracker
        self.transport = transport
        self.codec = codec
        self.peers = [p for p in range(transport.processes) if p != transport.process_index]
        self.outboxes: dict[int, list[list[Any]]] = {p: [] for p in self.peers}
        self.progress_out = ProgressAccumulator(tracker.reach)
        """This process's progress updates its peers have not been sent yet."""
        self._pack = PackerPool().pack
        """Packs a frame's envelope and progress batch (one packer kept, not one made a frame)."""
        self._waits: tuple[int, int, bool] = (-1, -1, False)
        """(``progress_out``'s version, the tracker's version, `ProgressAccumulator.waits_on_others`'
        answer then): a step that changed neither asks nothing again."""
        self._held_since: float | None = None
        """When a flush first held ``progress_out`` back (perf_counter); None while nothing is held."""
        self.waiting = False
        """``progress_out`` is held while the process has nothing to do, because every
        retirement in it is of a pointstamp something else still holds back (`flush`'s
        ``settle``): the process may sleep until a frame or the hold's time limit wakes it."""
        self._wait_timer: asyncio.TimerHandle | None = None
        self.arrived = ChangeBatch()
        """Peers' progress not yet applied to the tracker. The runtime applies it as one batch
        at the start of its next step: the frames that came in one pass of the event loop cost
        one tracker update, with opposite changes (one peer's ``+p``, another's ``-p``) netted
        first. Merging consecutive atomic batches, from one sender or several, is atomic."""
        self.records_since_release = False
        """Records went to or came from some peer since progress was last released: records are
        being exchanged, and more may be on their way (`ProcessRuntime._schedule`)."""
        self.byes: set[int] = set()
        self.bye_sent = False
        self.error_sent = False
        self.reading_paused = False
        self.decode_budget = decode_budget_from_env()
        """Bytes one DATA frame may take once decoded: a frame that could take more is refused
        before any of it is decoded (a 16 MiB frame of small ints decodes to about 290 MB)."""
        self._all_byes = asyncio.Event()
        self.on_sample: Callable[[int, Any], None] | None = None
        """Process 0 with the console on: what to do with a peer's sample (else samples are dropped)."""
        if not self.peers:
            self._all_byes.set()
        # traffic, by kind
        self.data_bytes_sent = self.data_frames_sent = 0
        self.progress_bytes_sent = self.progress_frames_sent = 0
        self.progress_piggybacked = 0
        """Progress batches sent inside a DATA frame (counted in ``progress_frames_sent`` too)."""
        self.progress_holds = 0
        """Flushes that held the progress batch back (busy and safe, or settled and waiting)."""
        self.progress_waits = 0
        """Of those, flushes out of work that held retirements something else still held back."""
        self.data_bytes_received = self.progress_bytes_received = 0

    def start(self) -> None:
        """Take frames from now on (those that came early first): the runtime is ready."""
        self.transport.set_handlers(self._on_frame, self._on_lost)

    # Sending ------------------------------------------------------------------------------------
    def publish(self, batch: Mapping[Pointstamp, int]) -> None:
        """Add a progress batch this process applies to its own tracker to what goes to the peers
        at a later flush (merged: peers see an atomic union of this process's batches)."""
        self.progress_out.add(batch)

    def send_records(self, process: int, connector: int, worker: int, time: tuple[int, ...], records: list[Any]) -> int:
        """Encode now (so a bad record fails in its sender's callback) and queue for the next flush;
        the number of messages made. A batch that encodes to more than `DATA_FRAME_BYTES` goes
        as several messages, so that every frame stays well inside the peer's decode budget."""
        blob = self.codec.encode_records(records)
        box = self.outboxes[process]
        if len(blob) <= DATA_FRAME_BYTES or len(records) == 1:
            box.append([connector, worker, time, blob])
            return 1
        pieces = -(-len(blob) // DATA_FRAME_BYTES)
        step = -(-len(records) // pieces)
        for start in range(0, len(records), step):
            box.append([connector, worker, time, self.codec.encode_records(records[start : start + step])])
        return -(-len(records) // step)

    def flush(self, hold: bool = False, settle: bool = False) -> None:
        """Send each peer its data, and the accumulated progress batch to every peer: inside
        the peer's first DATA frame, or as a frame of its own.

        ``hold``: the process is still busy (it will flush again within a time slice), so the
        progress batch may stay behind if the accumulator finds it safe to hold
        (`ProgressAccumulator.may_hold`) and it has not been held for `HOLD_SECONDS` yet: the
        updates of the next slices join it, and peers get one round where they would have got
        several. ``settle``: the process is out of work; a batch that may be held and whose
        every retirement is of a pointstamp something else in this view still holds back
        stays behind too (`ProgressAccumulator.waits_on_others`; busy, such a batch may also
        stay longer than `HOLD_SECONDS`), until that something retires here or
        `SETTLE_SECONDS` pass: a consumer that took its peers' records at several moments
        tells them once (`docs/progress.md`). Data is never held."""
        progress = self._progress_to_send(hold, settle)
        for p, box in self.outboxes.items():
            if box:
                self.outboxes[p] = []
                first = progress  # rides in this peer's first frame
                start = size = 0
                for i, message in enumerate(box):
                    n = len(message[3])
                    if size + n > DATA_FRAME_BYTES and i > start:
                        self._send_data(p, box[start:i], first)
                        first = None
                        start, size = i, 0
                    size += n
                self._send_data(p, box[start:] if start else box, first)
            elif progress is not None:
                self.transport.send(p, b"\x92" + _PROGRESS + progress)
                self.progress_bytes_sent += len(progress) + 2
                self.progress_frames_sent += 1

    def _progress_to_send(self, hold: bool, settle: bool) -> bytes | None:
        """The encoded progress batch this flush sends, or None (nothing to send, or held)."""
        out = self.progress_out
        self.waiting = False
        if not out:
            return None
        limit = None
        if (hold or settle) and self._waits_on_others(out):
            limit, self.waiting = SETTLE_SECONDS, settle
        elif hold and out.may_hold():
            limit = HOLD_SECONDS
        if limit is not None:
            now = _time.perf_counter()
            if self._held_since is None:
                self._held_since = now
            left = limit - (now - self._held_since)
            if left > 0:
                self.progress_holds += 1
                if self.waiting:
                    self.progress_waits += 1
                    if self._wait_timer is None:
                        self._wait_timer = asyncio.get_running_loop().call_later(left, self._wait_over)
                return None
            self.waiting = False
        self._held_since = None
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        self.records_since_release = False
        changes = [[t, loc, d] for (t, loc), d in out.release()]
        return self._pack(changes) if changes else None

    def _waits_on_others(self, out: ProgressAccumulator) -> bool:
        """`ProgressAccumulator.waits_on_others`, asked again only when the buffer or the
        tracker's frontier changed (what `ProgressTracker.blocked` answers from)."""
        version, seen, answer = self._waits
        if version != out.version or seen != self.tracker.version:
            answer = out.waits_on_others(self._held_back)
            self._waits = (out.version, self.tracker.version, answer)
        return answer

    def _held_back(self, p: Pointstamp) -> bool:
        return self.tracker.blocked(p, exclude_self=True)

    def _wait_over(self) -> None:
        """A settled hold reached `SETTLE_SECONDS`: wake the scheduler, whose flush releases it."""
        self._wait_timer = None
        self.host.wake()

    def _send_data(self, peer: int, messages: list[list[Any]], progress: bytes | None) -> None:
        body = self._pack(messages)
        if progress is None:
            payload = b"\x92" + _DATA + body  # [DATA, messages]
            self.records_since_release = True
        else:
            payload = b"\x93" + _DATA + body + progress  # [DATA, messages, changes]
            self.progress_bytes_sent += len(progress) + 2
            self.progress_frames_sent += 1
            self.progress_piggybacked += 1
        self.transport.send(peer, payload)
        self.data_bytes_sent += len(payload)
        self.data_frames_sent += 1

    @property
    def holding(self) -> bool:
        """Whether progress is held back from the peers (`flush`)."""
        return bool(self.progress_out)

    @property
    def sending_data(self) -> bool:
        """Whether the next flush sends records to some peer."""
        return any(self.outboxes.values())

    def pending_output(self) -> bool:
        return bool(self.progress_out) or any(self.outboxes.values())

    def send_bye(self) -> None:
        if not self.bye_sent:
            self.flush()
            payload = msgpack.packb([BYE])
            for p in self.peers:
                self.transport.send(p, payload)
            self.bye_sent = True

    def send_checkpoint_decision(self, epoch: int, take: bool) -> None:
        """Process 0 tells the others whether the epoch at the fence is checkpointed (time policy)."""
        payload = msgpack.packb([CHECKPOINT, epoch, take])
        for p in self.peers:
            self.transport.send(p, payload)

    def send_sample(self, sample: Any) -> None:
        """Send this process's console sample to process 0 (the console gathers there)."""
        self.transport.send(0, msgpack.packb([SAMPLE, sample]))

    def send_error(self, err: BaseException) -> None:
        """Tell every peer that the computation failed, so they stop within moments. A peer's
        failure is passed on as it came, so every process names the same origin even if it
        sees this process's connection close first."""
        if self.error_sent:
            return
        self.error_sent = True
        if isinstance(err, PeerError):
            info = err.info
        else:
            info = {
                "process": self.transport.process_index,
                "stage": getattr(err, "stage", None),
                "worker": getattr(err, "worker", None),
                "time": str(getattr(err, "time", "")) or None,
                "kind": type(err.__cause__ or err).__name__,
                "message": str(err),
            }
        payload = msgpack.packb([ERROR, info])
        for p in self.peers:
            try:
                self.transport.send(p, payload)
            except Exception:
                pass

    async def wait_byes(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._all_byes.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # Receiving ----------------------------------------------------------------------------------
    def _on_frame(self, peer: int, payload: bytes) -> None:
        rt = self.host
        try:
            frame = msgpack.unpackb(payload, use_list=False, strict_map_key=False)
            kind = frame[0]
            if kind == PROGRESS:
                self.progress_bytes_received += len(payload)
                self._arrive(frame[1])
            elif kind == DATA:
                self.data_bytes_received += len(payload)
                self.records_since_release = True
                self._check_budget(payload, frame[1])
                if len(frame) > 2:  # the sender's progress, made before this data was sent
                    self._arrive(frame[2])
                for connector, worker, time, blob in frame[1]:
                    rt.deliver_remote(connector, worker, _from_flat(tuple(time)), self.codec.decode_records(blob))
                if not self.reading_paused and (
                    rt.backlog() > RECEIVE_HIGH or rt.queued_records() > RECEIVE_HIGH_RECORDS
                ):
                    self.reading_paused = True
                    self.transport.pause_reading()
            elif kind == ERROR:
                info = frame[1]
                rt.fail(PeerError(f"process {info['process']} failed: {info['message']}", info))
            elif kind == CHECKPOINT:
                rt.checkpoint_decided(int(frame[1]), bool(frame[2]))
            elif kind == SAMPLE:
                if self.on_sample is not None:
                    self.on_sample(peer, frame[1])
                return  # a sample changes nothing the scheduler waits for
            elif kind == BYE:
                self.byes.add(peer)
                if len(self.byes) == len(self.peers):
                    self._all_byes.set()
            else:
                raise FrameError(f"unknown frame kind {kind!r}")
        except TimelyError as exc:
            rt.fail(_from_peer(peer, exc))
        except Exception as exc:
            rt.fail(_from_peer(peer, FrameError(f"malformed frame: {type(exc).__name__}: {exc}")))
        rt.wake()

    def _arrive(self, changes: Any) -> None:
        """Merge a peer's atomic batch into ``arrived``."""
        arrived = self.arrived
        for t, loc, d in changes:
            key = (_from_flat(tuple(t)), loc)
            arrived[key] = arrived.get(key, 0) + d

    def _check_budget(self, payload: bytes, messages: Any) -> None:
        budget = self.decode_budget
        if len(payload) * OBJECT_BYTES <= budget:
            return  # nothing in it could take more: every value takes at least a byte
        spent = len(payload)
        for message in messages:
            blob = message[3]
            if type(blob) is bytes:
                spent += decoded_size_bound(blob, budget - spent)
            if spent > budget:
                raise FrameError(
                    f"refusing a DATA frame of {len(payload)} bytes: decoded, it could take more than the decode "
                    f"budget of {budget / (1 << 20):g} MiB (TIMELY_DECODE_BUDGET)"
                )

    def _on_lost(self, peer: int, reason: BaseException) -> None:
        if peer in self.byes:
            return
        info = {
            "process": peer,
            "stage": None,
            "worker": None,
            "time": None,
            "kind": type(reason).__name__,
            "message": f"lost the connection to process {peer}: {reason}",
        }
        if isinstance(reason, SilentPeerError):
            info["message"] = f"process {peer} fell silent: {reason}"
        me = self.transport.process_index
        self.host.fail(PeerError(f"process {me}: {info['message']}", info))

    def maybe_resume_reading(self) -> None:
        host = self.host
        if self.reading_paused and host.backlog() <= RECEIVE_LOW and host.queued_records() <= RECEIVE_LOW_RECORDS:
            self.reading_paused = False
            self.transport.resume_reading()

    def statistics(self) -> dict[str, int]:
        return {
            "data_bytes_sent": self.data_bytes_sent,
            "data_frames_sent": self.data_frames_sent,
            "progress_bytes_sent": self.progress_bytes_sent,
            "progress_frames_sent": self.progress_frames_sent,
            "progress_piggybacked": self.progress_piggybacked,
            "progress_holds": self.progress_holds,
            "progress_waits": self.progress_waits,
            "data_bytes_received": self.data_bytes_received,
            "progress_bytes_received": self.progress_bytes_received,
        }


def _from_peer(peer: int, exc: TimelyError) -> TimelyError:
    if isinstance(exc, PeerError):
        return exc
    info = {
        "process": peer,
        "stage": None,
        "worker": None,
        "time": None,
        "kind": type(exc).__name__,
        "message": f"bad frame from process {peer}: {exc}",
    }
    err = PeerError(f"bad frame from process {peer}: {exc}", info)
    err.__cause__ = exc
    return err
