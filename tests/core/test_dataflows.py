"""Dataflows from the Naiad paper and loops, each checked against a plain-Python reference,
with one worker and with several."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest

import timely
from tests.support import TIMEOUT
from timely_examples.connected_components import components, reference_components


class DistinctCount(timely.Vertex):
    """Figure 4 of the Naiad paper: distinct records leave at once, counts at notification."""

    def __init__(self) -> None:
        self.counts: dict[timely.Timestamp, Counter[Any]] = {}

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        seen = self.counts.get(time)
        if seen is None:
            seen = self.counts[time] = Counter()
            self.notify_at(time)
        fresh = []
        for r in records:
            if r not in seen:
                fresh.append(r)
            seen[r] += 1
        self.send_by(self.outputs[0], fresh, time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[1], list(self.counts.pop(time).items()), time)


def distinct_count_dataflow(scope: timely.Scope) -> tuple[timely.Input, dict[str, dict[int, list[Any]]]]:
    words = scope.new_input("words")
    distinct, counts = words.stage("distinct_count", DistinctCount, outputs=2, exchange=lambda w: sum(map(ord, w)))
    out: dict[str, dict[int, list[Any]]] = {"distinct": {}, "counts": {}}
    distinct.subscribe(lambda t, b: out["distinct"].setdefault(t.epoch, []).extend(b))
    counts.subscribe(lambda t, b: out["counts"].setdefault(t.epoch, []).extend(b))
    return words, out


def test_distinct_count_matches_reference_per_epoch(workers: int) -> None:
    rng = random.Random(7)
    epochs = [[rng.choice("abcdefghij") for _ in range(rng.randrange(0, 400))] for _ in range(8)]
    with timely.execute(distinct_count_dataflow, workers=workers, timeout=TIMEOUT) as (comp, (words, out)):
        for e, batch in enumerate(epochs):  # several epochs in flight: nothing waits between them
            for i in range(0, len(batch), 37):
                words.send(batch[i : i + 37])
            words.advance_to(e + 1)
    for e, batch in enumerate(epochs):
        assert sorted(out["distinct"].get(e, [])) == sorted(set(batch))
        assert sorted(out["counts"].get(e, [])) == sorted(Counter(batch).items())


async def test_distinct_records_leave_before_the_epoch_completes(workers: int) -> None:
    """Distinct records are sent from on_recv, without waiting; counts only at notification."""
    seen: dict[str, list[tuple[int, Any]]] = {"distinct": [], "counts": []}

    def build(scope: timely.Scope) -> timely.Input:
        words = scope.new_input("words")
        distinct, counts = words.stage("distinct_count", DistinctCount, outputs=2, exchange=lambda w: ord(w[0]))
        distinct.inspect_batch("see_distinct", lambda t, b: seen["distinct"].extend((t.epoch, r) for r in b))
        counts.inspect_batch("see_counts", lambda t, b: seen["counts"].extend((t.epoch, r) for r in b))
        return words

    async with timely.execute_async(build, workers=workers, timeout=TIMEOUT) as (comp, words):
        words.send(["x", "y", "x"])
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(seen["distinct"]) == 2:
                break
        assert sorted(seen["distinct"]) == [(0, "x"), (0, "y")]
        assert seen["counts"] == []  # epoch 0 is still open: no counts yet
        words.advance_to(1)
        words.send(["y"])
    assert sorted(seen["counts"]) == [(0, ("x", 2)), (0, ("y", 1)), (1, ("y", 1))]


class Recorder(timely.Vertex):
    """Records every callback and fails if a message arrives at or before a notified time."""

    def __init__(self, log: list[tuple[str, str, int, timely.Timestamp]]) -> None:
        self.log = log
        self.notified: list[timely.Timestamp] = []
        self.requested: set[timely.Timestamp] = set()

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for t in self.notified:
            assert not time.less_equal(t), f"message at {time} after notification at {t}"
        self.log.append(("recv", self.stage_name, self.worker_index, time))
        if time not in self.requested:
            self.requested.add(time)
            self.notify_at(time)
        self.send_by(self.outputs[0], records, time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.notified.append(time)
        self.log.append(("notify", self.stage_name, self.worker_index, time))


def test_notifications_never_precede_messages_at_or_before_their_time(workers: int) -> None:
    rng = random.Random(3)
    log: list[tuple[str, str, int, timely.Timestamp]] = []

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("numbers")
        a = inp.stage("first", lambda: Recorder(log), exchange=lambda x: x)
        b = a.map("shuffle", lambda x: x * 7 + 1).stage("second", lambda: Recorder(log), exchange=lambda x: x // 3)
        b.probe()
        return inp

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
        epoch = 0
        for _ in range(200):
            if rng.random() < 0.2:
                epoch += rng.randrange(1, 3)
                inp.advance_to(epoch)
            inp.send([rng.randrange(1000) for _ in range(rng.randrange(1, 50))])
    # Recorder asserts the safety property itself; here: each (stage, worker, time) that
    # received data was notified exactly once, after its last message.
    received = {(s, w, t) for kind, s, w, t in log if kind == "recv"}
    notified = [(s, w, t) for kind, s, w, t in log if kind == "notify"]
    assert sorted(notified) == sorted(received)
    last_recv = {entry[1:]: i for i, entry in enumerate(log) if entry[0] == "recv"}
    for i, entry in enumerate(log):
        if entry[0] == "notify":
            assert last_recv[entry[1:]] < i


def test_loop_iterates_to_a_data_dependent_fixed_point(workers: int) -> None:
    g = nx.gnm_random_graph(120, 110, seed=5)
    with timely.execute(components, workers=workers, timeout=TIMEOUT) as (comp, (edges, best)):
        edges.send(list(g.edges()))
    expected = {n: min(c) for c in nx.connected_components(g) for n in c if g.degree(n) > 0}
    assert best == expected
    assert reference_components(list(g.edges())) == expected  # the example's own check agrees


class Countdown(timely.Vertex):
    """Inner-loop body: records (n, k) go round while k > 0; records the times it saw.

    Used by tests/support/dataflows.py's ``nested_loops`` case, which checks every timestamp against
    the paper's table (ingress appends 0, feedback increments, egress drops) in every mode."""

    def __init__(self, seen: list[tuple[Any, timely.Timestamp]]) -> None:
        self.seen = seen

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for r in records:
            self.seen.append((r, time))
        self.send_by(self.outputs[0], [(n, k - 1) for n, k in records if k > 0], time)
        self.send_by(self.outputs[1], [n for n, k in records if k == 0], time)


