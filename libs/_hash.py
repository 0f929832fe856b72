"""A hash of keys that every process computes alike, to route records by key (shared by the libraries).

Python randomises ``hash(str)`` per process unless PYTHONHASHSEED is fixed (``timely run``
fixes it, but a Spark task or a hand-started process may not), so keys are hashed here:
ints by value, strings and bytes by CRC32, None by a constant, tuples and frozensets from
their parts (pairs of ints by Python's tuple hash, which is not salted). Other
types use their own ``__hash__``, which must then be deterministic across processes.
"""

from __future__ import annotations

from typing import Any
from zlib import crc32

__all__ = ["by_first", "stable_hash"]

_MASK = (1 << 61) - 1
_NONE = 0x9E3779B9


def stable_hash(key: Any) -> int:
    """A hash of ``key`` that is the same in every process (see the module's docstring)."""
    t = type(key)
    if t is int:
        return key  # type: ignore[no-any-return]
    if key is None:  # hash(None) comes from None's address, different in every process
        return _NONE
    if t is str:
        return crc32(key.encode("utf-8", "surrogatepass"))
    if t is tuple:
        if len(key) == 2:  # the common key; Python's own hash of ints (and of tuples of ints) is unsalted
            a, b = key
            if type(a) is int and type(b) is int:
                return hash(key)
        h = 0x345678
        for part in key:
            h = ((h * 1000003) ^ (part if type(part) is int else stable_hash(part))) & _MASK
        return h
    if t is bytes:
        return crc32(key)
    if t is frozenset:
        return sum(stable_hash(part) for part in key) & _MASK
    return hash(key)


def by_first(record: tuple[Any, ...]) -> int:
    """The exchange function of ``(key, ...)`` records: route by the key."""
    return stable_hash(record[0])
