"""libs/pregel: Pregel vertex programs on timely (Malewicz et al., SIGMOD 2010; Naiad §4.2).

    from timely_libs import pregel

    def compute(vertex, messages):           # HashMin connected components
        smallest = min([vertex.value, *messages])
        if vertex.superstep == 0 or smallest < vertex.value:
            vertex.value = smallest
            vertex.send_to_all_neighbors(smallest)
        vertex.vote_to_halt()

    labels = pregel.pregel(pregel.Program(compute, combine=min), edges, vertices)

One superstep per iteration of a timely loop; messages, aggregator values and graph mutations
travel on the loop's feedback edges, and a notification is the barrier between supersteps.
Built on timely's public API only. See docs/pregel.md.
"""

from . import programs
from ._aggregators import Aggregator, Max, Min, Sum
from ._array_engine import ArrayProgram, ArrayStep
from ._dataflow import SuperstepReport, pregel
from ._errors import PregelError
from ._program import MISSING, Master
from ._vertex_engine import PregelVertex, Program

__all__ = [
    "MISSING",
    "Aggregator",
    "ArrayProgram",
    "ArrayStep",
    "Master",
    "Max",
    "Min",
    "PregelError",
    "PregelVertex",
    "Program",
    "Sum",
    "SuperstepReport",
    "pregel",
    "programs",
]
