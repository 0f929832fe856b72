"""The one error type of libs/bloom."""

from __future__ import annotations

import timely

__all__ = ["BloomError"]


class BloomError(timely.LibraryError):
    """A Bloom program is malformed (a rule in the wrong scope, an unmarked function where a
    monotone one is required, mixed lattice types) or a user function failed on a record.
    The message names the operator (or collection) and, when there is one, the record.

    Raised inside a timely vertex, it reaches the caller as `timely.VertexError` (text included,
    this error chained as ``__cause__``); raised while building, it reaches the caller as itself.
    """
