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

Why over 400 lines in one module: taking a checkpoint and restoring one must agree on
every detail of what a part holds, and are read side by side; the files live in
`timely.checkpoint`.
"""

from __future__ import annotations

import logging
import math
import time as _time
from pathlib import Path
from typing import Any, NamedTuple

from ..checkpoint import Checkpoints
from ..checkpoint._store import (
    RESUME,
    SEAL,
    CheckpointError,
    CheckpointInfo,
    InputLog,
    append_frame,
    clear_completion,
    collector_paused,
    log_processes,
    prune,
    read_delivered,
    read_log,
    write_completion,
    write_delivered,
    write_part,
)
from ..errors import VertexError
from ..timestamp import _from_flat
from ..vertex import KeyedState, RoutedPiece, Vertex
from .bindings import Bindings, SubscriptionBinding
from .cluster import ClusterLink
from .fence import CheckpointFence
from .scheduler import Scheduler
from .worker import VertexRuntime

log = logging.getLogger("timely")


class InputReplay(NamedTuple):
    """What one process replays of one input after a restart."""

    logs: list[int]
    """The old processes whose logs this process replays."""
    records: dict[int, list[Any]]
    """Their records by epoch, from the start epoch up to ``resume_at``."""
    resume_at: int | None
    """The epoch the program takes the input over at; None: every log says it was closed."""
    closed_at: int
    """When closed: the latest epoch a log says its input was closed at. Every process's input
    is closed there, so a program that feeds ``range(inp.epoch, last)`` feeds nothing, whichever
    old logs (if any) its process replays."""


ReplayPlan = dict[str, InputReplay]


def plan_replay(policy: Checkpoints, inputs: list[str], process: int, processes: int, start: int) -> ReplayPlan:
    """Read the input logs and decide what this process replays. Every process reads before it
    joins the others and none writes a log before all have joined, so all read the same logs
    and agree on where each input resumes: the earliest epoch some log has not sealed.

    A process of the logged run that has no log (it died, or its run was stopped, between the
    join and its first frame) sealed nothing: its input is at the start. Each segment says how
    many processes its run had, so its absence is seen; without that, the other processes' logs
    alone could say the input was closed, and its records would be lost."""
    plan: ReplayPlan = {}
    root = policy.path
    for name in inputs:
        states = {j: read_log(root, j, name, start) for j in log_processes(root, name)}
        ran = max((s.processes for s in states.values() if s is not None), default=0)
        positions = [s.position for s in states.values() if s is not None and not s.retired]
        positions += [start for j in range(ran) if states.get(j) is None]
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
        closed_at = max([start, *(s.closed_at for s in states.values() if s is not None and s.closed_at is not None)])
        plan[name] = InputReplay(mine, by_epoch, None if resume_at == math.inf else int(resume_at), closed_at)
    return plan


class Recovery:
    """One process's side of fault tolerance: the parts it writes, its input logs and delivery
    marks, and restoring from a checkpoint. It works through the public methods of the fence
    (`CheckpointFence.lift`, `carried`), the scheduler (the instances, their pending
    notifications, `request_notification`, `send`) and the bindings (`log_to`,
    `track_deliveries`, ``close``)."""

    def __init__(
        self,
        policy: Checkpoints,
        resume: CheckpointInfo | None,
        plan: ReplayPlan,
        fence: CheckpointFence,
        scheduler: Scheduler,
        bindings: Bindings,
        link: ClusterLink | None,
    ) -> None:
        self.plan = plan
        self.policy = policy
        self.root: Path = policy.path
        self.resume = resume
        self.fence = fence
        self.scheduler = scheduler
        self.bindings = bindings
        self.link = link
        self.process_index = scheduler.process_index
        self.processes = scheduler.processes
        self.start_epoch = resume.epoch + 1 if resume is not None else 0
        """The epoch every input starts at: the one after the checkpoint."""
        self.logs: dict[str, InputLog] = {}
        self.checkpoints = 0
        self.checkpoint_seconds = 0.0
        self.last_checkpoint: dict[str, Any] = {}
        self.resumed: dict[str, Any] = {}
        self.decisions: dict[int, bool] = {}
        self.last_taken = _time.monotonic()
        for sub in bindings.subscriptions:
            sub.track_deliveries(self._delivered(sub), self._marker(sub))

    # Taking checkpoints ------------------------------------------------------------------------
    def at_fence(self) -> bool:
        """The fence epoch is complete here: checkpoint (or, under a time policy, do what process
        0 decided for this epoch), then lift the fence. False while that decision has not arrived."""
        epoch = self.fence.epoch
        assert epoch is not None
        if self.policy.every_seconds is None:
            self.take()
            return True
        link = self.link
        if self.process_index == 0:
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
            self.fence.lift()
        return True

    def decided(self, epoch: int, take: bool) -> None:
        """Process 0's decision for a fence epoch (time policy)."""
        self.decisions[epoch] = take

    def take(self) -> None:
        """Save this process's part of the checkpoint at the fence epoch, then lift the fence."""
        epoch = self.fence.epoch
        assert epoch is not None
        with collector_paused():
            self._take(epoch)

    def _take(self, epoch: int) -> None:
        started = _time.perf_counter()
        scheduler = self.scheduler
        graph = scheduler.graph
        vertices = [state for instance in scheduler.instances() if (state := _state_of(instance, epoch)) is not None]
        notifications = [
            (instance.stage_name, instance.worker, tuple(guarantee), None if cap is None else tuple(cap))
            for instance, (guarantee, cap) in scheduler.notification_requests()
        ]
        names = [s.name for s in graph.stages]
        inputs = self.bindings.inputs
        header = {
            "epoch": epoch,
            "process": self.process_index,
            "processes": self.processes,
            "workers": scheduler.workers_per_process,
            "fingerprint": graph.fingerprint(),
            # As of the checkpoint's epoch, not of this moment: an input that ran ahead of a slow
            # consumer may be closed by now, with epochs after this checkpoint still to replay.
            "inputs_closed_at": [(b.name, b.epoch if b.closed and b.epoch <= epoch else None) for b in inputs],
        }
        body = {
            "vertices": vertices,
            "notifications": notifications,
            "carried": [(names[s], w, port, t, recs) for s, w, port, t, recs in self.fence.carried()],
        }
        for input_log in self.logs.values():
            input_log.sync()  # the part relies on the logs up to its epoch: they reach the disk first
        size = write_part(self.root, epoch, self.process_index, self.processes, header, body, self.policy.fsync)
        for binding in inputs:
            log_ = self.logs.get(binding.name)
            if log_ is not None and not binding.closed:
                log_.rotate(binding.epoch)
        prune(self.root, self.process_index, self.policy.keep)
        self.fence.lift()
        seconds = _time.perf_counter() - started
        self.last_taken = _time.monotonic()
        self.checkpoints += 1
        self.checkpoint_seconds += seconds
        self.last_checkpoint = {"epoch": epoch, "bytes": size, "seconds": seconds, "vertices": len(vertices)}
        log.info(
            "process %d: checkpoint at epoch %d written (%d vertex states, %.1f MB, %.3f s)",
            self.process_index,
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
        scheduler = self.scheduler
        same = info.processes == self.processes and all(
            p.header["workers"] == scheduler.workers_per_process for p in info.parts
        )
        mine = [info.parts[self.process_index].body()] if same else [p.body() for p in info.parts]
        restored = self._restore_states(info, mine, same)
        for part in mine:
            self._restore_notifications(part["notifications"], same)
            self._restore_carried(part["carried"], same)
        for binding in self.bindings.inputs:
            # Closed only if every process's input had closed by the checkpoint's epoch: then no
            # epoch after it exists to replay. (Older parts said whether the input was closed when
            # the part was written, which is not about the epoch; they are not believed.)
            closed_at = [
                at for p in info.parts for name, at in p.header.get("inputs_closed_at", ()) if name == binding.name
            ]
            if len(closed_at) == len(info.parts) and all(at is not None and at <= info.epoch for at in closed_at):
                binding.close()
        self.resumed = {
            "epoch": info.epoch,
            "processes_before": info.processes,
            "vertices": restored,
            "restore_seconds": _time.perf_counter() - started,
        }

    def _restore_states(self, info: CheckpointInfo, parts: list[dict[str, Any]], same: bool) -> int:
        """Give each vertex its saved state: its own when nothing changed, else the keyed pieces
        routed to it. The number of vertices restored."""
        by_stage: dict[str, list[tuple[int, int, Any]]] = {}
        for part in parts:
            for name, worker, keyed, state in part["vertices"]:
                by_stage.setdefault(name, []).append((worker, keyed, state))
        restored = 0
        for name, states in by_stage.items():
            spec = self.scheduler.graph.by_name.get(name)
            if spec is None:
                raise CheckpointError(f"the checkpoint has state for stage {name!r}, which this dataflow lacks")
            if same:
                for worker, keyed, state in states:
                    instance = self.scheduler.instance(spec.index, worker)
                    assert instance is not None
                    instance.vertex.restore(KeyedState(list(state)) if keyed else state)
                    restored += 1
            else:
                restored += self._reroute(info, name, spec.index, states)
        return restored

    def _reroute(self, info: CheckpointInfo, name: str, stage: int, states: list[tuple[int, int, Any]]) -> int:
        """Restore a stage's keyed states on another number of workers: each piece goes to the
        worker its routing key now maps to (a `RoutedPiece` is split among them). The number of
        local vertices restored."""
        peers = self.scheduler.peers
        if any(not keyed for _, keyed, _ in states):
            raise CheckpointError(
                f"stage {name!r} keeps state that is not keyed (its checkpoint() does not return a "
                f"KeyedState), so it cannot be resumed on {peers} workers; the checkpoint at epoch "
                f"{info.epoch} has {info.processes} process(es) of {info.parts[0].header['workers']} worker(s)"
            )
        local = self.scheduler.instances_of(stage)
        pieces = deal_pieces([state for _, _, state in states], peers, [instance.worker for instance in local])
        for instance in local:
            instance.vertex.restore(KeyedState(pieces[instance.worker]))
        return len(local)

    def _restore_notifications(self, saved: list[Any], same: bool) -> None:
        """Re-request the notifications pending at the checkpoint."""
        for name, worker, guarantee, cap in saved:
            for instance in self._owners(name, worker, same):
                capability = None if cap is None else _from_flat(tuple(cap))
                self.scheduler.request_notification(instance, _from_flat(tuple(guarantee)), capability)

    def _restore_carried(self, saved: list[Any], same: bool) -> None:
        """Send again what callbacks had sent past the checkpoint: it was in flight."""
        scheduler = self.scheduler
        for name, worker, port, time, records in saved:
            owners = self._owners(name, worker, same)
            if not owners:
                continue
            if same:
                instance: VertexRuntime | None = owners[0]
            else:
                instance = scheduler.instance(owners[0].stage, worker % scheduler.peers)
            if instance is not None:
                scheduler.send(instance, port, _from_flat(tuple(time)), records)

    def _owners(self, name: str, worker: int, same: bool) -> list[VertexRuntime]:
        """The local instances that take an old instance's notification requests: itself when
        nothing changed; every local instance of the stage after a change of worker count."""
        spec = self.scheduler.graph.by_name.get(name)
        if spec is None:
            return []
        if same:
            instance = self.scheduler.instance(spec.index, worker)
            return [] if instance is None else [instance]
        return self.scheduler.instances_of(spec.index)

    # Inputs and outputs ------------------------------------------------------------------------
    def replay(self) -> None:
        """Open the input logs and re-send the logged epochs after the checkpoint; the inputs are
        then at the first epoch no log sealed everywhere, where the program takes over."""
        me, processes = self.process_index, self.processes
        start = self.start_epoch
        clear_completion(self.root, me)
        replayed_records = 0
        replayed_epochs = 0
        for binding in self.bindings.inputs:
            mine, by_epoch, until, closed_at = self.plan[binding.name]
            if binding.closed:  # closed by the checkpoint's epoch: nothing after it to replay
                continue
            if self.policy.log_inputs and until is not None:
                log_ = InputLog(self.root, me, binding.name, self.policy.fsync, processes)
                log_.rotate(start)
                log_.write((RESUME, until, False))
                self.logs[binding.name] = log_
                for j in mine:
                    if j >= processes:  # its process is gone: retire its log
                        append_frame(self.root, j, binding.name, (RESUME, until, True), processes)
            binding.log_to(None)
            for epoch in sorted(by_epoch):
                if epoch > binding.epoch:
                    binding.advance_to(epoch)
                binding.send(by_epoch[epoch])
                replayed_records += len(by_epoch[epoch])
                replayed_epochs += 1
            if until is None:
                if closed_at > binding.epoch:
                    binding.advance_to(closed_at)
                binding.close()
            elif until > binding.epoch:
                binding.advance_to(until)
            kept = self.logs.get(binding.name)
            binding.log_to(None if kept is None else _sealer(kept))
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
        before = self.resume.processes if self.resume is not None else self.processes
        if before == self.processes:
            return read_delivered(self.root, self.process_index, sub.name)
        return min(read_delivered(self.root, j, sub.name) for j in range(before))

    def _marker(self, sub: SubscriptionBinding) -> Any:
        root, me, name = self.root, self.process_index, sub.name

        def mark(epoch: int) -> None:
            try:
                write_delivered(root, me, name, epoch)
            except OSError as e:  # the runtime's own write, not the subscriber's: say so
                raise CheckpointError(
                    f"process {me}: cannot record that subscription {name!r} delivered epoch {epoch} "
                    f"(under {root}): {e}"
                ) from e

        return mark

    def completed(self) -> None:
        """The computation ran to its end here: record where each input ended and what each
        subscription delivered, for `timely.checkpoint.verify_delivery`."""
        for input_log in self.logs.values():
            input_log.sync()
        write_completion(
            self.root,
            self.process_index,
            {
                "processes": self.processes,
                "inputs": {b.name: b.epoch if b.closed else None for b in self.bindings.inputs},
                "delivered": {s.name: s.delivered for s in self.bindings.subscriptions},
            },
        )

    def close(self) -> None:
        """Close the input logs (the computation has ended, one way or another)."""
        for log_ in self.logs.values():
            log_.close()
        for binding in self.bindings.inputs:
            binding.log_to(None)

    def statistics(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "checkpoint_seconds": self.checkpoint_seconds,
            "last_checkpoint": dict(self.last_checkpoint),
            "resumed": dict(self.resumed),
            "next_checkpoint_epoch": self.fence.epoch,
        }


def _sealer(log_: InputLog) -> Any:
    """What an input calls as each epoch ends: a SEAL frame in its log."""

    def seal(epoch: int, records: list[Any], next_epoch: int | None) -> None:
        log_.write((SEAL, epoch, records, next_epoch))

    return seal


def _state_of(instance: VertexRuntime, epoch: int) -> tuple[str, int, int, Any] | None:
    """What a vertex's checkpoint() returned, as a part's entry: (stage, worker, keyed, state);
    None for a vertex that keeps no state."""
    vertex = instance.vertex
    if type(vertex).checkpoint is Vertex.checkpoint:
        return None
    try:
        state = vertex.checkpoint()
    except BaseException as exc:
        err = VertexError(
            f"stage {instance.stage_name!r} (worker {instance.worker}) raised {type(exc).__name__} in checkpoint "
            f"at epoch {epoch}: {exc}",
            instance.stage_name,
            instance.worker,
            epoch,
            "checkpoint",
        )
        raise err from exc
    if state is None:
        return None
    if isinstance(state, KeyedState):
        return (instance.stage_name, instance.worker, 1, [tuple(p) for p in state.pieces])
    return (instance.stage_name, instance.worker, 0, state)


def deal_pieces(
    states: list[list[tuple[int, Any]]], peers: int, workers: list[int]
) -> dict[int, list[tuple[int, Any]]]:
    """The keyed pieces of a stage's old instances (``states``) that each of ``workers`` gets
    among ``peers``: a piece goes to worker ``route % peers``, a `RoutedPiece` is split."""
    dealt: dict[int, list[tuple[int, Any]]] = {worker: [] for worker in workers}
    for state in states:
        for route, piece in state:
            if isinstance(piece, RoutedPiece):
                for target, part in piece.split(peers, dealt.keys()):
                    if target in dealt:
                        dealt[target].append((target, part))
                continue
            target = route % peers
            if target in dealt:
                dealt[target].append((route, piece))
    return dealt
