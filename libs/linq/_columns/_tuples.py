"""Tuples of ints <-> dense ids, held in arrays: the interner's table for int records.

A stream of ``(user, hashtag)`` records keeps millions of distinct pairs alive; a dict of
Python tuples spends about 150 bytes and a dict lookup from Python on each, and coding a
block of them builds a tuple per row. Here a table of one width keeps its tuples as rows of
an int64 array (``rows[id]``), each with its route beside it (``routes[id]``, `stable_hash`
of the tuple), and finds them through an open-addressing index (linear probing, at most half
full, ``index[slot]`` an int32 id or -1) whose home slot is the route's Fibonacci hash. Coding a
block is then a few numpy passes (the routes, column-wise) and one lookup-or-add over its
rows, with no Python object per row, and a pair costs about 40 bytes (int32 index slots).

Two tiers do the lookup-or-add: numpy probing rounds for small blocks (no numba import, as
`_kernels.POLICY` asks), the compiled loop of `_tuple_loops` for large ones. They may number
a block's new tuples in different orders (ids mean nothing beyond their process), and both
keep the linear-probing invariant (every id sits in the first slot from its home on that was
free when it came, with no empty slot between), so either finds what the other added.

Freeing (`sweep`): the ids a mark of the holders' state does not reach go to a free list,
reused first (lowest first), and the index is rebuilt from the live ids' routes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._kernels import POLICY, greatest, least

__all__ = ["TupleTable", "int_hashes", "tuple_routes"]

_MERSENNE = (1 << 61) - 1
"""CPython hashes an int modulo this prime."""
_ROUTE_MASK = np.uint64((1 << 62) - 1)
_FIB = np.uint64(11400714785074694791)
"""2**64 / golden ratio: a route times it, high bits taken, is the home slot."""
_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P5 = np.uint64(2870177450012600261)
_LEN2 = np.uint64(2) ^ (_P5 ^ np.uint64(3527539))
_STEP = np.uint64(1000003)
_SEED = np.uint64(0x345678)
_M61 = np.uint64(_MERSENNE)

EMPTY = -1
"""An index slot with no id."""
MIN_BITS = 10
"""The index of a new table has ``2**MIN_BITS`` slots."""
MAX_IDS = (1 << 31) - 1
"""Ids a table hands out at most: its index holds them as int32 (half the memory and cache
lines of int64; two billion tuples would need 32 GiB of rows first)."""


def int_hashes(col: np.ndarray) -> np.ndarray:
    """CPython's ``hash`` of each int64 (unsalted: the int modulo 2**61 - 1, sign kept, -1
    made -2), as uint64 lanes (what a tuple's hash mixes)."""
    if not len(col) or (int(least(col)) >= 0 and int(greatest(col)) < _MERSENNE):
        return col.view(np.uint64)
    neg = col < 0
    u = col.view(np.uint64)
    mag = np.where(neg, np.uint64(0) - u, u) if neg.any() else u.copy()
    mag = (mag & _M61) + (mag >> np.uint64(61))  # modulo a Mersenne prime: fold, then subtract once
    mag -= _M61 * (mag >= _M61)
    h = np.where(neg, np.uint64(0) - mag, mag)
    h[h == np.uint64(0) - np.uint64(1)] = np.uint64(0) - np.uint64(2)
    return h


def tuple_routes(cols: Sequence[np.ndarray]) -> np.ndarray:
    """`stable_hash` of the tuples whose fields are the rows of the int64 ``cols``, reduced to
    62 bits (a route), column-wise: for a pair, CPython's own tuple hash (xxHash rounds over
    the items' hashes); for other widths, `stable_hash`'s multiply-and-xor over the ints."""
    n = len(cols[0])
    with np.errstate(over="ignore"):
        if len(cols) == 2:
            acc = np.full(n, _P5, dtype=np.uint64)
            for c in cols:
                acc += int_hashes(c) * _P2
                acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
                acc *= _P1
            acc += _LEN2
            acc[acc == np.uint64(0) - np.uint64(1)] = np.uint64(1546275796)
            return (acc & _ROUTE_MASK).view(np.int64)
        h = np.full(n, _SEED, dtype=np.uint64)
        for c in cols:
            h = ((h * _STEP) ^ c.view(np.uint64)) & _M61
        return h.view(np.int64)


def _compiled(n: int) -> bool:
    """Whether a block of ``n`` rows takes the compiled loop: from `COMPILED_ROWS` rows, and
    at any size once a program has loaded the compiled loops (`preload`), where one call
    (a few microseconds) costs a tenth of the numpy tier's probing rounds (about 100 us)."""
    return POLICY.compiled_rows(n) or POLICY.fused_rows(n)


def _homes(routes: np.ndarray, bits: int) -> np.ndarray:
    """The home slot of each route in an index of ``2**bits`` slots."""
    with np.errstate(over="ignore"):
        return ((routes.view(np.uint64) * _FIB) >> np.uint64(64 - bits)).view(np.int64)


class TupleTable:
    """The tuples of ``width`` ints a process has coded, each with a dense id (see the module)."""

    __slots__ = ("bits", "free", "held", "index", "routes", "rows", "size", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows = np.zeros((1024, width), dtype=np.int64)
        """Row ``id``: the fields of the tuple with that id (rows of freed ids are stale)."""
        self.routes = np.zeros(1024, dtype=np.int64)
        self.bits = MIN_BITS
        self.index = np.full(1 << MIN_BITS, EMPTY, dtype=np.int32)
        self.size = 0
        """Ids ever handed out: every id is below it."""
        self.free = np.zeros(0, dtype=np.int64)
        """Ids the last sweep freed, not yet reused: a stack (the lowest on top)."""
        self.held = 0
        """Tuples held now (in the index)."""

    def ids(self, cols: Sequence[np.ndarray]) -> np.ndarray:
        """The id of each tuple whose fields are the rows of the int64 ``cols`` (one per
        field), the new ones added."""
        n = len(cols[0])
        keys = np.stack([np.asarray(c, dtype=np.int64) for c in cols], axis=1)
        routes = tuple_routes(cols)
        self._reserve(n)
        homes = _homes(routes, self.bits)
        if _compiled(n):
            from ._tuple_loops import find_or_add  # numba only once blocks are large

            out = np.empty(n, dtype=np.int64)
            size, nfree = find_or_add(
                self.index, self.rows, self.routes, keys, routes, homes, self.free, len(self.free), self.size, out
            )
            added = size - self.size + len(self.free) - nfree
            self.size = size
            self.free = self.free[:nfree]
            self.held += added
            return out
        return self._find_or_add(keys, routes, homes)

    def _reserve(self, n: int) -> None:
        """Room for ``n`` more tuples: rows for new ids, and an index at most half full."""
        top = self.size + n
        if top > len(self.rows):
            cap = max(top, 2 * len(self.rows))
            rows = np.zeros((cap, self.width), dtype=np.int64)
            rows[: self.size] = self.rows[: self.size]
            routes = np.zeros(cap, dtype=np.int64)
            routes[: self.size] = self.routes[: self.size]
            self.rows, self.routes = rows, routes
        if top > MAX_IDS:
            raise MemoryError(f"a table of tuples of {self.width} ints cannot hold over {MAX_IDS:,} of them")
        if 2 * (self.held + n) > 1 << self.bits:
            # twice what is needed now: a growing table rebuilds its index once per doubling
            ids = self.index[self.index != EMPTY].astype(np.int64)
            self.bits = (4 * (self.held + n) - 1).bit_length()
            self._rebuild(ids)

    def _rebuild(self, ids: np.ndarray) -> None:
        """A fresh index holding ``ids`` (at ``2**bits`` slots)."""
        self.index = np.full(1 << self.bits, EMPTY, dtype=np.int32)
        homes = _homes(self.routes[ids], self.bits)
        if _compiled(len(ids)):
            from ._tuple_loops import place

            place(self.index, ids, homes)
        else:
            _place(self.index, ids, homes)

    def _find_or_add(self, keys: np.ndarray, routes: np.ndarray, homes: np.ndarray) -> np.ndarray:
        """The numpy tier of `ids`: probing rounds over the rows still looking, then the
        missing tuples (each once) added together."""
        n = len(keys)
        index, rows, mask = self.index, self.rows, len(self.index) - 1
        out = np.full(n, EMPTY, dtype=np.int64)
        looking = np.arange(n)
        pos = homes.copy()
        missed = []
        while len(looking):
            at = index[pos[looking]]
            empty = at == EMPTY
            if empty.any():
                missed.append(looking[empty])
                looking, at = looking[~empty], at[~empty]
            same = (rows[at] == keys[looking]).all(axis=1)
            out[looking[same]] = at[same]
            looking = looking[~same]
            pos[looking] = (pos[looking] + 1) & mask
        if not missed:
            return out
        miss = np.concatenate(missed)
        # each new tuple once: sort the missing rows by route then fields, and take each run's first
        order = np.lexsort((*keys[miss].T[::-1], routes[miss]))
        miss = miss[order]
        first = np.ones(len(miss), dtype=bool)
        first[1:] = (routes[miss[1:]] != routes[miss[:-1]]) | (keys[miss[1:]] != keys[miss[:-1]]).any(axis=1)
        new = miss[first]
        m = len(new)
        reuse = min(m, len(self.free))
        given = np.concatenate(
            [self.free[len(self.free) - reuse :][::-1], np.arange(self.size, self.size + m - reuse, dtype=np.int64)]
        )
        self.free = self.free[: len(self.free) - reuse]
        self.size += m - reuse
        self.held += m
        rows[given] = keys[new]
        self.routes[given] = routes[new]
        _place(index, given, homes[new])
        out[miss] = given[np.cumsum(first) - 1]
        return out

    def values(self, ids: np.ndarray) -> list[tuple[int, ...]]:
        """The tuples of ``ids``, their fields Python ints."""
        picked = self.rows[ids]
        return list(zip(*(picked[:, j].tolist() for j in range(self.width)), strict=True))

    def sweep(self, live: np.ndarray) -> int:
        """Free every held id that ``live`` (a flag per id below `size`) does not mark; the
        count freed."""
        held = np.zeros(self.size, dtype=bool)
        held[self.index[self.index != EMPTY]] = True
        live = live[: self.size] & held  # a stale code of a freed id (marked: it looks like one) stays freed
        kept = np.flatnonzero(live)
        freed = self.held - len(kept)
        if freed:
            self.free = np.flatnonzero(~live)[::-1].copy()  # the lowest on top of the stack
            self.held = len(kept)
            self._rebuild(kept)
        return freed

    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.routes.nbytes + self.index.nbytes + self.free.nbytes)

    def __repr__(self) -> str:
        return f"TupleTable(width={self.width}, held={self.held}, size={self.size})"


def _place(index: np.ndarray, ids: np.ndarray, homes: np.ndarray) -> None:
    """Put ``ids`` (not in ``index`` yet) into ``index``, each at the first empty slot from its
    home on: rounds in which every id still unplaced tries its next slot, the first of
    several trying one empty slot taking it."""
    mask = len(index) - 1
    pos = homes.copy()
    todo = np.arange(len(ids))
    while len(todo):
        slots = pos[todo]
        empty = index[slots] == EMPTY
        tried = todo[empty]
        taken, first = np.unique(slots[empty], return_index=True)
        index[taken] = ids[tried[first]]
        placed = np.zeros(len(todo), dtype=bool)
        placed[np.flatnonzero(empty)[first]] = True
        todo = todo[~placed]
        pos[todo] = (pos[todo] + 1) & mask
