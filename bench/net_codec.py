"""``net.codec``: nanoseconds per record to encode and decode a batch of 1024, by record shape.

The codec keeps every record's type across processes (``docs/network.md``): a census of the
types in each batch sends list-free batches down msgpack's fast path, and batches holding lists
down the strict encoding (tuples marked). Baseline ``msgpack_fast_path``: msgpack alone as the
codec used it before — ``packb`` and ``unpackb(use_list=False)`` — on the same batch, which is
exact for list-free batches and turns lists into tuples for the others. Best of several runs;
every decoded batch must equal what was sent, types included.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgpack

from bench._harness import Context, benchmark
from timely import Codec

BATCH = 1024
RUNS_FULL, RUNS_QUICK = 7, 3
SECONDS_PER_RUN = 0.2

SHAPES: dict[str, Callable[[int], Any]] = {
    "int": lambda i: i,
    "pair": lambda i: (i, 2 * i),
    "linq_difference": lambda i: ((i, i + 1), 1),
    "str_pair": lambda i: (str(i), i),
    "list_pair": lambda i: [i, 2 * i],
    "tuple_with_list": lambda i: (i, [i, i + 1, i + 2]),
}
"""Record shapes: the first four hold no list (the fast path), the last two do."""


def _types(value: Any) -> Any:
    if type(value) in (tuple, list):
        return (type(value), tuple(_types(v) for v in value))
    return type(value)


def _per_record(fn: Callable[[], Any], runs: int) -> float:
    """Best nanoseconds per record of ``fn`` (which handles one batch) over ``runs`` timed runs."""
    started = time.perf_counter()
    fn()
    reps = max(1, int(SECONDS_PER_RUN / max(time.perf_counter() - started, 1e-6)))
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - started) / reps)
    return best / BATCH * 1e9


@benchmark("net.codec", "ns/record to encode and decode batches of 1024 by record shape, vs msgpack's fast path alone")
def codec(ctx: Context) -> None:
    runs = RUNS_QUICK if ctx.quick else RUNS_FULL
    codec = Codec()
    gc.collect()
    for shape, make in SHAPES.items():
        batch = [make(i) for i in range(BATCH)]
        data = codec.encode_records(batch)
        back = codec.decode_records(data)
        ctx.check(back == batch and list(map(_types, back)) == list(map(_types, batch)), f"{shape}: types changed")
        plain = msgpack.packb(batch)
        encode = _per_record(partial(codec.encode_records, batch), runs)
        encode_plain = _per_record(partial(msgpack.packb, batch), runs)
        decode = _per_record(partial(codec.decode_records, data), runs)
        decode_plain = _per_record(partial(msgpack.unpackb, plain, use_list=False), runs)
        ctx.record(f"net.codec.encode.{shape}", encode, "ns/record", "msgpack_fast_path", encode_plain)
        ctx.record(f"net.codec.decode.{shape}", decode, "ns/record", "msgpack_fast_path", decode_plain)
        ctx.progress(
            f"{shape}: encode {encode:.0f} ns (msgpack {encode_plain:.0f}), decode {decode:.0f} ns "
            f"(msgpack {decode_plain:.0f})"
        )
