"""The streaming job's timely dataflow (Naiad Figure 1): posts in, interactive answers out.

``build(options, scope, inputs)`` is what `timely_libs.spark.run_stream` runs in every timely
process, one epoch per Spark micro-batch::

    posts ──parse──▶ window ──▶ mention graph ──distinct──▶ connected components ──┐
      │                 └────▶ (user, hashtag) ──join labels──▶ count ──▶ top per component
      └── malformed: counted, the first few quoted                                │
    queries ──stamp──────────────────────────────────────────────────────────▶ answer ──▶ rows

- ``parse`` (`Parse`) checks each post and extracts its mentions and hashtags; a post with a
  missing field, control bytes or an absurd length is counted and skipped, never fatal.
- ``window`` (`Window`) keeps the last ``window`` seconds of posts, by the second their
  ``time`` falls in: each post enters at the epoch it arrives and retires, as a retraction,
  at the first epoch whose *clock* (the latest second any post so far fell in) leaves it
  behind. Edges leave the graph, so components split as well as merge.
- Components and the top hashtag of each are `timely_libs.linq` collections: work per epoch in
  proportion to what changed.
- ``answer`` (`Answer`, one worker) holds the components and top hashtags as of the last
  completed epoch, and answers each query *fresh* (once its own epoch is complete) and/or
  *stale* (at once, against the last completed epoch if it completed at most ``stale``
  seconds ago; before the first epoch, the empty state, complete as of the start). The state changes only in `Answer.on_notify`, when an epoch is complete, so a
  stale answer always reflects exactly one complete epoch. ``stamp`` and ``answer`` are
  urgent vertices (`timely.Vertex.urgent`): queries overtake the bulk work on their worker.
- With ``kexposure`` among the analyses, k-exposure (`Exposure`) over the same window:
  distinct hashtags used, joined with the distinct mentions, counted.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any

import numpy as np

import timely
from timely_jobs._posts import MAX_TEXT
from timely_libs import linq

__all__ = ["ANSWER_SCHEMA", "DataflowOptions", "build", "tag_id"]

ANSWER_SCHEMA = (
    "kind string, mode string, query_id long, user long, component long, hashtag string, count long, "
    "as_of long, latency_ms double, issued double, note string, answered double"
)
"""The rows the dataflow gives (run_stream adds ``epoch``), by ``kind``:

- ``answer``: one per query and mode (``fresh``/``stale``): the user's ``component`` (the
  least user id in it), its top ``hashtag`` and that hashtag's ``count`` in the window, as of
  the window ending at second ``as_of``; ``latency_ms`` from the query entering the
  computation to its answer; ``issued`` the query's own ``time``; ``answered`` the
  wall-clock time (``time.time()``) of the answer. A user absent from the
  window has no component: ``note`` says so.
