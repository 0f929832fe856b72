"""What goes wrong inside linq's operators."""

from __future__ import annotations

import timely

__all__ = ["OperatorError"]


class OperatorError(timely.LibraryError):
    """A user function (key, selector, reducer, ...) raised, or returned something unusable.

    The message names the operator and the record. Like every `timely.LibraryError`, the
    runtime wraps it in a `timely.VertexError` that adds the stage, worker and time.
    """
