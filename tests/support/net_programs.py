"""Worker programs for tests/net/test_failures.py: every process of a test cluster runs this
file as a script, ``python net_programs.py MODE [args...]`` (directly with ``TIMELY_*`` in its
environment, or under ``timely run``).

Each mode prints what the test checks on stdout, one line per fact:

    JOINED <pid>           the process joined its cluster (``execute`` returned)
    READY <pid>            (mode ``long``) the computation is running across processes
    RESULT <json>          the computation's answer (process 0)
    FAILED <json>          the computation failed: {"type", "message", "info", "stage", "time"}

A failure is printed as ``FAILED`` and then raised again, so that the traceback reaches
stderr and the process exits non-zero. Logging goes to stderr as ``logger:LEVEL:message``,
so a test can tell which logger a warning came from.

Test knobs (environment variables; they patch this process only, never timely's files):

- ``TEST_CONNECT_TIMEOUT`` (seconds) shortens the time a process waits for its peers to join:
  `timely.execute` has no parameter for it, so this sets the default of `TcpTransport.join`'s
  ``connect_timeout`` (30 s).
- ``TEST_RUN_TIMEOUT`` (seconds): the ``timeout`` of `timely.execute` (default 60).
- ``TEST_DELAY_CONNECT`` (``peer:seconds``): wait that long before connecting to that peer.
- ``TEST_LINGER`` (seconds, mode ``stall``): how long processes other than 0 stay in their
  ``with`` block.

Mode ``fake-peer KIND`` is not a timely program: it joins the cluster as process 1 with a
genuine handshake (`TcpTransport.join`, the right secret and the graph's fingerprint), then
writes the malformed bytes KIND names straight onto the connection to process 0, and prints
``GOT <json>`` for every frame it receives back and ``LOST <reason>`` when the connection ends.
KIND ``error-then-reset`` instead fails as a process does (an ERROR frame) and then resets the
connection (see `error_then_reset`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct
import sys
import time
from typing import Any

import msgpack

import timely
from timely._runtime.cluster import DATA, ERROR, PROGRESS
from timely._runtime.config import cluster_from_env
from timely.dataflow import Dataflow
from timely.net.codec import EXT_FROZENSET
from timely.net.framing import MAX_FRAME, frame
from timely.net.tcp import TcpTransport

TOTAL = 100
"""Mode ``sum``: the records 0..TOTAL-1 are spread over the processes and doubled."""
EXPECTED_SUM = 2 * sum(range(TOTAL))


def say(*parts: object) -> None:
    print(*parts, flush=True)


# Graphs -----------------------------------------------------------------------------------------


def build_sum(scope: timely.Scope) -> tuple[timely.Input, list[int]]:
    """Double every record on a worker chosen by the record, then bring every record to worker 0."""
    results: list[int] = []
    inp = scope.new_input("numbers")
    doubled = inp.exchange("spread", lambda r: r).map("double", lambda r: 2 * r)
    doubled.exchange("gather", lambda r: 0).subscribe(lambda t, batch: results.extend(batch), name="collect")
    return inp, results


def build_sum_variant(scope: timely.Scope) -> tuple[timely.Input, list[int]]:
    """`build_sum` with one more stage: a different program (different fingerprint)."""
    results: list[int] = []
    inp = scope.new_input("numbers")
    doubled = inp.exchange("spread", lambda r: r).map("double", lambda r: 2 * r).filter("keep", lambda r: True)
    doubled.exchange("gather", lambda r: 0).subscribe(lambda t, batch: results.extend(batch), name="collect")
    return inp, results


def build_long(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
    inp = scope.new_input("ticks")
    probe = inp.exchange("spread", lambda r: r).map("inc", lambda r: r + 1).probe("done")
    return inp, probe


class Explodes(timely.Vertex):
    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if 13 in records:
            raise ValueError("unlucky record 13")
        self.send_by(self.outputs[0], records, time)


def build_explode(scope: timely.Scope) -> timely.Input:
    inp = scope.new_input("numbers")
    loop = timely.LoopContext(scope, "work")
    out = loop.ingress(inp).stage("explode", Explodes, exchange=lambda r: r)
    loop.egress(out).probe("done")
    return inp


class Opaque:
    """A class with no registered codec: it cannot cross a process boundary."""

    def __init__(self, n: int) -> None:
        self.n = n


def build_unencodable(scope: timely.Scope) -> timely.Input:
    inp = scope.new_input("numbers")
    inp.map("wrap", Opaque).exchange("shuffle", lambda o: o.n).probe("done")
    return inp


class Slow(timely.Vertex):
    """Holds the process in its first callback for a second (blocking: the event loop waits too)."""

    slept = False

    def on_recv(self, edge: int, records: list[Any], time_: timely.Timestamp) -> None:
        if not Slow.slept:
            Slow.slept = True
            time.sleep(1.0)
        self.send_by(self.outputs[0], records, time_)


def build_slow(scope: timely.Scope) -> timely.Input:
    inp = scope.new_input("numbers")
    inp.stage("slow", Slow).exchange("spread", lambda r: r).probe("done")
    return inp


BUILDS = {"sum": build_sum, "sum-variant": build_sum_variant}


# Modes ------------------------------------------------------------------------------------------


def failed(err: BaseException) -> None:
    record = {
        "type": type(err).__name__,
        "message": str(err),
        "info": getattr(err, "info", None),
        "stage": getattr(err, "stage", None),
        "time": str(getattr(err, "time", None)),
    }
    say("FAILED", json.dumps(record))


def joined() -> None:
    say("JOINED", os.getpid())


def run_timeout() -> float:
    return float(os.environ.get("TEST_RUN_TIMEOUT", "60"))


def run_sum(build: Any) -> None:
    processes = int(os.environ.get("TIMELY_PROCESSES", "1"))
    index = int(os.environ.get("TIMELY_PROCESS_INDEX", "0"))
    with timely.execute(build, timeout=run_timeout()) as (comp, (inp, results)):
        joined()
        inp.send(range(index, TOTAL, processes))
    if index == 0:
        say("RESULT", json.dumps({"sum": sum(results), "count": len(results)}))


def run_long(seconds: float) -> None:
    """Epoch after epoch, each waited for across processes, until killed (or `seconds` pass)."""
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    deadline = time.monotonic() + seconds
    with timely.execute(build_long, timeout=seconds + 30) as (comp, (inp, probe)):
        joined()
        epoch = 0
        while time.monotonic() < deadline:
            inp.send(range(index * 1000, index * 1000 + 50))
            epoch += 1
            inp.advance_to(epoch)
            comp.wait_passed(probe, epoch - 1)
            if epoch == 5:
                say("READY", os.getpid())
            time.sleep(0.005)
    say("RESULT", json.dumps({"epochs": epoch}))


def run_explode() -> None:
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    with timely.execute(build_explode, timeout=run_timeout()) as (comp, inp):
        joined()
        if index == 0:
            inp.send([r for r in range(20) if r != 13])
            inp.advance_to(1)
            inp.send([13])


def run_unencodable() -> None:
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    with timely.execute(build_unencodable, timeout=run_timeout()) as (comp, inp):
        joined()
        if index == 0:
            inp.send(range(10))


def run_stall() -> None:
    """Mode ``stall``: process 0 leaves its ``with`` block at once and waits (under
    TEST_RUN_TIMEOUT) for the others, which linger in theirs for ``TEST_LINGER`` seconds."""
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    with timely.execute(build_sum, timeout=run_timeout()) as (comp, (inp, results)):
        joined()
        if index != 0:
            time.sleep(float(os.environ.get("TEST_LINGER", "3")))


def run_slow() -> None:
    """Mode ``slow``: process 0 sends records that its first callback holds for a second, then
    sends on to every process."""
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    with timely.execute(build_slow, timeout=run_timeout()) as (comp, inp):
        joined()
        if index == 0:
            inp.send(range(10))


def run_idle() -> None:
    """Mode ``wait``: join, send a little, and wait for the end (which needs every peer's progress)."""
    with timely.execute(build_sum, timeout=run_timeout()) as (comp, (inp, results)):
        joined()
        inp.send([1, 2, 3])


# The fake peer ----------------------------------------------------------------------------------


def bad_bytes(kind: str) -> tuple[bytes, bool]:
    """The raw bytes to write after the handshake, and whether to close our side after them."""
    if kind == "oversize":
        return struct.pack(">I", MAX_FRAME + 1) + b"\0" * 16, False
    if kind == "garbage":
        return frame(b"\xc1\xc1\xc1\xc1"), False  # 0xc1 is never used in msgpack
    if kind == "unknown-kind":
        return frame(msgpack.packb([99, None])), False
    if kind == "bad-records":
        return frame(msgpack.packb([DATA, [[0, 0, [0], b"\xc1not msgpack"]]])), False
    if kind == "truncated":
        return struct.pack(">I", 100) + b"x" * 10, True
    if kind == "expanding":  # 16 Mi small ints in 16 MiB: about 290 MB once decoded
        ints = b"\xdd" + (16 << 20).to_bytes(4, "big") + b"\x01" * (16 << 20)
        return frame(msgpack.packb([DATA, [[0, 0, [0], ints]]])), False
    if kind == "too-deep":  # 200 nested frozensets (934 bytes): once enough to crash the decoder
        return frame(msgpack.packb([DATA, [[0, 0, [0], nested_frozensets(200)]]])), False
    raise SystemExit(f"unknown kind {kind!r}")


def nested_frozensets(depth: int) -> bytes:
    """A batch of one record, ``frozenset({frozenset({... {1}})})`` ``depth`` deep, as bytes made
    by hand (an encoder refuses to make it past the codec's nesting limit)."""
    elements = msgpack.packb([1])
    for _ in range(depth - 1):
        elements = msgpack.packb([msgpack.ExtType(EXT_FROZENSET, elements)])
    return msgpack.packb([msgpack.ExtType(EXT_FROZENSET, elements)])


FAKE_ERROR = {
    "process": 1,
    "stage": "fake.stage",
    "worker": 1,
    "time": "(0)",
    "kind": "ValueError",
    "message": "stage 'fake.stage' (worker 1) raised ValueError in on_recv at time (0): boom",
}
"""What the fake peer of kind ``error-then-reset`` reports, as a failing process reports its failure."""


async def error_then_reset(transport: TcpTransport) -> None:
    """Fail as a process does: send an ERROR frame, then go; but close the way a process does
    when it has not read everything it was sent, with a reset (SO_LINGER 0) instead of a FIN.
    Sent while process 0 is busy in a callback (mode ``slow``), so it writes to us before it
    reads again."""
    await asyncio.sleep(0.3)
    writer = transport.peers[0].writer
    writer.write(frame(msgpack.packb([ERROR, FAKE_ERROR])))
    await writer.drain()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    say("RESET")


async def negative_progress(transport: TcpTransport) -> None:
    """Take back our worker's capability at the input (a delta it never had to give), which
    empties process 0's view while we are still in the computation; never say goodbye; go
    after 11 s (longer than process 0 used to wait for goodbyes before exiting 0 regardless)."""
    transport.send(0, msgpack.packb([PROGRESS, [[[0], 0, -1]]]))
    await asyncio.sleep(11.0)
    say("LEAVING")
    await transport.close()


async def fake_peer(kind: str) -> None:
    config = cluster_from_env()
    assert config is not None
    build = build_slow if kind == "error-then-reset" else build_sum
    _, _, graph = Dataflow.build(build, config.process_index, config.processes, config.workers)
    transport = await TcpTransport.join(
        config.process_index, config.addresses, config.secret, graph.fingerprint(), connect_timeout=20
    )
    say("JOINED", os.getpid())
    lost = asyncio.Event()

    def on_frame(peer: int, payload: bytes) -> None:
        message = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        say("GOT", json.dumps(message, default=repr))

    def on_lost(peer: int, reason: BaseException) -> None:
        say("LOST", f"{type(reason).__name__}: {reason}")
        lost.set()

    transport.set_handlers(on_frame, on_lost)
    if kind == "error-then-reset":
        await error_then_reset(transport)
        return
    # Write only once process 0 runs its computation (it has sent us something), so that it
    # has left `TcpTransport.join` and set its handlers: the bytes are read as a peer's frame.
    deadline = time.monotonic() + 10
    while not transport.frames_received and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    writer = transport.peers[0].writer
    if kind == "negative-progress":
        await negative_progress(transport)
        return
    data, close = bad_bytes(kind)
    writer.write(data)
    await writer.drain()
    if close:
        writer.write_eof()  # half-close: process 0 sees the truncated frame end; we still read
    try:
        await asyncio.wait_for(lost.wait(), 20)
    except TimeoutError:
        say("TIMEOUT waiting for process 0 to close the connection")
    await transport.close()


def delay_connect(peer: str, seconds: str) -> None:
    connect = TcpTransport._connect

    async def delayed(self: TcpTransport, j: int, *args: Any) -> Any:
        if j == int(peer):
            await asyncio.sleep(float(seconds))
        return await connect(self, j, *args)

    TcpTransport._connect = delayed  # type: ignore[method-assign,assignment]


# ------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(name)s:%(levelname)s:%(message)s", stream=sys.stderr)
    if "TEST_CONNECT_TIMEOUT" in os.environ:
        TcpTransport.join.__func__.__kwdefaults__["connect_timeout"] = float(os.environ["TEST_CONNECT_TIMEOUT"])  # type: ignore[attr-defined]
    if "TEST_DELAY_CONNECT" in os.environ:
        delay_connect(*os.environ["TEST_DELAY_CONNECT"].split(":"))
    mode = argv[0]
    if mode == "fake-peer":
        asyncio.run(fake_peer(argv[1]))
        return
    try:
        if mode in BUILDS:
            run_sum(BUILDS[mode])
        elif mode == "wait":
            run_idle()
        elif mode == "quiet":
            with timely.execute(build_sum, timeout=run_timeout()):
                joined()  # and close the input at once, having sent nothing
        elif mode == "stall":
            run_stall()
        elif mode == "slow":
            run_slow()
        elif mode == "long":
            run_long(float(argv[1]) if len(argv) > 1 else 40.0)
        elif mode == "explode":
            run_explode()
        elif mode == "unencodable":
            run_unencodable()
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except timely.TimelyError as err:
        failed(err)
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
