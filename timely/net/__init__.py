"""The network layer's pure parts: the wire codec and length-prefixed framing.

Layer rule: this package imports only `timely.errors` and `timely.timestamp` (and the
standard library, msgpack, and `cryptography` for sealed frames); the codec, the framing and
the sealing (`_seal`) do no I/O and never touch asyncio.
"""

from __future__ import annotations

from timely.errors import CodecError, FrameError

from .codec import (
    DEFAULT_REGISTRY,
    EXT_EXACT,
    EXT_FROZENSET,
    EXT_PICKLE,
    EXT_SET,
    EXT_TIMESTAMP,
    EXT_TUPLE,
    FIRST_USER_CODE,
    LAST_USER_CODE,
    NESTING_LIMIT,
    Codec,
    CodecRegistry,
    register_codec,
)
from .framing import HEADER_SIZE, MAX_FRAME, FrameReader, frame, frame_header

__all__ = [
    "DEFAULT_REGISTRY",
    "EXT_EXACT",
    "EXT_FROZENSET",
    "EXT_PICKLE",
    "EXT_SET",
    "EXT_TIMESTAMP",
    "EXT_TUPLE",
    "FIRST_USER_CODE",
    "HEADER_SIZE",
    "LAST_USER_CODE",
    "MAX_FRAME",
    "NESTING_LIMIT",
    "Codec",
    "CodecError",
    "CodecRegistry",
    "FrameError",
    "FrameReader",
    "frame",
    "frame_header",
    "register_codec",
]
