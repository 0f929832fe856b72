"""What a process holds back of its progress updates before broadcasting them (Naiad §3.3,
"local accumulation").

A process applies its own updates to its own tracker at once, but it need not tell its
peers about each one: while it keeps working, the updates its callbacks make can be merged
into one buffer and broadcast together, so that a loop iteration costs its peers one round
of progress instead of one per time slice. Holding updates is safe only under a condition:

- **a positive update ``+p`` may be held while the buffer also holds a negative ``-q`` with
  ``q != p`` and ``q`` could-result-in ``p``.** The ``-q`` is not broadcast either, so every
  peer still counts ``q`` (or whatever covers it): ``p`` is covered in every view although
  no view knows of it yet. The records the process sends meanwhile may reach a peer before
  the ``+p`` that describes them; the peer's count at ``p`` then dips below zero, which the
  protocol already allows (a consumer's ``-1`` overtaking a producer's ``+1``).
- **a negative update may always be held**: it only keeps views more conservative (it may
  delay them, never put them ahead).

Every callback's batch satisfies the first condition by itself (a vertex sends or requests
only at times at or after the message, notification or capability it consumes), and merging
batches keeps it: a ``-q`` that a later ``+q`` cancels hands its cover on, by transitivity,
to whatever covered that ``+q``. What breaks it is an input's records (covered by the input's
capability, which is not in the buffer): then `may_hold` is false and the runtime broadcasts.

A buffer is released whole, positives first, and a process's releases go out in order on
FIFO channels, so its peers see the union of its callbacks' batches in the order they were
made — a merged atomic batch, as if those callbacks had run back to back. When to release
(before the process goes idle, after a time budget) is the runtime's choice: holding is
about safety, releasing about liveness. `docs/progress.md` has the argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .reachability import Pointstamp, Reachability

__all__ = ["ProgressAccumulator"]

MAX_CHECKED = 64
"""Buffers with more entries than this are not checked entry by entry (`may_hold` is false):
the check costs positives times negatives, and a buffer that large is worth sending anyway."""


class ProgressAccumulator:
    """One process's progress updates not yet broadcast, merged by pointstamp."""

    def __init__(self, reachability: Reachability) -> None:
        self.reach = reachability
        self.buffer: dict[Pointstamp, int] = {}
        """Pointstamp -> summed delta of the updates held (zero entries are dropped on release)."""
        self._verdict: bool | None = None
        """`may_hold`'s answer for the buffer as it is (None: not asked since it changed)."""
        self.version = 0
        """Bumped whenever the buffer changes, so that a caller may keep an answer about it."""

    def __bool__(self) -> bool:
        return bool(self.buffer)

    def add(self, batch: Mapping[Pointstamp, int]) -> None:
        """Merge one atomic batch of updates into the buffer."""
        if not batch:
            return
        buffer = self.buffer
        for key, delta in batch.items():
            buffer[key] = buffer.get(key, 0) + delta
        self._verdict = None
        self.version += 1

    def may_hold(self) -> bool:
        """Whether every positive update in the buffer is covered by a negative one in it
        (a pointstamp that could result in it, other than itself): the buffer may be kept
        back without any peer's view moving ahead of the truth."""
        verdict = self._verdict
        if verdict is None:
            verdict = self._verdict = self._covered()
        return verdict

    def _covered(self) -> bool:
        buffer = self.buffer
        if len(buffer) > MAX_CHECKED:
            return False
        negatives = [p for p, d in buffer.items() if d < 0]
        cri = self.reach.could_result_in
        for p, d in buffer.items():
            if d > 0 and not any(cri(q, p) for q in negatives):
                return False  # q != p holds: a pointstamp's deltas are summed into one entry
        return True

    def waits_on_others(self, held_back: Callable[[Pointstamp], bool]) -> bool:
        """Whether the buffer may be held (`may_hold`) and every negative update in it retires a
        pointstamp that ``held_back`` says something else in this process's view still holds
        back. Until that something retires, releasing the buffer moves no frontier in this
        view, and in a peer's view at most one hop sooner than releasing it then would: a round
        that, in a loop whose records come from several peers at several moments, is paid
        once per peer (`docs/progress.md`)."""
        buffer = self.buffer
        if len(buffer) > MAX_CHECKED:
            return False
        for p, d in buffer.items():
            if d < 0 and not held_back(p):
                return False
        return self.may_hold()

    def release(self) -> list[tuple[Pointstamp, int]]:
        """Empty the buffer: its nonzero updates, positives first (a peer applies them as one
        atomic batch, but a reader of the wire should never see a count fall before it rises)."""
        buffer, self.buffer = self.buffer, {}
        self._verdict = None
        self.version += 1
        changes = [(p, d) for p, d in buffer.items() if d > 0]
        changes.extend((p, d) for p, d in buffer.items() if d < 0)
        return changes
