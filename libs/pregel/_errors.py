"""The one error type of libs/pregel."""

from __future__ import annotations

import timely

__all__ = ["PregelError"]


class PregelError(timely.LibraryError):
    """A Pregel program went wrong: its compute raised, it messaged a vertex that does not exist
    (with ``on_missing_vertex="error"``), it sent what cannot cross the network, or its input
    contradicts itself. The message names the vertex and the superstep.

    Raised inside a timely vertex, it reaches the caller as `timely.VertexError` (text included,
    this error chained as ``__cause__``).
    """
