"""The streaming job's built-in source: a seeded stream of posts and queries, replayed against
real time (Naiad §6.4 fed its tweets at a fixed rate, not as fast as it could).

Second ``s`` of the stream is a pure function of ``(seed, s)``: the posts whose ``time`` falls in
``[s, s + 1)`` and the queries issued in it. That is what lets the job's check recompute any
epoch's answers from scratch in the same run: it asks the generator for the ground truth of the
seconds in a window instead of re-parsing the text the dataflow parsed.

- Authors and mentioned users are drawn from a power law (a few users post and are mentioned
  a lot, most rarely), hashtags from a Zipf law; a post mentions ``@u<id>`` and tags
  ``#<name>`` inside ordinary words.
- A small share of posts is malformed, each of one kind (`MALFORMED`): a missing field, text
  with control bytes in it, or an absurdly long text. The dataflow must count and skip them.
- Queries ask about a user: mostly one who posts, now and then one who never appears.

`StreamWriter` writes each second as one Parquet file per source (``posts/`` and
``queries/``) at the second's end of wall-clock time: a directory Spark's file source reads.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "MALFORMED",
    "MAX_TEXT",
    "POSTS_SCHEMA",
    "QUERIES_SCHEMA",
    "Second",
    "StreamSpec",
    "StreamWriter",
    "generate",
    "tag_name",
]

POSTS_SCHEMA = "time double, user long, text string"
QUERIES_SCHEMA = "query_id long, user long, time double"
_POSTS_ARROW = pa.schema([("time", pa.float64()), ("user", pa.int64()), ("text", pa.string())])
_QUERIES_ARROW = pa.schema([("query_id", pa.int64()), ("user", pa.int64()), ("time", pa.float64())])

MAX_TEXT = 2_000
"""Longest text a well-formed post has (characters); longer is malformed."""

MALFORMED = ("no_user", "no_time", "no_text", "control_bytes", "absurd_length")

_WORDS = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "it",
    "you",
    "that",
    "for",
    "on",
    "with",
    "this",
    "at",
    "be",
    "so",
    "we",
    "are",
    "my",
    "have",
    "just",
    "was",
    "not",
    "but",
    "all",
    "great",
    "new",
    "today",
    "love",
    "what",
    "when",
    "now",
    "out",
    "more",
    "about",
    "day",
    "time",
    "like",
    "good",
    "get",
    "see",
    "one",
    "how",
]

AUTHOR_EXPONENT = 0.5
MENTION_EXPONENT = 1.0
"""The power laws of authors and of mentioned users: the k-th most active user posts (is
mentioned) in proportion to ``k ** -exponent``."""

QUERY_IDS_PER_SECOND = 1_000_000
"""Query ids are ``second * QUERY_IDS_PER_SECOND + i``: unique and ordered by second."""


@dataclass(frozen=True)
class StreamSpec:
    """What the generated stream looks like."""

    seed: int = 7
    rate: int = 32_000
    """Posts per second."""
    query_rate: float = 10.0
    """Queries per second."""
    users: int = 500_000
    hashtags: int = 50_000
    malformed: float = 0.0005
    """Share of posts that are malformed."""
    unknown_queries: float = 0.02
    """Share of queries about a user who never posts and is never mentioned."""

    def __post_init__(self) -> None:
        if self.rate < 0 or self.query_rate < 0:
            raise ValueError("rates must be at least 0")
        if self.users < 2 or self.hashtags < 1:
            raise ValueError("need at least 2 users and 1 hashtag")
        if not 0 <= self.malformed <= 1 or not 0 <= self.unknown_queries <= 1:
            raise ValueError("shares must be between 0 and 1")


@dataclass(frozen=True)
class Second:
    """One second of the stream: the rows as written, and the ground truth behind them."""

    second: int
    posts: pa.Table
    queries: pa.Table
    authors: np.ndarray
    """Authors of the well-formed posts (one entry per post)."""
    mentions: np.ndarray
    """``(author, mentioned)`` pairs of the well-formed posts, shape (m, 2)."""
    tags: np.ndarray
    """``(author, hashtag index)`` pairs of the well-formed posts, shape (t, 2)."""
    malformed: int


def tag_name(index: int) -> str:
    """The text of hashtag ``index`` (without ``#``): a pronounceable word, unique per index."""
    syllables = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "he", "ji", "wa", "yo")
    out = []
    n = index
    while True:
        out.append(syllables[n % 16])
        n //= 16
        if n == 0:
            break
    return "".join(out)


