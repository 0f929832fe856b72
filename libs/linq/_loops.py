"""Loops over collections: `fixed_point` (TR §5.1.1) and `prioritize` (TR §5.1.2).

fixed_point. Inside a new `LoopContext`, the loop variable ``x`` is the input entered at
iteration 0 plus what the feedback edge brings back: ``body(x) - input``, one iteration
later. So ``x`` is the input at iteration 0 and ``body(x_{i-1})`` at iteration ``i``, and a
difference travels round the loop only while something still changes. The result leaves
the loop summed over iterations and consolidated (TR §5.1.1: the egress "accumulates all
differences"): the fixed point's net change per outer time, without the intermediate
differences of every iteration that would otherwise flood the operators after the loop.
The feedback is consolidated too (the TR's "tests for cancellation of records"): ``+r``
and ``-r`` at one time cancel there instead of travelling round the loop for ever. With
``max_iterations`` the feedback drops what would start iteration ``max_iterations``; the
loop then stops with ``body^max_iterations(input)``.

prioritize (TR §2.6, §5.1.2). A new loop coordinate holds the priority round. Each record
enters at round ``priority(record)`` and leaves again at the next round; the body's result
goes round the feedback edge to the next round. So round ``p`` runs the body on the result
of round ``p - 1`` plus the records of priority ``p``: with a `fixed_point` body, each round
starts from the fixed point of the rounds before, and the last round's result is the answer
(for CC: small labels flood the graph first and lock nodes in).

That is the TR's *lexicographic* order on (priority, iteration): everything done at an
earlier priority is visible at every later one, whatever the iteration. It is realised by
the graph rather than by comparing times lexicographically, because timely's capabilities
follow the product order: a reduce working at (priority 1, iteration 5) could not send a
correction to (priority 3, iteration 0), a time the product order puts neither before nor
after its own. Round ``p + 1`` instead begins only when round ``p``'s result has gone round,
which progress tracking already guarantees; all times stay in the product order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timely import LoopContext, ScopeError

from .collection import Collection, _lattices, _scope_name, operator_name


def _checked(full: str, loop: LoopContext, result: Any) -> Collection:
    if not isinstance(result, Collection):
        raise TypeError(f"{full}: the loop body must return a Collection, got {result!r}")
    if result.scope is not loop:
        raise ScopeError(
            f"{full}: the loop body returned a collection of {_scope_name(result.scope)}, but it must "
            f"return one of the loop it was given ({_scope_name(loop)})"
        )
    return result


def _open(collection: Collection, kind: str, name: str | None) -> tuple[str, LoopContext, Collection]:
    """A new loop around ``collection``'s scope, its name, and ``collection`` entered into it."""
    full = operator_name(collection.scope, kind, name)
    loop = LoopContext(collection.scope, full)
    lattice = collection.lattice.enter()
    _lattices[loop] = lattice
    return full, loop, Collection._of(loop.ingress(collection._blocks, "enter"), lattice)


def fixed_point(
    collection: Collection,
    body: Callable[[Collection], Collection],
    max_iterations: int | None,
    name: str | None,
) -> Collection:
    full, loop, entered = _open(collection, "fixed_point", name)
    feedback = loop.feedback("next", max_iterations)
    x = Collection._of(loop.concat("x", [entered._blocks, feedback.stream]), entered.lattice)
    result = _checked(full, loop, body(x))
    step = result.concat(entered.negate(name="undo_input"), name="step")
    # a difference and its opposite must cancel before going round, or they would go round for ever
    feedback.connect(step.consolidate(name="cancel")._blocks)
    return result.leave(name="result").consolidate(name="limit")


def prioritize(
    collection: Collection,
    priority: Callable[[Any], int],
    body: Callable[[Collection], Collection],
    name: str | None,
) -> Collection:
    full, loop, entered = _open(collection, "prioritize", name)
    arrive = entered._delayed(priority, 0, "arrive")
    depart = entered.negate(name="negate")._delayed(priority, 1, "depart")
    previous = loop.feedback("previous_round")
    x = Collection._of(loop.concat("x", [arrive._blocks, depart._blocks, previous.stream]), entered.lattice)
    result = _checked(full, loop, body(x))
    previous.connect(result.consolidate(name="cancel")._blocks)
    return result.leave(name="result").consolidate(name="limit")
