"""``net.seal``: what sealing frames costs (docs/network.md), and what TLS 1.3 would have cost.

``net.seal.frame.<size>``: microseconds to seal and open one frame of that many bytes
(AES-256-GCM, `timely.net._seal`), against the baseline of encoding and decoding the
records that fill such a frame (ints, with the codec): what a frame costs anyway.

``net.seal.stream.sealed``: MB/s of 1 MiB frames from one `TcpTransport` to another over
loopback TCP, both in this process (one event loop: the figure counts both ends' CPU), sealed,
against the same transports in clear (``clear``), measured alternately in the same run. Every
frame must arrive, intact and in order.

``net.seal.stream.tls``: the alternative not taken: the same frames over asyncio streams with
TLS 1.3 (a self-signed certificate made here), against the same streams in clear.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import secrets
import socket
import ssl
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from bench._harness import Context, benchmark
from timely import Codec
from timely.net._seal import Opener, Sealer
from timely.net.tcp import TcpTransport

FRAME_SIZES = (64, 4096, 65536, 1 << 20)
STREAM_FRAME = 1 << 20
STREAM_FRAMES_FULL, STREAM_FRAMES_QUICK = 256, 64
RUNS_FULL, RUNS_QUICK = 5, 2


def _best(fn: object, reps: int, runs: int) -> float:
    """Best seconds per call of ``fn()`` over ``runs`` runs of ``reps`` calls."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(reps):
            fn()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - started) / reps)
    return best


def _run(coroutine: Coroutine[Any, Any, float]) -> float:
    """Run on the event loop the runtime uses (uvloop when it is installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


async def _transports(encrypt: bool, frames: int, payload: bytes) -> float:
    """Seconds to move ``frames`` copies of ``payload`` from process 1 to process 0."""
    addresses = [("127.0.0.1", p) for p in _free_ports(2)]
    secret = secrets.token_bytes(32)
    a, b = await asyncio.gather(*(TcpTransport.join(i, addresses, secret, "bench", encrypt=encrypt) for i in range(2)))
    got: list[int] = []
    done = asyncio.get_running_loop().create_future()

    def on_frame(peer: int, data: bytes) -> None:
        if data != payload:
            done.set_exception(AssertionError("a frame arrived changed"))
        got.append(len(data))
        if len(got) == frames and not done.done():
            done.set_result(None)

    a.set_handlers(on_frame, lambda peer, exc: None if done.done() else done.set_exception(exc))
    b.set_handlers(lambda peer, data: None, lambda peer, exc: None)
    started = time.perf_counter()
    for _ in range(frames):
        b.send(0, payload)
        while b.congested():
            await asyncio.sleep(0)
    await asyncio.wait_for(done, 120)
    seconds = time.perf_counter() - started
    await asyncio.gather(a.close(1.0), b.close(1.0))
    return seconds


def _tls_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "timely-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("timely-bench")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_3
    server.load_cert_chain(cert_file, key_file)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_3
    client.load_verify_locations(cert_file)
    return server, client


async def _streams(tls: tuple[ssl.SSLContext, ssl.SSLContext] | None, frames: int, payload: bytes) -> float:
    """Seconds to move ``frames`` length-prefixed copies of ``payload`` over asyncio streams."""
    done = asyncio.get_running_loop().create_future()
    header = len(payload).to_bytes(4, "big")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(frames):
            length = int.from_bytes(await reader.readexactly(4), "big")
            if await reader.readexactly(length) != payload:
                done.set_exception(AssertionError("a frame arrived changed"))
                return
        done.set_result(None)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls[0] if tls else None)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls[1] if tls else None, server_hostname="timely-bench" if tls else None
    )
    started = time.perf_counter()
    for _ in range(frames):
        writer.writelines((header, payload))
        await writer.drain()
    await asyncio.wait_for(done, 120)
    seconds = time.perf_counter() - started
    writer.close()
    server.close()
    return seconds


@benchmark("net.seal", "us to seal and open a frame; MB/s of 1 MiB frames sealed vs clear, and TLS 1.3 vs clear")
def seal(ctx: Context) -> None:
    runs = RUNS_QUICK if ctx.quick else RUNS_FULL
    key = os.urandom(32)
    codec = Codec()
    for size in FRAME_SIZES:
        payload = os.urandom(size)
        sealer, opener = Sealer(key), Opener(key, "the benchmark")

        def round_trip(sealer: Sealer = sealer, opener: Opener = opener, payload: bytes = payload) -> None:
            opener.open(sealer.seal(payload))

        reps = max(3, 20_000_000 // (size + 1000) // 10)
        sealing = _best(round_trip, reps, runs)
        records = list(range(size // 3))  # about 3 bytes each, encoded: a frame of about `size` bytes
        blob = codec.encode_records(records)
        ctx.check(codec.decode_records(blob) == records, "the codec lost records")

        def encoding(records: list[int] = records) -> None:
            codec.decode_records(codec.encode_records(records))

        coding = _best(encoding, max(1, reps // 10), runs)
        ctx.record(f"net.seal.frame.{size}", sealing * 1e6, "us/frame", "encode+decode", coding * 1e6)
        ctx.progress(
            f"{size:>8} bytes: seal+open {sealing * 1e6:.2f} us, encoding+decoding its {len(records):,} ints "
            f"({len(blob):,} bytes) {coding * 1e6:.1f} us"
        )

    frames = STREAM_FRAMES_QUICK if ctx.quick else STREAM_FRAMES_FULL
    payload = os.urandom(STREAM_FRAME)
    megabytes = frames * STREAM_FRAME / 1e6
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        tls = _tls_contexts(Path(directory))
        for run in range(1, runs + 1):
            line = []
            for name, measure in (
                ("clear", lambda: _transports(False, frames, payload)),
                ("sealed", lambda: _transports(True, frames, payload)),
                ("streams", lambda: _streams(None, frames, payload)),
                ("tls", lambda: _streams(tls, frames, payload)),
            ):
                load = os.getloadavg()[0]
                rate = megabytes / _run(measure())
                best[name] = max(best.get(name, 0.0), rate)
                line.append(f"{name} {rate:.0f} (load {load:.1f})")
            ctx.progress(f"run {run}/{runs}, {frames} frames of 1 MiB, MB/s: " + ", ".join(line))
    ctx.record("net.seal.stream.clear", best["clear"], "MB/s")
    ctx.record("net.seal.stream.sealed", best["sealed"], "MB/s", "clear", best["clear"])
    ctx.record("net.seal.stream.streams", best["streams"], "MB/s")
    ctx.record("net.seal.stream.tls", best["tls"], "MB/s", "streams", best["streams"])
