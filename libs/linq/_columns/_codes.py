"""Codes: every record field as one int64, so that arrangements can sort and search them.

An arrangement sorts rows by (key, value, time) and finds keys with `numpy.searchsorted`, so
every key and every field of a stored record must be an int64 whose equality is the value's
equality. The code of a value depends on the value alone (never on the block or the operator
it came through), so the same key meets itself in both inputs of a join:

==========================================  =============================================
value                                       code
==========================================  =============================================
int in ``[-2**61, 2**61)``                  the int itself
pair of ints, each in ``[0, 2**30)``        ``2**61 + (a << 30 | b)``  (edges, labels)
anything else hashable                      ``2**62 + id``, ``id`` from the process's interner
==========================================  =============================================

The three ranges are disjoint, so ``5`` and ``(0, 5)`` never share a code. Interned ids are
process-local: a code never leaves its process (blocks travel with their values, and routing
uses `route_of`, a stable hash, never an id).

Equality is exact, type included, as in the wire codec (and Arrow, and differential
dataflow's Rust types): ``1``, ``1.0`` and ``True`` are three values with three codes (only
an ``int`` is its own code; a bool or a float is interned), so every record comes out of an
arrangement as exactly the value that went in. The interner compares by an exact key
(`_exact`): a value with its type, and tuples and frozensets by their parts' exact keys,
because Python's own ``==`` would make ``(1, "k")`` and ``(True, "k")`` one dict key.

Memory: the interner frees the values no operator holds any more (`release_unused`): every
operator that keeps codes registers itself (`hold_codes`), and once the interner holds twice
as many values as after its last sweep (at least `SWEEP_MIN`), the next safe point marks the
codes those operators still reach (every int64 array and int in their state, found by walking
it) and frees the rest, to be reused by later values. A safe point is a moment when no
operator is half-way through a callback, since a callback's local arrays hold codes that no
state holds yet: the start of a stateful operator's ``on_recv`` (`Stateful.watch`), since
callbacks never nest (a callback's messages leave when it returns). Codes in messages need
no marking, because messages carry values, never codes, except a shared arrangement's
batches, which its arranging operator keeps until every reader has received them. See
docs/linq.md, "Codes".
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import chain, compress, repeat
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

import numpy as np

from ..._hash import stable_hash
from ._kernels import greatest, least

__all__ = [
    "INTERNED",
    "PAIRS",
    "SWEEP_MIN",
    "codes_of_ints",
    "codes_of_tuples",
    "codes_of_values",
    "held_values",
    "hold_codes",
    "release_unused",
    "route_of",
    "values_of",
]

PAIRS = 1 << 61
"""First code of a packed pair of small ints."""
INTERNED = 1 << 62
"""First code of an interned value."""
_SMALL = 1 << 30
_ROUTE_MASK = (1 << 62) - 1

SWEEP_MIN = 65_536
"""Values the interner holds before a safe point first looks for ones no operator holds."""


class _Interner:
    """Values <-> dense ids, with each value's stable hash (its route) kept beside it, the ids
    freed by the last sweep (reused first), and the operators whose state holds codes."""

    __slots__ = ("floats", "free", "hashes", "held", "holders", "ids", "kept", "size", "values")

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.floats: dict[float, int] = {}
        """Top-level floats by value (all floats: no other type meets them here)."""
        self.values: list[Any] = []
        self.hashes = np.zeros(1024, dtype=np.int64)
        self.size = 0
        """Ids ever handed out: every id is below it."""
        self.free: list[int] = []
        """Ids the last sweep freed, not yet reused."""
        self.held = 0
        """Values held now (``size - len(free)``)."""
        self.kept = 0
        """Values the last sweep kept: the next runs once twice as many are held."""
        self.holders: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """The objects whose state may hold codes, each with the thread that made it."""

    def intern(self, value: Any, key: Any, ids: dict[Any, int] | None = None) -> int:
        """The id of ``value``, whose exact key (`_exact`) is ``key``, in ``ids`` (by default
        `ids`; `floats` for a float) (TypeError if it cannot be hashed)."""
        if ids is None:
            ids = self.ids
        i = ids.get(key)
        if i is None:
            if self.free:
                i = self.free.pop()
                self.values[i] = value
            else:
                i = self.size
                self.values.append(value)
                if i >= len(self.hashes):
                    self.hashes = np.concatenate([self.hashes, np.zeros(len(self.hashes), dtype=np.int64)])
                self.size += 1
            ids[key] = i
            self.hashes[i] = stable_hash(value) & _ROUTE_MASK
            self.held += 1
        return i

    def intern_plain(self, keys: list[Any], hashes: Callable[[list[Any]], np.ndarray]) -> np.ndarray:
        """The ids of ``keys``, values that are their own exact keys (`_PLAIN` values and tuples
        of them), found and added a batch at a time: one dict lookup each, made in C, and the new
        ones added together; ``hashes(new)`` gives the routes of the new ones (TypeError if a key
        cannot be hashed)."""
        ids = self.ids
        found = np.fromiter(map(ids.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        miss = np.flatnonzero(found < 0)
        if not len(miss):
            return found
        missed = [keys[i] for i in miss.tolist()]
        new = list(dict.fromkeys(missed))  # each new value once, in first-seen order
        m = len(new)
        reused = self.free[len(self.free) - min(m, len(self.free)) :]
        del self.free[len(self.free) - len(reused) :]
        values = self.values
        for i, v in zip(reused, new, strict=False):
            values[i] = v
        fresh = m - len(reused)
        top = self.size + fresh
        if top > len(self.hashes):
            grown = np.zeros(max(top, 2 * len(self.hashes)), dtype=np.int64)
            grown[: self.size] = self.hashes[: self.size]
            self.hashes = grown
        values.extend(new[len(reused) :])
        given = np.concatenate([np.asarray(reused, dtype=np.int64), np.arange(self.size, top, dtype=np.int64)])
        self.size = top
        self.hashes[given] = hashes(new) & _ROUTE_MASK
        ids.update(zip(new, given.tolist()))
        self.held += m
        found[miss] = np.fromiter(map(ids.__getitem__, missed), dtype=np.int64, count=len(missed))
        return found

    def sweep(self, live: np.ndarray) -> int:
        """Free every id not marked in ``live`` (one flag per id below `size`); the freed count."""
        self.ids, self.floats = _kept(self.ids, live), _kept(self.floats, live)
        held = len(self.ids) + len(self.floats)
        freed = self.held - held
        values = self.values
        self.free = np.flatnonzero(~live).tolist()
        for i in self.free:
            values[i] = None  # the value itself may now be collected
        self.free.reverse()  # reuse low ids first (pop takes from the end)
        self.held = self.kept = held
        return freed


def _kept(ids: dict[Any, int], live: np.ndarray) -> dict[Any, int]:
    """The entries of ``ids`` whose id ``live`` marks, picked in C (no Python call an entry):
    the dead deleted when they are the fewer (a sweep that finds most values still held),
    else the live copied into a new dict."""
    idx = np.fromiter(ids.values(), dtype=np.int64, count=len(ids))
    keep = live[idx]
    dead = len(keep) - int(np.count_nonzero(keep))
    if 2 * dead <= len(keep):
        if dead:
            deque(map(ids.__delitem__, compress(list(ids), (~keep).tolist())), maxlen=0)
        return ids
    return dict(zip(compress(ids.keys(), keep.tolist()), idx[keep].tolist(), strict=True))


_interner = _Interner()

_PLAIN = frozenset({str, int, bytes, type(None)})
"""Types whose ``==`` never equates a value with one of another type (among the values a
record holds): such a value is its own exact key."""


class _Tag:
    """Marks an exact key (`_exact`): no value of a record is ever equal to one."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<exact {self.kind}>"