class IterationBarrier(timely.Vertex):
    """Counts what it gets per inner time and emits the count at notification (a per-iteration barrier)."""

    def __init__(self, log: list[tuple[timely.Timestamp, int]]) -> None:
        self.log = log
        self.counts: Counter[timely.Timestamp] = Counter()
        self.done: list[timely.Timestamp] = []

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for t in self.done:
            assert not time.less_equal(t), f"message at {time} after notification at {t}"
        if time not in self.counts:
            self.notify_at(time)
        self.counts[time] += len(records)
        self.send_by(self.outputs[0], [r - 1 for r in records if r > 1], time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.done.append(time)
        self.log.append((time, self.counts.pop(time)))


def barrier_in_nested_loops(log: list[tuple[timely.Timestamp, int]]) -> Callable[[timely.Scope], timely.Input]:
    """A dataflow whose input enters two nested loops, where an `IterationBarrier` (logging to
    ``log``) passes each record on, less one, to the next inner iteration until it reaches 1."""

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("n")
        outer = timely.LoopContext(scope, "outer")
        inner = timely.LoopContext(outer, "inner")
        back = inner.feedback("back")
        x = inner.ingress(outer.ingress(inp)).concat("in", back.stream)
        back.connect(x.stage("barrier", lambda: IterationBarrier(log), exchange=lambda r: r))
        return inp

    return build


def test_notifications_inside_nested_loops_see_every_message(workers: int) -> None:
    log: list[tuple[timely.Timestamp, int]] = []
    build = barrier_in_nested_loops(log)

    values = list(range(1, 30))
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
        inp.send(values)
    totals: Counter[int] = Counter()
    for t, n in log:
        assert t.epoch == 0 and t.counters[0] == 0
        totals[t.counters[1]] += n
    assert dict(totals) == {j: sum(1 for v in values if v > j) for j in range(max(values))}


def test_hundreds_of_epochs_in_flight_through_nested_loops_see_every_message(workers: int) -> None:
    """Every epoch sent without waiting for any: hundreds are open at once inside two loops, so
    the progress tracker keeps per-location frontiers and the barrier's notificator releases
    incomparable times out of order. Each notification must still see all its messages (the
    barrier asserts none arrives after), with the counts of a direct computation."""
    log: list[tuple[timely.Timestamp, int]] = []
    build = barrier_in_nested_loops(log)

    epochs = 300
    sent = {e: [e % 7 + 1, e % 3 + 1, 5] for e in range(epochs)}
    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
        for e in range(epochs):
            inp.send(sent[e])
            inp.advance_to(e + 1)
    got: Counter[tuple[int, int]] = Counter()
    for t, n in log:
        assert t.counters[0] == 0
        got[(t.epoch, t.counters[1])] += n
    expected = {(e, j): sum(1 for v in values if v > j) for e, values in sent.items() for j in range(max(values))}
    assert dict(got) == expected


@pytest.mark.parametrize("size", [0, 1, 5000])
def test_map_filter_flat_map_concat_exchange_match_python(workers: int, size: int) -> None:
    data = list(range(size))
    got: dict[str, list[Any]] = defaultdict(list)

    def build(scope: timely.Scope) -> timely.Input:
        inp = scope.new_input("xs")
        doubled = inp.map("double", lambda x: 2 * x)
        odd = inp.filter("odd", lambda x: x % 2 == 1)
        pairs = inp.flat_map("pairs", lambda x: [x, -x] if x % 3 == 0 else [])
        both = doubled.concat("both", odd).exchange("spread", lambda x: x * 31)
        both.subscribe(lambda t, b: got["both"].extend(b))
        pairs.inspect("look", lambda x: got["inspected"].append(x)).subscribe(lambda t, b: got["pairs"].extend(b))
        return inp

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, inp):
        inp.send(data)
    assert sorted(got["both"]) == sorted([2 * x for x in data] + [x for x in data if x % 2])
    expected_pairs = sorted(y for x in data if x % 3 == 0 for y in (x, -x))
    assert sorted(got["pairs"]) == expected_pairs
    assert sorted(got["inspected"]) == expected_pairs


def test_results_are_equal_with_one_and_several_workers() -> None:
    g = nx.gnm_random_graph(60, 50, seed=11)
    results = []
    for w in (1, 2, 4):
        with timely.execute(components, workers=w, timeout=TIMEOUT) as (comp, (edges, best)):
            edges.send(list(g.edges()))
        results.append(best)
    assert results[0] == results[1] == results[2]
