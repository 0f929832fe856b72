"""Proposals between `Propagate`'s workers: kept when they are the worker's own, and one
message per line for the rest, whatever the times.

With peers, every loop iteration of a round goes round timely's loop, and what a worker pays
for it besides its evaluation is mostly per message: the feedback vertex, the exchange, a
frame to the peer, a pointstamp's progress and a callback at the receiver. Two things cut
the messages without changing what is evaluated, or when:

- **Its own nodes' proposals stay with the worker**, staged at the next iteration, as they
  are with one worker (the feedback would bring them back to it at that very time).
- **One message per line.** A join proposes at several times at once: an edge change meets
  every time of its source's label history, a label change evaluated along a line meets the
  edges at each of its line times. Those bound for a peer travel together, one message per
  *line* (the outer coordinates), at the line's least time, each row's place on the line in
  a column of its own (its offset from the message's time), as differential dataflow's
  exchange sends updates with their own times under one capability.

Why a row is evaluated no earlier than it would have been on its own: the message's time is
at or before each of its rows' times (same outer coordinates, least innermost one), so while
it is in flight it holds the receiver's frontier at or before each of them, as the row's own
message would have; the receiver stages each row at its own time and asks for a notification
there, which the message's capability allows (a time at or after it). A staged row is read at
its time only (`Propagate._process`), so arriving early changes nothing evaluated before it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .._columns import Block, block_of_codes

__all__ = ["LineMessage", "line_messages"]

Time = tuple[int, ...]
Proposals = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Destination nodes, labels (codes) and diffs."""
LineMessage = tuple[Time, Block, np.ndarray]
"""A message's time, its block and each row's destination worker."""


def line_messages(pieces: list[tuple[Time, Proposals, np.ndarray]]) -> Iterator[LineMessage]:
    """The messages for ``(time, proposals, destination workers)`` pieces: one per line, at its
    least time, of ``(dst, label, offset)`` rows (every message has the offsets, zeros for a line
    of one time: blocks that meet in one delivery must agree in shape). The receiver stages a
    row at the message's time plus its offset (`Propagate.on_recv`)."""
    lines: dict[Time, list[tuple[Time, Proposals, np.ndarray]]] = {}
    for piece in pieces:
        lines.setdefault(piece[0][:-1], []).append(piece)
    for prefix, line in lines.items():
        if len(line) == 1:
            u, (dst, label, diffs), dest = line[0]
            yield u, block_of_codes([dst, label, np.zeros(len(dst), dtype=np.int64)], 3, diffs), dest
            continue
        first = min(u[-1] for u, _, _ in line)
        dst = np.concatenate([p[1][0] for p in line])
        label = np.concatenate([p[1][1] for p in line])
        diffs = np.concatenate([p[1][2] for p in line])
        offsets = np.concatenate([np.full(len(p[1][0]), p[0][-1] - first, dtype=np.int64) for p in line])
        dest = np.concatenate([p[2] for p in line])
        yield (*prefix, first), block_of_codes([dst, label, offsets], 3, diffs), dest
