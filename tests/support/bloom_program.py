"""The bloom workloads of tests/bloom/test_processes.py, as a program for `Mode.run`.

One dataflow runs four programs: `bloom.programs.reachability` asynchronous (loop ``reach``)
and coordinated (loop ``reach_sync``) on the same seeded random graph and sources,
`bloom.programs.shortest_paths` (loop ``sssp``) on that graph with a weight per edge, and
`bloom.programs.quorum` (loop ``quorum``) on seeded random votes. Each gets new records in
each of `EPOCHS` epochs. Every process feeds only its share of each epoch's records (those at
positions ``i`` with ``i % processes == process_index``), so that a request's votes, for
instance, come from several processes.

A process's result: per output and epoch, its share of the answer (`Output.answer`), and per
loop the notifications each of its stages requested (`Vertex.statistics`, summed over this
process's workers), and how many workers it ran.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from typing import Any

import timely
from tests.support.modes import Run
from timely_libs import bloom

EPOCHS = 2
QUORUM = 3
LOOPS = ("reach", "reach_sync", "sssp", "quorum")
NODES = 40


def edge_epochs(seed: int) -> list[list[tuple[int, int]]]:
    """Per epoch, new directed edges (some repeated, some self-loops possible)."""
    rng = random.Random(f"bloom-edges/{seed}")
    return [[(rng.randrange(NODES), rng.randrange(NODES)) for _ in range(45)] for _ in range(EPOCHS)]


def weight(u: int, v: int) -> int:
    return (u * 7 + v * 3) % 10


def weighted_epochs(seed: int) -> list[list[tuple[int, int, int]]]:
    """The edges of `edge_epochs`, each with its weight."""
    return [[(u, v, weight(u, v)) for u, v in batch] for batch in edge_epochs(seed)]


def source_epochs(seed: int) -> list[list[int]]:
    rng = random.Random(f"bloom-sources/{seed}")
    return [rng.sample(range(NODES), 2) for _ in range(EPOCHS)]


def vote_epochs(seed: int) -> list[list[tuple[str, int]]]:
    """Per epoch, ``(request, voter)`` votes; a voter may vote twice for the same request."""
    rng = random.Random(f"bloom-votes/{seed}")
    return [[(f"req{rng.randrange(10)}", rng.randrange(6)) for _ in range(24)] for _ in range(EPOCHS)]


def share(records: list[Any], process_index: int, processes: int) -> list[Any]:
    return [r for i, r in enumerate(records) if i % processes == process_index]


@dataclass
class BloomRun(Run):
    seed: int
    process_index: int
    processes: int
    inputs: dict[str, timely.Input]
    outputs: dict[str, bloom.Output]
    epochs = EPOCHS

    def feed(self, epoch: int) -> None:
        """Send this process's share of ``epoch``'s records and advance past the epoch."""
        data: dict[str, list[Any]] = {
            "edges": edge_epochs(self.seed)[epoch],
            "weighted": weighted_epochs(self.seed)[epoch],
            "sources": source_epochs(self.seed)[epoch],
            "votes": vote_epochs(self.seed)[epoch],
        }
        for name, inp in self.inputs.items():
            inp.send(share(data[name], self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def answers(self) -> dict[str, dict[str, Any]]:
        """JSON-able: output -> epoch -> this process's share of the answer, sorted."""
        out: dict[str, dict[str, Any]] = {}
        for name, output in self.outputs.items():
            by_epoch = out[name] = {}
            for epoch in range(EPOCHS):
                answer = output.answer(epoch)
                if output.lattice:
                    by_epoch[str(epoch)] = {k: _revealed(v) for k, v in sorted(answer.items())}
                else:
                    by_epoch[str(epoch)] = sorted(json.loads(json.dumps(sorted(answer))))
        return out

    def probes(self) -> list[timely.Probe]:
        return [output.probe for output in self.outputs.values()]

    def result(self, comp: Any) -> dict[str, Any]:
        return {
            "process": self.process_index,
            "workers": len(comp.vertices("reach.reach")),
            "answers": self.answers(),
            "notifications": {loop: notifications_requested(comp, loop) for loop in LOOPS},
        }


def _revealed(value: Any) -> Any:
    """A lattice value as JSON: a set sorted, anything else as it is."""
    inner = value.reveal()
    return sorted(inner) if isinstance(inner, (set, frozenset)) else inner


