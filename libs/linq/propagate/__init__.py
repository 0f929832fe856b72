"""`propagate`: least labels along edges, the fused loop body under connected components,
strongly connected components and shortest paths (`linq.algorithms`).

The operator (`_operator.Propagate`), its evaluation of a node's labels along a line of times
(`_least`) and the compiled loops that serve only it (`_compiled`) live here, beside each
other and apart from the general kernels (`_columns`). It reads its arrangements through the
trace read interface (`_trace`: `matches`, `indexed`, `key_spans`, `latest`) and picks its
tiers by size through the one `POLICY`, as every stateful operator does.
"""

from __future__ import annotations

import sys
import time

from ._operator import Propagate, by_size, propagate

__all__ = ["Propagate", "by_size", "load_loops", "propagate"]


def load_loops() -> float:
    """Load propagate's compiled loops now (`linq.preload`); the seconds it took (0 if loaded)."""
    if f"{__name__}._compiled" in sys.modules and f"{__name__}._line" in sys.modules:
        return 0.0
    started = time.perf_counter()
    from . import _compiled, _line  # noqa: F401

    return time.perf_counter() - started