_TYPED, _TUPLE, _FROZEN = _Tag("typed"), _Tag("tuple"), _Tag("frozenset")


def _exact(value: Any) -> Any:
    """A dict key equal only for values equal in value *and* type, at every level: ``1.0``,
    ``True`` and ``1`` get three keys, ``(1, "k")`` and ``(True, "k")`` two."""
    t = type(value)
    if t in _PLAIN:
        return value
    if t is tuple:
        if set(map(type, value)) <= _PLAIN:
            return value
        return (_TUPLE, tuple(map(_exact, value)))
    if t is frozenset:
        return (_FROZEN, frozenset(map(_exact, value)))
    return (_TYPED, t, value)


def code_of(value: Any) -> int:
    """The code of one value (TypeError if it cannot be hashed)."""
    t = type(value)
    if t is int:
        if -PAIRS <= value < PAIRS:
            return value  # type: ignore[no-any-return]
    elif t is tuple and len(value) == 2:
        a, b = value
        if type(a) is int and type(b) is int and 0 <= a < _SMALL and 0 <= b < _SMALL:
            return PAIRS + (a << 30 | b)
    if t is float:
        return INTERNED + _interner.intern(value, value, _interner.floats)
    return INTERNED + _interner.intern(value, value if t in _PLAIN else _exact(value))


