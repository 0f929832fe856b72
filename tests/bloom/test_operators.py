"""libs/bloom's operators on plain timely streams: the asynchronous aggregate sends every
improvement and requests no notification, the coordinated one sends once per complete time;
records of an earlier epoch arriving late still reach that epoch's answer; not_in waits; and
mistakes are reported naming the operator and the record."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import bloom
from timely_libs.bloom import LMax, LSet


def _aggregate_run(coordinated: bool, workers: int) -> tuple[dict[int, list[Any]], int]:
    seen: dict[int, list[Any]] = {}

    def build(scope: timely.Scope) -> Any:
        values = scope.new_input("values")
        out = bloom.aggregate(values, "agg", lattice=LMax, coordinated=coordinated)
        out.subscribe(lambda t, records: seen.setdefault(t.epoch, []).extend(records))
        return values

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, values):
        values.send([("a", LMax(1)), ("b", LMax(5))])
        values.send([("a", LMax(3)), ("a", LMax(2)), ("b", LMax(4))])  # b does not grow
        values.advance_to(1)
        values.send([("a", LMax(2))])  # nothing new at epoch 1
        values.send([("b", LMax(9))])
    asked = sum(v.statistics().notifications_requested for v in comp.vertices("agg"))
    return seen, asked


def test_async_aggregate_sends_each_improvement_without_notifications(workers: int) -> None:
    seen, asked = _aggregate_run(False, workers)
    assert asked == 0
    assert max(v for k, v in seen[0] if k == "a") == LMax(3) and ("b", LMax(5)) in seen[0]
    assert ("b", LMax(4)) not in seen[0]  # what adds nothing is dropped
    assert seen[1] == [("b", LMax(9))]


def test_coordinated_aggregate_sends_one_final_value_per_key_and_time(workers: int) -> None:
    seen, asked = _aggregate_run(True, workers)
    assert asked > 0
    assert sorted(seen[0]) == [("a", LMax(3)), ("b", LMax(5))]
    assert seen[1] == [("b", LMax(9))]


def test_a_late_record_of_an_earlier_epoch_updates_the_later_epochs_too() -> None:
    """Epoch 1's votes arrive before epoch 0's; the threshold must still fire at both."""
    seen: dict[int, list[Any]] = {}
    order: list[int] = []

    @bloom.monotone
    def three(s: LSet) -> Any:
        return s.size().gt_eq(3)

    class Late(timely.Vertex):
        """Holds epoch 0's records until epoch 1's have gone (a slow path)."""

        def __init__(self) -> None:
            self.held: list[Any] = []

        def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
            if time.epoch == 0:
                self.held.extend(records)
                self.notify_at(time)  # messages go before notifications: epoch 1 overtakes
            else:
                self.send_by(self.outputs[0], records, time)

        def on_notify(self, time: timely.Timestamp) -> None:
            self.send_by(self.outputs[0], self.held, time)

    def build(scope: timely.Scope) -> Any:
        votes = scope.new_input("votes")
        late = votes.stage("late", Late).inspect_batch("order", lambda t, r: order.append(t.epoch))
        tally = bloom.aggregate(late, "tally")
        bloom.when(tally, three, "quorum").subscribe(lambda t, r: seen.setdefault(t.epoch, []).extend(r))
        return votes

    with timely.execute(build, timeout=TIMEOUT) as (comp, votes):
        votes.send([("r", LSet([1])), ("r", LSet([2]))])
        votes.advance_to(1)
        votes.send([("r", LSet([3]))])
    assert order == [1, 0]  # the scenario happened: epoch 1's vote went first
    assert seen == {1: ["r"]}  # {1, 2} at epoch 0 is short of three; {1, 2, 3} at epoch 1 is not


class _Late(timely.Vertex):
    """Holds epoch 0's records until a notification, so that later epochs' records overtake them."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if time.epoch == 0:
            self.held.extend(records)
            self.notify_at(time)
        else:
            self.send_by(self.outputs[0], records, time)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.send_by(self.outputs[0], self.held, time)


