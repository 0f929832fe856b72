"""Arrangements: keyed differences sorted into batches (`Batch`) and kept as a spine (`Spine`)."""

from ._batch import FEW_KEYS, Batch, Keys, Rows, concat_rows, le_time, lub_time, matches, matches_each, time_columns
from ._spine import Spine

__all__ = [
    "FEW_KEYS",
    "Batch",
    "Keys",
    "Rows",
    "Spine",
    "concat_rows",
    "le_time",
    "lub_time",
    "matches",
    "matches_each",
    "time_columns",
]
