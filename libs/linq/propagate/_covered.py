"""Which staged keys a step may skip: those whose last evaluation already covered the step.

An evaluation of a key at ``(L, x)`` gives its labels along line ``L`` from ``x`` on
(`_least`), from its history as it then is, and stages the key at the joins of ``(L, x)``
with its rows off ``L`` (`Propagate._evaluate`'s ``later``). So a key staged at ``(L, y)``
(an earlier evaluation met one of its rows on ``L``) needs no evaluation there when its
latest evaluation, on any line, was on ``L`` at a position ``x <= y``: nothing of its
history has changed since (a change of its proposals is evaluated where it lands, or is
checked to move no label on a line holding every row, `Propagate._touched`; its labels
change only when it is evaluated), so the labels from ``y`` on are already right, and what
the evaluation at ``(L, y)`` would stage off ``L`` is at or after what the covering one
staged, on the same lines, still pending. A key staged *after* its evaluation was staged by
a later evaluation, on another line: it is not covered. Two evaluations on one line in a
row cover from the earlier position (the later one was for a change at its own position).

In a round of SCC about two thirds of the keys staged this way are covered: each outer
iteration's proposals reach a node at a few positions of its line, and the joins with its
rows of the previous iteration stage it at the same line again.

One int64 stamp per key, ``line << 32 | position`` (-1: none), in an array indexed by the key
(node ids are small ints); keys outside it are never skipped. Two compiled calls a step, no
Python value per key.
"""

from __future__ import annotations

import numpy as np

from .._columns import POLICY

__all__ = ["MAX_KEYS", "Covered"]

MAX_KEYS = 1 << 22
"""Keys from 0 to this many have a stamp (32 MiB at most); others are always evaluated."""
SHIFT = 32
"""Positions below ``1 << SHIFT`` are stamped; an evaluation at a later one clears its keys'."""
NONE = -1


class Covered:
    """Each key's latest evaluation, as a stamp ``line << 32 | position``, and `uncovered`,
    the staged keys it does not cover. Kept in compiled loops (`_compiled.stamp_keys`,
    `uncovered_keys`): one call a step, whatever the keys. While the policy keeps the
    compiled loops out, it forgets every stamp and skips nothing."""

    __slots__ = ("lines", "numbered", "stamps")

    def __init__(self) -> None:
        self.stamps = np.full(0, NONE, dtype=np.int64)
        self.lines: dict[tuple[int, ...], int] = {}
        """A number per line (outer time coordinates) evaluated since the stamps were last forgotten."""
        self.numbered = 0
        """Line numbers given so far: one is never given twice, so a forgotten line's stamps cover nothing."""

    def evaluated(self, keys: np.ndarray, t: tuple[int, ...]) -> None:
        """``keys`` (sorted, distinct) evaluated at ``t``: their stamp is ``t``'s, or stays at an
        earlier position of ``t``'s line if their latest evaluation was there."""
        if not len(keys):
            return
        x = t[-1]
        if not POLICY.eager or not 0 <= x < 1 << SHIFT or self.numbered >= 1 << (62 - SHIFT):
            self.lines.clear()  # these keys' stamps would be stale: forget all
            return
        from ._compiled import stamp_keys  # loaded: the policy is eager

        top = int(keys[-1])
        if top >= MAX_KEYS:  # the greatest key with a stamp
            below = int(np.searchsorted(keys, MAX_KEYS))
            top = int(keys[below - 1]) if below else -1
        if top >= len(self.stamps):
            # an eighth to spare, not double: the first answer's first steps reach the greatest
            # node already, and SCC keeps two of these (8 MiB each at a million nodes)
            grown = np.full(min(MAX_KEYS, top + 1 + top // 8), NONE, dtype=np.int64)
            grown[: len(self.stamps)] = self.stamps
            self.stamps = grown
        line = self.lines.get(t[:-1])
        if line is None:
            line = self.lines[t[:-1]] = self.numbered
            self.numbered += 1
        stamp_keys(np.ascontiguousarray(keys), self.stamps, line << SHIFT, x)

    def uncovered(self, keys: np.ndarray, t: tuple[int, ...]) -> np.ndarray:
        """``keys`` less those whose latest evaluation was on ``t``'s line at or before ``t``."""
        line = self.lines.get(t[:-1])
        if line is None or not len(keys) or not 0 <= t[-1] < 1 << SHIFT:
            return keys
        from ._compiled import uncovered_keys  # stamped: the policy was eager

        return uncovered_keys(np.ascontiguousarray(keys), self.stamps, line << SHIFT, t[-1])
