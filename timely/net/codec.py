"""The wire codec: msgpack, with extension types for what msgpack cannot say natively.

A `Codec` turns a *batch* of records into bytes (`Codec.encode_records`) and back
(`Codec.decode_records`); `Codec.encode` / `Codec.decode` do the same for one control
message. Batches, not records, are the unit: one ``packb`` call per batch costs about as
much as a few records, and records that msgpack can say natively never leave C.

What round-trips exactly
------------------------
A value comes out with the type it went in, nested in any way: ``None``, ``bool``, ``int``
(from ``-2**63`` to ``2**64 - 1``), ``float``, ``str``, ``bytes``, ``tuple``, ``list``,
``dict`` (any hashable keys), ``set``, ``frozenset``, `timely.Timestamp`, any type
registered with `register_codec`, and — with pickle enabled — anything picklable. So a
record leaves an exchange with the same type whether it crossed a process or stayed in one
(where it is not copied at all).

Tuples and lists: two encodings, chosen per batch
-------------------------------------------------
msgpack has one array type. Most batches hold no list at all (tuples are by far the common
record shape), and for them the fast encoding is exact: pack in msgpack's default mode,
unpack with ``use_list=False`` so every array comes back a tuple. Before packing, a census
of the types in the batch, level by level in C (``set(map(type, ...))`` and
``gc.get_referents``), checks that every value msgpack would pack natively is of an exact
native type other than ``list``. A batch that holds a list (or an instance of a subclass of
a native type) is packed instead in msgpack's *strict* mode, where exact lists are arrays
and everything else goes to ``default``: a tuple becomes an array ending in the `EXT_TUPLE`
marker, and the whole batch is wrapped in `EXT_EXACT`, which unpacks arrays as lists and
turns marked ones back into tuples (``list_hook``). The census costs about as much as packing
a list-free batch and nothing on unpacking it; marking tuples costs far less than an extension
type per tuple (about 20x on packing). ``python -m bench net.codec`` measures both paths, and
``docs/network.md`` quotes the figures.

Subclasses of the native types (a namedtuple, an ``IntEnum``, an ``OrderedDict``) reach
``default`` in the strict encoding: a codec registered for the class wins, then pickle if
enabled; otherwise they arrive as the base type (a namedtuple as a plain tuple, an
``IntEnum`` as an int), as msgpack would pack them. ``bytearray`` and ``memoryview`` arrive
as ``bytes``.

Extension types
---------------
Extension codes 0..15 are reserved for timely (`EXT_SET`, `EXT_FROZENSET`, `EXT_PICKLE`,
`EXT_TUPLE`, `EXT_TIMESTAMP`, `EXT_EXACT`); 16..127 are for user types.
``register_codec(cls, encode, decode, code=None)`` adds a type to the module's default
registry, which every `Codec` consults: ``encode(obj)`` returns any value this codec can
encode (it is packed with the same codec), ``decode(value)`` rebuilds the object from that
value, which arrives with its own types (lists as lists, tuples as tuples). Without
``code``, the code is derived from a stable hash of ``cls.__module__ + '.' +
cls.__qualname__``, the same in every process; a collision with another registered class is
refused with a `CodecError` (pass an explicit ``code``). Register at import time,
identically in every process: a code the receiver does not know is refused. A `Codec` may
also carry its own registrations (`Codec.register`), which take precedence over the default
registry.

pickle
------
Only with ``Codec(allow_pickle=True)`` — what ``timely.execute(..., pickle=True)`` and
``timely run --pickle`` give the runtime: an object the codec cannot otherwise encode (an
unregistered type, a subclass of a native type, an int beyond 64 bits) is pickled into
`EXT_PICKLE`. A codec without ``allow_pickle`` refuses to *decode* a pickled value — a peer
must not be able to make this process unpickle — so enable it only on a trusted cluster, in
every process.

Nesting
-------
Sets, frozensets and registered types are each packed as a msgpack value of their own inside
an extension, and so is a value holding lists (the strict encoding); decoding one takes a
nested ``unpackb`` call, which costs some 40 KiB of C stack (msgpack's fixed parse stack). So both
sides count these *levels* — how many such values enclose a value — and refuse more than
`NESTING_LIMIT`: the encoder with a `CodecError` in the sender, the decoder with a
`CodecError` for bytes no encoder would make (200 nested frozensets, 934 bytes, used to
overflow the decoder's C stack). Native tuples, lists and dicts nest within one ``unpackb``
and are bounded by msgpack's own limits (511 levels), which the decoder also reports cleanly.

Errors
------
Every failure is a `CodecError` naming the offending type, or, for received bytes, what was
wrong with them; an exception from a user's encode/decode function is chained as
``__cause__``. This module is pure (no I/O, no asyncio) and thread-safe: a `Codec` keeps
no buffers between calls.

Why over 400 lines in one module: the two encodings, the census that chooses between them,
the extension types and the registry must agree on every type code and every path back, and
the error messages that name a failing record and what to do live next to the path that fails.
"""

