"""The program the ``net.*`` benchmarks run in every process (private; not a benchmark).

Started by `bench._net` as ``python -m timely.cli run -n N bench/_net_worker.py MODE [options]``,
so every process finds its place in the cluster in the ``TIMELY_*`` environment. Each process
prints its measurements as one line ``NETBENCH {json}`` on stdout (the launcher prefixes it
with ``[pI] ``); the parent parses the N lines. Modes:

``throughput``  integers -> CPU-heavy map to a key -> exchange by key -> count per key per
                epoch (emitted at the epoch's notification). Each process feeds records
                ``i`` with ``i % processes == index``. The clock starts once ``execute()`` has
                returned (the handshake with every peer is done) and stops when the
                computation is complete; the counts go back to the parent for checking.
``loop``        the empty notification loop of ``core.loop_latency``: one spinning vertex per
                process, so each iteration is a global round of the progress protocol.
``ring``        ``loop`` with records: each process's vertex passes a batch of ``--records`` ints on
                to the next process at every iteration (exchanged by value), so each iteration
                costs every process one frame of records and progress. Reports the CPU, the
                frames, the scheduler steps and wake-ups per iteration, and the CPU split into
                user and kernel time with the context switches.
``raw``         the floor for ``loop``: a plain asyncio (uvloop) all-to-all round over loopback
                TCP among the same processes (on the ports the launcher gave them; timely does
                not run): per round each process writes 8 bytes to every other one and waits
                for 8 bytes from every other one.
``cc``          ``timely_examples.connected_components.components`` on a seeded random graph, each
                process feeding its share of the edges; reports the network statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import resource
import socket
import statistics
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import timely
from bench.core_throughput import Count  # the same counting vertex as core.throughput

V = TypeVar("V", bound=timely.Vertex)

MARK = "NETBENCH"
"""What starts the result line of every process."""
KEYS = 1000
HEAVY_ROUNDS = 8
"""Steps of the map's linear-congruential loop: about 1 us of pure Python per record."""


def emit(result: dict[str, Any]) -> None:
    print(f"{MARK} {json.dumps(result, separators=(',', ':'))}", flush=True)


# throughput ----------------------------------------------------------------------------------


def heavy_key(x: int) -> int:
    """The map: a key in ``0..KEYS-1`` after `HEAVY_ROUNDS` steps of pure-Python arithmetic."""
    h = x
    for _ in range(HEAVY_ROUNDS):
        h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    return (h >> 12) % KEYS  # the high bits: the low bit of h is the low bit of x (a and c are odd)


def epoch_of(i: int, records: int, epochs: int) -> int:
    """The epoch of record ``i`` (records are numbered 0..records-1, in equal runs per epoch)."""
    return i * epochs // records


def epoch_shares(index: int, processes: int, records: int, epochs: int) -> list[list[int]]:
    """What process ``index`` feeds: records ``i`` with ``i % processes == index``, by epoch."""
    shares: list[list[int]] = [[] for _ in range(epochs)]
    for i in range(index, records, processes):
        shares[epoch_of(i, records, epochs)].append(i)
    return shares


def _identity(k: int) -> int:
    return k


def run_throughput(args: argparse.Namespace) -> None:
    counts: list[list[int]] = []  # [epoch, key, count]
    shares: list[list[list[int]]] = []
    where: list[int] = []
    last_epoch_at = [0.0]

    def collect(t: timely.Timestamp, pairs: list[tuple[int, int]]) -> None:
        counts.extend([t.epoch, k, n] for k, n in pairs)
        last_epoch_at[0] = time.perf_counter()

    def build(scope: timely.Scope) -> timely.Input:
        where[:] = [scope.process_index, scope.processes]
        # The input is made here, before execute() returns, so it is not timed.
        shares.append(epoch_shares(scope.process_index, scope.processes, args.records, args.epochs))
        numbers = scope.new_input("numbers")
        keyed = numbers.map("key", heavy_key).stage("count", Count, exchange=_identity)
        keyed.subscribe(collect)
        return numbers

    gc.collect()
    with timely.execute(build, timeout=args.timeout) as (comp, numbers):
        started = time.perf_counter()  # every peer is connected: the start signal
        cpu = time.process_time()
        for epoch, records in enumerate(shares[0]):
            numbers.send(records)
            numbers.advance_to(epoch + 1)
        fed = time.perf_counter()
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    stats = comp.statistics()
    emit(
        {
            "mode": "throughput",
            "process": where[0],
            "processes": where[1],
            "records_fed": sum(len(r) for r in shares[0]),
            "started": started,
            "fed": fed,
            "last_epoch": last_epoch_at[0],
            "done": done,
            "seconds": done - started,
            "cpu_seconds": cpu,
            "records_delivered": stats.records_delivered,
            "callback_seconds": sum(w.callback_seconds for w in stats.workers),
            "network": stats.network,
            "counts": counts,
        }
    )


