"""Fault tolerance (Naiad §3.4): consistent checkpoints, input logs and recovery.

Give `execute` a `Checkpoints` policy (or run under ``timely run --checkpoint-dir``) and the
runtime, every ``every_epochs`` epochs, saves each vertex's `Vertex.checkpoint` state once
the frontier has passed the epoch, logs every input's sealed epochs, and remembers the last
epoch each subscription delivered. A computation started on a directory that holds a
complete checkpoint resumes from it: vertices are restored, inputs replay their logged
epochs, and the program goes on feeding from ``Input.epoch``. See docs/fault-tolerance.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ._store import CheckpointError, CheckpointInfo, latest_checkpoint, verify_delivery

__all__ = ["Checkpoints", "CheckpointError", "CheckpointInfo", "latest_checkpoint", "verify_delivery"]


@dataclass(frozen=True)
class Checkpoints:
    """Where and how often a computation checkpoints.

    ``every_epochs``: take a checkpoint after epochs ``k-1, 2k-1, ...`` (None: never; the
    inputs are still logged when ``log_inputs``, and a directory's existing checkpoint is
    still resumed from). ``every_seconds``, when given, replaces it: after each epoch,
    process 0 decides whether ``t`` seconds have passed since the last checkpoint and tells
    the others; every epoch boundary is then a fence, so epochs no longer overlap (use
    ``every_epochs`` for pipelined streams). ``keep``: complete checkpoints kept (older ones
    and the log segments only they need are deleted). ``fsync``: force parts and log frames
    to disk, so a checkpoint survives the machine, not only the process (log frames by a
    thread, while the computation goes on; a part is written once the logs it relies on are
    on disk). A directory holds
    one computation: started on a directory with state, a computation resumes from it.
    """

    directory: str | os.PathLike[str]
    every_epochs: int | None = 10
    every_seconds: float | None = None
    log_inputs: bool = True
    keep: int = 2
    fsync: bool = True

    def __post_init__(self) -> None:
        if self.every_seconds is not None:
            if self.every_seconds <= 0:
                raise ValueError("every_seconds must be positive")
            object.__setattr__(self, "every_epochs", None)
        if self.every_epochs is not None and self.every_epochs < 1:
            raise ValueError("every_epochs must be at least 1 (or None for no checkpoints)")
        if self.keep < 1:
            raise ValueError("keep must be at least 1")

    @property
    def path(self) -> Path:
        return Path(self.directory)