from __future__ import annotations

import gc
import hashlib
import pickle
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from timely.errors import CodecError
from timely.timestamp import Timestamp, _from_flat

__all__ = [
    "EXT_EXACT",
    "EXT_FROZENSET",
    "EXT_PICKLE",
    "EXT_SET",
    "EXT_TIMESTAMP",
    "EXT_TUPLE",
    "FIRST_USER_CODE",
    "LAST_USER_CODE",
    "NESTING_LIMIT",
    "Codec",
    "CodecRegistry",
    "Opaque",
    "DEFAULT_REGISTRY",
    "register_codec",
]

EXT_SET = 0
"""Extension code of a set: its elements, packed as one array with the same codec."""
EXT_FROZENSET = 1
"""Extension code of a frozenset, packed as `EXT_SET` is."""
EXT_PICKLE = 2
"""Extension code of a pickled object; decoded only by a codec with ``allow_pickle=True``."""
EXT_TUPLE = 3
"""An empty marker, the last item of an array that is a tuple, inside an `EXT_EXACT` value."""
EXT_TIMESTAMP = 4
"""Extension code of a `timely.Timestamp`: its coordinates, packed as one array."""
EXT_EXACT = 5
"""A value packed in msgpack's strict mode: arrays are lists, except those ending in the
`EXT_TUPLE` marker, which are tuples. Used for values that hold lists."""
FIRST_USER_CODE = 16
"""Codes below this one are reserved for timely."""
LAST_USER_CODE = 127
"""msgpack extension codes are signed bytes; user codes run up to 127."""

NESTING_LIMIT = 16
"""Levels of nested sets, frozensets, registered types and list-holding values a value may
have, encoding or decoding (see "Nesting" above). Each level takes about 40 KiB of C stack
to decode: 16 fit in a thread with a 1 MiB stack, where about 200 crashed the default 8 MiB
main thread."""

_nesting = threading.local()
"""``level``: how many nested extension values the codec is inside, on this thread."""


def _enter_level(what: str) -> int:
    """Go one level deeper (returns the level to restore); `CodecError` past `NESTING_LIMIT`."""
    level: int = getattr(_nesting, "level", 0)
    if level >= NESTING_LIMIT:
        raise CodecError(
            f"{what} nested more than {NESTING_LIMIT} levels deep in sets, frozensets, registered types "
            f"or values holding lists (the codec's NESTING_LIMIT): flatten the record"
        )
    _nesting.level = level + 1
    return level


_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

# msgpack packs instances of these natively in its default mode, subclasses included, so a
# codec registered for one of them would never be called. Their subclasses may be registered:
# the strict encoding, which any batch holding one uses, hands them to ``default``.
_NATIVE: tuple[type, ...] = (tuple, list, dict, int, float, str, bytes, bytearray, memoryview, type(None))

