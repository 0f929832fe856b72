"""Bloom's timesteps on timely (docs/bloom.md, "Timesteps"): Bud's own temporal tests ported
(bloom-lang/bud test/tc_collections.rb, tc_temp.rb, tc_channel.rb), each compared with the
answers Bud's test asserts; Bud's tick ``n`` is timestep ``n - 1`` here (bootstrap facts hold
at timestep 0). Every test runs on one and on several workers. Then the CALM boundary: what is
monotone requests no notification, a table with deletions one per timestep, and what cannot be
evaluated soundly is refused with an error that says why.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any

import pytest

import timely
from tests.support import TIMEOUT
from timely_libs import bloom

Feeds = dict[str, list[list[Any]]]


def run(
    make: Callable[..., dict[str, bloom.Output]], feeds: Feeds, steps: int, workers: int
) -> tuple[dict[str, list[set[Any]]], Any]:
    """Feed ``feeds`` (input -> records per epoch; an input named ``clock`` gets one record per
    epoch) and return each output's answer at timesteps 0..steps-1, and the computation."""
    epochs = max(len(v) for v in feeds.values())

    def build(scope: timely.Scope) -> tuple[dict[str, timely.Input], dict[str, bloom.Output]]:
        inputs = {name: scope.new_input(name) for name in feeds}
        return inputs, make(**inputs)

    with timely.execute(build, workers=workers, timeout=TIMEOUT) as (comp, (inputs, outputs)):
        for epoch in range(epochs):
            for name, inp in inputs.items():
                batch = feeds[name][epoch] if epoch < len(feeds[name]) else []
                inp.send(batch)
                inp.advance_to(epoch + 1)
    return {name: [out.answer(t) for t in range(steps)] for name, out in outputs.items()}, comp


def ticks(n: int) -> list[list[int]]:
    return [[e] for e in range(n)]


def notifications(comp: Any, prefix: str) -> dict[str, int]:
    return {
        spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
        for spec in comp.graph.stages
        if spec.name.startswith(prefix)
    }


# tc_collections.rb ----------------------------------------------------------------------------------
def baby_bud(clock: timely.Stream) -> dict[str, bloom.Output]:
    """``BabyBud``: bootstrap facts, ``<+`` of constants into a scratch and a keyed table, ``<-``
    of a bootstrap fact, and the table's keys and values re-derived at every timestep."""
    with bloom.Program(clock.scope, "baby", clock=clock) as p:
        tick = p.periodic("tick")  # Bud's constant rules fire at every timestep
        scrtch = p.scratch("scrtch")
        scrtch2 = p.scratch("scrtch2")
        tbl = p.keyed_table("tbl", key=lambda t: t[:2])
        scrtch.bootstrap([("a", "b", 1, 2), ("a", "c", 3, 4)])
        scrtch2.bootstrap([("a", "b")])
        tbl.bootstrap([("a", "b", 1, 2), ("z", "y", 9, 8)])
        scrtch.defer(tick.select(lambda _: ("c", "d", 5, 6)))
        tbl.defer(tick.select(lambda _: ("c", "d", 5, 6)))
        tbl.delete(tick.select(lambda _: ("a", "b", 1, 2)))
        the_keys = p.temp("the_keys", tbl.select(lambda t: t[:2]))
        the_vals = p.temp("the_vals", tbl.select(lambda t: t[2:]))
    return {n: p.output(c) for n, c in [("scrtch", scrtch), ("scrtch2", scrtch2), ("tbl", tbl)]} | {
        "the_keys": p.output(the_keys),
        "the_vals": p.output(the_vals),
    }


