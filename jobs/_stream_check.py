"""The streaming job's check: every answer recomputed from scratch from the posts of its window.

The dataflow computes incrementally (linq), epoch by epoch, from parsed text; the check takes
the generator's own record of what it wrote (`timely_jobs._posts.Second`: who posted, who they
mentioned, which hashtags) for the seconds of an answer's window, computes the components of
that mention graph from nothing (minimum-label propagation with pointer jumping, in numpy; the
tests hold it against NetworkX) and the top hashtag of each, and compares.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from timely_jobs._posts import Second, tag_name
from timely_jobs._stream_dataflow import tag_id

__all__ = ["Checker", "Truth", "component_labels", "k_exposure", "window_truth"]


def component_labels(nodes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """For sorted unique ``nodes`` and edges ``src -> dst`` among them (undirected), the least
    node of each node's connected component."""
    if len(nodes) == 0:
        return nodes.copy()
    return nodes[_least(len(nodes), np.searchsorted(nodes, src), np.searchsorted(nodes, dst))]


@dataclass(frozen=True)
class Truth:
    """The window's answers: per node its component, per component its top hashtag."""

    nodes: np.ndarray
    labels: np.ndarray
    tops: dict[int, tuple[str, int]]
    exposed: dict[str, int]
    """k-exposure: per hashtag, the users at least k of whose mentioned users used it."""

    def answer(self, user: int) -> tuple[int | None, str | None, int]:
        """``(component, hashtag, count)`` for ``user``; ``(None, None, 0)`` if absent."""
        i = int(np.searchsorted(self.nodes, user))
        if i >= len(self.nodes) or self.nodes[i] != user:
            return None, None, 0
        label = int(self.labels[i])
        tag, count = self.tops.get(label, (None, 0))
        return label, tag, count


def k_exposure(mentions: np.ndarray, tags: np.ndarray, k: int) -> dict[str, int]:
    """Per hashtag (by name), the users who mention at least ``k`` distinct users that used it,
    from ``(author, mentioned)`` and ``(author, hashtag index)`` pairs."""
    edges = np.unique(mentions, axis=0) if len(mentions) else mentions.reshape(-1, 2)
    used = np.unique(tags, axis=0) if len(tags) else tags.reshape(-1, 2)  # sorted by user
    lo = np.searchsorted(used[:, 0], edges[:, 1], side="left")
    hi = np.searchsorted(used[:, 0], edges[:, 1], side="right")
    n = hi - lo
    src = np.repeat(edges[:, 0], n)
    at = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))  # lo[i], lo[i] + 1, ..., per edge
    pairs = np.stack([src, used[at, 1]], axis=1)
    if not len(pairs):
        return {}
    exposures, times = np.unique(pairs, axis=0, return_counts=True)
    tags_of, users = np.unique(exposures[times >= k, 1], return_counts=True)
    return {tag_name(int(t)): int(u) for t, u in zip(tags_of, users, strict=True)}


DENSE = 1 << 24
"""Ids below this are indexed directly (the generator's are below ``2 * users``); a window
with a larger id is first renumbered by sorting."""

_TAGS: dict[int, tuple[str, int]] = {}
"""Hashtag index -> its name and `tag_id` (the same for every window: made once each)."""