_NoneType = type(None)
_PLAIN = frozenset({_NoneType, bool, int, float, str, bytes})
"""Types msgpack packs and unpacks exactly, holding nothing."""
_WALK = _PLAIN | {tuple, dict}
"""Types whose contents the census walks into: exact tuples and dicts."""
_OPAQUE = frozenset({set, frozenset, bytearray, memoryview, msgpack.ExtType, msgpack.Timestamp})
"""Types the census need not look into: packed through ``default`` (each its own encoded
value) or as bytes, whatever the encoding."""
_CENSUS_DEPTH = 512
"""Levels the census walks before it gives up and picks the strict encoding (whose packer
then reports a value nested too deeply, or that contains itself)."""
_get_referents = gc.get_referents


def _needs_strict(values: list[Any]) -> bool:
    """Whether packing ``values`` in msgpack's default mode (arrays unpacked as tuples) would
    lose a type: some value msgpack would pack natively is a list or a subclass of a native type.

    A census, one nesting level at a time, in C: the set of types at this level; if they are
    all exact tuples, dicts and plain scalars, the next level is whatever those tuples and
    dicts refer to (``gc.get_referents``: a tuple's items, a dict's values and non-str keys).
    Other types cost a Python-level filter of the level. Sets and registered types are packed
    through ``default`` as values of their own, so the census does not look inside them.
    """
    level = values
    for _ in range(_CENSUS_DEPTH):
        if not level:
            return False
        types = set(map(type, level))
        if types <= _PLAIN:
            return False
        if not types <= _WALK:
            for t in types - _WALK:
                if t not in _OPAQUE and issubclass(t, _NATIVE):
                    return True
            if tuple not in types and dict not in types:
                return False
            level = [x for x in level if type(x) is tuple or type(x) is dict]
        level = _get_referents(*level)
    return True


Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(cls: type) -> str:
    """``'Foo' (module bar)``, as error messages name a type."""
    return f"{cls.__qualname__!r} (module {cls.__module__})"


def auto_code(cls: type) -> int:
    """The extension code derived from ``cls``'s module and qualified name: stable across
    processes and runs (unlike ``hash``), in ``FIRST_USER_CODE..LAST_USER_CODE``."""
    digest = hashlib.blake2b(_type_name(cls).encode(), digest_size=8).digest()
    return FIRST_USER_CODE + int.from_bytes(digest, "big") % (LAST_USER_CODE - FIRST_USER_CODE + 1)


class _Entry:
    __slots__ = ("cls", "code", "decode", "encode")

    def __init__(self, cls: type, code: int, encode: Encoder, decode: Decoder) -> None:
        self.cls = cls
        self.code = code
        self.encode = encode
        self.decode = decode


class CodecRegistry:
    """User types and their extension codes. `DEFAULT_REGISTRY` is the one every `Codec`
    consults; a `Codec` also has its own, consulted first."""

    def __init__(self) -> None:
        self._by_type: dict[type, _Entry] = {}
        self._by_code: dict[int, _Entry] = {}
        self._lock = threading.Lock()

    def register(
        self,
        cls: type,
        encode: Encoder,
        decode: Decoder,
        code: int | None = None,
        *,
        also_check: Iterable[CodecRegistry] = (),
    ) -> int:
        """Register ``cls``; return its extension code.

        Registering a class again replaces its functions (and its code). A code already used
        by another class, here or in a registry of ``also_check``, is refused.
        """
        if not isinstance(cls, type):
            raise CodecError(f"register_codec needs a class, got {cls!r}")
        if cls in (set, frozenset, bool) or cls in _NATIVE or issubclass(cls, memoryview):
            base = next((b for b in (bool, *_NATIVE, set, frozenset) if issubclass(cls, b)), object)
            raise CodecError(
                f"cannot register a codec for {_describe(cls)}: it is {'' if cls is base else 'a subclass of '}"
                f"{base.__name__}, which the codec encodes natively (as {base.__name__}), so the codec would "
                f"never be called; convert the objects yourself or use a class that does not derive from "
                f"{base.__name__}"
            )
        if not callable(encode) or not callable(decode):
            raise CodecError(f"register_codec({cls.__qualname__}, encode, decode): encode and decode must be callable")
        explicit = code is not None
        if code is None:
            code = auto_code(cls)
        elif type(code) is not int or not FIRST_USER_CODE <= code <= LAST_USER_CODE:
            raise CodecError(
                f"extension code {code!r} for {_describe(cls)} is out of range: user codes are "
                f"{FIRST_USER_CODE}..{LAST_USER_CODE} (0..{FIRST_USER_CODE - 1} are reserved for timely)"
            )
        with self._lock:
            for registry in (self, *also_check):
                other = registry._by_code.get(code)
                if other is not None and other.cls is not cls:
                    how = "given" if explicit else "derived from its name"
                    raise CodecError(
                        f"extension code {code} ({how}) for {_type_name(cls)} collides with "
                        f"{_type_name(other.cls)}, registered with the same code; pass an explicit, unused "
                        f"code={FIRST_USER_CODE}..{LAST_USER_CODE} to register_codec for one of them "
                        f"(the same in every process)"
                    )
            old = self._by_type.pop(cls, None)
            if old is not None:
                del self._by_code[old.code]
            entry = _Entry(cls, code, encode, decode)
            self._by_type[cls] = entry
            self._by_code[code] = entry
        return code

    def unregister(self, cls: type) -> None:
        """Forget ``cls`` (no error if it was not registered)."""
        with self._lock:
            old = self._by_type.pop(cls, None)
            if old is not None:
                del self._by_code[old.code]

    def code_of(self, cls: type) -> int | None:
        entry = self._by_type.get(cls)
        return None if entry is None else entry.code

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_type

    def __len__(self) -> int:
        return len(self._by_type)