def test_baby_bud_simple_deduction_and_insert_delete(workers: int) -> None:
    """test_simple_deduction and test_insert_delete: after tick 1 ``scrtch2`` has one fact; after
    tick 2 ``scrtch`` is ``[c, d, 5, 6]``, ``scrtch2`` empty, ``tbl`` has ``[c,d,5,6]`` and
    ``[z,y,9,8]`` (``[a,b,1,2]`` deleted), and its keys and values follow."""
    got, _ = run(baby_bud, {"clock": ticks(2)}, 2, workers)
    assert len(got["scrtch2"][0]) == 1
    assert got["scrtch"][1] == {("c", "d", 5, 6)}
    assert got["scrtch2"][1] == set()
    assert sorted(got["tbl"][1]) == [("c", "d", 5, 6), ("z", "y", 9, 8)]
    assert sorted(got["the_keys"][1]) == [("c", "d"), ("z", "y")]
    assert sorted(got["the_vals"][1]) == [(5, 6), (9, 8)]
    assert sorted(got["tbl"][0]) == [("a", "b", 1, 2), ("z", "y", 9, 8)]  # the delete waits a timestep


def delete_key(clock: timely.Stream, del_in: timely.Stream) -> dict[str, bloom.Output]:
    """``DeleteKey``: ``t1 <- del_buf`` with ``del_buf`` a table: a delete must match the whole
    stored fact, not only its key."""
    with bloom.Program(clock.scope, "delkey", clock=clock) as p:
        t1 = p.keyed_table("t1", key=lambda t: t[0])
        del_buf = p.table("del_buf", del_in)
        t1.bootstrap([(5, 10)])
        t1.delete(del_buf)
    return {"t1": p.output(t1)}


def test_delete_key_matches_whole_facts(workers: int) -> None:
    """test_delete_key: ``[5, 11]`` does not delete ``[5, 10]``; ``[5, 10]`` does, a tick later."""
    feeds: Feeds = {"clock": ticks(5), "del_in": [[], [(5, 11)], [], [(5, 10)], []]}
    got, _ = run(delete_key, feeds, 5, workers)
    assert [len(t) for t in got["t1"]] == [1, 1, 1, 1, 0]


# tc_temp.rb ---------------------------------------------------------------------------------------------
def temp_next(inski: timely.Stream, wait: timely.Stream) -> dict[str, bloom.Output]:
    """``TempNext``: ``temp :tmpy <= inski``, ``temp :waity <+ wait``, ``out <= tmpy``, ``out <= waity``."""
    with bloom.Program(inski.scope, "tempnext", timesteps=True) as p:
        ins = p.scratch("inski", inski)
        wt = p.scratch("wait", wait)
        tmpy = p.temp("tmpy", ins)
        waity = p.temp("waity", wt.next())
        out = p.scratch("out")
        out |= tmpy
        out |= waity
    return {"out": p.output(out)}


def test_temp_next(workers: int) -> None:
    """test_temp_next: ``out`` holds inski's rows at the first tick, wait's at the next."""
    rows = {"inski": [[(1, 1, 2, 2), (2, 2, 3, 3), (3, 3, 4, 4)]], "wait": [[(5, 5, 6, 6), (7, 7, 8, 8), (9, 9, 9, 9)]]}
    got, _ = run(temp_next, rows, 3, workers)
    assert sorted(r[0] for r in got["out"][0]) == [1, 2, 3]
    assert sorted(r[0] for r in got["out"][1]) == [5, 7, 9]
    assert got["out"][2] == set()


def temp_at_next(clock: timely.Stream) -> dict[str, bloom.Output]:
    """``TempAtNext``: ``temp :xyz <+ t1 {|t| [t.key + 1, t.val + 1]}``, ``t2 <= xyz``."""
    with bloom.Program(clock.scope, "tempatnext", clock=clock) as p:
        t1 = p.table("t1")
        t1.bootstrap([(5, 10)])
        xyz = p.temp("xyz", t1.select(lambda t: (t[0] + 1, t[1] + 1)).next())
        t2 = p.table("t2")
        t2 |= xyz
    return {"t2": p.output(t2)}


def test_temp_at_next(workers: int) -> None:
    got, _ = run(temp_at_next, {"clock": ticks(2)}, 2, workers)
    assert got["t2"] == [set(), {(6, 11)}]


