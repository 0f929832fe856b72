"""Checkpoints and recovery inside one process (Naiad §3.4), without stopping the world.

The *fence* is the epoch of the next checkpoint, the same in every process (``k-1``,
``2k-1``, ...). While it stands, the scheduler delivers nothing at a later epoch: messages
and notifications past it wait. Progress tracking still tells when the fence epoch is
complete here, since nothing later can result in an earlier time; then the process saves
every vertex's state, the notification requests pending at later epochs, and the messages
its callbacks sent past the fence (they are in flight and no replay would make them again),
and lifts the fence to the next checkpoint epoch. Processes reach the point at different
moments; each saves its own part, and a checkpoint counts once every part is on disk.

Inputs log each sealed epoch. A computation started on a directory with a complete
checkpoint restores each vertex (re-routing `KeyedState` pieces when the worker count
changed), re-registers the notification requests, re-sends the carried messages, replays
the logged epochs after the checkpoint, and the program feeds from ``Input.epoch`` on.
"""

from __future__ import annotations

import logging
import math
import time as _time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint import Checkpoints
from ..checkpoint._store import (
    RESUME,
    SEAL,
    CheckpointError,
    CheckpointInfo,
    InputLog,
    append_frame,
    collector_paused,
    log_processes,
    prune,
    read_delivered,
    read_log,
    write_delivered,
    write_part,
)
from ..errors import VertexError
from ..timestamp import _from_flat
from ..vertex import TOP, KeyedState, Vertex

if TYPE_CHECKING:
    from .process import InputBinding, ProcessRuntime, SubscriptionBinding, VertexRuntime

log = logging.getLogger("timely")


ReplayPlan = dict[str, tuple[list[int], dict[int, list[Any]], int | None]]
"""Per input: the old processes whose logs this process replays, their records by epoch, and
the epoch the input resumes at (None: every log says it was closed)."""


def plan_replay(policy: Checkpoints, inputs: list[str], process: int, processes: int, start: int) -> ReplayPlan:
    """Read the input logs and decide what this process replays. Every process reads before it
    joins the others and none writes a log before all have joined, so all read the same logs
    and agree on where each input resumes: the earliest epoch some log has not sealed."""
    plan: ReplayPlan = {}
    root = policy.path
    for name in inputs:
        states = {j: read_log(root, j, name) for j in log_processes(root, name)}
        positions = [s.position for s in states.values() if s is not None and not s.retired]
        resume_at: float = float(start)
        if positions:
            resume_at = max(min(math.inf if p is None else p for p in positions), start)
        mine = [j for j, s in states.items() if s is not None and j % processes == process]
        by_epoch: dict[int, list[Any]] = {}
        for j in mine:
            state = states[j]
            assert state is not None
            for epoch, records in state.records.items():
                if start <= epoch < resume_at:
                    by_epoch.setdefault(epoch, []).extend(records)
        plan[name] = (mine, by_epoch, None if resume_at == math.inf else int(resume_at))
    return plan