- ``epoch``: one per completed epoch: ``as_of`` its clock.
- ``posts`` and ``malformed``: per epoch and worker, ``count`` posts taken in, and skipped;
- ``skipped``: the first few skipped posts, quoted in ``note``.
"""

_COLUMNS = tuple(c.split()[0] for c in ANSWER_SCHEMA.split(", "))

QUOTED = 5
"""Skipped posts quoted per worker (the rest are only counted)."""

_SCAN = re.compile(r"[\x00@#](?:(?<=\x00)|(?<=@)(?<![\w@#].)u[0-9]{1,18}(?!\w)|(?<=#)(?<![\w@#].)\w+)")
"""Post separators (``NUL``), mentions (``@u<digits>``) and hashtags (``#<word>``): ``@`` or
``#`` then a word, not inside a word. A mention is ``@u`` and 1 to 18 ASCII digits (an int64;
``str.isdigit`` would take ``²``, which ``int()`` refuses) ending the word; any other
``@word`` names no user. The leading character class lets the regex engine skip to the next
``NUL``, ``@`` or ``#`` instead of trying the lookbehind at every character, and without
groups ``findall`` returns strings, which the garbage collector does not track, not tuples."""
_INF = float("inf")
_AT, _HASH = ord("@"), ord("#")
_first, _after_u, _after_hash = itemgetter(0), itemgetter(slice(2, None)), itemgetter(slice(1, None))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")


@dataclass(frozen=True)
class DataflowOptions:
    window: int = 60
    """Seconds of posts the graph holds."""
    fresh: bool = True
    """Answer each query once its own epoch is complete."""
    stale: float | None = 1.0
    """Answer each query at once against the last completed epoch if it is at most this many
    seconds old; before the first, the empty state, complete as of the start (None: no stale
    answers)."""
    analyses: tuple[str, ...] = ("components",)
    """``components`` (the components, top hashtags and the answers to queries) and/or
    ``kexposure`` (Kineograph's k-exposure, Naiad §6.3)."""
    k: int = 2
    """k-exposure: a user counts for a hashtag once ``k`` of the users they mention used it."""
    query_priority: bool = True
    """Make the query path (``stamp`` and ``answer``) urgent (`timely.Vertex.urgent`): its
    messages overtake the posts and component updates queued on the same worker."""


def tag_id(name: str) -> int:
    """The 62-bit id of hashtag ``name`` (the same in every process); ties between equally
    popular hashtags go to the greater id."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") >> 2


def _row(kind: str, **values: Any) -> tuple[Any, ...]:
    """A row of `ANSWER_SCHEMA` with ``values`` by column name, the rest null."""
    return tuple(values.get(c, kind if c == "kind" else None) for c in _COLUMNS)


def _quote(user: Any, time_: Any, text: Any) -> str:
    shown = repr(text) if not isinstance(text, str) or len(text) <= 60 else repr(text[:60]) + f"... ({len(text)} chars)"
    return f"time={time_!r} user={user!r} text={shown}"


def _problem(time_: Any, user: Any, text: Any) -> str | None:
    """Why a post cannot be used, or None."""
    if type(user) is not int:
        return "no user"
    if type(time_) is not float or not time_ >= 0.0 or time_ == float("inf"):
        return "no time"
    if type(text) is not str:
        return "no text"
    if len(text) > MAX_TEXT:
        return f"text of {len(text)} characters"
    if _CONTROL.search(text):
        return "control bytes in the text"
    return None


class Parse(timely.Vertex):
    """Posts ``(time, user, text)`` to, per batch, one record of the batch's data for the
    window (port 0), the clock for every worker (port 1), counts and quotes of skipped posts
    (port 2) and the names of hashtags not seen before on this worker (port 3)."""

    def __init__(self) -> None:
        self.tag_ids: dict[str, int] = {}
        self.quoted = 0
        self.counts: dict[timely.Timestamp, list[int]] = {}

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        times: list[float] = []
        users: list[int] = []
        texts: list[str] = []
        quotes: list[tuple[Any, ...]] = []
        bad = 0
        for t, user, text in records:  # the common case in one test; _problem says why not
            if (
                type(user) is int
                and type(text) is str
                and type(t) is float
                and 0.0 <= t < _INF
                and len(text) <= MAX_TEXT
            ):
                times.append(t)
                users.append(user)
                texts.append(text)
            else:
                bad += 1
                self._skip(quotes, _problem(t, user, text) or "unreadable", user, t, text)
        # One regex pass over the batch's texts joined by NUL (which no good text holds).
        joined = "\x00".join(texts)
        if _CONTROL.search(joined.replace("\x00", " ")) or joined.count("\x00") != max(0, len(texts) - 1):
            keep = [i for i, x in enumerate(texts) if not _CONTROL.search(x)]
            for i in sorted(set(range(len(texts))) - set(keep)):
                bad += 1
                self._skip(quotes, "control bytes in the text", users[i], times[i], texts[i])
            times, users, texts = [times[i] for i in keep], [users[i] for i in keep], [texts[i] for i in keep]
            joined = "\x00".join(texts)
        new_names = []
        if texts:
            slots = np.floor(np.asarray(times)).astype(np.int64)
            authors = np.asarray(users, dtype=np.int64)
            ids = self.tag_ids
            found = _SCAN.findall(joined)
            kinds = np.frombuffer("".join(map(_first, found)).encode("latin-1"), np.uint8)
            is_mention, is_tag = kinds == _AT, kinds == _HASH
            post = np.cumsum(kinds == 0)  # a match's post: the separators before it
            mp = post[is_mention]
            md = np.fromiter(map(int, map(_after_u, compress(found, is_mention.tolist()))), np.int64)
            names = list(map(_after_hash, compress(found, is_tag.tolist())))
            tag_ids = list(map(ids.get, names))
            if None in tag_ids:  # names this worker has not seen before
                for j, h in enumerate(tag_ids):
                    if h is None:
                        word = names[j]
                        h = ids.get(word)
                        if h is None:
                            h = ids[word] = tag_id(word)
                            new_names.append((h, word))
                        tag_ids[j] = h
            tp = post[is_tag]
            other = md != authors[mp]
            mp, md = mp[other], md[other]
            edges = np.stack(
                [
                    np.concatenate([slots, slots[mp]]),
                    np.concatenate([authors, authors[mp]]),
                    np.concatenate([authors, md]),
                ],
                axis=1,
            )
            tags = np.stack([slots[tp], authors[tp], np.asarray(tag_ids, dtype=np.int64)], axis=1)
            self.send_by(self.outputs[0], [(edges, tags)], time)
            top = int(slots.max())
            self.send_by(self.outputs[1], [(w, top) for w in range(self.peers)], time)
        counts = self.counts.get(time)
        if counts is None:
            counts = self.counts[time] = [0, 0]
            self.notify_at(time)
        counts[0] += len(records) - bad
        counts[1] += bad
        if quotes:
            self.send_by(self.outputs[2], quotes, time)
        if new_names:
            self.send_by(self.outputs[3], new_names, time)

    def _skip(self, quotes: list[tuple[Any, ...]], problem: str, user: Any, t: Any, text: Any) -> None:
        if self.quoted < QUOTED:
            self.quoted += 1
            quotes.append(_row("skipped", note=f"{problem}: {_quote(user, t, text)}"))

    def checkpoint(self) -> Any:
        # Counts are per pending time: none is pending at a checkpoint.
        return (sorted(self.tag_ids.items()), self.quoted)

    def restore(self, state: Any) -> None:
        tag_ids, self.quoted = state
        self.tag_ids = dict(tag_ids)

    def on_notify(self, time: timely.Timestamp) -> None:
        good, bad = self.counts.pop(time)
        self.send_by(self.outputs[2], [_row("posts", count=good), _row("malformed", count=bad)], time)


class Window(timely.Vertex):
    """The last ``window`` seconds of edges and hashtags as linq differences: ``(columns,
    diffs)`` records on port 0 (edges ``(src, dst)``) and port 1 (``(user, hashtag)``)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.clock = -1
        self.slots: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        """second -> its edges and hashtags, as ``(second, a, b)`` int64 rows."""
        self.rows = 0

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if edge == 1:  # the clock
            clock = max(c for _, c in records)
            if clock > self.clock:
                self.clock = clock
                gone = sorted(s for s in self.slots if s <= clock - self.window)
                if gone:
                    parts = [self.slots.pop(s) for s in gone]
                    self._emit([e for p in parts for e in p[0]], [t for p in parts for t in p[1]], -1, time)
            return
        horizon = self.clock - self.window
        new_edges: list[np.ndarray] = []
        new_tags: list[np.ndarray] = []
        for edges, tags in records:
            for rows, out, k in ((edges, new_edges, 0), (tags, new_tags, 1)):
                for second in np.unique(rows[:, 0]).tolist():
                    if second > horizon:  # a late second already out of the window is left out
                        mine = rows[rows[:, 0] == second]
                        self.slots.setdefault(second, ([], []))[k].append(mine)
                        out.append(mine)
        self._emit(new_edges, new_tags, 1, time)

    def _emit(self, edges: list[np.ndarray], tags: list[np.ndarray], diff: int, time: timely.Timestamp) -> None:
        for port, parts in ((0, edges), (1, tags)):
            if parts:
                a = np.concatenate(parts)
                self.rows += diff * len(a)
                if len(a):
                    self.send_by(self.outputs[port], [((a[:, 1], a[:, 2]), np.full(len(a), diff, np.int64))], time)

    def state_size(self) -> tuple[int, int] | None:
        return self.rows, self.rows * 24

    def checkpoint(self) -> Any:
        # The window's rows as raw int64 bytes (three columns): compact, and any codec takes bytes.
        slots = [
            (second, [a.tobytes() for a in edges], [a.tobytes() for a in tags])
            for second, (edges, tags) in sorted(self.slots.items())
        ]
        return (self.clock, self.rows, slots)

    def restore(self, state: Any) -> None:
        self.clock, self.rows, slots = state

        def rows(data: bytes) -> np.ndarray:
            return np.frombuffer(data, dtype=np.int64).reshape(-1, 3).copy()

        self.slots = {second: ([rows(a) for a in edges], [rows(a) for a in tags]) for second, edges, tags in slots}


class Stamp(timely.Vertex):
    """Queries ``(query_id, user, time)`` stamped with the wall-clock time they entered the
    computation (where their latency starts)."""

    def __init__(self, urgent: bool) -> None:
        self.urgent = urgent

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        now = _now()
        self.send_by(self.outputs[0], [(q, u, t, now) for q, u, t in records], time)


def _now() -> float:
    return time.time()


class Answer(timely.Vertex):
    """Components, top hashtags and queries in (on one worker); answers out (see the module
    doc). Inputs: 0 label changes, 1 top-hashtag changes, 2 clocks, 3 hashtag names,
    4 stamped queries."""

    def __init__(self, options: DataflowOptions) -> None:
        self.options = options
        self.urgent = options.query_priority
        self.labels: dict[int, int] = {}
        self.tops: dict[int, tuple[int, int]] = {}
        self.names: dict[int, str] = {}
        self.pending: dict[timely.Timestamp, list[Any]] = {}
        self.clocks: dict[timely.Timestamp, int] = {}
        self.posts: dict[timely.Timestamp, int] = {}
        self.fresh: dict[timely.Timestamp, list[Any]] = {}
        self.stale: list[tuple[Any, timely.Timestamp]] = []
        self.as_of = -1
        self.epoch = -1
        self.completed_at = _now()
        """When the state answered from became complete: the empty state (no posts yet,
        ``as_of`` -1) is complete as of the computation's start, so stale queries of the
        first ``stale`` seconds are answered from it at once instead of waiting for epoch 0."""

    def _watch(self, time: timely.Timestamp) -> None:
        if time not in self.pending:
            self.pending[time] = []
            self.notify_at(time)

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if edge <= 1:
            self._watch(time)
            self.pending[time].extend((edge, r) for r in records)
        elif edge == 2:
            self._watch(time)
            self.clocks[time] = max(self.clocks.get(time, -1), *(c for _, c in records))
        elif edge == 3:
            self.names.update(records)
        else:
            self._watch(time)
            if self.options.fresh:
                self.fresh.setdefault(time, []).extend(records)
            if self.options.stale is not None:
                now = _now()
                if now - self.completed_at <= self.options.stale:
                    self.send_by(self.outputs[0], [self._answer(q, "stale", now) for q in records], time)
                else:
                    self.stale.extend((q, time) for q in records)

    def on_notify(self, time: timely.Timestamp) -> None:
        for t in sorted(t for t in self.pending if t <= time):
            self._apply(self.pending.pop(t))
        clock = max((c for t, c in self.clocks.items() if t <= time), default=self.as_of)
        self.clocks = {t: c for t, c in self.clocks.items() if t > time}
        self.as_of = max(self.as_of, clock)
        self.epoch = time[0]
        now = _now()
        self.completed_at = now
        rows = [self._answer(q, "fresh", now) for q in self.fresh.pop(time, [])]
        if rows:
            self.send_by(self.outputs[0], rows, time)
        waiting, self.stale = self.stale, []
        for q, t in waiting:  # at their own times (>= this one): the state is fresh now
            self.send_by(self.outputs[0], [self._answer(q, "stale", now)], t)
        self.send_by(self.outputs[0], [_row("epoch", as_of=self.as_of)], time)

    def _apply(self, changes: list[Any]) -> None:
        labels, tops = self.labels, self.tops
        for sign in (-1, 1):  # retractions first: a key's old value goes before its new one comes
            for edge, (columns, diff_list) in changes:
                keys, values, *rest = (np.asarray(c) for c in columns)
                diffs = np.asarray(diff_list)
                picked = np.flatnonzero(diffs == sign) if sign < 0 else np.flatnonzero(diffs > 0)
                if not len(picked):
                    continue
                ks = keys[picked].tolist()
                vs = values[picked].tolist()
                if edge == 0:
                    if sign < 0:
                        for k, v in zip(ks, vs, strict=True):
                            if labels.get(k) == v:
                                del labels[k]
                    else:
                        labels.update(zip(ks, vs, strict=True))
                else:
                    counts = rest[0][picked].tolist()
                    if sign < 0:
                        for k, v, c in zip(ks, vs, counts, strict=True):
                            if tops.get(k) == (v, c):
                                del tops[k]
                    else:
                        for k, v, c in zip(ks, vs, counts, strict=True):
                            tops[k] = (v, c)

    def _answer(self, query: Any, mode: str, now: float) -> tuple[Any, ...]:
        query_id, user, issued, arrived = query
        latency = (now - arrived) * 1000.0
        label = self.labels.get(user)
        if label is None:
            if self.as_of < 0:
                note = f"user {user} not seen yet: no posts in the state answered from"
            else:
                note = f"user {user} not seen in the last {self.options.window} s"
            return _row(
                "answer",
                mode=mode,
                query_id=query_id,
                user=user,
                count=0,
                as_of=self.as_of,
                latency_ms=latency,
                issued=issued,
                answered=now,
                note=note,
            )
        tag, count = self.tops.get(label, (None, 0))
        name = self.names.get(tag) if tag is not None else None
        return _row(
            "answer",
            mode=mode,
            query_id=query_id,
            user=user,
            component=label,
            hashtag=name,
            count=count,
            as_of=self.as_of,
            latency_ms=latency,
            issued=issued,
            answered=now,
        )

    def state_size(self) -> tuple[int, int] | None:
        rows = len(self.labels) + len(self.tops)
        return rows, rows * 100

    def checkpoint(self) -> Any:
        # What is pending (changes, clocks, queries) belongs to later times: none at a checkpoint.
        return (
            sorted(self.labels.items()),
            sorted(self.tops.items()),
            sorted(self.names.items()),
            self.as_of,
            self.epoch,
            self.completed_at,
        )

    def restore(self, state: Any) -> None:
        labels, tops, names, self.as_of, self.epoch, self.completed_at = state
        self.labels = dict(labels)
        self.tops = {k: (v, c) for k, (v, c) in tops}
        self.names = dict(names)


class Exposure(timely.Vertex):
    """k-exposure on one worker: per hashtag, how many users are exposed to it by at least k
    of the users they mention (Kineograph's metric). Inputs: 0 changes of ``(hashtag,
    users)``, 1 clocks, 2 hashtag names. At each complete epoch, a row for every hashtag whose
    figure changed: ``kind = kexposure``, ``hashtag``, ``count`` (0 once nobody is)."""

    def __init__(self, options: DataflowOptions) -> None:
        self.users: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.pending: dict[timely.Timestamp, list[Any]] = {}
        self.clocks: dict[timely.Timestamp, int] = {}
        self.as_of = -1

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if edge == 2:
            self.names.update(records)
            return
        if time not in self.pending:
            self.pending[time] = []
            self.notify_at(time)
        if edge == 0:
            self.pending[time].extend(records)
        else:
            self.clocks[time] = max(self.clocks.get(time, -1), *(c for _, c in records))

    def checkpoint(self) -> Any:
        return (sorted(self.users.items()), sorted(self.names.items()), self.as_of)

    def restore(self, state: Any) -> None:
        users, names, self.as_of = state
        self.users, self.names = dict(users), dict(names)

    def on_notify(self, time: timely.Timestamp) -> None:
        changed: set[int] = set()
        for t in sorted(t for t in self.pending if t <= time):
            for (tags, users), diffs in self.pending.pop(t):
                for tag, n, d in zip(tags, users, diffs, strict=True):
                    changed.add(tag)
                    if d < 0 and self.users.get(tag) == n:
                        del self.users[tag]
                    elif d > 0:
                        self.users[tag] = n
        clock = max((c for t, c in self.clocks.items() if t <= time), default=self.as_of)
        self.clocks = {t: c for t, c in self.clocks.items() if t > time}
        self.as_of = max(self.as_of, clock)
        rows = [
            _row("kexposure", hashtag=self.names.get(tag), count=self.users.get(tag, 0), as_of=self.as_of)
            for tag in sorted(changed)
        ]
        if rows:
            self.send_by(self.outputs[0], rows, time)


def _not_self(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return src != dst


def _exposed(src: np.ndarray, dst: np.ndarray, user: np.ndarray, tag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return src, tag


def _hashtags(users_tags: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The hashtag of each ``((user, hashtag), count)``: its key's second field, taken in C."""
    return np.fromiter(map(_second, users_tags), dtype=np.int64, count=len(users_tags))


_second = itemgetter(1)


def _by_count(record: Any) -> tuple[int, int, int]:
    """``((component, hashtag), n)`` as the flat ``(component, n, hashtag)``: then ``max`` by
    ``n`` per component, ties to the greatest record, so to the greater hashtag id, runs on
    columns of ints instead of calling Python per record and per component."""
    (label, tag), n = record
    return (label, n, tag)


def _as_lists(change: Any) -> tuple[tuple[list[Any], ...], list[int]]:
    """linq's ``(columns, diffs)`` as Python lists, which timely's codec moves between
    processes (numpy arrays it does not)."""
    columns, diffs = change
    return tuple(c.tolist() for c in columns), diffs.tolist()


def _to_worker_zero(record: Any) -> int:
    return 0


def _labelled(user: np.ndarray, tag: np.ndarray, node: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return label, tag


def build(options: DataflowOptions, scope: timely.Scope, inputs: dict[str, timely.Input]) -> timely.Stream:
    """The dataflow (see the module doc); ``inputs`` are ``posts`` and ``queries`` rows."""
    # linq's compiled loops load now, before the first epoch, not inside it at its first large
    # array: that took seconds, and epoch 0's fresh answers were the slowest of a whole run.
    linq.preload()
    data, clock, skipped, names = inputs["posts"].stage("parse", Parse, outputs=4)
    edges_d, tags_d = scope.stage(
        "window", lambda: Window(options.window), [data, clock], exchange=[None, itemgetter(0)], outputs=2
    )
    graph = linq.Collection.from_columns(edges_d, name="window_edges").distinct(name="mention_graph")
    tags = linq.Collection.from_columns(tags_d, name="window_tags")
    every: Callable[[Any], int] = _to_worker_zero
    outputs = [skipped]
    if "components" in options.analyses:
        labels = linq.connected_components(graph)
        counts = tags.join(labels, itemgetter(0), itemgetter(0), linq.columns(_labelled), name="tags_by_component")
        top = (
            counts.count(name="tag_counts")
            .select(_by_count, name="tag_count_rows")
            .max(itemgetter(0), itemgetter(1), name="top_tag")
        )
        queries = inputs["queries"].stage("stamp", lambda: Stamp(options.query_priority))
        changes = [
            labels.consolidate(name="label_changes").to_columns().map("label_lists", _as_lists),
            top.select(itemgetter(0, 2, 1), name="top_rows")
            .consolidate(name="top_changes")
            .to_columns()
            .map("top_lists", _as_lists),
        ]
        outputs.append(
            scope.stage("answer", lambda: Answer(options), [*changes, clock, names, queries], exchange=[every] * 5)
        )
    if "kexposure" in options.analyses:
        k = options.k
        mentions = graph.where(linq.columns(_not_self), name="mentions")
        used = tags.distinct(name="hashtags_used")
        exposures = mentions.join(used, itemgetter(1), itemgetter(0), linq.columns(_exposed), name="exposures")
        exposed = exposures.count(name="exposure_counts").where(
            linq.columns(lambda _, n: n >= k), name="exposed_k_times"
        )
        per_tag = exposed.select(linq.columns(_hashtags), name="exposed_users").count(name="kexposure")
        outputs.append(
            scope.stage(
                "kexposure_rows",
                lambda: Exposure(options),
                [
                    per_tag.consolidate(name="kexposure_changes").to_columns().map("kexposure_lists", _as_lists),
                    clock,
                    names,
                ],
                exchange=[every] * 3,
            )
        )
    return scope.concat("rows", outputs)