def simple_temp(clock: timely.Stream) -> dict[str, bloom.Output]:
    """``SimpleTempTest``: ``temp :k <= (t1 * t2)`` (a cross product) and three rules over it."""
    with bloom.Program(clock.scope, "simpletemp", clock=clock) as p:
        t1, t2 = p.table("t1"), p.table("t2")
        t1.bootstrap([(5, 10), (10, 20)])
        t2.bootstrap([(50, 100), (75, 125)])
        k = p.temp("k", t1.join(t2, lambda _: 0, lambda _: 0))
        t3 = p.temp("t3", k.select(lambda ab: (ab[0][0] + ab[1][0], ab[0][1] + ab[1][1])))
        t5 = p.temp("t5", k.where(lambda ab: ab[1][1] > 100).select(lambda ab: ab[0]))
    return {"t3": p.output(t3), "t5": p.output(t5)}


def test_simple_temp(workers: int) -> None:
    got, _ = run(simple_temp, {"clock": ticks(2)}, 2, workers)
    want_t3 = {(55, 110), (60, 120), (80, 135), (85, 145)}
    assert got["t3"] == [want_t3, want_t3]  # a temp is re-derived at every timestep
    assert got["t5"] == [{(5, 10), (10, 20)}] * 2


def temp_shadow(clock: timely.Stream) -> dict[str, bloom.Output]:
    """``TempShadow`` (without ``t4``'s negation of ``k``, a rule of the same program)."""
    with bloom.Program(clock.scope, "shadow", clock=clock) as p:
        t1, t2, t3 = p.table("t1"), p.table("t2"), p.table("t3")
        t1.bootstrap([(20, 40), (40, 60)])
        k = p.temp("k", t1.select(lambda t: (t[0] + 10, t[1] + 20)))
        t2 |= k
        t2 |= t1.select(lambda t: (t[0], t[1]))
        t3 |= t1.join(t2, lambda j: j[0], lambda q: q[0], lambda j, q: (j[0] + 20, q[1] + 20))
    return {"k": p.output(k), "t2": p.output(t2), "t3": p.output(t3)}


def test_temp_shadow(workers: int) -> None:
    got, _ = run(temp_shadow, {"clock": ticks(1)}, 1, workers)
    assert sorted(got["k"][0]) == [(30, 60), (50, 80)]
    assert sorted(got["t2"][0]) == [(20, 40), (30, 60), (40, 60), (50, 80)]
    assert sorted(got["t3"][0]) == [(40, 60), (60, 80)]


# tc_channel.rb ---------------------------------------------------------------------------------------------
def tickle_count(clock: timely.Stream) -> dict[str, bloom.Output]:
    """``TickleCount``: a loopback channel counts to 5 with ``<~`` (one timestep per hop), and
    multicasts each count on a second channel."""
    me = "node"
    with bloom.Program(clock.scope, "tickle", clock=clock) as p:
        start = p.scratch("start")
        start.bootstrap([(me, 0)])
        loop_chan = p.channel("loop_chan")
        mcast = p.channel("mcast")
        loop_chan.send(start)
        loop_chan.send(loop_chan.where(lambda m: m[1] < 6).select(lambda m: (m[0], m[1] + 1)))
        loopback_done = p.scratch("loopback_done")
        loopback_done |= loop_chan.where(lambda m: m[1] == 5).select(lambda m: (m[1],))
        mcast.send(loop_chan.where(lambda m: m[1] < 6))
        mcast_done = p.scratch("mcast_done")
        mcast_done |= mcast.where(lambda m: m[1] == 5).select(lambda m: (m[1],))
    return {"loopback_done": p.output(loopback_done), "mcast_done": p.output(mcast_done)}


def test_tickle_count_counts_to_five_over_channels(workers: int) -> None:
    """test_tickle_single_step: ``[[5]]`` arrives on both, after several ticks (here: exactly when)."""
    got, comp = run(tickle_count, {"clock": ticks(1)}, 10, workers)
    assert [t for t, s in enumerate(got["loopback_done"]) if s] == [6]  # counts 0..5 at timesteps 1..6
    assert got["loopback_done"][6] == {(5,)}
    assert [t for t, s in enumerate(got["mcast_done"]) if s] == [7]
    assert got["mcast_done"][7] == {(5,)}
    assert set(notifications(comp, "tickle.").values()) == {0}  # channels and scratch: no coordination