class _Laws:
    """Sampling from the power laws of one spec (made once: the CDFs are large)."""

    def __init__(self, spec: StreamSpec) -> None:
        rng = np.random.default_rng(spec.seed)
        ranks = np.arange(1, spec.users + 1, dtype=np.float64)
        # Who posts is skewed less than who is mentioned (a few accounts draw most mentions;
        # nobody writes a tenth of all posts): exponents 0.5 and 1.0 of the user's rank.
        self.user_cdf = np.cumsum(ranks**-AUTHOR_EXPONENT)
        self.user_cdf /= self.user_cdf[-1]
        self.mention_cdf = np.cumsum(ranks**-MENTION_EXPONENT)
        self.mention_cdf /= self.mention_cdf[-1]
        self.user_ids = rng.permutation(spec.users).astype(np.int64)  # rank -> user id
        tranks = np.arange(1, spec.hashtags + 1, dtype=np.float64)
        self.tag_cdf = np.cumsum(tranks**-1.3)
        self.tag_cdf /= self.tag_cdf[-1]
        self.tag_names = [tag_name(i) for i in range(spec.hashtags)]

    def users(self, rng: np.random.Generator, n: int, mentioned: bool = False) -> np.ndarray:
        cdf = self.mention_cdf if mentioned else self.user_cdf
        return self.user_ids[np.minimum(np.searchsorted(cdf, rng.random(n)), len(self.user_ids) - 1)]

    def tags(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(self.tag_cdf, rng.random(n)), len(self.tag_cdf) - 1).astype(np.int64)


_LAWS: dict[StreamSpec, _Laws] = {}
_LAWS_LOCK = threading.Lock()


def _laws(spec: StreamSpec) -> _Laws:
    with _LAWS_LOCK:
        if spec not in _LAWS:
            _LAWS[spec] = _Laws(spec)
        return _LAWS[spec]