class Recovery:
    """One process's side of fault tolerance: the fence, the parts it writes, its input logs
    and delivery marks, and restoring from a checkpoint."""

    def __init__(
        self, runtime: ProcessRuntime, policy: Checkpoints, resume: CheckpointInfo | None, plan: ReplayPlan
    ) -> None:
        self.rt = runtime
        self.plan = plan
        self.policy = policy
        self.root: Path = policy.path
        self.resume = resume
        self.start_epoch = resume.epoch + 1 if resume is not None else 0
        """The epoch every input starts at: the one after the checkpoint."""
        self.carried: list[tuple[int, int, int, tuple[int, ...], list[Any]]] = []
        """(stage, worker, port, time, records) sent past the fence by callbacks before it."""
        self.logs: dict[str, InputLog] = {}
        self.delivered: dict[str, int] = {}
        self.checkpoints = 0
        self.checkpoint_seconds = 0.0
        self.last_checkpoint: dict[str, Any] = {}
        self.resumed: dict[str, Any] = {}
        self.decisions: dict[int, bool] = {}
        self.last_taken = _time.monotonic()
        k = policy.every_epochs
        if policy.every_seconds is not None:
            runtime.fence = self.start_epoch  # every epoch is a candidate; process 0 decides
        else:
            runtime.fence = None if k is None else self.start_epoch + k - 1
        for sub in runtime.subscriptions:
            self.delivered[sub.name] = self._delivered(sub)

    # Taking checkpoints ------------------------------------------------------------------------
    def carry(self, ctx: VertexRuntime, port: int, time: tuple[int, ...], records: list[Any]) -> None:
        self.carried.append((ctx.stage, ctx.worker, port, tuple(time), list(records)))

    def at_fence(self) -> bool:
        """The fence epoch is complete here: checkpoint (or, under a time policy, do what process
        0 decided for this epoch). False while that decision has not arrived."""
        epoch = self.rt.fence
        assert epoch is not None
        if self.policy.every_seconds is None:
            self.take()
            return True
        link = self.rt.link
        if self.rt.process_index == 0:
            take = _time.monotonic() - self.last_taken >= self.policy.every_seconds
            if link is not None:
                link.send_checkpoint_decision(epoch, take)
        elif epoch in self.decisions:
            take = self.decisions.pop(epoch)
        else:
            return False
        if take:
            self.take()
        else:
            self._lift(epoch)
        return True

    def decided(self, epoch: int, take: bool) -> None:
        """Process 0's decision for a fence epoch (time policy)."""
        self.decisions[epoch] = take

    def _lift(self, epoch: int) -> None:
        """Move the fence past ``epoch`` and release what waited behind it."""
        rt = self.rt
        k = self.policy.every_epochs
        rt.fence = epoch + (k if k is not None else 1)
        self.carried = [c for c in self.carried if c[3][0] > rt.fence]
        for w in rt.workers:
            if w.fenced:
                rt._held_back -= w.requeue(w.fenced)
                w.fenced.clear()

    def take(self) -> None:
        """Save this process's part of the checkpoint at the fence epoch, then lift the fence."""
        rt = self.rt
        epoch = rt.fence
        assert epoch is not None
        with collector_paused():
            self._take(epoch)

    def _take(self, epoch: int) -> None:
        rt = self.rt
        started = _time.perf_counter()
        vertices: list[tuple[str, int, int, Any]] = []
        notifications: list[tuple[str, int, tuple[int, ...], tuple[int, ...] | None]] = []
        for w in rt.workers:
            for ctx in w.vertices:
                vertex = ctx.vertex
                if type(vertex).checkpoint is Vertex.checkpoint:
                    continue
                try:
                    state = vertex.checkpoint()
                except BaseException as exc:
                    err = VertexError(
                        f"stage {ctx.stage_name!r} (worker {ctx.worker}) raised {type(exc).__name__} in checkpoint "
                        f"at epoch {epoch}: {exc}",
                        ctx.stage_name,
                        ctx.worker,
                        epoch,
                        "checkpoint",
                    )
                    raise err from exc
                if state is None:
                    continue
                if isinstance(state, KeyedState):
                    vertices.append((ctx.stage_name, ctx.worker, 1, [tuple(p) for p in state.pieces]))
                else:
                    vertices.append((ctx.stage_name, ctx.worker, 0, state))
            for guarantee, stage, cap in w.notifications:
                name = w.vertices[stage].stage_name
                notifications.append((name, w.index, tuple(guarantee), None if cap is TOP else tuple(cap)))
        names = [s.name for s in rt.graph.stages]
        header = {
            "epoch": epoch,
            "process": rt.process_index,
            "processes": rt.processes,
            "workers": rt.workers_per_process,
            "fingerprint": rt.graph.fingerprint(),
            "inputs": [(b.name, b.closed) for b in rt.inputs],
        }
        body = {
            "vertices": vertices,
            "notifications": notifications,
            "carried": [(names[s], w, port, t, recs) for s, w, port, t, recs in self.carried],
        }
        size = write_part(self.root, epoch, rt.process_index, rt.processes, header, body, self.policy.fsync)
        for binding in rt.inputs:
            log_ = self.logs.get(binding.name)
            if log_ is not None and not binding.closed:
                log_.rotate(binding.epoch)
        prune(self.root, rt.process_index, self.policy.keep)
        self._lift(epoch)
        seconds = _time.perf_counter() - started
        self.last_taken = _time.monotonic()
        self.checkpoints += 1
        self.checkpoint_seconds += seconds
        self.last_checkpoint = {"epoch": epoch, "bytes": size, "seconds": seconds, "vertices": len(vertices)}
        log.info(
            "process %d: checkpoint at epoch %d written (%d vertex states, %.1f MB, %.3f s)",
            rt.process_index,
            epoch,
            len(vertices),
            size / 1e6,
            seconds,
        )

    # Restoring ---------------------------------------------------------------------------------
    def restore(self) -> None:
        """Give every vertex its state back and re-register what was pending (before any callback)."""
        if self.resume is not None:
            with collector_paused():
                self._restore(self.resume)

    def _restore(self, info: CheckpointInfo) -> None:
        started = _time.perf_counter()
        rt = self.rt
        same = info.processes == rt.processes and all(p.header["workers"] == rt.workers_per_process for p in info.parts)
        mine = [info.parts[rt.process_index].body()] if same else [p.body() for p in info.parts]
        local = {w.index: w for w in rt.workers}
        by_stage: dict[str, list[tuple[int, int, Any]]] = {}
        for part in mine:
            for name, worker, keyed, state in part["vertices"]:
                by_stage.setdefault(name, []).append((worker, keyed, state))
        restored = 0
        for name, states in by_stage.items():
            spec = rt.graph.by_name.get(name)
            if spec is None:
                raise CheckpointError(f"the checkpoint has state for stage {name!r}, which this dataflow lacks")
            if same:
                for worker, keyed, state in states:
                    ctx = local[worker].vertices[spec.index]
                    ctx.vertex.restore(KeyedState(list(state)) if keyed else state)
                    restored += 1
                continue
            plain = [w for w, keyed, _ in states if not keyed]
            if plain:
                raise CheckpointError(
                    f"stage {name!r} keeps state that is not keyed (its checkpoint() does not return a "
                    f"KeyedState), so it cannot be resumed on {rt.peers} workers; the checkpoint at epoch "
                    f"{info.epoch} has {info.processes} process(es) of {info.parts[0].header['workers']} worker(s)"
                )
            pieces: dict[int, list[tuple[int, Any]]] = {w: [] for w in local}
            for _, _, state in states:
                for route, piece in state:
                    target = route % rt.peers
                    if target in pieces:
                        pieces[target].append((route, piece))
            for worker, got in pieces.items():
                local[worker].vertices[spec.index].vertex.restore(KeyedState(got))
                restored += 1
        # notification requests, then messages in flight past the checkpoint
        for part in mine:
            for name, worker, guarantee, cap in part["notifications"]:
                for ctx in self._owners(name, worker, same):
                    time = _from_flat(tuple(guarantee))
                    ctx.requests.append((time, None if cap is None else _from_flat(tuple(cap))))
                    rt._register_notifications(ctx)
            for name, worker, port, time, records in part["carried"]:
                owners = self._owners(name, worker, same)
                if not owners or (not same and worker % rt.peers not in local):
                    continue
                ctx = owners[0] if same else local[worker % rt.peers].vertices[owners[0].stage]
                ctx.buffers[port].setdefault(_from_flat(tuple(time)), []).extend(records)
                rt._flush(ctx)
        for binding in rt.inputs:
            flags = [closed for p in info.parts for name, closed in p.header["inputs"] if name == binding.name]
            if flags and all(flags):
                binding.close()
        self.resumed = {
            "epoch": info.epoch,
            "processes_before": info.processes,
            "vertices": restored,
            "restore_seconds": _time.perf_counter() - started,
        }

    def _owners(self, name: str, worker: int, same: bool) -> list[VertexRuntime]:
        """The local instances that take an old instance's notification requests: itself when
        nothing changed; every local instance of the stage after a change of worker count."""
        spec = self.rt.graph.by_name.get(name)
        if spec is None:
            return []
        if same:
            return [w.vertices[spec.index] for w in self.rt.workers if w.index == worker]
        return [w.vertices[spec.index] for w in self.rt.workers]

    # Inputs and outputs ------------------------------------------------------------------------
    def replay(self) -> None:
        """Open the input logs and re-send the logged epochs after the checkpoint; the inputs are
        then at the first epoch no log sealed everywhere, where the program takes over."""
        rt = self.rt
        me, processes = rt.process_index, rt.processes
        start = self.start_epoch
        replayed_records = 0
        replayed_epochs = 0
        for binding in rt.inputs:
            mine, by_epoch, until = self.plan[binding.name]
            if binding.closed:
                continue
            if self.policy.log_inputs and until is not None:
                log_ = InputLog(self.root, me, binding.name, self.policy.fsync)
                log_.rotate(start)
                log_.write((RESUME, until, False))
                self.logs[binding.name] = log_
                for j in mine:
                    if j >= processes:  # its process is gone: retire its log
                        append_frame(self.root, j, binding.name, (RESUME, until, True))
            binding.logging = False
            for epoch in sorted(by_epoch):
                if epoch > binding.epoch:
                    binding.advance_to(epoch)
                binding.send(by_epoch[epoch])
                replayed_records += len(by_epoch[epoch])
                replayed_epochs += 1
            if until is None:
                binding.close()
            elif until > binding.epoch:
                binding.advance_to(until)
            binding.logging = binding.name in self.logs
        if self.resume is not None or replayed_epochs:
            self.resumed.update(replayed_epochs=replayed_epochs, replayed_records=replayed_records)
            log.info(
                "process %d: resumed from %s; replayed %d logged epoch(s), %d records",
                me,
                f"the checkpoint at epoch {self.resume.epoch}" if self.resume else "the start (no checkpoint yet)",
                replayed_epochs,
                replayed_records,
            )

    def _delivered(self, sub: SubscriptionBinding) -> int:
        rt = self.rt
        before = self.resume.processes if self.resume is not None else rt.processes
        if before == rt.processes:
            return read_delivered(self.root, rt.process_index, sub.name)
        return min(read_delivered(self.root, j, sub.name) for j in range(before))

    def seal(self, binding: InputBinding, epoch: int, records: list[Any], next_epoch: int | None) -> None:
        self.logs[binding.name].write((SEAL, epoch, records, next_epoch))

    def mark_delivered(self, sub: SubscriptionBinding, epoch: int) -> None:
        self.delivered[sub.name] = epoch
        write_delivered(self.root, self.rt.process_index, sub.name, epoch)

    def close(self) -> None:
        """Close the input logs (the computation has ended, one way or another)."""
        for log_ in self.logs.values():
            log_.close()
        for binding in self.rt.inputs:
            binding.logging = False

    def statistics(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "checkpoint_seconds": self.checkpoint_seconds,
            "last_checkpoint": dict(self.last_checkpoint),
            "resumed": dict(self.resumed),
            "next_checkpoint_epoch": self.rt.fence,
        }
