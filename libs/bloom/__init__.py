"""libs/bloom: asynchronous monotone programs on timely (Bloom and BloomL; Naiad §2.4, §4.2).

    from timely_libs import bloom

    def build(scope):
        edges = scope.new_input("edges")
        with bloom.Program(scope, "tc") as p:
            link = p.table("link", edges)
            path = p.table("path")
            path |= link
            path |= link.join(path, lambda l: l[1], lambda q: q[0], lambda l, q: (l[0], q[1]))
        return edges, p.output(path)

Rules over tables, scratch collections and channels run inside one timely loop with no
``notify_at``: nothing waits for an iteration to end, and the loop stops when nothing new is
derived. Lattices (`LMax`, `LMin`, `LBool`, `LSet`, `LMap`, `LCounter`, `LPair`) merge values
that grow; `aggregate` sends a value each time it grows, or, coordinated, once per complete
time. Functions marked `monotone` / `morphism` are forwarded without waiting; anything else
waits for a notification. ``Program(scope, name, timesteps=True)`` adds Bloom's timesteps
(``<+``, ``<-``, ``<+-``, ``<~``, tables with deletions, ``bootstrap``, ``periodic``), and
`programs` has Bud's KVS, cart, chat and two-phase commit. Built on timely's public API only.
See docs/bloom.md.
"""

from . import programs
from ._errors import BloomError
from ._functions import kind_of, monotone, morphism
from ._group import accum, argmax, argmin, average, count, group, maximum, minimum, total
from ._lattice import Lattice, LBag, LBool, LCounter, LMap, LMax, LMin, LPair, LPSet, LSet
from ._operators import aggregate, apply, distinct, join, not_in, when
from ._program import Collection, Expr, Keep, LatticeCollection, LatticeExpr, Output, Program

__all__ = [
    "BloomError",
    "Collection",
    "Expr",
    "Keep",
    "LBag",
    "LBool",
    "LCounter",
    "LMap",
    "LMax",
    "LMin",
    "LPSet",
    "LPair",
    "LSet",
    "Lattice",
    "LatticeCollection",
    "LatticeExpr",
    "Output",
    "Program",
    "accum",
    "aggregate",
    "apply",
    "argmax",
    "argmin",
    "average",
    "count",
    "distinct",
    "group",
    "join",
    "kind_of",
    "maximum",
    "minimum",
    "monotone",
    "morphism",
    "not_in",
    "programs",
    "total",
    "when",
]