def generate(spec: StreamSpec, second: int) -> Second:
    """Second ``second`` of the stream ``spec`` describes (the same on every call)."""
    laws = _laws(spec)
    rng = np.random.default_rng([spec.seed, second])
    n = spec.rate
    times = second + np.sort(rng.random(n))
    authors = laws.users(rng, n)
    mention_counts = rng.choice(3, size=n, p=[0.45, 0.45, 0.10])
    tag_counts = rng.choice(3, size=n, p=[0.50, 0.38, 0.12])
    mentioned = laws.users(rng, int(mention_counts.sum()), mentioned=True)
    tagged = laws.tags(rng, int(tag_counts.sum()))
    words = rng.integers(0, len(_WORDS), size=(n, 4))
    bad = rng.random(n) < spec.malformed
    bad_kind = rng.integers(0, len(MALFORMED), size=n)

    texts: list[str | None] = []
    users: list[int | None] = authors.tolist()
    time_list: list[float | None] = times.tolist()
    good_authors: list[int] = []
    mention_pairs: list[tuple[int, int]] = []
    tag_pairs: list[tuple[int, int]] = []
    mi = ti = 0
    names = laws.tag_names
    malformed = 0
    for i in range(n):
        a = users[i]
        k = int(mention_counts[i])
        ms = mentioned[mi : mi + k].tolist()
        mi += k
        k = int(tag_counts[i])
        ts = tagged[ti : ti + k].tolist()
        ti += k
        w = words[i]
        parts = [_WORDS[w[0]], _WORDS[w[1]]]
        parts.extend(f"@u{m}" for m in ms)
        parts.append(_WORDS[w[2]])
        parts.extend(f"#{names[t]}" for t in ts)
        parts.append(_WORDS[w[3]])
        text = " ".join(parts)
        if bad[i]:
            malformed += 1
            kind = MALFORMED[bad_kind[i]]
            if kind == "no_user":
                users[i] = None
            elif kind == "no_time":
                time_list[i] = None
            elif kind == "no_text":
                text = None  # type: ignore[assignment]
            elif kind == "control_bytes":
                text = text[:5] + "\x00\x07\x1b\ufffd" + text[5:]
            else:
                text = (text + " ") * (MAX_TEXT // max(1, len(text)) + 50)
            texts.append(text)
            continue
        texts.append(text)
        good_authors.append(a)  # type: ignore[arg-type]
        mention_pairs.extend((a, m) for m in ms if m != a)  # type: ignore[misc]
        tag_pairs.extend((a, t) for t in ts)  # type: ignore[misc]

    posts = pa.table(
        [pa.array(time_list, pa.float64()), pa.array(users, pa.int64()), pa.array(texts, pa.string())],
        schema=_POSTS_ARROW,
    )
    queries = _queries(spec, laws, rng, second)
    return Second(
        second=second,
        posts=posts,
        queries=queries,
        authors=np.asarray(good_authors, dtype=np.int64),
        mentions=np.asarray(mention_pairs, dtype=np.int64).reshape(-1, 2),
        tags=np.asarray(tag_pairs, dtype=np.int64).reshape(-1, 2),
        malformed=malformed,
    )


def _queries(spec: StreamSpec, laws: _Laws, rng: np.random.Generator, second: int) -> pa.Table:
    # A fractional rate is kept on average: second s issues floor((s + 1) r) - floor(s r) queries.
    n = int((second + 1) * spec.query_rate) - int(second * spec.query_rate)
    users = laws.users(rng, n)
    unknown = rng.random(n) < spec.unknown_queries
    users = np.where(unknown, spec.users + rng.integers(0, spec.users, size=n), users)  # ids nobody has
    ids = second * QUERY_IDS_PER_SECOND + np.arange(n, dtype=np.int64)
    times = second + np.sort(rng.random(n))
    return pa.table([pa.array(ids), pa.array(users, pa.int64()), pa.array(times)], schema=_QUERIES_ARROW)


class StreamWriter:
    """Writes the stream into ``root/posts`` and ``root/queries``, one Parquet file per source
    per second, each at the end of its second of wall-clock time (or as fast as it can when
    generating falls behind: `behind` says by how much). Runs on a thread of its own."""

    def __init__(self, spec: StreamSpec, root: Path, seconds: int | None, start_at: int = 0) -> None:
        self.spec = spec
        self.posts = root / "posts"
        self.queries = root / "queries"
        self.posts.mkdir(parents=True, exist_ok=True)
        self.queries.mkdir(parents=True, exist_ok=True)
        self.seconds = seconds
        self.next_second = start_at
        self.started = 0.0
        """Wall-clock time (``time.time()``) of second 0 of the stream."""
        self.behind = 0.0
        """The most the writer lagged behind real time, seconds."""
        self.error: BaseException | None = None
        self._warm_up: threading.Event | None = None
        self.keep: Callable[[Second], None] | None = None
        """Called with each second as it is written (the job's check keeps them)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="post-generator", daemon=True)

    def start(self, warm_up: threading.Event | None = None) -> None:
        """Start writing. With ``warm_up``, second 0 is written at once and the clock starts
        (second 1 ends a second later) only once ``warm_up`` is set: the reader has taken
        second 0 in, so start-up costs (Spark's first tasks, the first epoch) are not lag."""
        _laws(self.spec)  # the CDFs before the clock starts
        self._warm_up = warm_up
        self.started = time.time() - self.next_second - (1 if warm_up is not None else 0)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while self.seconds is None or self.next_second < self.seconds:
                s = self.next_second
                data = generate(self.spec, s)
                due = self.started + s + 1
                wait = due - time.time()
                if wait > 0 and self._stop.wait(wait):
                    return
                self.behind = max(self.behind, -wait)
                _write(data.queries, self.queries / f"q-{s:08d}.parquet")
                _write(data.posts, self.posts / f"p-{s:08d}.parquet")
                if self.keep is not None:
                    self.keep(data)
                self.next_second = s + 1
                if s == 0 and self._warm_up is not None:
                    while not self._warm_up.wait(0.1):
                        if self._stop.is_set():
                            return
                    self.started = time.time() - 1
                if self._stop.is_set():
                    return
        except BaseException as e:
            self.error = e


def _write(table: pa.Table, path: Path) -> None:
    """Write then rename, so a reader never sees half a file (names starting ``.`` are skipped)."""
    tmp = path.with_name("." + path.name)
    pq.write_table(table, tmp)
    os.replace(tmp, path)
