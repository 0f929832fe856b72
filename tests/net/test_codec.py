"""The wire codec (timely.net.codec) and length-prefixed framing (timely.net.framing)."""

from __future__ import annotations

import itertools
import pickle
import struct
import subprocess
import sys
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.net as net
from tests.support.net_programs import nested_frozensets
from timely.errors import CodecError, FrameError, TimelyError
from timely.net import (
    DEFAULT_REGISTRY,
    EXT_EXACT,
    EXT_PICKLE,
    MAX_FRAME,
    Codec,
    CodecRegistry,
    FrameReader,
    frame,
    frame_header,
    register_codec,
)
from timely.net.codec import NESTING_LIMIT, OBJECT_BYTES, auto_code, decoded_size_bound
from timely.timestamp import Timestamp

# --- user types used by the tests ------------------------------------------------------


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)

    def __hash__(self) -> int:
        return hash((Point, self.x, self.y))

    def __repr__(self) -> str:
        return f"Point({self.x!r}, {self.y!r})"


class Unregistered:
    def __eq__(self, other: object) -> bool:
        return type(other) is Unregistered

    def __hash__(self) -> int:
        return 1


def point_codec() -> Codec:
    codec = Codec()
    codec.register(Point, lambda p: (p.x, p.y), lambda v: Point(*v), code=40)
    return codec


# --- strategies ----------------------------------------------------------------------