DEFAULT_REGISTRY = CodecRegistry()
"""The registry `register_codec` adds to and every `Codec` consults."""


def register_codec(cls: type, encode: Encoder, decode: Decoder, code: int | None = None) -> int:
    """Teach every `Codec` to send instances of ``cls`` (exactly that class, not subclasses).

    ``encode(obj)`` returns any value the codec can encode; ``decode(value)`` rebuilds the
    object from that value as it arrives (arrays as tuples). ``code`` is the extension code,
    16..127; without it, one is derived from ``cls``'s module and qualified name. Call this
    at import time, identically in every process. Returns the code.

    >>> class Point:
    ...     def __init__(self, x, y): self.x, self.y = x, y
    >>> code = register_codec(Point, lambda p: (p.x, p.y), lambda v: Point(*v))
    >>> Codec().decode(Codec().encode(Point(1, 2))).y
    2
    >>> DEFAULT_REGISTRY.unregister(Point)
    """
    return DEFAULT_REGISTRY.register(cls, encode, decode, code)


class _Unencodable(Exception):
    """Raised inside ``default``; turned into a `CodecError` worded for the caller."""

    def __init__(self, obj: object, inside: str = "") -> None:
        super().__init__()
        self.obj = obj
        self.inside = inside


_PACK_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)
_KEPT_PACKER_BYTES = 1 << 18
"""A packer that packed more than this (its initial buffer) is dropped, not kept for reuse."""


class PackerPool:
    """``msgpack.packb`` with these options, its packers kept for reuse: ``packb`` makes a
    packer a call, which with ``default`` is half of packing a small batch. A packer is not
    reentrant (a ``default`` may pack a value of its own while the outer one is being packed)
    nor to be shared between threads, so each pack takes one off the list (atomic under the
    GIL) or makes one, and puts it back after, unless the value was large (a packer keeps its
    grown buffer) or packing failed."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._spare: list[msgpack.Packer] = []

    def pack(self, value: Any) -> bytes:
        spare = self._spare
        try:
            packer = spare.pop()
        except IndexError:
            packer = msgpack.Packer(**self._options)
        packed: bytes = packer.pack(value)
        if len(packed) <= _KEPT_PACKER_BYTES:
            spare.append(packer)
        return packed


PICKLE_HINT = "on a trusted cluster, enable pickle with timely.execute(..., pickle=True) or timely run --pickle"
"""How a user enables pickle, as error messages say it."""


class _TupleMark:
    """What the `EXT_TUPLE` marker decodes to, until ``list_hook`` turns its array into a tuple."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<timely tuple marker>"


_TUPLE_MARK = _TupleMark()
_TUPLE_EXT = msgpack.ExtType(EXT_TUPLE, b"")