def _code_of_float(value: float) -> int:
    return INTERNED + _interner.intern(value, value, _interner.floats)


def _code_of_plain(value: Any) -> int:
    """`code_of` for a value known to be made of `_PLAIN` values only: its own exact key."""
    t = type(value)
    if t is int:
        if -PAIRS <= value < PAIRS:
            return value  # type: ignore[no-any-return]
    elif t is tuple and len(value) == 2:
        a, b = value
        if type(a) is int and type(b) is int and 0 <= a < _SMALL and 0 <= b < _SMALL:
            return PAIRS + (a << 30 | b)
    return INTERNED + _interner.intern(value, value)


def _all_plain(values: list[Any], kinds: set[type]) -> bool:
    """Whether every value is `_PLAIN`, or a tuple of such: checked in C, over the whole list
    at once, so that a column of strings or of flat tuples skips `_exact` per value
    (``kinds``: the values' types)."""
    if kinds <= _PLAIN:
        return True
    if kinds - _PLAIN != {tuple}:
        return False
    return set(map(type, chain.from_iterable(v for v in values if type(v) is tuple))) <= _PLAIN


def codes_of_values(values: Iterable[Any], count: int = -1) -> np.ndarray:
    """The codes of Python values (raises TypeError naming nothing: callers name the value)."""
    values = values if type(values) is list else list(values)
    kinds = set(map(type, values))
    code = _code_of_float if kinds == {float} else _code_of_plain if _all_plain(values, kinds) else code_of
    return np.fromiter(map(code, values), dtype=np.int64, count=count)


def codes_of_ints(column: np.ndarray) -> np.ndarray:
    """The codes of an int64 column: itself, unless some values lie outside the int range
    (those are interned, a batch at a time)."""
    if not len(column):
        return column
    lo, hi = int(least(column)), int(greatest(column))
    if lo >= -PAIRS and hi < PAIRS:
        return column
    out = column.copy()
    big = (column < -PAIRS) | (column >= PAIRS)
    out[big] = INTERNED + _interner.intern_plain(column[big].tolist(), _int_hashes)
    return out


def _int_hashes(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)  # an int's `stable_hash` is itself


def _pair_hashes(values: list[tuple[int, int]]) -> np.ndarray:
    # `stable_hash` of a pair of ints is Python's own (unsalted) hash of the pair
    return np.fromiter(map(hash, values), dtype=np.int64, count=len(values))


def _stable_hashes(values: list[Any]) -> np.ndarray:
    return np.fromiter(map(stable_hash, values), dtype=np.int64, count=len(values))


_TEXT = frozenset({str, bytes, type(None)})
"""The `_PLAIN` types that are never ints: an object column of them needs no pair packing."""


