"""The wire codec: msgpack, with extension types for what msgpack cannot say natively.

A `Codec` turns a *batch* of records into one msgpack array (`Codec.encode_records`) and
back (`Codec.decode_records`); `Codec.encode` / `Codec.decode` do the same for one control
message. Batches, not records, are the unit: one ``packb`` call per batch costs about as
much as a few records, and records that msgpack can say natively never leave C.

What round-trips exactly
------------------------
``None``, ``bool``, ``int`` (from ``-2**63`` to ``2**64 - 1``), ``float``, ``str``,
``bytes``, ``tuple``, ``dict`` (any hashable keys, tuple keys included), ``set``,
``frozenset``, and any type registered with `register_codec` — nested in any way.

The one lossy conversion: lists arrive as tuples
------------------------------------------------
msgpack has one array type. The codec packs in msgpack's default (non-strict) mode, so
tuples *and* lists are packed as arrays, and it unpacks with ``use_list=False``, so every
array comes back as a **tuple**. Tuples — by far the common record shape — therefore
round-trip exactly, and a list inside a record arrives as a tuple with the same items.
The alternative, wrapping every tuple (or every list) in an extension type so that both
survive, measured 15-20x slower to pack and 4x slower to unpack: the price of keeping
lists would be paid by every tuple record. (``decode_records`` itself returns a ``list``
of records; only arrays *inside* records become tuples.)

For the same reason — msgpack's packer checks ``isinstance`` — instances of *subclasses*
of the native types arrive as the base type: a namedtuple or a `timely.Timestamp` as a
plain tuple (rebuild with the class), an ``IntEnum`` as an int, an ``OrderedDict`` as a
dict, a ``bytearray`` or ``memoryview`` as bytes, a subclass of set as a set. Registering
a codec for a subclass of tuple, list, dict, int, float, str or bytes is refused, since
msgpack would never ask for it.

Extension types
---------------
Extension codes 0..15 are reserved for timely (`EXT_SET`, `EXT_FROZENSET`, `EXT_PICKLE`);
16..127 are for user types. ``register_codec(cls, encode, decode, code=None)`` adds a type
to the module's default registry, which every `Codec` consults: ``encode(obj)`` returns
any value this codec can encode (it is packed with the same codec), ``decode(value)``
rebuilds the object. Without ``code``, the code is derived from a stable hash of
``cls.__module__ + '.' + cls.__qualname__``, the same in every process; a collision with
another registered class is refused with a `CodecError` (pass an explicit ``code``).
Register at import time, identically in every process: a code the receiver does not know
is refused. A `Codec` may also carry its own registrations (`Codec.register`), which take
precedence over the default registry.

pickle
------
Only with ``Codec(allow_pickle=True)``: an object the codec cannot otherwise encode (an
unregistered type, an int beyond 64 bits) is pickled into `EXT_PICKLE`. A codec without
``allow_pickle`` refuses to *decode* a pickled value — a peer must not be able to make this
process unpickle — so enable it only on a trusted cluster, in every process.

Errors
------
Every failure is a `CodecError` naming the offending type, or, for received bytes, what was
wrong with them; an exception from a user's encode/decode function is chained as
``__cause__``. This module is pure (no I/O, no asyncio) and thread-safe: a `Codec` keeps
no buffers between calls.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from timely.errors import CodecError

__all__ = [
    "EXT_FROZENSET",
    "EXT_PICKLE",
    "EXT_SET",
    "FIRST_USER_CODE",
    "LAST_USER_CODE",
    "Codec",
    "CodecRegistry",
    "DEFAULT_REGISTRY",
    "register_codec",
]

EXT_SET = 0
"""Extension code of a set: its elements, packed as one array with the same codec."""
EXT_FROZENSET = 1
"""Extension code of a frozenset, packed as `EXT_SET` is."""
EXT_PICKLE = 2
"""Extension code of a pickled object; decoded only by a codec with ``allow_pickle=True``."""
FIRST_USER_CODE = 16
"""Codes below this one are reserved for timely."""
LAST_USER_CODE = 127
"""msgpack extension codes are signed bytes; user codes run up to 127."""

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

# msgpack packs instances of these (and of their subclasses) natively, so a codec registered
# for such a class would never be called.
_NATIVE: tuple[type, ...] = (tuple, list, dict, int, float, str, bytes, bytearray, memoryview, type(None))

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
        if cls in (set, frozenset) or issubclass(cls, _NATIVE):
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


class Codec:
    """Encode and decode batches of records and control messages. See the module docstring."""

    __slots__ = ("_default", "_ext_hook", "allow_pickle", "registry")

    def __init__(self, allow_pickle: bool = False) -> None:
        self.allow_pickle = allow_pickle
        self.registry = CodecRegistry()
        self._default = self._make_default()
        self._ext_hook = self._make_ext_hook()

    def register(self, cls: type, encode: Encoder, decode: Decoder, code: int | None = None) -> int:
        """Register ``cls`` for this codec only (taking precedence over `DEFAULT_REGISTRY`);
        codes used by another class in either registry are refused. Returns the code."""
        return self.registry.register(cls, encode, decode, code, also_check=(DEFAULT_REGISTRY,))

    # Encoding ------------------------------------------------------------------------
    def encode_records(self, records: list[Any]) -> bytes:
        """One msgpack array holding the records."""
        if type(records) is not list and type(records) is not tuple:
            records = list(records)
        return self._pack(records, "a record", "a batch of records")

    def encode(self, obj: Any) -> bytes:
        """One control message (any value the codec can encode)."""
        return self._pack(obj, "a message", "a message")

    def _pack(self, obj: Any, item: str, whole: str) -> bytes:
        try:
            return msgpack.packb(obj, default=self._default, use_bin_type=True)  # type: ignore[no-any-return]
        except _Unencodable as e:
            raise self._unencodable(item, e) from None
        except _PACK_ERRORS as e:
            raise self._pack_failed(whole, e) from e

    def _make_default(self) -> Callable[[Any], msgpack.ExtType]:
        local = self.registry._by_type
        shared = DEFAULT_REGISTRY._by_type
        allow_pickle = self.allow_pickle
        ExtType = msgpack.ExtType
        packb = msgpack.packb

        def pack_inner(value: Any, inside: str) -> bytes:
            try:
                return packb(value, default=default, use_bin_type=True)  # type: ignore[no-any-return]
            except _Unencodable as e:
                if not e.inside:
                    e.inside = inside
                raise

        def default(obj: Any) -> msgpack.ExtType:
            cls = type(obj)
            entry = local.get(cls) or shared.get(cls)
            if entry is not None:
                try:
                    value = entry.encode(obj)
                except Exception as e:
                    raise CodecError(
                        f"the codec registered for {_describe(cls)} failed to encode {_short_repr(obj)}: "
                        f"{type(e).__name__}: {e}"
                    ) from e
                return ExtType(entry.code, pack_inner(value, f"inside the encoding of a {cls.__qualname__}"))
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
            raise _Unencodable(obj)

        return default

    def _unencodable(self, what: str, e: _Unencodable) -> CodecError:
        obj = e.obj
        cls = type(obj)
        inside = f" {e.inside}" if e.inside else ""
        if isinstance(obj, int) and not isinstance(obj, bool):
            return CodecError(
                f"cannot encode {what} holding an int of {obj.bit_length()} bits (type {_describe(cls)}){inside}: "
                f"msgpack integers are limited to 64 bits ({_INT_MIN} .. {_INT_MAX}); send it as a str or "
                f"bytes, or run with pickle enabled"
            )
        return CodecError(
            f"cannot encode {what} of type {_describe(cls)}{inside}: register a codec with "
            f"timely.net.register_codec({cls.__qualname__}, encode, decode) or run with pickle enabled"
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
        """The records of a batch made by `encode_records`, as a list (arrays inside them
        arrive as tuples)."""
        result = self._unpack(data, "batch of records")
        if type(result) is not tuple:
            raise CodecError(
                f"malformed batch of records ({len(data)} bytes): expected an array of records, "
                f"got a {type(result).__name__}"
            )
        return list(result)

    def decode(self, data: bytes) -> Any:
        """The value of a message made by `encode`."""
        return self._unpack(data, "message")

    def _unpack(self, data: bytes, what: str) -> Any:
        try:
            return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False, ext_hook=self._ext_hook)
        except CodecError:
            raise
        except Exception as e:
            raise CodecError(f"malformed {what} ({len(data)} bytes): {_unpack_reason(e)}") from e

    def _make_ext_hook(self) -> Callable[[int, bytes], Any]:
        local = self.registry._by_code
        shared = DEFAULT_REGISTRY._by_code
        allow_pickle = self.allow_pickle
        unpackb = msgpack.unpackb

        def unpack_inner(data: bytes, what: str) -> Any:
            try:
                return unpackb(data, use_list=False, raw=False, strict_map_key=False, ext_hook=ext_hook)
            except CodecError:
                raise
            except Exception as e:
                raise CodecError(f"malformed {what} ({len(data)} bytes): {_unpack_reason(e)}") from e

        def ext_hook(code: int, data: bytes) -> Any:
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
                if not allow_pickle:
                    raise CodecError(
                        "refusing a pickled record: enable pickle only on a trusted cluster "
                        f"(a peer sent a pickled value of {len(data)} bytes to a codec without allow_pickle)"
                    )
                try:
                    return pickle.loads(data)
                except Exception as e:
                    raise CodecError(f"cannot unpickle a record ({len(data)} bytes): {type(e).__name__}: {e}") from e
            entry = local.get(code) or shared.get(code)
            if entry is None:
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
                    f"{_short_repr(value)}: {type(e).__name__}: {e}"
                ) from e

        return ext_hook


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


def _short_repr(obj: object, limit: int = 80) -> str:
    try:
        text = repr(obj)
    except Exception:
        return f"<{type(obj).__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
