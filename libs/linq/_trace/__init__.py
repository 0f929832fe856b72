"""Arrangements: keyed differences sorted into batches (`Batch`), kept as a spine (`Spine`),
and read through one interface (`_reader`: descriptions, and vectorised reads of keys)."""

from ._batch import FEW_KEYS, Batch, Keys, Rows, concat_rows, le_time, lub_time, time_columns
from ._frontier import Antichain, Description, antichain, beyond
from ._reader import KeyIndex, count_changes, indexed, key_spans, latest, matches, matches_each
from ._spine import Spine

__all__ = [
    "FEW_KEYS",
    "Antichain",
    "KeyIndex",
    "Batch",
    "Description",
    "Keys",
    "Rows",
    "Spine",
    "antichain",
    "beyond",
    "concat_rows",
    "count_changes",
    "indexed",
    "key_spans",
    "latest",
    "le_time",
    "lub_time",
    "matches",
    "matches_each",
    "time_columns",
]