def build(seed: int) -> Any:
    """The program of the workloads of ``seed`` (for `Mode.run`)."""

    def build(scope: timely.Scope) -> BloomRun:
        edges = scope.new_input("edges")
        weighted = scope.new_input("weighted")
        sources = scope.new_input("sources")
        votes = scope.new_input("votes")
        committed, tally = bloom.programs.quorum(votes, QUORUM, name="quorum")
        outputs = {
            "reach": bloom.programs.reachability(edges, sources, name="reach"),
            "reach_sync": bloom.programs.reachability(edges, sources, name="reach_sync", coordinated=True),
            "dist": bloom.programs.shortest_paths(weighted, sources, name="sssp"),
            "committed": committed,
            "tally": tally,
        }
        inputs = {"edges": edges, "weighted": weighted, "sources": sources, "votes": votes}
        return BloomRun(seed, scope.process_index, scope.processes, inputs, outputs)

    return build


def notifications_requested(comp: Any, loop: str) -> dict[str, int]:
    """Per stage of the loop named ``loop``: the notifications this process's vertices requested."""
    return {
        spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
        for spec in comp.graph.stages
        if spec.name.startswith(loop + ".")
    }


# Bud's programs with timesteps (tests/bloom/test_bud_programs.py) ------------------------------------------
def kvs_workload(seed: int) -> tuple[dict[str, list[list[Any]]], int]:
    """Bud's ``workload1`` (four puts of ``foo``), a get, a delete, a get; then seeded puts, gets and
    deletes of 30 keys, some in the same epoch as a get of the same key. Per input, per epoch."""
    puts: list[list[Any]] = [[("c", "foo", i, v)] for i, v in enumerate(["bar", "baz", "bam", "bak"], 1)]
    gets: list[list[Any]] = [[] for _ in puts]
    dels: list[list[Any]] = [[] for _ in puts]
    tail: list[tuple[list[Any], list[Any], list[Any]]] = [
        ([], [], []),
        ([], [(1234, "foo")], []),
        ([], [], [("foo", 23525)]),
        ([], [(1235, "foo")], []),
    ]
    for put, get, delete in tail:
        puts.append(put)
        gets.append(get)
        dels.append(delete)
    rng = random.Random(f"bloom-kvs/{seed}")
    reqid = 2000
    for _ in range(12):
        keys = rng.sample(range(30), 12)  # one op per key and epoch (Bud: one value per key per timestep)
        p: list[Any] = []
        g: list[Any] = []
        d: list[Any] = []
        for k in keys:
            reqid += 1
            r = rng.random()
            if r < 0.45:
                p.append(("c", f"k{k}", reqid, rng.randrange(100)))
            elif r < 0.8:
                g.append((reqid, f"k{k}"))
            else:
                d.append((f"k{k}", reqid))
        puts.append(p)
        gets.append(g)
        dels.append(d)
    return {"puts": puts, "dels": dels, "gets": gets}, len(puts) + 2


def chat_workload(seed: int) -> tuple[dict[str, list[list[Any]]], int]:
    """Clients connect, talk and leave over 8 epochs (seeded)."""
    rng = random.Random(f"bloom-chat/{seed}")
    clients = [f"c{i}" for i in range(5)]
    connects: list[list[Any]] = [[(c, c.upper())] for c in clients[:3]] + [[(c, c.upper())] for c in clients[3:]]
    connects += [[] for _ in range(8 - len(connects))]
    messages: list[list[Any]] = [[(c, f"{c}-{e}") for c in rng.sample(clients, 2) if int(c[1:]) <= e] for e in range(8)]
    leaves: list[list[Any]] = [[] for _ in range(8)]
    leaves[4] = [("c1",)]
    leaves[6] = [("c3",)]
    return {"connects": connects, "messages": messages, "leaves": leaves}, 11


def cart_workload(seed: int) -> tuple[dict[str, list[list[Any]]], int]:
    """bud-sandbox test/cart_workloads.rb: ``simple_workload`` then ``multi_session_workload``,
    one action per timestep as Bud's ``sync_do`` sends them, each checkout after its actions."""
    seq = iter(range(1, 1000))
    server, client = "server", "client"
    simple = [("meat", 1), ("books", -1), ("beer", 1), ("diapers", 1), ("meat", -1)] + [("beer", 1)] * 12
    actions: list[list[Any]] = [[(server, client, 1234, next(seq), i, c)] for i, c in simple]
    checkouts: list[list[Any]] = [[] for _ in actions]
    actions.append([])
    checkouts.append([(server, client, 1234, next(seq))])
    cart1 = [(555, "remedy", 1), (555, "sightglass", 2), (555, "cole", -1)]
    cart2 = [(666, "blue bottle", 1), (666, "cole", 1)]
    for session, item, count in cart1 + cart2:
        actions.append([(server, client, session, next(seq), item, count)])
        checkouts.append([])
    actions += [[], []]
    checkouts += [[(server, client, 666, next(seq))], [(server, client, 555, next(seq))]]
    return {"actions": actions, "checkouts": checkouts}, len(actions) + 3