def ring(
    kickoff: timely.Stream, next_guy: timely.Stream, delay: int | Callable[[Any], int] = 1
) -> dict[str, bloom.Output]:
    """``RingMember`` for every member at once: ``pipe <~`` passes a count round the ring (each
    fact addressed to its member, so members live on different workers), and ``last_cnt`` keeps
    each member's latest count with ``<+`` and ``<-``."""
    with bloom.Program(kickoff.scope, "ring", timesteps=True) as p:
        kick = p.scratch("kickoff", kickoff)  # (member, cnt)
        nxt = p.table("next_guy", next_guy)  # (member, next member)
        pipe = p.channel("pipe", delay=delay)  # (member, cnt)
        pipe.send(kick)
        pipe.send(pipe.join(nxt, lambda m: m[0], lambda n: n[0], lambda m, n: (n[1], m[1] + 1)).where(_below(40)))
        done = p.scratch("done")
        done |= pipe.where(lambda m: m[1] == 39)
        last_cnt = p.keyed_table("last_cnt")  # (member, cnt)
        last_cnt.defer(pipe)
        last_cnt.delete(pipe.join(last_cnt, lambda m: m[0], lambda c: c[0], lambda m, c: c))
    return {"done": p.output(done), "last_cnt": p.output(last_cnt)}


def _below(n: int) -> Callable[[Any], bool]:
    return lambda m: m[1] < n


RING = 10


def ring_feeds() -> Feeds:
    members = [f"m{i}" for i in range(RING)]
    return {
        "kickoff": [[("m0", 0)]],
        "next_guy": [[(members[i], members[(i + 1) % RING]) for i in range(RING)]],
    }


def test_ring_passes_a_count_round_and_keeps_each_members_last(workers: int) -> None:
    """test_basic_ring: member 9 (the last) sees count 39; here also the exact timestep, and each
    member's ``last_cnt`` (its latest count) after every timestep, against a plain simulation."""
    members = [f"m{i}" for i in range(RING)]
    got, comp = run(ring, ring_feeds(), 43, workers)
    assert [t for t, s in enumerate(got["done"]) if s] == [40]
    assert got["done"][40] == {("m9", 39)}
    last: dict[str, int] = {}
    for t in range(43):
        if 1 <= t - 1 <= 40:  # count t-2 reached member (t-2) % RING at timestep t-1; kept from t
            last[members[(t - 2) % RING]] = t - 2
        assert got["last_cnt"][t] == set(last.items()), f"timestep {t}"
    asked = notifications(comp, "ring.")
    assert asked["ring.step.last_cnt"] > 0  # deletion is coordinated, once per timestep
    assert asked["ring.step.pipe"] == 0 and asked["ring.step.done"] == 0  # the channel is not


def hop(fact: Any) -> int:
    """1 to 4 timesteps, by the message."""
    return 1 + zlib.crc32(repr(fact).encode()) % 4


def test_a_ring_under_delays_passes_the_same_counts_at_the_timesteps_the_delays_say(workers: int) -> None:
    """Bud's ``<~`` arrives at *some* later timestep: with a delay of 1 to 4 by the message, count
    ``c`` reaches member ``c % 10`` at the sum of the delays so far, ``last_cnt`` keeps each
    member's latest count one timestep later, and the last member still sees 39."""
    members = [f"m{i}" for i in range(RING)]
    arrive = ring_arrivals()
    steps = arrive[-1] + 3
    got, comp = run(functools.partial(ring, delay=hop), ring_feeds(), steps, workers)
    assert [t for t, s in enumerate(got["done"]) if s] == [arrive[39]]
    assert arrive[39] > 40  # the delays did delay it
    for t in range(steps):
        last = {members[c % RING]: c for c in range(40) if arrive[c] + 1 <= t}
        assert got["last_cnt"][t] == set(last.items()), f"timestep {t}"
    assert notifications(comp, "ring.")["ring.step.pipe"] == 0