ints64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints64,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
# Hashable values that survive the round trip unchanged (usable as dict keys, set elements).
hashables = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(inner, max_size=4),
    ),
    max_leaves=12,
)
timestamps = st.lists(st.integers(0, 2**32), min_size=1, max_size=3).map(lambda c: Timestamp(c[0], c[1:]))
exact_values = st.recursive(
    st.one_of(scalars, timestamps, st.builds(Point, hashables, hashables)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.lists(inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.dictionaries(hashables, inner, max_size=4),
        st.builds(Point, inner, inner),
    ),
    max_leaves=20,
)
records = st.lists(exact_values, max_size=20)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types, all the way down (1 == 1.0 == True would hide a bug)."""
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list, Timestamp):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a) is Point:
        return same(a.x, b.x) and same(a.y, b.y)
    if type(a) is float:
        return struct.pack(">d", a) == struct.pack(">d", b)  # tells -0.0 from 0.0
    return bool(a == b)


# --- round trips ---------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(records)
def test_records_round_trip_exactly(batch: list[Any]) -> None:
    codec = point_codec()
    out = codec.decode_records(codec.encode_records(batch))
    assert type(out) is list
    assert len(out) == len(batch)
    assert all(same(a, b) for a, b in zip(out, batch)), (out, batch)


@settings(max_examples=60, deadline=None)
@given(exact_values)
def test_messages_round_trip_exactly(value: Any) -> None:
    codec = point_codec()
    assert same(codec.decode(codec.encode(value)), value)


def test_lists_and_tuples_keep_their_types_concretely() -> None:
    codec = Codec()
    batch = [[1, [2, 3]], ([4],), (1, (2, [3])), {"k": [1, (2,)]}, [], ()]
    out = codec.decode_records(codec.encode_records(batch))
    assert out == batch
    assert all(same(a, b) for a, b in zip(out, batch, strict=True))
    assert type(out[0][1]) is list and type(out[1][0]) is list and type(out[2][1]) is tuple
    assert type(out[3]["k"]) is list and type(out[3]["k"][1]) is tuple


def test_a_batch_without_lists_takes_the_fast_encoding() -> None:
    # Plain msgpack (one array, arrays decoded as tuples) for list-free batches; the strict
    # encoding, wrapped in EXT_EXACT, only when a list (or a subclass of a native type) is inside.
    codec = Codec()
    plain = codec.encode_records([(1, (2, "a")), ((3, 4), {"k": (5,)}), 7, {(1, 2): frozenset({(3,)})}])
    assert type(msgpack.unpackb(plain, use_list=False, strict_map_key=False, ext_hook=lambda c, d: c)) is tuple
    for holds_a_list in ([(1, (2, [3]))], [{"k": (1, [2])}], [Timestamp(1)], [(1, namedtuple("NT", "a")(2))]):  # type: ignore[arg-type]
        data = codec.encode_records(holds_a_list)
        assert msgpack.unpackb(data, ext_hook=lambda code, _: code) == net.EXT_EXACT, holds_a_list


def test_messages_keep_lists_and_tuples() -> None:
    codec = Codec()
    for value in ([1, 2], (1, 2), [(1, [2])], {"a": [1]}, {1, (2, 3)}, [Timestamp(2, (1,))]):
        assert same(codec.decode(codec.encode(value)), value), value


def test_nested_containers_round_trip() -> None:
    codec = point_codec()
    record = (
        1,
        "a",
        b"a",
        None,
        True,
        1.5,
        {1, 2},
        frozenset({(1, "x"), frozenset({3})}),
        {(1, 2): "pair", "k": {(3,): {4}}, frozenset({5}): 6},
        Point({1}, (Point(2, 3), [4])),
    )
    (out,) = codec.decode_records(codec.encode_records([record]))
    assert out[:8] == record[:8]
    assert type(out[2]) is bytes and type(out[1]) is str  # str and bytes stay distinct
    assert out[4] is True and type(out[5]) is float
    assert type(out[6]) is set and type(out[7]) is frozenset
    assert out[8] == {(1, 2): "pair", "k": {(3,): {4}}, frozenset({5}): 6}
    assert same(out[9], Point({1}, (Point(2, 3), [4])))


def test_empty_batch_and_tuple_input() -> None:
    codec = Codec()
    assert codec.decode_records(codec.encode_records([])) == []
    assert codec.decode_records(codec.encode_records(((1, 2), (3, 4)))) == [(1, 2), (3, 4)]


def test_subclasses_of_native_types_arrive_as_the_base_type() -> None:
    # Without a codec for the class or pickle: what msgpack itself would make of them.
    codec = Codec()
    NT = namedtuple("NT", "a b")

    class Number(int):
        pass

    class Text(str):
        def __str__(self) -> str:
            return "not the value"

    class Mapping(dict):  # type: ignore[type-arg]
        pass

    out = codec.decode(codec.encode((NT(1, [2]), Number(5), Text("v"), Mapping(k=[1]))))
    assert same(out, ((1, [2]), 5, "v", {"k": [1]}))
    out = codec.decode(codec.encode(NT(1, 2)))
    assert same(out, (1, 2))


def test_timestamps_arrive_as_timestamps() -> None:
    codec = Codec()
    t = Timestamp(3, (1, 2))
    out = codec.decode_records(codec.encode_records([(t, 1), t]))
    assert same(out, [(t, 1), t])
    assert out[1].counters == (1, 2)


def test_subclasses_of_native_types_keep_their_type_with_pickle() -> None:
    out = Codec(allow_pickle=True).decode(Codec(allow_pickle=True).encode([NamedPair(1, 2), (NamedPair(3, 4),)]))
    assert type(out[0]) is NamedPair and type(out[1][0]) is NamedPair and out[1][0].b == 4


NamedPair = namedtuple("NamedPair", "a b")


# --- registration ----------------------------------------------------------------------


def test_default_registry_is_consulted_by_every_codec() -> None:
    class Celsius:
        def __init__(self, degrees: float) -> None:
            self.degrees = degrees

    with pytest.raises(CodecError):
        Codec().encode(Celsius(1.0))
    code = register_codec(Celsius, lambda c: c.degrees, Celsius)
    try:
        assert code == auto_code(Celsius)
        assert 16 <= code <= 127
        data = Codec().encode_records([(Celsius(21.5), 1)])  # a codec made after registering
        assert msgpack.unpackb(data, ext_hook=lambda c, _: c) == [[code, 1]]
        (out,) = Codec().decode_records(data)  # and another one decodes it
        assert type(out[0]) is Celsius and out[0].degrees == 21.5
    finally:
        DEFAULT_REGISTRY.unregister(Celsius)
    with pytest.raises(CodecError, match="unknown extension code"):
        Codec().decode_records(data)


def test_auto_code_is_stable_and_in_range() -> None:
    # Derived from the name only: the same in every process and run (not Python's hash()).
    import hashlib

    name = f"{Point.__module__}.Point".encode()
    expected = 16 + int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big") % 112
    assert auto_code(Point) == expected


def test_code_collisions_are_refused() -> None:
    class A:
        pass

    class B:
        pass

    codec = Codec()
    assert codec.register(A, repr, repr, code=50) == 50
    with pytest.raises(CodecError, match=r"extension code 50 \(given\) .*B collides with .*A"):
        codec.register(B, repr, repr, code=50)
    # Collisions with the default registry are refused as well.
    register_codec(B, repr, repr, code=51)
    try:
        with pytest.raises(CodecError, match="collides with"):
            codec.register(A, repr, repr, code=51)
    finally:
        DEFAULT_REGISTRY.unregister(B)
    # Re-registering the same class replaces it (and frees its old code).
    assert codec.register(A, repr, repr, code=52) == 52
    assert codec.register(B, repr, repr, code=50) == 50


def test_auto_code_collision_is_refused_with_advice() -> None:
    # Find two class names whose derived codes collide (112 codes: a collision is quick to find).
    registry = CodecRegistry()
    seen: dict[int, type] = {}
    for i in range(1000):
        cls = type(f"T{i}", (), {})
        code = auto_code(cls)
        if code in seen:
            registry.register(seen[code], repr, repr)
            with pytest.raises(CodecError, match=r"derived from its name.*pass an explicit, unused code"):
                registry.register(cls, repr, repr)
            registry.register(cls, repr, repr, code=16 if code != 16 else 17)
            return
        seen[code] = cls
    pytest.fail("no collision among 1000 names")  # pragma: no cover


@pytest.mark.parametrize("code", [0, 15, 128, -1, 1.5])
def test_reserved_and_out_of_range_codes_are_refused(code: Any) -> None:
    with pytest.raises(CodecError, match=r"out of range: user codes are 16\.\.127"):
        Codec().register(Point, repr, repr, code=code)


@pytest.mark.parametrize("cls", [tuple, list, dict, int, bool, str, bytes, float, set, frozenset])
def test_registering_natively_encoded_types_is_refused(cls: type) -> None:
    with pytest.raises(CodecError, match="encodes natively"):
        Codec().register(cls, repr, repr)


def test_a_codec_registered_for_a_tuple_subclass_is_used() -> None:
    NT = namedtuple("NT", "a b")
    codec = Codec()
    codec.register(NT, tuple, lambda v: NT(*v), code=61)
    out = codec.decode_records(codec.encode_records([NT(1, [2]), (NT(3, 4), 5)]))
    assert type(out[0]) is NT and out[0].b == [2] and type(out[1][0]) is NT


def test_user_codec_failures_are_codec_errors() -> None:
    def bad_encode(p: Point) -> Any:
        raise RuntimeError("boom")

    codec = Codec()
    codec.register(Point, bad_encode, lambda v: Point(*v), code=41)
    with pytest.raises(CodecError, match="codec registered for 'Point'.*failed to encode.*boom") as info:
        codec.encode_records([(Point(1, 2),)])
    assert isinstance(info.value.__cause__, RuntimeError)

    good = Codec()
    good.register(Point, lambda p: (p.x, p.y), lambda v: Point(*v), code=41)
    data = good.encode_records([Point(1, 2)])
    picky = Codec()
    picky.register(Point, repr, lambda v: Point(*v, 3), code=41)  # type: ignore[call-arg]  # decode raises TypeError
    with pytest.raises(CodecError, match="failed to decode") as info:
        picky.decode_records(data)
    assert isinstance(info.value.__cause__, TypeError)


def test_kept_packers_survive_reentry_failure_and_large_values() -> None:
    """The codec keeps its msgpack packers for reuse (`PackerPool`): a registered encoder that
    encodes through the same codec while the outer batch is being packed, a failure in the
    middle of a pack, and a value larger than a kept packer's buffer must each leave every
    later encoding byte for byte what a fresh codec makes (a shared packer reentered would
    interleave the two values' bytes)."""

    def reference() -> Codec:
        fresh = Codec()
        fresh.register(Point, lambda p: (p.x, p.y), lambda v: Point(*v), code=42)
        return fresh

    codec = Codec()
    fail = [False]

    def encode(p: Point) -> Any:
        if fail[0]:
            raise RuntimeError("boom")
        return codec.encode_records([p.x, p.y])  # reenters this codec's packing

    codec.register(Point, encode, lambda v: Point(*codec.decode_records(v)), code=42)
    batch = [Point(i, -i) for i in range(50)] + [(1, "a"), None]
    first = codec.encode_records(batch)
    assert codec.decode_records(first) == batch
    fail[0] = True
    with pytest.raises(CodecError, match="boom"):
        codec.encode_records([1, 2, Point(3, 4)])
    fail[0] = False
    large = [bytes(1000)] * 400  # about 400 KB: more than a kept packer's buffer
    assert codec.encode_records(large) == reference().encode_records(large)
    assert codec.decode_records(codec.encode_records(large)) == large
    for records in ([1, 2, 3], [(i, str(i)) for i in range(100)], [{"k": 1.5}]):
        assert codec.encode_records(records) == reference().encode_records(records)
    assert codec.encode_records(batch) == first
    assert codec.decode_records(codec.encode_records(batch)) == batch


# --- encoding errors -------------------------------------------------------------------


def test_unregistered_type_is_refused_naming_the_type() -> None:
    with pytest.raises(CodecError) as info:
        Codec().encode_records([(1, Unregistered())])
    message = str(info.value)
    assert f"'Unregistered' (module {Unregistered.__module__})" in message
    assert "register_codec(Unregistered, encode, decode)" in message
    assert "pickle" in message
    assert isinstance(info.value, TimelyError)


def test_unregistered_type_nested_in_a_set_says_where() -> None:
    with pytest.raises(CodecError, match="'Unregistered'.*inside a frozenset"):
        Codec().encode({1: frozenset({Unregistered()})})


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_ints_beyond_64_bits_are_refused(value: int) -> None:
    with pytest.raises(CodecError, match=rf"int of {value.bit_length()} bits \(type 'int'.*limited to 64 bits"):
        Codec().encode_records([(value,)])
    # The 64-bit extremes are fine.
    codec = Codec()
    assert codec.decode_records(codec.encode_records([2**64 - 1, -(2**63)])) == [2**64 - 1, -(2**63)]


def test_other_encoding_failures_are_codec_errors() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(CodecError, match="nested too deeply"):
        Codec().encode_records([looped])
    with pytest.raises(CodecError, match="not valid UTF-8"):
        Codec().encode("\ud800")


# --- nesting: one limit for the encoder and the decoder ------------------------------------


def frozensets(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = frozenset([value])
    return value


def points(depth: int, holding_lists: bool) -> Any:
    """Points nested ``depth`` deep; each one's encoding holds a list when ``holding_lists``."""
    value: Any = 0
    for _ in range(depth):
        value = Point([value] if holding_lists else value, 1)
    return value


def nesting_cases() -> list[tuple[str, Callable[[int], Any], int]]:
    """(name, value of a given depth, levels each step of depth takes)."""
    return [
        ("frozensets", frozensets, 1),
        ("a set of frozensets", lambda d: {frozensets(d - 1)}, 1),
        ("points", lambda d: points(d, holding_lists=False), 1),
        ("points holding lists", lambda d: points(d, holding_lists=True), 2),
    ]


@pytest.mark.parametrize(("name", "make", "cost"), nesting_cases(), ids=[c[0] for c in nesting_cases()])
def test_values_at_the_nesting_limit_round_trip_and_one_past_it_are_refused(
    name: str, make: Callable[[int], Any], cost: int
) -> None:
    codec = Codec()
    codec.register(Point, lambda p: (p.x, p.y), lambda v: Point(*v), code=40)
    deepest = NESTING_LIMIT // cost
    at_limit = make(deepest)
    assert codec.decode_records(codec.encode_records([at_limit, 7])) == [at_limit, 7]
    assert codec.decode(codec.encode(at_limit)) == at_limit
    too_deep = make(deepest + 1) if cost == 1 else Point([make(deepest)], 1)
    with pytest.raises(CodecError, match=rf"cannot encode a value nested more than {NESTING_LIMIT} levels deep"):
        codec.encode_records([too_deep])
    with pytest.raises(CodecError, match=rf"nested more than {NESTING_LIMIT} levels"):
        codec.encode(too_deep)
    # The codec is usable afterwards: the failed attempt left no level counted.
    assert codec.decode_records(codec.encode_records([at_limit])) == [at_limit]


@pytest.mark.parametrize("depth", [NESTING_LIMIT, NESTING_LIMIT + 1, 200, 5000])
def test_the_decoder_refuses_bytes_nested_past_the_limit_the_encoder_keeps(depth: int) -> None:
    # Hand-made bytes, as a peer could send: the decoder takes exactly what an encoder could make.
    data = nested_frozensets(depth)
    if depth <= NESTING_LIMIT:
        assert data == Codec().encode_records([frozensets(depth)])
        assert Codec().decode_records(data) == [frozensets(depth)]
    else:
        with pytest.raises(CodecError, match=rf"refusing a frozenset \(\d+ bytes\): nested more than {NESTING_LIMIT}"):
            Codec().decode_records(data)


def test_strict_wrappers_nested_in_each_other_are_refused() -> None:
    # EXT_EXACT inside EXT_EXACT never comes from an encoder; each is a nested unpack.
    data = msgpack.packb([1])
    for _ in range(300):
        data = msgpack.packb(msgpack.ExtType(EXT_EXACT, data))
    with pytest.raises(CodecError, match=f"nested more than {NESTING_LIMIT} levels"):
        Codec().decode(data)


def test_a_value_at_the_limit_decodes_in_a_thread_with_a_one_mib_stack() -> None:
    # What the limit is chosen for: it fits a small thread stack (each level takes about 40 KiB).
    # In a child process, so that a crash is a failed assertion, not a dead test run.
    program = (
        "import threading\n"
        "from tests.support.net_programs import nested_frozensets\n"
        "from timely.net import Codec\n"
        f"data = nested_frozensets({NESTING_LIMIT})\n"
        "threading.stack_size(1 << 20)\n"
        "t = threading.Thread(target=lambda: print(len(repr(Codec().decode_records(data)))))\n"
        "t.start(); t.join()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(repr([frozensets(NESTING_LIMIT)]))


# --- the decode budget: a bound on what bytes become, known before decoding them -----------


def decoded_bytes(data: bytes) -> int:
    """What decoding ``data`` really allocates (its peak, by tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        value = Codec().decode_records(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del value
    return peak


@pytest.mark.parametrize(
    "records",
    [
        list(range(200_000)),
        [1] * 200_000,
        [{} for _ in range(50_000)],
        [(i, (i, i)) for i in range(50_000)],
        ["x" * 1000 for _ in range(2000)],
        [frozenset(range(10)) for _ in range(5000)],
        [[i, [i]] for i in range(20_000)],
    ],
    ids=["ints", "small ints", "empty dicts", "nested tuples", "strings", "frozensets", "lists"],
)
def test_the_decoded_size_bound_is_above_what_decoding_takes(records: list[Any]) -> None:
    data = Codec().encode_records(records)
    bound = decoded_size_bound(data, 1 << 40)
    assert bound >= decoded_bytes(data), (bound, decoded_bytes(data))


def test_the_decoded_size_bound_refuses_a_bomb_and_passes_large_strings() -> None:
    budget = 64 << 20
    bomb = b"\xdd" + (4 << 20).to_bytes(4, "big") + b"\x01" * (4 << 20)  # 4 Mi small ints, 4 MiB
    assert decoded_size_bound(bomb, budget) > budget
    strings = Codec().encode_records(["x" * (10 << 20), b"y" * (10 << 20)])  # 20 MiB that stay 20 MiB
    assert len(strings) * OBJECT_BYTES > budget  # not the quick answer: it looks inside
    assert decoded_size_bound(strings, budget) < 21 << 20


# --- pickle ---------------------------------------------------------------------------


def test_pickle_only_when_allowed() -> None:
    trusting = Codec(allow_pickle=True)
    data = trusting.encode_records([(Unregistered(), 2**70, {Unregistered()})])
    assert trusting.decode_records(data) == [(Unregistered(), 2**70, {Unregistered()})]
    with pytest.raises(CodecError, match=r"refusing a pickled record .* pickle=True\) or timely run --pickle"):
        Codec().decode_records(data)


class _Bomb:
    def __reduce__(self) -> Any:
        return (pytest.fail, ("a codec without allow_pickle unpickled a peer's data",))


def test_a_peer_cannot_make_us_unpickle() -> None:
    # A hand-made frame: a pickle in the reserved code, nested inside a set inside a tuple.
    evil = msgpack.packb(msgpack.ExtType(EXT_PICKLE, pickle.dumps(_Bomb())))
    data = msgpack.packb([(1, msgpack.ExtType(0, msgpack.packb([msgpack.ExtType(EXT_PICKLE, evil)])))])
    with pytest.raises(CodecError, match="refusing a pickled record"):
        Codec().decode_records(data)
    with pytest.raises(CodecError, match="refusing a pickled record"):
        Codec().decode(msgpack.packb(msgpack.ExtType(EXT_PICKLE, pickle.dumps(_Bomb()))))


def test_registered_codec_wins_over_pickle() -> None:
    codec = Codec(allow_pickle=True)
    codec.register(Point, lambda p: (p.x, p.y), lambda v: Point(*v), code=42)
    data = codec.encode(Point(1, 2))
    assert msgpack.unpackb(data, ext_hook=lambda code, _: code) == 42
    assert point_codec().registry.code_of(Point) == 40


# --- malformed bytes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\x92\x01", "truncated"),
        (b"\xc1", "invalid msgpack type byte"),
        (b"\x91\x01\x02\x03", "2 bytes of trailing data"),
        (b"\x91\xa2\xff\xfe", "not valid UTF-8"),
        (b"\x05", "expected an array of records, got a int"),
        (msgpack.packb([msgpack.ExtType(99, b"")]), "unknown extension code 99"),
        (msgpack.packb([msgpack.ExtType(9, b"")]), "unknown extension code 9 .*reserved by timely"),
        (msgpack.packb([msgpack.ExtType(0, b"\x05")]), "malformed set: expected an array"),
        (msgpack.packb([msgpack.ExtType(1, b"\x92\x01")]), r"malformed frozenset \(2 bytes\): truncated"),
        (msgpack.packb([msgpack.ExtType(0, msgpack.packb([{1: 2}]))]), "malformed set: unhashable"),
        (b"\x91\x81\x81\x01\x02\x03", "cannot be hashed"),
    ],
)
def test_malformed_bytes_are_codec_errors(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError, match=reason):
        Codec().decode_records(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    try:
        out = Codec().decode_records(data)
    except CodecError:
        return
    assert type(out) is list


# --- framing --------------------------------------------------------------------------


def test_frame_layout() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame_header(258) == b"\x00\x00\x01\x02"
    assert MAX_FRAME == 64 * 1024 * 1024
    with pytest.raises(FrameError, match="frame of 4 bytes: the limit is 3 bytes"):
        frame(b"abcd", max_frame=3)


@st.composite
def chunked_stream(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    payloads = draw(st.lists(st.binary(max_size=40), max_size=12))
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    return payloads, [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(chunked_stream(), st.sampled_from([bytes, bytearray, memoryview]))
def test_frame_reader_with_random_chunkings(case: tuple[list[bytes], list[bytes]], kind: type) -> None:
    payloads, chunks = case
    reader = FrameReader(max_frame=40)
    got: list[bytes] = []
    for chunk in chunks:
        out = reader.feed(kind(chunk))
        assert all(type(f) is bytes for f in out)
        got.extend(out)
    assert got == payloads
    assert reader.buffered == 0
    reader.eof()  # the stream ended on a frame boundary


def test_frame_reader_copies_out_of_the_callers_buffer() -> None:
    reader = FrameReader()
    chunk = bytearray(frame(b"hello") + frame(b"world")[:7])
    (first,) = reader.feed(chunk)
    chunk[4:9] = b"XXXXX"  # the caller reuses its buffer
    chunk += b"ld"  # still resizable: no view of it was kept
    assert first == b"hello"
    assert reader.feed(b"") == []
    assert reader.buffered == 7


def test_oversized_frame_refused_before_its_body_arrives() -> None:
    reader = FrameReader(max_frame=1000)
    assert reader.feed(frame(b"x" * 1000)) == [b"x" * 1000]  # at the limit: fine
    assert reader.feed(b"\x00\x00") == []  # half a header: nothing to judge yet
    with pytest.raises(FrameError, match="refusing a frame of 1001 bytes: the limit is 1000 bytes"):
        reader.feed(b"\x03\xe9")  # the header is complete; no body byte has been sent
    assert reader.buffered == 0
    with pytest.raises(FrameError, match="1001 bytes"):  # the stream is out of step for good
        reader.feed(frame(b"ok"))


def test_oversized_frame_after_good_frames_in_one_chunk() -> None:
    reader = FrameReader(max_frame=10)
    with pytest.raises(FrameError, match=f"refusing a frame of {MAX_FRAME} bytes"):
        reader.feed(frame(b"fine") + struct.pack(">I", MAX_FRAME) + b"body")
    # A partial frame pending, then a header that finishes in a later chunk with body bytes.
    reader = FrameReader(max_frame=10)
    assert reader.feed(b"\x00") == []
    with pytest.raises(FrameError, match="refusing a frame of 16777215 bytes"):
        reader.feed(b"\xff\xff\xff" + b"\x00" * 100)
    assert reader.buffered == 0


def test_default_limit_is_max_frame() -> None:
    reader = FrameReader()
    assert reader.max_frame == MAX_FRAME
    assert reader.feed(struct.pack(">I", MAX_FRAME)) == []
    with pytest.raises(FrameError, match=f"{MAX_FRAME + 1} bytes"):
        FrameReader().feed(struct.pack(">I", MAX_FRAME + 1))


def test_eof_in_the_middle_of_a_frame() -> None:
    reader = FrameReader()
    reader.feed(frame(b"abcdef")[:7])
    with pytest.raises(FrameError, match="3 of 6 bytes arrived"):
        reader.eof()
    reader = FrameReader()
    reader.feed(b"\x00\x00")
    with pytest.raises(FrameError, match="frame header"):
        reader.eof()


def test_codec_and_framing_together() -> None:
    codec = point_codec()
    batches = [[(i, str(i), Point(i, {i})) for i in range(n)] for n in (0, 1, 50)]
    stream = b"".join(frame(codec.encode_records(b)) for b in batches)
    reader = FrameReader()
    frames = [f for i in range(0, len(stream), 7) for f in reader.feed(stream[i : i + 7])]
    assert [codec.decode_records(f) for f in frames] == batches