def codes_of_tuples(cols: Sequence[np.ndarray]) -> np.ndarray | None:
    """The codes of the tuples whose fields are the rows of ``cols`` (what `code_of` gives
    each tuple), column-wise: pairs of small ints packed, the other tuples interned a batch at
    a time, with no Python call per record. None when a column is neither int64 nor made of
    strings, bytes and None only (floats, nested values: `codes_of_values` then)."""
    n = len(cols[0]) if cols else 0
    lists = []
    for c in cols:
        if c.dtype == np.int64:
            lists.append(c.tolist())
        elif c.dtype == object:
            values = c.tolist()
            if not set(map(type, values)) <= _TEXT:
                return None
            lists.append(values)
        else:
            return None
    if not n:
        return np.zeros(0, dtype=np.int64)
    if len(cols) == 2 and cols[0].dtype == np.int64 and cols[1].dtype == np.int64:
        a, b = cols
        small = (a >= 0) & (a < _SMALL) & (b >= 0) & (b < _SMALL)
        if small.all():
            return (a << 30 | b) + PAIRS
        out = np.where(small, (a << 30 | b) + PAIRS, 0)
        rest = np.flatnonzero(~small)
        keys = list(zip(a[rest].tolist(), b[rest].tolist()))
        out[rest] = INTERNED + _interner.intern_plain(keys, _pair_hashes)
        return out
    keys = list(zip(*lists))
    return INTERNED + _interner.intern_plain(keys, _stable_hashes)


def values_of(codes: np.ndarray) -> list[Any]:
    """The Python values of codes."""
    if not len(codes):
        return []
    if int(greatest(codes)) < PAIRS:
        return codes.tolist()  # type: ignore[no-any-return]
    interned = codes >= INTERNED
    if interned.all():  # one lookup a code, made in C
        return list(map(_interner.values.__getitem__, (codes - INTERNED).tolist()))
    # by kind, each column-wise, then merged in an object array (no Python call per code)
    out = np.empty(len(codes), dtype=object)
    ints = codes < PAIRS
    out[ints] = codes[ints].tolist()
    pairs = ~ints & ~interned
    if pairs.any():
        c = codes[pairs] - PAIRS
        out[pairs] = _objects(list(zip((c >> 30).tolist(), (c & (_SMALL - 1)).tolist())))
    if interned.any():
        out[interned] = _objects(list(map(_interner.values.__getitem__, (codes[interned] - INTERNED).tolist())))
    return out.tolist()  # type: ignore[no-any-return]


def _objects(values: list[Any]) -> np.ndarray:
    """An object array of ``values`` (tuples stay values: no broadcasting into a 2-D array)."""
    return np.fromiter(values, dtype=object, count=len(values))


def all_ints(codes: np.ndarray) -> bool:
    """Whether every code is a plain int (so the codes are the values, in order)."""
    return not len(codes) or int(greatest(codes)) < PAIRS


_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P5 = np.uint64(2870177450012600261)
_LEN2 = np.uint64(2) ^ (_P5 ^ np.uint64(3527539))


def _pair_hash(codes: np.ndarray) -> np.ndarray:
    """Python's (unsalted) hash of the pairs of small ints packed in ``codes``, column-wise:
    CPython's tuple hash (xxHash's rounds over the items' hashes, a small int's hash being
    itself), so a pair routes as `stable_hash` routes it."""
    c = codes - PAIRS
    acc = np.full(len(c), _P5, dtype=np.uint64)
    for lane in ((c >> 30).astype(np.uint64), (c & (_SMALL - 1)).astype(np.uint64)):
        acc = acc + lane * _P2
        acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
        acc = acc * _P1
    out = (acc + _LEN2).view(np.int64)
    out[out == -1] = 1546275796
    return out & _ROUTE_MASK


def route_of(codes: np.ndarray) -> np.ndarray:
    """The route (worker = route % peers) of each code: `stable_hash` of its value, an int's
    being the int itself, others' reduced to 62 bits."""
    if not len(codes) or int(greatest(codes)) < PAIRS:
        return codes
    out = codes.copy()
    pairs = (codes >= PAIRS) & (codes < INTERNED)
    if pairs.any():
        out[pairs] = _pair_hash(codes[pairs])
    interned = codes >= INTERNED
    if interned.any():
        out[interned] = _interner.hashes[codes[interned] - INTERNED]
    return out


