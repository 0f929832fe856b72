"""linq: differential dataflow on timely (McSherry et al., CIDR 2013; the Naiad TR).

A `Collection` is a multiset that changes over lattice times. Feed an input collection
additions and retractions epoch by epoch; LINQ-style operators (select, where, join,
group_by, min, distinct, fixed_point, ...) compute new collections; an output reports the
*changes* to a result after each epoch, doing work proportional to what changed, through
any number of nested loops.

    def build(scope):
        edges = linq.new_input(scope, "edges")
        labels = linq.connected_components(edges.collection)
        return edges, linq.CollectionOutput(labels)

Everything here is built on `timely`'s public API; a collection becomes a plain stream of
``(record, time, diff)`` triples (`Collection.to_stream`) and back (`Collection.from_stream`),
so a user's own `timely.Vertex` can sit between two operators, also inside a loop.
"""

from .._hash import stable_hash
from ._arrange import Arranged
from ._columns import preload as _preload_columns
from ._columns._functions import columns
from ._errors import OperatorError
from ._io import CollectionInput, CollectionOutput, ColumnOutput, new_input
from ._lattice import Lattice
from .algorithms import (
    connected_components,
    connected_components_figure3,
    prioritized_connected_components,
    shortest_paths,
    strongly_connected_components,
)
from .collection import Collection
from .propagate import load_loops as _load_propagate_loops

__all__ = [
    "Arranged",
    "Collection",
    "CollectionInput",
    "CollectionOutput",
    "ColumnOutput",
    "Lattice",
    "OperatorError",
    "columns",
    "connected_components",
    "connected_components_figure3",
    "new_input",
    "preload",
    "prioritized_connected_components",
    "shortest_paths",
    "stable_hash",
    "strongly_connected_components",
]


def preload() -> float:
    """Load linq's compiled loops now, not at the first large array; the seconds it took (0 if
    they were loaded). A program that will meet large arrays calls it at start-up (in several
    processes each would otherwise stop at its own moment); it also makes the tier policy
    eager (`_columns.preload`)."""
    return _preload_columns() + _load_propagate_loops()
