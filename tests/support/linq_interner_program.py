"""A stream whose string keys are ever new, as a program for `Mode.run`
(tests/linq/test_interner.py): what the interner holds must stay bounded while the answers
stay exact.

Epoch ``e`` inserts `POSTS` posts ``(user, tag)`` whose users and tags were never seen before
and retracts the posts of epoch ``e - 2`` (a sliding window). The query keys, joins, counts,
takes minima and distinct values of those strings; every process feeds the posts ``i`` with
``i % processes == process_index`` and reports, per epoch, its output's changes and how many
values its interner held once the epoch had passed.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import timely
from tests.support import linq_reference as ref
from tests.support.linq_in_flight import reported, share
from tests.support.modes import Run
from timely_libs import linq
from timely_libs.linq._columns import _codes

EPOCHS = 80
POSTS = 100
WINDOW = 2
SWEEP_MIN = 500
"""The interner's sweep threshold in this program (the default, 65,536, would need a far longer stream)."""
first, second = itemgetter(0), itemgetter(1)


def posts(epoch: int) -> list[tuple[str, str]]:
    return [(f"user-{epoch}-{i}", f"#tag-{epoch}-{i % 7}") for i in range(POSTS)]


def changes(epoch: int) -> list[tuple[tuple[str, str], int]]:
    out = [(p, 1) for p in posts(epoch)]
    if epoch >= WINDOW:
        out += [(p, -1) for p in posts(epoch - WINDOW)]
    return out


def query(window: linq.Collection) -> linq.Collection:
    per_user = window.count(first).select(lambda r: ("count", r))
    tags = window.select(second).distinct().select(lambda t: ("tag", t))
    least = window.min(second, first).select(lambda r: ("min", r))
    peers = window.join(window, second, second, lambda a, b: (a[0], b[0])).where(lambda p: p[0] < p[1])
    pairs = peers.count_all().select(lambda n: ("pairs", n))
    return per_user.concat(tags, least, pairs)


def reference(window: ref.Multiset) -> ref.Multiset:
    live = [p for p, n in window.items() for _ in range(n)]
    by_tag: dict[str, list[str]] = {}
    for user, tag in live:
        by_tag.setdefault(tag, []).append(user)
    npairs = sum(1 for users in by_tag.values() for a in users for b in users if a < b)
    return ref.concat(
        ref.select(ref.count(window, first), lambda r: ("count", r)),
        {("tag", t): 1 for t in by_tag},
        {("min", (min(users), t)): 1 for t, users in by_tag.items()},
        {("pairs", npairs): 1} if live else {},
    )


@dataclass
class InternerRun(Run):
    process_index: int
    processes: int
    window: linq.CollectionInput
    output: linq.CollectionOutput
    held: list[int] = field(default_factory=list)
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        self.window.update(share(changes(epoch), self.process_index, self.processes))
        self.window.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [self.output.probe]

    def observe(self, epoch: int) -> None:
        self.held.append(_codes.held_values())

    def result(self, comp: Any = None) -> dict[str, Any]:
        return {
            "changes": reported(self.output),
            "held": self.held,
        }


def builder() -> Callable[[timely.Scope], InternerRun]:
    _codes.SWEEP_MIN = SWEEP_MIN
    gc.collect()  # operators of earlier computations in this process: gone, and their codes with them
    _codes.release_unused(force=True)

    def build(scope: timely.Scope) -> InternerRun:
        window = linq.new_input(scope, "posts")
        output = linq.CollectionOutput(query(window.collection), name="result")
        return InternerRun(scope.process_index, scope.processes, window, output)

    return build
