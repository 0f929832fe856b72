"""What goes wrong inside linq's operators."""

from __future__ import annotations

__all__ = ["OperatorError"]


class OperatorError(Exception):
    """A user function (key, selector, reducer, ...) raised, or returned something unusable.

    The message names the operator and the record. It is deliberately not a `TimelyError`:
    the runtime wraps it in a `timely.VertexError` that adds the stage, worker and time.
    """