def test_a_join_sends_each_result_once_at_its_earliest_epoch(workers: int) -> None:
    """Many pairs give one result (``(a, c)`` through every ``b``); each join instance sends it
    once, at the earliest epoch both of some pair hold, also when a pair of an earlier epoch
    arrives after a later one (then it is sent again, at the earlier epoch). Checked against
    the nested loop over the facts of every epoch, and an unhashable result is still sent."""
    import random

    rng = random.Random(3)
    lefts = [[(rng.randrange(3), rng.randrange(8)) for _ in range(12)] for _ in range(3)]  # (a, b)
    rights = [[(rng.randrange(8), rng.randrange(3)) for _ in range(12)] for _ in range(3)]  # (b, c)
    sent: dict[int, list[Any]] = {}
    lists: list[Any] = []

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Input]:
        left, right = scope.new_input("left"), scope.new_input("right")
        late = left.stage("late", _Late)  # epoch 0's lefts come after epoch 1's and 2's
        out = bloom.join(late, right, itemgetter(1), itemgetter(0), lambda x, y: (x[0], y[1]), "paths")
        out.subscribe(lambda t, recs: sent.setdefault(t.epoch, []).extend(recs))
        as_lists = bloom.join(left, right, itemgetter(1), itemgetter(0), lambda x, y: [x[0], y[1]], "lists")
        as_lists.subscribe(lambda t, recs: lists.extend(recs))
        return left, right

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (left, right)):
        for e in range(3):
            left.send(lefts[e])
            right.send(rights[e])
            left.advance_to(e + 1)
            right.advance_to(e + 1)
    pairs = [
        (max(el, er), (a, c))
        for el in range(3)
        for er in range(3)
        for a, b in lefts[el]
        for b2, c in rights[er]
        if b == b2
    ]
    earliest: dict[Any, int] = {}
    for epoch, result in pairs:
        earliest[result] = min(epoch, earliest.get(result, epoch))
    got: dict[Any, int] = {}
    for epoch, results in sent.items():
        for result in results:
            got[result] = min(epoch, got.get(result, epoch))
    assert got == earliest
    assert set(sent[0]) & set(sent[1] + sent[2])  # sent at a later epoch, then at epoch 0 when it came
    assert len(pairs) > 3 * len(earliest)  # the scenario: most pairs repeat a result ...
    sends = sum(len(r) for r in sent.values())
    assert sends <= len(earliest) * workers * 3  # ... which is sent at most once per instance and epoch
    assert {tuple(x) for x in lists} == {r for _, r in pairs}


def test_not_in_waits_for_each_time_and_is_scratch(workers: int) -> None:
    seen: dict[int, set[Any]] = {}

    def build(scope: timely.Scope) -> Any:
        pos = scope.new_input("pos")
        neg = scope.new_input("neg")
        out = bloom.not_in(pos, neg, key=lambda r: r[0], name="minus")
        out.subscribe(lambda t, r: seen.setdefault(t.epoch, set()).update(r))
        return pos, neg

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (pos, neg)):
        pos.send([(1, "a"), (2, "b"), (3, "c")])
        neg.send([2])
        pos.advance_to(1)
        neg.advance_to(1)
        pos.send([(4, "d")])
        neg.send([3])
    assert seen[0] == {(1, "a"), (3, "c")}
    assert seen[1] == {(1, "a"), (4, "d")}  # the answer at epoch 1 in full; (3, "c") is negated now
    assert sum(v.statistics().notifications_requested for v in comp.vertices("minus")) > 0


def test_errors_name_the_operator_and_the_record() -> None:
    def build(scope: timely.Scope) -> Any:
        values = scope.new_input("values")
        bloom.aggregate(values, "maxes", lattice=LMax)
        return values

    with pytest.raises(timely.VertexError) as info:
        with timely.execute(build, timeout=TIMEOUT) as (comp, values):
            values.send([("k", LSet([1]))])
    assert isinstance(info.value.__cause__, bloom.BloomError)
    assert "aggregate 'maxes'" in str(info.value.__cause__) and "LSet" in str(info.value.__cause__)

    def nested(scope: timely.Scope) -> Any:
        outer = timely.LoopContext(scope, "outer")
        inner = timely.LoopContext(outer, "inner")
        s = inner.ingress(outer.ingress(scope.new_input("x")))
        bloom.distinct(s, "d")

    with pytest.raises(bloom.BloomError, match="distinct 'd'.*2 loops deep"):
        timely.execute(nested).__enter__()

    def stream_in_rule(scope: timely.Scope) -> Any:
        edges = scope.new_input("edges")
        with bloom.Program(scope, "p") as p:
            t = p.table("t")
            t |= edges  # type: ignore[arg-type]

    with pytest.raises(bloom.BloomError, match="is a timely stream; make it the source of a collection"):
        timely.execute(stream_in_rule).__enter__()


# Bud's stratified operators: group, argmin/argmax, notin with a join predicate --------------------------------
def _epochs(seed: int, n: int = 4) -> list[list[tuple[str, int, int]]]:
    """Per epoch, ``(group, id, value)`` facts (some repeated across epochs)."""
    import random

    rng = random.Random(seed)
    return [[(rng.choice("abc"), rng.randrange(6), rng.randrange(10)) for _ in range(7)] for _ in range(n)]