def _from_strict_array(items: list[Any]) -> Any:
    """``list_hook`` of the strict encoding: an array ending in the tuple marker is a tuple."""
    if items and items[-1] is _TUPLE_MARK:
        items.pop()
        return tuple(items)
    return items


def _as_base(obj: Any) -> Any:
    """An instance of a subclass of a native type as msgpack's default mode would pack it: as
    the base type (the strict encoding hands such instances to ``default``)."""
    if isinstance(obj, tuple):
        return [*obj, _TUPLE_EXT]
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, int):
        value = int.__int__(obj)
        if not _INT_MIN <= value <= _INT_MAX:
            raise _Unencodable(obj)
        return value
    if isinstance(obj, float):
        return float.__float__(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    raise _Unencodable(obj)


@dataclass(frozen=True)
class Opaque:
    """A value an ``opaque`` `Codec` could not rebuild (a type registered in another process, a
    pickle), kept as its extension code and bytes."""

    code: int
    data: bytes


class Codec:
    """Encode and decode batches of records and control messages. See the module docstring.

    ``opaque``: decode a value of a type this process has not registered, or a pickle, as an
    `Opaque` instead of failing; for a tool that reads a file's structure (epochs, counts) but
    not its records, such as the launcher checking a run's delivery."""

    __slots__ = ("_default", "_ext_hook", "_pack_value", "_unpack_value", "allow_pickle", "opaque", "registry")

    def __init__(self, allow_pickle: bool = False, *, opaque: bool = False) -> None:
        self.allow_pickle = allow_pickle
        self.opaque = opaque
        self.registry = CodecRegistry()
        self._default, self._pack_value = self._make_packer()
        self._ext_hook, self._unpack_value = self._make_ext_hook()

    def register(self, cls: type, encode: Encoder, decode: Decoder, code: int | None = None) -> int:
        """Register ``cls`` for this codec only (taking precedence over `DEFAULT_REGISTRY`);
        codes used by another class in either registry are refused. Returns the code."""
        return self.registry.register(cls, encode, decode, code, also_check=(DEFAULT_REGISTRY,))

    # Encoding ------------------------------------------------------------------------
    def encode_records(self, records: Iterable[Any]) -> bytes:
        """The records as one msgpack value (an array, or `EXT_EXACT` when they hold lists)."""
        batch = records if type(records) is list else list(records)
        return self._pack(batch, batch, "a record", "a batch of records")

    def encode(self, obj: Any) -> bytes:
        """One control message (any value the codec can encode)."""
        return self._pack(obj, [obj], "a message", "a message")

    def _pack(self, obj: Any, census: list[Any], item: str, whole: str) -> bytes:
        try:
            return self._pack_value(obj, census)
        except _Unencodable as e:
            raise self._unencodable(item, e) from None
        except _PACK_ERRORS as e:
            raise self._pack_failed(whole, e) from e

    def _make_packer(self) -> tuple[Callable[[Any], Any], Callable[[Any, list[Any]], bytes]]:
        local = self.registry._by_type
        shared = DEFAULT_REGISTRY._by_type
        allow_pickle = self.allow_pickle
        ExtType = msgpack.ExtType
        packb = msgpack.packb
        needs_strict = _needs_strict
        mark = _TUPLE_EXT
        enter_level = _enter_level
        nesting = _nesting

        def pack_value(value: Any, census: list[Any], nested: bool = False) -> bytes:
            """``value`` packed so that it decodes to the same types: msgpack's default mode
            unless the census of ``census`` (the values inside ``value``) finds a list. The
            strict wrapper is a level of nesting inside another value (``nested``), not at the
            root, which the decoder unwraps without a nested unpack."""
            if not needs_strict(census):
                return pack_plain(value)
            level = enter_level("cannot encode a value") if nested else 0
            try:
                strict = packb(value, default=default, use_bin_type=True, strict_types=True)
            finally:
                if nested:
                    nesting.level = level
            return packb(ExtType(EXT_EXACT, strict), use_bin_type=True)  # type: ignore[no-any-return]

        def pack_inner(value: Any, inside: str) -> bytes:
            level = enter_level("cannot encode a value")
            try:
                return pack_value(value, [value], True)
            except _Unencodable as e:
                if not e.inside:
                    e.inside = inside
                raise
            finally:
                nesting.level = level

        def default(obj: Any) -> Any:
            cls = type(obj)
            if cls is tuple:  # only in the strict encoding: an array marked as a tuple
                return [*obj, mark]
            entry = local.get(cls) or shared.get(cls)
            if entry is not None:
                try:
                    value = entry.encode(obj)
                except Exception as e:
                    raise CodecError(
                        f"the codec registered for {_describe(cls)} failed to encode {short_repr(obj)}: "
                        f"{type(e).__name__}: {e}"
                    ) from e
                return ExtType(entry.code, pack_inner(value, f"inside the encoding of a {cls.__qualname__}"))
            if cls is Timestamp:
                return ExtType(EXT_TIMESTAMP, packb(tuple(obj)))
            if isinstance(obj, frozenset):
                return ExtType(EXT_FROZENSET, pack_inner(tuple(obj), "inside a frozenset"))
            if isinstance(obj, set):
                return ExtType(EXT_SET, pack_inner(tuple(obj), "inside a set"))
            if allow_pickle:
                try:
                    return ExtType(EXT_PICKLE, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
                except Exception as e:
                    raise CodecError(
                        f"cannot encode a value of type {_describe(cls)}: it has no registered codec and "
                        f"pickle failed: {type(e).__name__}: {e}"
                    ) from e
            return _as_base(obj)

        pack_plain = PackerPool(default=default, use_bin_type=True).pack  # what pack_value packs with
        return default, pack_value

    def _unencodable(self, what: str, e: _Unencodable) -> CodecError:
        obj = e.obj
        cls = type(obj)
        inside = f" {e.inside}" if e.inside else ""
        if isinstance(obj, int) and not isinstance(obj, bool):
            return CodecError(
                f"cannot encode {what} holding an int of {obj.bit_length()} bits (type {_describe(cls)}){inside}: "
                f"msgpack integers are limited to 64 bits ({_INT_MIN} .. {_INT_MAX}); send it as a str or "
                f"bytes, or, {PICKLE_HINT}"
            )
        return CodecError(
            f"cannot encode {what} of type {_describe(cls)}{inside}: register a codec with "
            f"timely.register_codec({cls.__qualname__}, encode, decode) (at import time, in every process), "
            f"or, {PICKLE_HINT}"
        )

    @staticmethod
    def _pack_failed(what: str, e: BaseException) -> CodecError:
        if isinstance(e, RecursionError) or (isinstance(e, ValueError) and "recursion limit" in str(e)):
            reason = "it is nested too deeply (or contains itself)"
        elif isinstance(e, UnicodeEncodeError):
            reason = f"a str is not valid UTF-8 ({e.reason} at position {e.start})"
        else:
            reason = f"{type(e).__name__}: {e}"
        return CodecError(f"cannot encode {what}: {reason}")

    # Decoding ------------------------------------------------------------------------
    def decode_records(self, data: bytes) -> list[Any]:
        """The records of a batch made by `encode_records`, as a list."""
        result = self._unpack(data, "batch of records")
        if type(result) is tuple:
            return list(result)
        if type(result) is list:
            return result
        raise CodecError(
            f"malformed batch of records ({len(data)} bytes): expected an array of records, "
            f"got a {type(result).__name__}"
        )

    def decode(self, data: bytes) -> Any:
        """The value of a message made by `encode`."""
        return self._unpack(data, "message")

    def _unpack(self, data: bytes, what: str) -> Any:
        exact = _root_exact(data)
        if exact is not None:  # a value holding lists: unwrapped here, not a nested unpack
            return self._unpack_value(exact, what, True)
        return self._unpack_value(data, what, False)

    def _make_ext_hook(self) -> tuple[Callable[[int, bytes], Any], Callable[[bytes, str, bool], Any]]:
        local = self.registry._by_code
        shared = DEFAULT_REGISTRY._by_code
        allow_pickle = self.allow_pickle
        opaque = self.opaque
        unpackb = msgpack.unpackb
        from_strict_array = _from_strict_array
        enter_level = _enter_level
        nesting = _nesting

        def unpack_value(data: bytes, what: str, strict: bool) -> Any:
            try:
                if strict:
                    return unpackb(
                        data,
                        use_list=True,
                        list_hook=from_strict_array,
                        raw=False,
                        strict_map_key=False,
                        ext_hook=ext_hook,
                    )
                return unpackb(data, use_list=False, raw=False, strict_map_key=False, ext_hook=ext_hook)
            except CodecError:
                raise
            except Exception as e:
                raise CodecError(f"malformed {what} ({len(data)} bytes): {_unpack_reason(e)}") from e

        def unpack_inner(data: bytes, what: str, strict: bool = False) -> Any:
            """A value inside an extension value: one level deeper (a nested unpack)."""
            level = enter_level(f"refusing a {what} ({len(data)} bytes):")
            try:
                return unpack_value(data, what, strict)
            finally:
                nesting.level = level

        def ext_hook(code: int, data: bytes) -> Any:
            if code == EXT_TUPLE:
                if data:
                    raise CodecError(f"malformed tuple marker ({len(data)} bytes): it carries no data")
                return _TUPLE_MARK
            if code == EXT_EXACT:
                return unpack_inner(data, "value holding lists", strict=True)
            if code == EXT_TIMESTAMP:
                try:  # ints only: no extension hook, so no nesting
                    flat = unpackb(data, use_list=False)
                except Exception as e:
                    raise CodecError(f"malformed timestamp ({len(data)} bytes): {_unpack_reason(e)}") from e
                if type(flat) is not tuple or not flat or any(type(c) is not int or c < 0 for c in flat):
                    raise CodecError(f"malformed timestamp: expected non-negative ints, got {short_repr(flat)}")
                return _from_flat(flat)
            if code in (EXT_SET, EXT_FROZENSET):
                kind = "set" if code == EXT_SET else "frozenset"
                items = unpack_inner(data, kind)
                if type(items) is not tuple:
                    raise CodecError(
                        f"malformed {kind}: expected an array of its elements, got a {type(items).__name__}"
                    )
                try:
                    return set(items) if code == EXT_SET else frozenset(items)
                except TypeError as e:
                    raise CodecError(f"malformed {kind}: {e}") from e
            if code == EXT_PICKLE:
                if opaque:
                    return Opaque(code, data)
                if not allow_pickle:
                    raise CodecError(
                        f"refusing a pickled record ({len(data)} bytes): a peer has pickle enabled and this "
                        f"process does not; {PICKLE_HINT}, in every process"
                    )
                try:
                    return pickle.loads(data)
                except Exception as e:
                    raise CodecError(f"cannot unpickle a record ({len(data)} bytes): {type(e).__name__}: {e}") from e
            entry = local.get(code) or shared.get(code)
            if entry is None:
                if opaque and code >= FIRST_USER_CODE:
                    return Opaque(code, data)
                if code < FIRST_USER_CODE:
                    raise CodecError(
                        f"unknown extension code {code} ({len(data)} bytes): reserved by timely but unused; "
                        f"the peer runs a different version of timely or sent garbage"
                    )
                raise CodecError(
                    f"unknown extension code {code} ({len(data)} bytes): the sending process registered a "
                    f"codec that this process did not; register the same types, with the same codes, in "
                    f"every process (at import time)"
                )
            value = unpack_inner(data, f"encoding of a {entry.cls.__qualname__}")
            try:
                return entry.decode(value)
            except Exception as e:
                raise CodecError(
                    f"the codec registered for {_describe(entry.cls)} (extension code {code}) failed to decode "
                    f"{short_repr(value)}: {type(e).__name__}: {e}"
                ) from e

        return ext_hook, unpack_value


_EXT_HEADERS = {0xC7: (1, 2), 0xC8: (2, 3), 0xC9: (4, 5)}
"""msgpack's ext 8/16/32 formats: the size of the length field, and where the type byte is."""
_FIXEXT_LENGTHS = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
"""msgpack's fixext formats (type byte at 1): their payload lengths."""


def _root_exact(data: bytes) -> bytes | None:
    """The payload when ``data`` is one `EXT_EXACT` value, as the encoder wraps a value
    holding lists; else None."""
    if not data:
        return None
    header = _EXT_HEADERS.get(data[0])
    if header is not None:
        size, at = header
        if len(data) <= at:
            return None
        length = int.from_bytes(data[1 : 1 + size], "big")
    elif data[0] in _FIXEXT_LENGTHS:
        at, length = 1, _FIXEXT_LENGTHS[data[0]]
    else:
        return None
    if len(data) <= at or data[at] != EXT_EXACT:
        return None
    if len(data) != at + 1 + length:
        return None  # malformed: left to msgpack, which says how
    return data[at + 1 :]


def _unpack_reason(e: BaseException) -> str:
    if isinstance(e, msgpack.ExtraData):
        return f"{len(e.extra)} bytes of trailing data after the value"
    if isinstance(e, msgpack.FormatError):
        return "an invalid msgpack type byte"
    if isinstance(e, msgpack.StackError):
        return "nested too deeply"
    if isinstance(e, UnicodeDecodeError):
        return f"a str that is not valid UTF-8 ({e.reason})"
    if isinstance(e, ValueError) and "incomplete input" in str(e):
        return "truncated (the data ends in the middle of a value)"
    if isinstance(e, TypeError) and "unhashable" in str(e):
        return f"a map key or set element that cannot be hashed ({e})"
    return f"{type(e).__name__}: {e}"


def short_repr(obj: object, limit: int = 80) -> str:
    """``repr(obj)`` cut to ``limit`` characters, never raising: how error messages show a value."""
    try:
        text = repr(obj)
    except Exception:
        return f"<{type(obj).__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The decode budget ---------------------------------------------------------------------------------

OBJECT_BYTES = 112
"""The most memory one msgpack value of a byte or two can become once decoded, with room to
spare: an empty map is one byte and becomes a new dict (80 bytes with its allocator header)
plus the slots that hold it (16). Small ints cost 8-16 bytes each: a 16 MiB batch of them
decodes to about 290 MB."""

_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_FIXED.update({0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8})
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin and str: the length's size
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # array, map: (length size, items each)


def decoded_size_bound(data: bytes, budget: int) -> int:
    """An upper bound on the memory ``data`` (msgpack) takes once decoded, for deciding before
    decoding whether to: `OBJECT_BYTES` per value, plus the length of every str and bin, looking
    inside extension values (sets, registered types) too. Stops counting, and returns a value
    above ``budget``, as soon as it passes it. Malformed data is left to the decoder."""
    if len(data) * OBJECT_BYTES <= budget:
        return len(data) * OBJECT_BYTES  # cannot be more: every value takes at least a byte
    total = 0
    stack = [(data, 0, len(data))]
    while stack:
        buf, pos, end = stack.pop()
        while pos < end:
            total += OBJECT_BYTES
            if total > budget:
                return total
            b = buf[pos]
            pos += 1
            if b <= 0x7F or b >= 0xE0 or 0x80 <= b <= 0x9F:  # fixint, fixmap, fixarray: items follow
                continue
            if 0xA0 <= b <= 0xBF:
                n = b & 0x1F
            elif b in _FIXED:
                pos += _FIXED[b]
                continue
            elif b in _SIZED:
                size = _SIZED[b]
                n = int.from_bytes(buf[pos : pos + size], "big")
                pos += size
            elif b in _CONTAINERS:
                pos += _CONTAINERS[b][0]
                continue
            elif b in _EXT or b in _FIXEXT:
                if b in _EXT:
                    size = _EXT[b]
                    n = int.from_bytes(buf[pos : pos + size], "big")
                    pos += size + 1
                else:
                    n = _FIXEXT[b]
                    pos += 1
                stack.append((buf, pos, min(pos + n, end)))  # an extension's payload is msgpack too
                pos += n
                continue
            else:
                return total  # malformed: the decoder says how
            total += n
            pos += n
    return total