def ring_arrivals() -> list[int]:
    """The timestep at which count ``c`` reaches its member, under `hop` delays."""
    arrive, t = [], 0
    for c in range(40):
        t += hop((f"m{c % RING}", c))
        arrive.append(t)
    return arrive


# Bud's temporal tests across two real processes ---------------------------------------------------------
TEMPORAL: dict[str, tuple[Callable[[], Feeds], Callable[..., dict[str, bloom.Output]], int]] = {
    "baby": (lambda: {"clock": ticks(2)}, baby_bud, 2),
    "tickle": (lambda: {"clock": ticks(1)}, tickle_count, 10),
    "ring": (ring_feeds, ring, 43),
    "ring-delayed": (ring_feeds, functools.partial(ring, delay=hop), 0),
}


def temporal(name: str) -> Any:
    """The build of temporal test ``name`` (`TEMPORAL`), for `Mode.run`."""
    from tests.support.bloom_program import BudRun

    feeds_of, make, steps = TEMPORAL[name]
    feeds = feeds_of()
    steps = steps or ring_arrivals()[-1] + 3

    def build(scope: timely.Scope) -> BudRun:
        inputs = {n: scope.new_input(n) for n in feeds}
        return BudRun(inputs, make(**inputs), feeds, steps, scope.process_index, scope.processes)

    return build


@pytest.mark.parametrize("name", list(TEMPORAL))
def test_buds_temporal_tests_across_two_processes(name: str) -> None:
    """``<+``, ``<-``, bootstrap and ``<~`` with the collections spread over two real processes
    (loopback TCP, all epochs in flight): every timestep's union of the processes' shares equals
    the one-process answer, which the tests above check against Bud's."""
    from tests.support.modes import Mode

    results = Mode("tcp", processes=2).run(temporal, name, lag=None, timeout=TIMEOUT)
    feeds_of, make, steps = TEMPORAL[name]
    alone, _ = run(make, feeds_of(), steps or ring_arrivals()[-1] + 3, 1)
    for output, answers in alone.items():
        for t, facts in enumerate(answers):
            shares = [tuple(f) for r in results for f in r["answers"][output][t]]
            assert len(shares) == len(set(shares)), f"{output} at {t}: a fact held twice"
            assert set(shares) == facts, f"{output} at timestep {t}"
    if name == "ring":
        assert alone["done"][40] == {("m9", 39)}
    if name == "tickle":
        assert alone["loopback_done"][6] == {(5,)} and alone["mcast_done"][7] == {(5,)}


def test_a_channel_delay_must_be_a_later_timestep() -> None:
    _refused(lambda p, s: p.channel("c", delay=0), "delay must be an int >= 1")

    def make(x: timely.Stream) -> dict[str, bloom.Output]:
        with bloom.Program(x.scope, "d", timesteps=True) as p:
            c = p.channel("c", delay=lambda fact: 0)
            c.send(p.scratch("x", x))
        return {"c": p.output(c)}

    with pytest.raises(timely.VertexError, match="channel 'c': the delay of .* is 0; it must be an int >= 1"):
        run(make, {"x": [[("a", 1)]]}, 1, 1)


# The CALM boundary -----------------------------------------------------------------------------------------
def _program(timesteps: bool = True) -> Callable[[timely.Scope], Any]:
    def build(scope: timely.Scope) -> bloom.Program:
        return bloom.Program(scope, "p", timesteps=timesteps)

    return build


def _refused(body: Callable[[bloom.Program, timely.Scope], Any], match: str, timesteps: bool = True) -> None:
    def build(scope: timely.Scope) -> Any:
        p = bloom.Program(scope, "p", timesteps=timesteps)
        body(p, scope)
        p.finish()
        return scope.new_input("unused")

    with pytest.raises(bloom.BloomError, match=match):
        with timely.execute(build, workers=1, timeout=TIMEOUT):
            pass