def route_of_value(value: Any) -> int:
    """`route_of` for one value: what a checkpoint piece of ``value`` is routed by."""
    return int(route_of(np.array([code_of(value)], dtype=np.int64))[0])


# Freeing -------------------------------------------------------------------------------------------
def hold_codes(holder: Any) -> None:
    """Register ``holder`` (an operator): while it lives, the codes its state reaches stay valid."""
    _interner.holders[holder] = threading.get_ident()


def held_values() -> int:
    """How many values the interner holds now."""
    return _interner.held


def release_unused(force: bool = False) -> int:
    """Free the values no registered holder reaches; the count freed. Call only at a safe point:
    when no operator of this process is half-way through a callback (its local arrays may hold
    codes no state holds yet). Runs when the interner has doubled since the last sweep (or
    ``force``), and never while a holder made on another thread lives (that thread's
    computation may be mid-callback now)."""
    it = _interner
    if not force and it.held < max(SWEEP_MIN, 2 * it.kept):
        return 0
    me = threading.get_ident()
    holders = list(it.holders.items())
    if any(thread != me for _, thread in holders):
        return 0
    return it.sweep(_live([h for h, _ in holders], it.size))


_LEAVES = frozenset({int, float, str, bytes, bool, complex, type(None)})
_OPAQUE = (type, ModuleType, FunctionType, MethodType, BuiltinFunctionType, partial, memoryview, threading.Thread)
_NOT_STATE = frozenset({"_timely", "outputs"})
"""A vertex's attributes that belong to the runtime, not to its state."""


def _live(roots: list[Any], size: int) -> np.ndarray:
    """One flag per id below ``size``: whether some int64 array or int reachable from ``roots``
    (through attributes, slots, dicts and containers; not through functions, classes or
    timely's own objects) holds its code. Anything that merely looks like a code is marked
    too, which only keeps a value longer."""
    live = np.zeros(size, dtype=bool)
    top = INTERNED + size

    def mark(codes: np.ndarray) -> None:
        codes = codes[(codes >= INTERNED) & (codes < top)]
        if len(codes):
            live[codes - INTERNED] = True

    def mark_ints(items: list[Any]) -> None:
        ints = [x for x in items if type(x) is int and INTERNED <= x < top]
        if ints:
            live[np.asarray(ints, dtype=np.int64) - INTERNED] = True

    def scan(items: list[Any]) -> None:
        """Mark the ints among ``items`` in one pass when they are all leaves (a dict of ints, a
        batch's key spans), else walk them."""
        kinds = set(map(type, items))
        if kinds <= _LEAVES:
            mark_ints(items)
            return
        if kinds == {tuple}:
            flat = list(chain.from_iterable(items))
            if set(map(type, flat)) <= _LEAVES:
                mark_ints(flat)
                return
        stack.extend(items)

    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        t = type(obj)
        if t is np.ndarray:
            if obj.dtype == np.int64 and obj.size:
                mark(obj.ravel())
            continue
        if t in _LEAVES:
            if t is int and INTERNED <= obj < top:
                live[obj - INTERNED] = True
            continue
        if isinstance(obj, np.integer):
            stack.append(int(obj))
            continue
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            scan(list(obj.keys()))
            scan(list(obj.values()))
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            scan(list(obj))
            continue
        module = t.__module__
        if module == "timely" or module.startswith("timely."):
            continue  # the runtime's objects hold no codes (the graph, contexts, the loop)
        items = [v for k, v in getattr(obj, "__dict__", {}).items() if k not in _NOT_STATE]
        for klass in t.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if not slot.startswith("__") and slot not in _NOT_STATE and hasattr(obj, slot):
                    items.append(getattr(obj, slot))
        scan(items)
    return live