def _tag_names(indices: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Names and `tag_id`s of the hashtag indices ``indices``."""
    for index in indices.tolist():
        if index not in _TAGS:
            name = tag_name(index)
            _TAGS[index] = (name, tag_id(name))
    named = [_TAGS[i] for i in indices.tolist()]
    return [n for n, _ in named], np.fromiter((i for _, i in named), np.int64, len(named))


def window_truth(seconds: list[Second], k: int | None = None) -> Truth:
    """The components and top hashtags of the posts of ``seconds`` (one window), and with
    ``k`` their k-exposure (left out otherwise: it can be far larger than the window).

    Whole-array work only (no Python per post or per component but for the result): the
    check runs beside the stream on the same machine, once per epoch, on a window that grows
    to millions of mentions, so what it costs is taken from the computation it checks."""
    authors = np.concatenate([s.authors for s in seconds] or [np.zeros(0, np.int64)])
    mentions = np.concatenate([s.mentions for s in seconds] or [np.zeros((0, 2), np.int64)])
    tags = np.concatenate([s.tags for s in seconds] or [np.zeros((0, 2), np.int64)])
    src, dst = mentions[:, 0], mentions[:, 1]
    top = max((int(a.max()) for a in (authors, src, dst) if len(a)), default=-1)
    if min((int(a.min()) for a in (authors, src, dst) if len(a)), default=0) >= 0 and top < DENSE:
        # Ids are indices: a node's position is its id, and no sort is needed.
        present = np.zeros(top + 1, dtype=bool)
        present[authors] = True
        present[src] = True
        present[dst] = True
        nodes = np.flatnonzero(present)
        least = _least(top + 1, src, dst)
        labels = least[nodes]
        tag_label = least[tags[:, 0]]  # a component as its least node's position ...
        ids = None  # ... which is its id
    else:
        nodes = np.unique(np.concatenate([authors, src, dst]))
        least = _least(len(nodes), np.searchsorted(nodes, src), np.searchsorted(nodes, dst))
        labels = nodes[least]
        tag_label = least[np.searchsorted(nodes, tags[:, 0])]
        ids = nodes
    tops: dict[int, tuple[str, int]] = {}
    if len(tags):
        # (component, hashtag) pairs counted by one sort of int64 keys; then per component the
        # pair with the most posts, ties to the greater hashtag id (as the job documents).
        span = int(tags[:, 1].max()) + 1
        keys, counts = np.unique(tag_label * span + tags[:, 1], return_counts=True)
        component, tag = keys // span, keys % span
        used, slot = np.unique(tag, return_inverse=True)
        names, idents = _tag_names(used)
        order = np.lexsort((idents[slot], counts, component))
        last = order[np.flatnonzero(np.append(component[order][1:] != component[order][:-1], True))]
        winners = component[last] if ids is None else ids[component[last]]
        tops = dict(
            zip(
                winners.tolist(),
                zip([names[i] for i in slot[last].tolist()], counts[last].tolist(), strict=True),
                strict=True,
            )
        )
    return Truth(nodes, labels, tops, k_exposure(mentions, tags, k) if k is not None else {})


def _least(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """For nodes ``0 .. n - 1`` and edges ``u -> v`` (undirected), the least node of each
    node's component: minimum-label propagation with pointer jumping."""
    label = np.arange(n, dtype=np.int64)
    while len(u):
        before = label.copy()
        m = np.minimum(label[u], label[v])
        np.minimum.at(label, u, m)
        np.minimum.at(label, v, m)
        label = label[label]  # pointer jumping: a node takes its label's label
        label = label[label]
        if np.array_equal(label, before):
            break
    return label


class Checker:
    """Checks answers against `window_truth` of their window, on a thread of its own so the
    stream does not wait for it. ``truth_of(second)`` gives a second's ground truth; ``k``
    the k-exposure to check, if any."""

    QUOTED = 5

    def __init__(self, window: int, truth_of: Callable[[int], Second | None], k: int | None = None) -> None:
        self.window = window
        self.k = k
        self.truth_of = truth_of
        self.checked = 0
        self.wrong = 0
        self.unknown_users = 0
        self.exposures_checked = 0
        self.examples: list[str] = []
        self.cpu_seconds = 0.0
        """CPU the check's thread has used: it runs beside the stream, on the same machine."""
        self._cache: dict[int, Truth] = {}
        self._queue: list[tuple[int, int, int | None, str | None, int, int]] = []
        self._lock = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="answer-check", daemon=True)
        self._thread.start()

    def add(self, query_id: int, user: int, component: int | None, hashtag: str | None, count: int, as_of: int) -> None:
        with self._lock:
            self._queue.append((query_id, user, component, hashtag, count, as_of))
            self._lock.notify()

    def add_exposure(self, hashtag: str | None, users: int, as_of: int) -> None:
        """A k-exposure figure to check (``query_id`` -1 marks it in the queue)."""
        with self._lock:
            self._queue.append((-1, 0, None, hashtag, users, as_of))
            self._lock.notify()

    def truth(self, as_of: int) -> Truth:
        got = self._cache.get(as_of)
        if got is None:
            seconds = [self.truth_of(s) for s in range(max(0, as_of - self.window + 1), as_of + 1)]
            got = window_truth([s for s in seconds if s is not None], self.k)
            self._cache = {as_of: got}  # answers come in as_of order: keep the latest only
        return got

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            began = time.thread_time()
            self._check(batch)
            self.cpu_seconds += time.thread_time() - began

    def _check(self, batch: list[tuple[int, int, int | None, str | None, int, int]]) -> None:
        for query_id, user, component, hashtag, count, as_of in sorted(batch, key=lambda a: a[5]):
            if query_id == -1:
                want = self.truth(as_of).exposed.get(hashtag or "", 0)
                self.exposures_checked += 1
                if want != count:
                    self._wrong(f"k-exposure of #{hashtag} as of second {as_of}: got {count}, expected {want}")
                continue
            expected = self.truth(as_of).answer(user) if as_of >= 0 else (None, None, 0)
            got = (component, hashtag, count)
            self.checked += 1
            if expected[0] is None:
                self.unknown_users += 1
            if got != expected:
                self._wrong(f"query {query_id} (user {user}, as of second {as_of}): got {got}, expected {expected}")

    def _wrong(self, example: str) -> None:
        """Count a wrong answer, quoting the first `QUOTED` of them."""
        self.wrong += 1
        if len(self.examples) < self.QUOTED:
            self.examples.append(example)

    def close(self) -> None:
        """Check what is queued, then stop."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join()