def test_deletion_only_from_a_table_with_deletions() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        t = p.table("t", scope.new_input("x"))
        t.delete(p.scratch("s", scope.new_input("y")))

    _refused(body, "only a table with deletions.*monotone: it never forgets")


def test_next_timestep_rules_need_a_timestep_program() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        p.table("t").defer(p.scratch("s", scope.new_input("y")))

    _refused(body, "timesteps=True", timesteps=False)
    _refused(lambda p, s: p.keyed_table("k"), "timesteps=True", timesteps=False)


def test_a_persistent_body_into_a_scratch_is_refused_not_derived_once() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        s = p.scratch("s")
        s |= p.table("t", scope.new_input("x"))

    _refused(body, "re-derives it at every timestep; name it with program.temp")


def test_a_changing_table_joins_only_scratch_facts() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        k = p.keyed_table("k")
        t = p.table("t", scope.new_input("x"))
        p.table("out").merge(k.join(t, lambda a: a, lambda b: b))

    _refused(body, "joins with scratch facts only")


def test_a_left_join_needs_a_table_that_changes_only_between_timesteps() -> None:
    def body(p: bloom.Program, scope: timely.Scope) -> None:
        k = p.keyed_table("k", key=lambda f: f[0])
        s = p.scratch("s", scope.new_input("x"))
        k |= s
        p.scratch("out").merge(s.left_join(k, lambda a: a[0], lambda b: b[0]))

    _refused(body, "also changes within a timestep")


def test_bootstrap_needs_a_clock() -> None:
    _refused(lambda p, s: p.table("t").bootstrap([1]), "needs the program's clock")


def test_a_key_constraint_violation_fails_the_run_naming_the_table() -> None:
    """Two values for one key at one timestep (Bud's KeyConstraintError)."""

    def make(puts: timely.Stream) -> dict[str, bloom.Output]:
        with bloom.Program(puts.scope, "kc", timesteps=True) as p:
            t = p.keyed_table("t", key=lambda f: f[0])
            t.defer(p.scratch("put", puts))
        return {"t": p.output(t)}

    with pytest.raises(timely.VertexError, match="table 't': key 'k' holds .* breaks the key constraint"):
        run(make, {"puts": [[("k", 1), ("k", 2)]]}, 1, 1)


def rederived(base_in: timely.Stream, del_in: timely.Stream, probe_in: timely.Stream) -> dict[str, bloom.Output]:
    """``t <= base`` (a table) with ``t <- del``: Bud derives ``base``'s facts into ``t`` at every
    timestep, so deleting one that ``base`` still holds does not remove it; a fact inserted
    only by ``<+`` goes. ``probe`` joins ``t`` on a field that is not its key (the general join)."""
    with bloom.Program(base_in.scope, "rederive", timesteps=True) as p:
        base = p.table("base", base_in)
        extra = p.scratch("extra", del_in)
        t = p.keyed_table("t", key=lambda f: f[0])
        t |= base
        t.defer(extra.where(lambda f: f[2] == "add").select(lambda f: (f[0], f[1])))
        t.delete(extra.where(lambda f: f[2] == "del").select(lambda f: (f[0], f[1])))
        probe = p.input("probe", probe_in)
        hits = p.temp("hits", probe.join(t, lambda q: q, lambda f: f[1], lambda q, f: (q, f[0])))
    return {"t": p.output(t), "hits": p.output(hits)}


def test_a_fact_a_persistent_rule_derives_survives_its_deletion(workers: int) -> None:
    feeds: Feeds = {
        "base_in": [[("a", 1)], [], [], []],
        "del_in": [[("b", 2, "add")], [("a", 1, "del"), ("b", 2, "del")], [], []],
        "probe_in": [[1, 2], [1, 2], [1, 2], [1, 2]],
    }
    got, comp = run(rederived, feeds, 4, workers)
    assert got["t"] == [{("a", 1)}, {("a", 1), ("b", 2)}, {("a", 1)}, {("a", 1)}]
    assert got["hits"] == [{(1, "a")}, {(1, "a"), (2, "b")}, {(1, "a")}, {(1, "a")}]