# loop --------------------------------------------------------------------------------------


class Spin(timely.Vertex):
    """Asks for a notification at the next iteration, from each notification, ``iterations`` times."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.stamps: list[float] = []
        self._stamp = self.stamps.append

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        self.notify_at(time)

    def on_notify(self, t: timely.Timestamp) -> None:
        self._stamp(time.perf_counter())
        if t[-1] + 1 < self.iterations:
            self.notify_at(t.advance())


def summarize(stamps: list[float], warmup: int) -> dict[str, float]:
    """Microseconds between consecutive stamps, after the first `warmup` of them."""
    lat = sorted(stamps[i + 1] - stamps[i] for i in range(warmup, len(stamps) - 1))
    if not lat:
        return {"n": 0}
    return {
        "n": len(lat),
        "p10": _rank(lat, 10) * 1e6,
        "p25": _rank(lat, 25) * 1e6,
        "median": statistics.median(lat) * 1e6,
        "p75": _rank(lat, 75) * 1e6,
        "p90": _rank(lat, 90) * 1e6,
        "p99": _rank(lat, 99) * 1e6,
        "max": lat[-1] * 1e6,
        "mean": statistics.fmean(lat) * 1e6,
    }


def _rank(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile (as `bench._harness.percentile`)."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _one_stage_loop(
    name: str,
    factory: Callable[[], V],
    made: list[V],
    where: list[int],
    feedback_exchange: Callable[[Any], int] | None,
) -> Callable[[timely.Scope], timely.Input]:
    """A dataflow of one input entering a loop whose single stage (each worker's vertex made by
    ``factory`` and kept in ``made``) feeds itself back; entering records go to the worker they
    name, fed-back ones by ``feedback_exchange`` (None: they stay on the worker). The build
    fills ``where`` with the process's index and count."""

    def make() -> V:
        vertex = factory()
        made.append(vertex)
        return vertex

    def build(scope: timely.Scope) -> timely.Input:
        where[:] = [scope.process_index, scope.processes]
        start = scope.new_input("start")
        loop = timely.LoopContext(scope, "loop")
        entered = loop.ingress(start)
        feedback = loop.feedback("feedback")
        out = loop.stage(name, make, [entered, feedback.stream], exchange=[_identity, feedback_exchange])
        feedback.connect(out)
        return start

    return build


def run_loop(args: argparse.Namespace) -> None:
    total = args.warmup + args.iterations
    spins: list[Spin] = []
    where: list[int] = []
    build = _one_stage_loop("spin", lambda: Spin(total), spins, where, feedback_exchange=None)

    gc.collect()
    with timely.execute(build, timeout=args.timeout) as (comp, start):
        started = time.perf_counter()
        cpu = time.process_time()
        start.send([where[0]])  # one record per process: the exchange keeps it on this process's worker
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    stats = comp.statistics()
    stamps = spins[0].stamps
    if len(stamps) != total:
        raise RuntimeError(f"process {where[0]}: notified {len(stamps)} times, not {total}")
    emit(
        {
            "mode": "loop",
            "process": where[0],
            "processes": where[1],
            "seconds": done - started,
            "cpu_seconds": cpu,
            "latency_us": summarize(stamps, args.warmup),
            "network": stats.network,
        }
    )


# ring ----------------------------------------------------------------------------------------


