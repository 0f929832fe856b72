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
other tuple of 1 to 63 int64s               ``3 * 2**61 + (width << 55) + id``, ``id`` from
                                            the width's `TupleTable`
anything else hashable                      ``2**62 + id``, ``id`` from the process's interner
==========================================  =============================================

The ranges are disjoint, so ``5``, ``(0, 5)`` and ``(5,)`` never share a code. Interned ids
are process-local: a code never leaves its process (blocks travel with their values, and
routing uses `route_of`, a stable hash, never an id). Tuples of ints are the records a
stream keeps millions of (``(user, hashtag)``): their tables hold them as rows of int64
arrays, coded a block at a time by one compiled lookup, with no Python tuple kept per value
(`_tuples`).

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
from ._kernels import bounds, greatest, least
from ._tuples import TupleTable

__all__ = [
    "INTERNED",
    "PAIRS",
    "SWEEP_MIN",
    "TUPLES",
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
TUPLES = INTERNED + (1 << 61)
"""First code of a tuple of ints held in a `TupleTable`: ``TUPLES + (width << WIDTH_SHIFT) + id``."""
WIDTH_SHIFT = 55
MAX_WIDTH = 63
"""The widest tuple of ints a table holds (wider ones are interned as objects)."""
_ID_MASK = (1 << WIDTH_SHIFT) - 1
_INT64 = (-(1 << 63), 1 << 63)
_SMALL = 1 << 30
_ROUTE_MASK = (1 << 62) - 1

SWEEP_MIN = 65_536
"""Values the interner holds before a safe point first looks for ones no operator holds."""


class _Interner:
    """Values <-> dense ids, with each value's stable hash (its route) kept beside it, the ids
    freed by the last sweep (reused first), and the operators whose state holds codes."""

    __slots__ = ("floats", "free", "hashes", "held", "holders", "ids", "kept", "size", "tables", "values")

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
        """Values held now (``size - len(free)``), tuples of ints in `tables` included."""
        self.tables: dict[int, TupleTable] = {}
        """Tuples of ints, by width."""
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

    def tuple_codes(self, cols: Sequence[np.ndarray]) -> np.ndarray:
        """The codes of the tuples whose fields are the rows of the int64 ``cols``, from the
        table of their width (made at its first tuple)."""
        width = len(cols)
        table = self.tables.get(width)
        if table is None:
            table = self.tables[width] = TupleTable(width)
        before = table.held
        ids = table.ids(cols)
        self.held += table.held - before
        return ids + (TUPLES + (width << WIDTH_SHIFT))

    def sweep(self, live: np.ndarray, tuples: dict[int, np.ndarray]) -> int:
        """Free every id not marked in ``live`` (one flag per id below `size`) and every tuple
        not marked in ``tuples`` (flags per table, by width); the freed count."""
        self.ids, self.floats = _kept(self.ids, live), _kept(self.floats, live)
        held = len(self.ids) + len(self.floats)
        values = self.values
        self.free = np.flatnonzero(~live).tolist()
        for i in self.free:
            values[i] = None  # the value itself may now be collected
        self.free.reverse()  # reuse low ids first (pop takes from the end)
        for width, table in self.tables.items():
            table.sweep(tuples[width])
            held += table.held
        freed = self.held - held
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
    elif t is tuple:
        code = _int_tuple_code(value)
        if code is not None:
            return code
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
    elif t is tuple:
        code = _int_tuple_code(value)
        if code is not None:
            return code
    return INTERNED + _interner.intern(value, value)


def _int_tuple_code(value: tuple[Any, ...]) -> int | None:
    """`code_of` for a tuple whose fields are all int64s (a packed pair, or from its width's
    table); None for any other tuple."""
    if len(value) == 2:
        a, b = value
        if type(a) is int and type(b) is int and 0 <= a < _SMALL and 0 <= b < _SMALL:
            return PAIRS + (a << 30 | b)  # the common case first, with no call
    if not 0 < len(value) <= MAX_WIDTH or set(map(type, value)) != {int}:
        return None
    if min(value) < _INT64[0] or max(value) >= _INT64[1]:
        return None
    return int(_int_tuple_codes([np.array([x], dtype=np.int64) for x in value])[0])


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
    if kinds == {int}:  # an object column of ints: converted in C, then coded as an int column
        try:
            return codes_of_ints(np.fromiter(values, dtype=np.int64, count=len(values)))
        except OverflowError:  # an int beyond int64: each on its own below
            pass
    if kinds == {tuple}:
        cols = _int_columns(values)
        if cols is not None:
            return _int_tuple_codes(cols)
    code = _code_of_float if kinds == {float} else _code_of_plain if _all_plain(values, kinds) else code_of
    return np.fromiter(map(code, values), dtype=np.int64, count=count)


def _int_columns(values: list[tuple[Any, ...]]) -> list[np.ndarray] | None:
    """The fields of ``values`` (tuples) as int64 columns, when every tuple has one width (1
    to `MAX_WIDTH`) and only int64 fields: checked and converted in C."""
    widths = set(map(len, values))
    if len(widths) != 1:
        return None
    (width,) = widths
    if not 0 < width <= MAX_WIDTH or set(map(type, chain.from_iterable(values))) != {int}:
        return None
    try:
        flat = np.fromiter(chain.from_iterable(values), dtype=np.int64, count=width * len(values))
    except OverflowError:  # an int beyond int64: interned as an object, as `code_of` does
        return None
    rows = flat.reshape(-1, width)
    return [np.ascontiguousarray(rows[:, j]) for j in range(width)]


def _int_tuple_codes(cols: Sequence[np.ndarray]) -> np.ndarray:
    """The codes of the tuples whose fields are the rows of the int64 ``cols`` (1 to
    `MAX_WIDTH` of them): pairs of small ints packed, the others from their width's table."""
    if len(cols) == 2:
        a, b = cols
        small = (a >= 0) & (a < _SMALL) & (b >= 0) & (b < _SMALL)
        if small.all():
            return (a << 30 | b) + PAIRS
        out = np.where(small, (a << 30 | b) + PAIRS, 0)
        rest = np.flatnonzero(~small)
        out[rest] = _interner.tuple_codes([a[rest], b[rest]])
        return out
    return _interner.tuple_codes(cols)


def codes_of_ints(column: np.ndarray) -> np.ndarray:
    """The codes of an int64 column: itself, unless some values lie outside the int range
    (those are interned, a batch at a time)."""
    if not len(column):
        return column
    lo, hi = bounds(column)
    if lo >= -PAIRS and hi < PAIRS:
        return column
    out = column.copy()
    big = (column < -PAIRS) | (column >= PAIRS)
    out[big] = INTERNED + _interner.intern_plain(column[big].tolist(), _int_hashes)
    return out


def _int_hashes(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)  # an int's `stable_hash` is itself


def _stable_hashes(values: list[Any]) -> np.ndarray:
    return np.fromiter(map(stable_hash, values), dtype=np.int64, count=len(values))


_TEXT = frozenset({str, bytes, type(None)})
"""The `_PLAIN` types that are never ints: an object column of them needs no pair packing."""


def codes_of_tuples(cols: Sequence[np.ndarray]) -> np.ndarray | None:
    """The codes of the tuples whose fields are the rows of ``cols`` (what `code_of` gives
    each tuple), column-wise: tuples of ints packed (pairs of small ones) or looked up in
    their width's table, the other tuples interned a batch at a time, with no Python call per
    record. None when a column is neither int64 nor made of strings, bytes and None only
    (floats, nested values: `codes_of_values` then)."""
    n = len(cols[0]) if cols else 0
    if cols and len(cols) <= MAX_WIDTH and all(c.dtype == np.int64 for c in cols):
        return _int_tuple_codes(cols) if n else np.zeros(0, dtype=np.int64)
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
    keys = list(zip(*lists))
    return INTERNED + _interner.intern_plain(keys, _stable_hashes)


def values_of(codes: np.ndarray) -> list[Any]:
    """The Python values of codes."""
    if not len(codes):
        return []
    hi = int(greatest(codes))
    if hi < PAIRS:
        return codes.tolist()  # type: ignore[no-any-return]
    lo = int(least(codes))
    if lo >= INTERNED and hi < TUPLES:  # one lookup a code, made in C
        return list(map(_interner.values.__getitem__, (codes - INTERNED).tolist()))
    if lo >= TUPLES and (lo - TUPLES) >> WIDTH_SHIFT == (hi - TUPLES) >> WIDTH_SHIFT:
        return _tuple_table(lo).values(codes & _ID_MASK)  # tuples of one width
    # by kind, each column-wise, then merged in an object array (no Python call per code)
    out = np.empty(len(codes), dtype=object)
    ints = codes < PAIRS
    out[ints] = codes[ints].tolist()
    interned = codes >= INTERNED
    pairs = ~ints & ~interned
    if pairs.any():
        c = codes[pairs] - PAIRS
        out[pairs] = _objects(list(zip((c >> 30).tolist(), (c & (_SMALL - 1)).tolist())))
    tuples = codes >= TUPLES
    interned &= ~tuples
    if interned.any():
        out[interned] = _objects(list(map(_interner.values.__getitem__, (codes[interned] - INTERNED).tolist())))
    for width_code, part in _by_width(codes, tuples):
        out[part] = _objects(_tuple_table(width_code).values(codes[part] & _ID_MASK))
    return out.tolist()  # type: ignore[no-any-return]


def _tuple_table(code: int) -> TupleTable:
    """The table of the tuple coded ``code``."""
    return _interner.tables[(code - TUPLES) >> WIDTH_SHIFT]


def _by_width(codes: np.ndarray, tuples: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The tuple codes among ``codes`` (the mask ``tuples``) split by width: for each width
    present, one of its codes and the indices of its codes."""
    idx = np.flatnonzero(tuples)
    if not len(idx):
        return []
    widths = (codes[idx] - TUPLES) >> WIDTH_SHIFT
    if int(least(widths)) == int(greatest(widths)):
        return [(int(codes[idx[0]]), idx)]
    return [(int(codes[idx[widths == w][0]]), idx[widths == w]) for w in np.unique(widths).tolist()]


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
    tuples = codes >= TUPLES
    interned = (codes >= INTERNED) & ~tuples
    if interned.any():
        out[interned] = _interner.hashes[codes[interned] - INTERNED]
    for width_code, part in _by_width(codes, tuples):
        out[part] = _tuple_table(width_code).routes[codes[part] & _ID_MASK]
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
    return it.sweep(*_live([h for h, _ in holders], it.size, {w: t.size for w, t in it.tables.items()}))


_LEAVES = frozenset({int, float, str, bytes, bool, complex, type(None)})
_OPAQUE = (type, ModuleType, FunctionType, MethodType, BuiltinFunctionType, partial, memoryview, threading.Thread)
_NOT_STATE = frozenset({"_timely", "outputs"})
"""A vertex's attributes that belong to the runtime, not to its state."""


def _live(roots: list[Any], size: int, sizes: dict[int, int]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """One flag per id below ``size``, and per id of each tuple table (``sizes``: each
    width's ids handed out): whether some int64 array or int reachable from ``roots``
    (through attributes, slots, dicts and containers; not through functions, classes or
    timely's own objects) holds its code. Anything that merely looks like a code is marked
    too, which only keeps a value longer."""
    live = np.zeros(size, dtype=bool)
    top = INTERNED + size
    tuples = {w: np.zeros(n, dtype=bool) for w, n in sizes.items()}

    def mark(codes: np.ndarray) -> None:
        codes = codes[codes >= INTERNED]
        if not len(codes):
            return
        objects = codes[codes < top]
        if len(objects):
            live[objects - INTERNED] = True
        if tuples and int(greatest(codes)) >= TUPLES:
            codes = codes[codes >= TUPLES]
            for width_code, part in _by_width(codes, np.ones(len(codes), dtype=bool)):
                flags = tuples.get((width_code - TUPLES) >> WIDTH_SHIFT)
                if flags is not None:
                    ids = codes[part] & _ID_MASK
                    flags[ids[ids < len(flags)]] = True

    def mark_ints(items: list[Any]) -> None:
        ints = [x for x in items if type(x) is int and INTERNED <= x < _INT64[1]]
        if ints:
            mark(np.asarray(ints, dtype=np.int64))

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
            if t is int and INTERNED <= obj < _INT64[1]:
                mark(np.array([obj], dtype=np.int64))
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
    return live, tuples