def _stratified_run(make: Any, epochs: list[list[Any]], workers: int, persistent: bool) -> list[set[Any]]:
    def build(scope: timely.Scope) -> tuple[timely.Input, bloom.Output]:
        facts = scope.new_input("facts")
        return facts, bloom.Output(make(facts), "mutable" if persistent else "scratch", False)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (facts, out)):
        for e, batch in enumerate(epochs):
            facts.send(batch)
            facts.advance_to(e + 1)
    return [out.answer(e) for e in range(len(epochs))]


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "scratch"])
def test_group_argmin_argmax_equal_a_recomputation_per_epoch(workers: int, persistent: bool) -> None:
    """Each epoch's answer equals the aggregates computed from scratch over the facts that hold
    then (all epochs so far, or that epoch's), group by group."""
    epochs = _epochs(5)
    holding = [{f for b in epochs[: e + 1] for f in b} if persistent else set(epochs[e]) for e in range(len(epochs))]
    grouped = _stratified_run(
        lambda s: bloom.group(
            s,
            lambda f: f[0],
            bloom.count(),
            bloom.total(lambda f: f[2]),
            bloom.maximum(lambda f: f[2]),
            bloom.accum(lambda f: f[1]),
            persistent=persistent,
        ),
        epochs,
        workers,
        persistent,
    )
    lowest = _stratified_run(
        lambda s: bloom.argmin(s, lambda f: f[0], lambda f: f[2], persistent=persistent), epochs, workers, persistent
    )
    highest = _stratified_run(
        lambda s: bloom.argmax(s, lambda f: f[0], lambda f: f[2], persistent=persistent), epochs, workers, persistent
    )
    for e, facts in enumerate(holding):
        groups: dict[str, list[Any]] = {}
        for f in facts:
            groups.setdefault(f[0], []).append(f)
        want = {
            (g, len(fs), sum(f[2] for f in fs), max(f[2] for f in fs), tuple(sorted({f[1] for f in fs})))
            for g, fs in groups.items()
        }
        assert grouped[e] == want, f"epoch {e}"
        assert lowest[e] == {f for fs in groups.values() for f in fs if f[2] == min(x[2] for x in fs)}
        assert highest[e] == {f for fs in groups.values() for f in fs if f[2] == max(x[2] for x in fs)}


def test_not_in_with_a_join_predicate_equals_a_nested_loop() -> None:
    """Bud's ``orders.notin(refunds, :item => :item) { |o, r| r.amount >= o.amount }``. One
    worker: `not_in` answers at the epochs its worker receives something (docs/bloom.md), and
    with several workers one may get nothing at an epoch."""
    workers = 1
    import random

    rng = random.Random(9)
    orders = [[(f"o{e}{i}", rng.randrange(4), rng.randrange(10)) for i in range(6)] for e in range(3)]
    refunds = [[(rng.randrange(4), rng.randrange(10)) for _ in range(3)] for _ in range(3)]
    seen: dict[int, list[Any]] = {}

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Input]:
        o, r = scope.new_input("orders"), scope.new_input("refunds")
        out = bloom.not_in(
            o, r, key=lambda x: x[1], negated_key=lambda y: y[0], predicate=lambda x, y: y[1] >= x[2], name="n"
        )
        out.subscribe(lambda t, recs: seen.setdefault(t.epoch, []).extend(recs))
        return o, r

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (o, r)):
        for e in range(3):
            o.send(orders[e])
            r.send(refunds[e])
            o.advance_to(e + 1)
            r.advance_to(e + 1)
    for e in range(3):
        os_ = {x for b in orders[: e + 1] for x in b}
        rs = {y for b in refunds[: e + 1] for y in b}
        want = {x for x in os_ if not any(y[0] == x[1] and y[1] >= x[2] for y in rs)}
        assert set(seen.get(e, [])) == want, f"epoch {e}"
    assert want != os_  # some orders are blocked ...
    assert any(x[1] in {y[0] for y in rs} for x in want)  # ... and the predicate spares some with a refund


def test_group_refuses_a_stream_inside_a_loop() -> None:
    def build(scope: timely.Scope) -> Any:
        loop = timely.LoopContext(scope, "l")
        bloom.group(loop.ingress(scope.new_input("x")), lambda f: f, bloom.count())

    with pytest.raises(bloom.BloomError, match="reads a lower stratum"):
        with timely.execute(build, workers=1, timeout=TIMEOUT):
            pass