def commit_workload(seed: int) -> tuple[dict[str, list[list[Any]]], int]:
    """Seeded transactions over 4 participants, each voting yes or no, begun over 3 epochs."""
    rng = random.Random(f"bloom-2pc/{seed}")
    names = [f"p{i}" for i in range(4)]
    requests: list[list[Any]] = [[], [], []]
    policies: list[list[Any]] = [[], [], []]
    for x in range(9):
        epoch = x % 3
        who = tuple(sorted(rng.sample(names, rng.randrange(1, 5))))
        requests[epoch].append((f"x{x}", who))
        policies[epoch].extend((p, f"x{x}", "yes" if rng.random() < 0.75 else "no") for p in who)
    return {"requests": requests, "policies": policies}, 8


def message_delay(fact: Any) -> int:
    """1, 2 or 3 timesteps, by the fact (the same in every process): Bud's "some later timestep"."""
    return 1 + zlib.crc32(repr(fact).encode()) % 3


def delayed_commit_workload(seed: int) -> tuple[dict[str, list[list[Any]]], int]:
    """`commit_workload`, read over enough timesteps for three hops of up to three timesteps each."""
    feeds, _ = commit_workload(seed)
    return feeds, 16


BUD_PROGRAMS: dict[str, Any] = {
    "kvs": (
        kvs_workload,
        lambda s, puts, dels, gets: dict(
            zip(("response", "kvstate"), bloom.programs.kvs(puts, dels, gets), strict=True)
        ),
    ),
    "chat": (
        chat_workload,
        lambda s, connects, messages, leaves: {"inbox": bloom.programs.chat(connects, messages, leaves)},
    ),
    "cart": (
        cart_workload,
        lambda s, actions, checkouts: {"memo": bloom.programs.destructive_cart(actions, checkouts)},
    ),
    "2pc-delayed": (
        delayed_commit_workload,
        lambda s, requests, policies: dict(
            zip(
                ("decision", "state"),
                bloom.programs.two_phase_commit(requests, policies, delay=message_delay),
                strict=True,
            )
        ),
    ),
    "2pc-late": (
        delayed_commit_workload,
        lambda s, requests, policies: dict(
            zip(("decision", "state"), bloom.programs.two_phase_commit(requests, policies, delay=3), strict=True)
        ),
    ),
    "2pc": (
        commit_workload,
        lambda s, requests, policies: dict(
            zip(("decision", "state"), bloom.programs.two_phase_commit(requests, policies), strict=True)
        ),
    ),
}
"""Name -> (workload(seed) -> (feeds, timesteps to read), make(scope, **inputs) -> outputs)."""


@dataclass
class BudRun(Run):
    inputs: dict[str, timely.Input]
    outputs: dict[str, bloom.Output]
    feeds: dict[str, list[list[Any]]]
    steps: int
    process_index: int
    processes: int

    def __post_init__(self) -> None:
        self.epochs = max(len(v) for v in self.feeds.values())

    def feed(self, epoch: int) -> None:
        for name, inp in self.inputs.items():
            records = self.feeds[name][epoch] if epoch < len(self.feeds[name]) else []
            inp.send(share(records, self.process_index, self.processes))
            inp.advance_to(epoch + 1)

    def probes(self) -> list[timely.Probe]:
        return [output.probe for output in self.outputs.values()]

    def result(self, comp: Any) -> dict[str, Any]:
        answers = {
            name: [sorted(json.loads(json.dumps(list(output.answer(t)))), key=json.dumps) for t in range(self.steps)]
            for name, output in self.outputs.items()
        }
        asked = {
            spec.name: sum(v.statistics().notifications_requested for v in comp.vertices(spec.name))
            for spec in comp.graph.stages
        }
        return {"process": self.process_index, "answers": answers, "notifications": asked}


def bud(name: str, seed: int) -> Any:
    """The build of Bud program ``name`` (`BUD_PROGRAMS`) fed its workload of ``seed`` (for `Mode.run`)."""
    workload, make = BUD_PROGRAMS[name]
    feeds, steps = workload(seed)

    def build(scope: timely.Scope) -> BudRun:
        inputs = {n: scope.new_input(n) for n in feeds}
        outputs = make(scope, **inputs)
        return BudRun(inputs, outputs, feeds, steps, scope.process_index, scope.processes)

    return build


def negation(seed: int) -> Any:
    """tests/bloom/test_negation.py's program fed its workload of ``seed`` (for `Mode.run`)."""
    from tests.bloom import test_negation

    feeds = test_negation.workload(seed)

    def build(scope: timely.Scope) -> BudRun:
        inputs = {n: scope.new_input(n) for n in feeds}
        outputs = test_negation.program(**inputs)
        return BudRun(inputs, outputs, feeds, test_negation.STEPS, scope.process_index, scope.processes)

    return build
