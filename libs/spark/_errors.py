"""The one error the Spark bridge raises for what went wrong in Spark or in the computation."""

from __future__ import annotations

import timely

__all__ = ["SparkBridgeError"]


class SparkBridgeError(timely.LibraryError):
    """A timely computation run through Spark failed, or cannot run as asked (for example more
    timely processes than Spark has task slots). The message carries the timely error's text
    (the stage, worker and time that failed), so that it survives Spark's own wrapping."""