class Relay(timely.Vertex):
    """Holds the batch that reached it at an iteration and, at that iteration's notification,
    passes it on to the next worker for the next iteration (each record ``r`` as ``r + 1``, which
    the exchange sends to worker ``(r + 1) % workers``), ``iterations`` times."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.held: dict[timely.Timestamp, list[int]] = {}
        self.stamps: list[float] = []

    def on_recv(self, edge: int, records: list[int], time: timely.Timestamp) -> None:
        held = self.held.get(time)
        if held is None:
            self.held[time] = held = []
            self.notify_at(time)
        held.extend(records)

    def on_notify(self, t: timely.Timestamp) -> None:
        self.stamps.append(time.perf_counter())
        batch = self.held.pop(t)
        if t[-1] + 1 < self.iterations:
            self.send_by(self.outputs[0], [r + 1 for r in batch], t)  # the feedback adds the iteration


def run_ring(args: argparse.Namespace) -> None:
    total = args.warmup + args.iterations
    relays: list[Relay] = []
    where: list[int] = []
    build = _one_stage_loop("relay", lambda: Relay(total), relays, where, feedback_exchange=_identity)

    gc.collect()
    with timely.execute(build, timeout=args.timeout) as (comp, start):
        index, processes = where
        workers = len(relays)
        first = index * workers  # this process's workers: first, first + 1, ...
        before = comp.statistics()
        started = time.perf_counter()
        cpu = time.process_time()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        for w in range(first, first + workers):  # one batch a worker, its records all routed to w
            start.send([w + k * workers * processes for k in range(args.records)])
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    spent = _usage_since(usage)
    stats = comp.statistics()
    for relay in relays:
        if len(relay.stamps) != total:
            raise RuntimeError(f"process {index}: a relay was notified {len(relay.stamps)} times, not {total}")
    emit(
        {
            "mode": "ring",
            "process": index,
            "processes": processes,
            "workers": workers,
            "iterations": total,
            "seconds": done - started,
            "cpu_seconds": cpu,
            "latency_us": summarize(relays[0].stamps, args.warmup),
            "steps": stats.scheduler_steps - before.scheduler_steps,
            "wakeups": stats.wakeups - before.wakeups,
            "network": stats.network,
            **spent,
        }
    )


def _usage_since(before: resource.struct_rusage) -> dict[str, float]:
    """This process's CPU since ``before``, split into user and kernel (system) seconds, and its
    context switches: voluntary (it slept, waiting for a frame) and involuntary (preempted)."""
    now = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "user_seconds": now.ru_utime - before.ru_utime,
        "system_seconds": now.ru_stime - before.ru_stime,
        "voluntary_switches": now.ru_nvcsw - before.ru_nvcsw,
        "involuntary_switches": now.ru_nivcsw - before.ru_nivcsw,
    }


# raw ---------------------------------------------------------------------------------------


class _Mesh:
    """Counts, per round, the messages that arrived from the other processes."""

    def __init__(self, index: int, processes: int) -> None:
        self.index = index
        self.others = processes - 1
        self.peers: dict[int, asyncio.Transport] = {}
        self.all_connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.arrived: dict[int, int] = {}
        self.waiting = -1
        self.ready: asyncio.Future[None] | None = None

    def add(self, index: int, transport: asyncio.Transport) -> None:
        self.peers[index] = transport
        if len(self.peers) == self.others and not self.all_connected.done():
            self.all_connected.set_result(None)

    def got(self, round_: int) -> None:
        n = self.arrived.get(round_, 0) + 1
        self.arrived[round_] = n
        if n == self.others and round_ == self.waiting and self.ready is not None and not self.ready.done():
            self.ready.set_result(None)

    async def round(self, r: int, message: bytes) -> None:
        for transport in self.peers.values():
            transport.write(message)
        if self.arrived.get(r, 0) < self.others:
            self.waiting = r
            self.ready = asyncio.get_running_loop().create_future()
            await self.ready
        del self.arrived[r]


class _RawPeer(asyncio.Protocol):
    """One TCP connection of the mesh: a 4-byte process index first, then 8-byte round numbers."""

    transport: asyncio.Transport

    def __init__(self, mesh: _Mesh, index: int | None) -> None:
        self.mesh = mesh
        self.index = index  # known on the connecting side; the listening side reads it
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.index is not None:
            self.transport.write(struct.pack("<I", self.mesh.index))
            self.mesh.add(self.index, self.transport)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        if self.index is None:
            if len(buffer) < 4:
                self.buffer = buffer
                return
            (self.index,) = struct.unpack_from("<I", buffer)
            buffer = buffer[4:]
            self.mesh.add(self.index, self.transport)
        whole = len(buffer) // 8
        for k in range(whole):
            self.mesh.got(struct.unpack_from("<Q", buffer, 8 * k)[0])
        self.buffer = buffer[8 * whole :]


async def _raw_rounds(args: argparse.Namespace) -> dict[str, Any]:
    from timely._runtime.config import cluster_from_env

    cluster = cluster_from_env()
    if cluster is None:
        raise RuntimeError("the raw mode needs the TIMELY_* environment (run it with timely run -n N)")
    loop = asyncio.get_running_loop()
    mesh = _Mesh(cluster.process_index, cluster.processes)
    host, port = cluster.address
    server = await loop.create_server(lambda: _RawPeer(mesh, None), host, port, reuse_address=True)
    deadline = loop.time() + 30
    for j in range(cluster.process_index):  # like timely: connect to the lower indices, accept the higher
        peer_host, peer_port = cluster.addresses[j]
        while True:
            try:
                await loop.create_connection(functools.partial(_RawPeer, mesh, j), peer_host, peer_port)
                break
            except OSError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.02)
    if cluster.processes > 1:
        await asyncio.wait_for(mesh.all_connected, 30)
    server.close()
    gc.collect()
    total = args.warmup + args.iterations
    stamps: list[float] = []
    clock = time.perf_counter
    started = clock()
    cpu = time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for r in range(total):
        await mesh.round(r, struct.pack("<Q", r))
        stamps.append(clock())
    seconds = clock() - started
    cpu = time.process_time() - cpu
    spent = _usage_since(usage)
    for transport in mesh.peers.values():
        transport.close()
    await asyncio.sleep(0.05)  # let the peers read their last round before the connections go
    return {
        "mode": "raw",
        "process": cluster.process_index,
        "processes": cluster.processes,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "latency_us": summarize(stamps, args.warmup),
        **spent,
    }


def run_raw(args: argparse.Namespace) -> None:
    import uvloop

    loop = uvloop.new_event_loop()
    try:
        emit(loop.run_until_complete(_raw_rounds(args)))
    finally:
        loop.close()


# cc ------------------------------------------------------------------------------------------


def make_graph(nodes: int, edges: int, seed: int) -> list[tuple[int, int]]:
    """The graph of ``timely_examples.connected_components`` (the same generator and seed)."""
    import random

    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def run_cc(args: argparse.Namespace) -> None:
    from timely_examples.connected_components import components, reference_components

    edge_list = make_graph(args.nodes, args.edges, args.seed)
    iterations = [0]
    where: list[int] = []

    def on_iteration(t: timely.Timestamp, improved: int) -> None:
        iterations[0] = max(iterations[0], t.counters[0] + 1)

    def build(scope: timely.Scope) -> tuple[timely.Input, dict[int, int]]:
        where[:] = [scope.process_index, scope.processes]
        return components(scope, on_iteration)

    gc.collect()
    with timely.execute(build, timeout=args.timeout) as (comp, (edges, best)):
        started = time.perf_counter()
        index, processes = where
        edges.send([e for j, e in enumerate(edge_list) if j % processes == index])
    done = time.perf_counter()
    stats = comp.statistics()
    expected = reference_components(edge_list)
    wrong = sum(1 for node, label in best.items() if expected.get(node) != label)
    elsewhere = sum(1 for node in best if node % processes != index)  # not this process's worker's node
    emit(
        {
            "mode": "cc",
            "process": index,
            "processes": processes,
            "seconds": done - started,
            "iterations": iterations[0],
            "nodes_here": len(best),
            "node_sum_here": sum(best),
            "nodes_expected": len(expected),
            "node_sum_expected": sum(expected),
            "wrong_labels": wrong,
            "nodes_elsewhere": elsewhere,
            "records_delivered": stats.records_delivered,
            "notifications_delivered": stats.notifications_delivered,
            "network": stats.network,
        }
    )


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/_net_worker.py")
    parser.add_argument("mode", choices=["throughput", "loop", "ring", "raw", "cc"])
    parser.add_argument("--records", type=int, default=1_000_000, help="throughput: records fed; ring: a batch's")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    {"throughput": run_throughput, "loop": run_loop, "ring": run_ring, "raw": run_raw, "cc": run_cc}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
