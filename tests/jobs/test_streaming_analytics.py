"""The streaming job (Naiad §6.4 on Spark): the check's oracle against NetworkX; the dataflow on
hand-made posts whose window retires edges so that a component splits, answered fresh and
stale; and the whole job on a real local Spark session, every answer checked against a
recomputation from the posts of its window, malformed posts counted and quoted, queries for
users never seen answered as such, and bad options refused in one line."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import timely
from tests.support import ROOT
from tests.support.console import read_json, run_job_watching_consoles
from timely_jobs import streaming_analytics
from timely_jobs._posts import StreamSpec, generate
from timely_jobs._stream_check import DENSE, component_labels, window_truth
from timely_jobs._stream_dataflow import DataflowOptions, Parse, build, tag_id
from timely_jobs.streaming_analytics import StreamOptions, run_job

pytestmark = pytest.mark.timeout(300)


def nx_answers(posts: list[tuple[int, int, list[int], list[str]]]) -> dict[int, tuple[int, str | None, int]]:
    """Per user: (least user in the component, top hashtag, its count), from NetworkX; ties
    between hashtags go to the greater 62-bit id, as the job documents."""
    from timely_jobs._stream_dataflow import tag_id

    g: Any = nx.Graph()
    for _, user, mentions, _ in posts:
        g.add_node(user)
        g.add_edges_from((user, m) for m in mentions if m != user)
    out = {}
    for comp in nx.connected_components(g):
        counts: dict[str, int] = {}
        for _, user, _, tags in posts:
            if user in comp:
                for t in tags:
                    counts[t] = counts.get(t, 0) + 1
        top = max(counts, key=lambda t: (counts[t], tag_id(t))) if counts else None
        for v in comp:
            out[v] = (min(comp), top, counts.get(top, 0) if top else 0)
    return out


def test_oracle_matches_networkx() -> None:
    """The job's own check (numpy) gives NetworkX's components and top hashtags."""
    spec = StreamSpec(seed=3, rate=400, users=300, hashtags=40, malformed=0.02)
    seconds = [generate(spec, s) for s in range(3)]
    truth = window_truth(seconds)
    from timely_jobs._posts import tag_name

    posts: list[tuple[int, int, list[int], list[str]]] = []
    for s in seconds:
        by_author: dict[int, list[int]] = {}
        for a, m in s.mentions.tolist():
            by_author.setdefault(a, []).append(m)
        for a in s.authors.tolist():
            posts.append((s.second, a, by_author.pop(a, []), []))
        for a, t in s.tags.tolist():
            posts.append((s.second, a, [], [tag_name(t)]))
    expected = nx_answers(posts)
    assert len(expected) == len(truth.nodes) > 100
    for user, answer in expected.items():
        assert truth.answer(user) == answer
    assert truth.answer(10**9) == (None, None, 0)
    # ids too large to index directly take the sorting path, with the same answers
    shift = 1 << 40
    far = [
        dataclasses.replace(
            s, authors=s.authors + shift, mentions=s.mentions + shift, tags=s.tags + np.array([shift, 0])
        )
        for s in seconds
    ]
    far_truth = window_truth(far)
    assert far_truth.nodes.min() >= DENSE
    for user, (component, tag, count) in expected.items():
        assert far_truth.answer(user + shift) == (component + shift, tag, count)
    # and the labels alone, on a random graph with long paths
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 2000, 1500), rng.integers(0, 2000, 1500)
    nodes = np.unique(np.concatenate([src, dst]))
    labels = dict(zip(nodes.tolist(), component_labels(nodes, src, dst).tolist(), strict=True))
    g = nx.Graph(zip(src.tolist(), dst.tolist(), strict=True))
    assert labels == {v: min(c) for c in nx.connected_components(g) for v in c}


def run_dataflow(
    epochs: list[tuple[list[tuple[Any, Any, Any]], list[tuple[int, int, float]]]], options: DataflowOptions
) -> list[tuple[int, tuple[Any, ...]]]:
    """The job's dataflow in plain timely (no Spark): ``epochs[e]`` = (posts, queries); each
    epoch is complete before the next goes in. The output rows with their epochs."""
    out: list[tuple[int, tuple[Any, ...]]] = []

    def program(scope: timely.Scope) -> Any:
        inputs = {"posts": scope.new_input("posts"), "queries": scope.new_input("queries")}
        rows = build(options, scope, inputs)
        rows.subscribe(lambda t, records: out.extend((t[0], r) for r in records))
        return inputs, rows.probe()

    with timely.execute(program, timeout=120) as (comp, (inputs, probe)):
        for e, (posts, queries) in enumerate(epochs):
            inputs["posts"].send(posts)
            inputs["queries"].send(queries)
            for i in inputs.values():
                i.advance_to(e + 1)
            comp.wait_passed(probe, e)
        for i in inputs.values():
            i.close()
        comp.run()
    return out


def test_window_retires_edges_and_components_split() -> None:
    """Users 1-2-3-4 form one component while their mentions are in the window; once the
    post that links 2 and 3 retires, {1, 2} and {3, 4} are components of their own, with their
    own top hashtags. Every answer (fresh and stale) against NetworkX on its window."""
    posts = [  # (second, user, mentions, hashtags)
        (0, 1, [2], ["red"]),
        (0, 3, [4], ["blue", "blue"]),
        (1, 2, [3], ["green"]),
        (2, 4, [], ["blue"]),
        (3, 1, [2], ["red", "red"]),
        (3, 4, [3], []),
    ]

    def text(mentions: list[int], tags: list[str]) -> str:
        return " ".join(["hello", *(f"@u{m}" for m in mentions), "there", *(f"#{t}" for t in tags)])

    window = 2
    epochs = []
    for second in range(4):
        mine = [(second + 0.5, u, text(m, t)) for s, u, m, t in posts if s == second]
        queries = [(100 * second + u, u, second + 0.9) for u in (1, 3, 4, 99)]
        epochs.append((mine, queries))
    out = run_dataflow(epochs, DataflowOptions(window=window, fresh=True, stale=3600.0))
    answers = [r for _, r in out if r[0] == "answer"]
    assert len(answers) == 2 * 4 * 4  # every query, in both modes
    seen_split = False
    for _kind, mode, query_id, user, component, hashtag, count, as_of, latency, issued, note, answered in answers:
        in_window = [p for p in posts if as_of - window < p[0] <= as_of]
        expected = nx_answers(in_window).get(user, (None, None, 0))
        assert (component, hashtag, count) == expected, (mode, query_id, as_of)
        assert latency >= 0 and issued == pytest.approx(query_id // 100 + 0.9) and answered > 1e9
        if mode == "fresh":
            assert as_of == query_id // 100  # its own epoch's window
        else:
            assert as_of <= query_id // 100
        if user == 99 and as_of >= 0:
            assert note == f"user 99 not seen in the last {window} s"
        elif as_of < 0:  # a stale answer of epoch 0, from the empty state at the start
            assert (
                mode == "stale"
                and query_id < 100
                and note == f"user {user} not seen yet: no posts in the state answered from"
            )
        if as_of == 3 and user == 3:
            seen_split = True
            assert component == 3  # 3 and 4 apart from 1 and 2 now
    assert seen_split
    # while 2-3 was in the window (seconds 1 and 2), 4 was with 1
    assert any(r[3] == 4 and r[4] == 1 for r in answers)


def run_from_the_start(stale: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Queries of users 1 and 99 sent at epoch 0 while its posts are held back, then the posts
    (user 1 mentions 2, with #tag), then a query of user 1 at epoch 1: the answers given while
    epoch 0 was still open, and all of them, as they arrived."""
    out: list[tuple[Any, ...]] = []

    def seen(row: tuple[Any, ...]) -> tuple[Any, ...]:  # as each row arrives, not once its time completes
        if row[0] == "answer":
            out.append(row)
        return row

    def program(scope: timely.Scope) -> Any:
        inputs = {"posts": scope.new_input("posts"), "queries": scope.new_input("queries")}
        rows = build(DataflowOptions(window=10, fresh=True, stale=stale), scope, inputs)
        return inputs, rows.map("seen", seen).probe()

    with timely.execute(program, timeout=120) as (comp, (inputs, probe)):
        inputs["queries"].send([(1, 1, 0.1), (2, 99, 0.1)])
        inputs["queries"].advance_to(1)  # the posts of epoch 0 are still to come
        for _ in range(50):  # let it work while epoch 0 stays open
            with contextlib.suppress(timely.StalledError):
                comp.run(timeout=0.1)
            if len(out) == 2 or stale == 0.0:
                break
        early = list(out)
        inputs["posts"].send([(0.5, 1, "hi @u2 #tag"), (0.7, 3, "#other")])
        inputs["posts"].advance_to(1)
        comp.wait_passed(probe, 0)
        inputs["queries"].send([(3, 1, 1.1)])
        for i in inputs.values():
            i.advance_to(2)
        comp.wait_passed(probe, 1)
    return early, out


def test_stale_queries_at_the_start_are_answered_from_the_empty_state() -> None:
    """Before any epoch is complete, the state answered from is the empty one (complete as of
    the start): a stale query is answered while its epoch is still open, with no component and
    ``as_of`` -1, as the check's empty window has it; a fresh query of the same epoch waits
    for the epoch and sees its posts. With ``stale`` 0 the start is already too old, so the
    stale answer waits for epoch 0 too."""
    for stale in (3600.0, 0.0):
        early, out = run_from_the_start(stale)
        answers = {(r[1], r[2]): r for r in out}
        assert len(answers) == len(out) == 6  # three queries, both modes, each answered once
        if stale:
            # answered with epoch 0 open (no fresh answer can exist yet), from the empty state
            assert sorted((r[1], r[2]) for r in early) == [("stale", 1), ("stale", 2)]
            for r in early:
                assert (r[4], r[5], r[6], r[7]) == (None, None, 0, -1)
                assert r[10] == f"user {r[3]} not seen yet: no posts in the state answered from"
        else:
            assert early == []
            for q in (1, 2):  # waited for epoch 0, answered from it
                assert answers["stale", q][7] == 0
        for q in (1, 3):  # fresh: its own epoch's window, where user 1 mentions 2
            assert answers["fresh", q][4:8] == (1, "tag", 1, 0)
        assert answers["fresh", 2][4] is None and answers["fresh", 2][7] == 0
        assert answers["stale", 3][4:8] == (1, "tag", 1, 0)  # epoch 0 is the last complete one


def test_malformed_posts_are_counted_skipped_and_quoted() -> None:
    good = (0.5, 1, "hi @u2 #tag")
    bad: list[tuple[Any, Any, Any]] = [
        (0.1, None, "no user"),
        (None, 5, "no time"),
        (0.2, 6, None),
        (0.3, 7, "control \x00\x07 bytes"),
        (0.4, 8, "x" * 100_000),
    ]
    later = [
        (float("nan"), 9, "not a time"),
        (1.5, 10, "@u99999999999999999999999 is not a user id"),
        (1.6, 10, "nor are @u\u00b2 and @u\u0661\u0662 (digits int() refuses, or not ASCII)"),
    ]
    epochs = [([good, *bad], [(1, 1, 0.9), (2, 2, 0.9)]), (later, [(3, 10, 1.9)])]
    out = run_dataflow(epochs, DataflowOptions(window=5, stale=None))
    rows = [r for _, r in out]
    assert sum(r[6] for r in rows if r[0] == "malformed") == len(bad) + 1
    assert sum(r[6] for r in rows if r[0] == "posts") == 3
    quoted = [r[10] for r in rows if r[0] == "skipped"]
    assert len(quoted) == 5  # the first few, not all
    for reason in ("no user", "no time", "no text", "control bytes in the text", "text of 100000 characters"):
        assert sum(q.startswith(reason + ":") for q in quoted) == 1
    answers = {r[2]: r for r in rows if r[0] == "answer"}
    assert answers[1][4:7] == (1, "tag", 1) and answers[2][4:7] == (1, "tag", 1)
    assert answers[3][4:7] == (10, None, 0)  # user 10 posted, alone: its mention names no user id


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # what a Unicode regex's \\w matches


def read_post(text: str) -> tuple[list[int], list[str]]:
    """A post's mentions and hashtags read one character at a time, as the job documents them:
    ``@`` or ``#`` not inside a word (nor after another ``@``/``#``), then the word; a mention
    is ``@u`` and 1 to 18 ASCII digits, the whole word."""
    mentions: list[int] = []
    tags: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in "@#" and (i == 0 or not (_word(text[i - 1]) or text[i - 1] in "@#")):
            j = i + 1
            while j < len(text) and _word(text[j]):
                j += 1
            word = text[i + 1 : j]
            if word:
                if text[i] == "#":
                    tags.append(word)
                elif word[0] == "u" and 1 < len(word) <= 19 and all("0" <= c <= "9" for c in word[1:]):
                    mentions.append(int(word[1:]))
                i = j
                continue
        i += 1
    return mentions, tags


_PIECES = ["@", "#", "u", "@u", "@u1", "a@u2", "x#t", "#t", "0", "7", "a", "_", " ", ".", "\n", "\x07"]
_PIECES += ["\u00b2", "\u0663", "\u00e9", "@u" + "1" * 18]  # non-ASCII digits, a letter; the longest user id


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.lists(st.sampled_from(_PIECES), max_size=14).map("".join)),
        max_size=25,
    )
)
@example([(1, "@u" + "1" * 18 + " @u" + "2" * 19 + " a@u3 #a#b x#c @u4_ @u5#d @@u6 ##e @u\u00b2 #\u00e9t\u00e9\n#")])
def test_parse_reads_mentions_and_hashtags_as_a_post_by_post_reading(posts: list[tuple[int, str]]) -> None:
    """``parse`` reads a whole batch in one regular-expression pass and sorts the matches out
    with NumPy; it must find, post by post, exactly what `read_post` finds."""
    got: list[tuple[list[Any], list[Any]]] = []

    def program(scope: timely.Scope) -> Any:
        posts_in = scope.new_input("posts")
        data, _, _, _ = posts_in.stage("parse", Parse, outputs=4)
        data.subscribe(lambda t, records: got.extend((e.tolist(), g.tolist()) for e, g in records))
        return posts_in

    records = [(0.5 + i, user, text) for i, (user, text) in enumerate(posts)]
    with timely.execute(program, timeout=60) as (comp, posts_in):
        posts_in.send(records)
        posts_in.close()
        comp.run()
    edges, tags = [], []
    for second, user, text in records:
        if "\x07" in text:
            continue  # control bytes: skipped
        mentions, names = read_post(text)
        edges.append([int(second), user, user])
        edges += [[int(second), user, m] for m in mentions if m != user]
        tags += [[int(second), user, tag_id(name)] for name in names]
    assert sorted(e for batch, _ in got for e in batch) == sorted(edges)
    assert sorted(t for _, batch in got for t in batch) == sorted(tags)


def brute_k_exposure(seconds: list[Any], k: int) -> dict[str, int]:
    """Per hashtag name, the users who mention at least k distinct users that used it."""
    from timely_jobs._posts import tag_name

    edges = {(a, b) for s in seconds for a, b in s.mentions.tolist()}
    used = {(a, t) for s in seconds for a, t in s.tags.tolist()}
    exposed: dict[tuple[int, int], int] = {}
    for a, b in edges:
        for user, t in used:
            if user == b:
                exposed[(a, t)] = exposed.get((a, t), 0) + 1
    out: dict[str, int] = {}
    for (_, t), n in exposed.items():
        if n >= k:
            out[tag_name(t)] = out.get(tag_name(t), 0) + 1
    return out


def test_k_exposure_against_brute_force() -> None:
    """Every k-exposure figure the dataflow reports (a hashtag whose figure changed at an
    epoch) is the brute-force count over its window; and the job's own oracle agrees."""
    spec = StreamSpec(seed=5, rate=300, users=120, hashtags=15, malformed=0.0)
    window, k = 2, 2
    seconds = [generate(spec, s) for s in range(5)]
    epochs: list[tuple[list[tuple[Any, Any, Any]], list[tuple[int, int, float]]]] = [
        (list(zip(*(s.posts.column(c).to_pylist() for c in ("time", "user", "text")), strict=True)), [])
        for s in seconds
    ]
    out = run_dataflow(epochs, DataflowOptions(window=window, analyses=("kexposure",), k=k))
    rows = [r for _, r in out if r[0] == "kexposure"]
    assert len(rows) > 20
    reported: dict[int, dict[str, int]] = {}
    for r in rows:
        reported.setdefault(r[7], {})[r[5]] = r[6]
    state: dict[str, int] = {}
    for as_of in sorted(reported):
        state.update(reported[as_of])
        expected = brute_k_exposure(seconds[max(0, as_of - window + 1) : as_of + 1], k)
        assert {t: n for t, n in state.items() if n} == expected, as_of  # changes add up to the whole figure
        assert window_truth(seconds[max(0, as_of - window + 1) : as_of + 1], k).exposed == expected


# The job on Spark -----------------------------------------------------------------------------------
SMALL: dict[str, Any] = {
    "rate": 600,
    "query_rate": 8.0,
    "users": 2_000,
    "hashtags": 100,
    "window": 3,
    "malformed": 0.01,
}


@pytest.mark.slow  # a Spark session
def test_job_end_to_end_every_answer_checked(spark_session: Any, tmp_path: Path) -> None:
    out = io.StringIO()
    duration = 6
    options = StreamOptions(duration=duration, output=tmp_path / "out", trigger=0.2, drain=120.0, **SMALL)
    result = run_job(options, session=spark_session, out=out)
    spec = StreamSpec(
        seed=options.seed,
        rate=options.rate,
        query_rate=options.query_rate,
        users=options.users,
        hashtags=options.hashtags,
        malformed=options.malformed,
    )
    seconds = [generate(spec, s) for s in range(duration)]
    queries = sum(s.queries.num_rows for s in seconds)
    # every post and query taken in, every answer (two modes) checked and right
    assert result.posts == sum(len(s.authors) for s in seconds)
    assert result.malformed == sum(s.malformed for s in seconds) > 0
    assert result.queries == queries
    assert result.checked == 2 * queries and result.wrong == 0
    assert result.unknown_users > 0  # queries about users never seen were answered as such
    assert result.skipped_quotes and all(":" in q for q in result.skipped_quotes)
    # Spark wrote the answers: one per query and mode, no query twice
    written = pq.read_table(tmp_path / "out" / "answers").to_pylist()
    assert len(written) == 2 * queries
    assert len({(r["query_id"], r["mode"]) for r in written}) == 2 * queries
    unknown = [r for r in written if r["component"] is None]
    assert unknown and all("not seen" in r["note"] for r in unknown)
    text = out.getvalue()
    assert "answers checked" in text and "wrong: 0" in text


@pytest.mark.slow  # a Spark session
def test_job_stale_only(spark_session: Any, tmp_path: Path) -> None:
    """Stale answers alone, each right for the complete epoch it says it reflects; with
    k-exposure beside, each of its figures checked too, and written by Spark."""
    options = StreamOptions(
        duration=4,
        output=tmp_path / "out",
        trigger=0.2,
        drain=120.0,
        fresh=False,
        stale=30.0,
        analyses=("components", "kexposure"),
        **SMALL,
    )
    result = run_job(options, session=spark_session, out=io.StringIO())
    assert set(result.answers) == {"stale"}
    assert result.checked == result.queries > 0 and result.wrong == 0
    assert result.exposures_checked == result.exposures > 0
    assert len(pq.read_table(tmp_path / "out" / "kexposure")) == result.exposures
    written = pq.read_table(tmp_path / "out" / "answers").to_pylist()
    assert len(written) == result.queries and all(r["mode"] == "stale" for r in written)


@pytest.mark.slow  # a Spark session in a process of its own
def test_the_console_shows_the_stream_live(tmp_path: Path) -> None:
    """``--console`` reaches the stream's timely process inside its Spark task: its console
    serves the job's dataflow (parse, window, answer) while the stream runs."""
    argv = [sys.executable, "-m", "timely_jobs.streaming_analytics", "--console", "127.0.0.1:0"]
    argv += ["--output", str(tmp_path / "out"), "--duration", "6", "--rate", "500", "--users", "2000"]
    argv += ["--window", "3", "--trigger", "0.2"]
    stages: set[str] = set()
    states: list[dict[str, Any]] = []

    def visit(url: str) -> None:
        if not stages:
            stages.update(stage["name"] for stage in read_json(url + "api/graph")["stages"])
        states.append(read_json(url + "api/state"))

    run = run_job_watching_consoles(argv, visit)
    assert run.returncode == 0, "".join(run.errors[-40:])
    assert len(run.urls) == 1 and {"parse", "window", "stamp", "answer", "posts", "queries"} <= stages, (
        run.urls,
        stages,
    )
    assert states and "wrong: 0" in run.printed


@pytest.mark.slow  # a Spark session of three slots, in a process of its own
def test_two_processes_every_answer_checked(tmp_path: Path) -> None:
    """Two timely processes (Spark tasks): the window and linq's operators split the posts, the
    answers and k-exposure gather on process 0's worker, and every figure is still right."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "timely_jobs.streaming_analytics", "--processes", "2", "--output", str(out)]
    argv += ["--duration", "6", "--rate", "800", "--users", "3000", "--hashtags", "200", "--window", "3"]
    argv += ["--analyses", "components,kexposure", "--trigger", "0.2"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["answers_wrong"] == 0
    assert summary["answers_checked"] == 2 * summary["queries"] > 0
    assert summary["kexposure_checked"] == summary["kexposure_figures"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--posts", "."], "give both --posts and --queries"),
        (["--posts", "/nonexistent", "--queries", "/nonexistent"], "not a directory"),
        (["--stale", "-1"], "--stale must be >= 0"),
        (["--window", "0"], "--window"),
        (["--checkpoint-dir", "ck"], "--checkpoint-dir needs --posts and --queries"),
        (["--posts", ".", "--queries", ".", "--checkpoint-dir", "ck", "--checkpoint-every", "0"], "--checkpoint-every"),
    ],
)
def test_bad_options_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert streaming_analytics.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_the_check_counts_every_wrong_answer_and_quotes_the_first_few() -> None:
    """An empty window knows no user and no hashtag: a k-exposure of 5 and seven answers
    naming a component are wrong, an answer saying the user is unknown is right; the first
    `Checker.QUOTED` wrong ones are quoted, in the order checked."""
    from timely_jobs._stream_check import Checker

    checker = Checker(window=5, truth_of=lambda second: None, k=2)
    checker.add_exposure("x", 5, 0)
    for query in range(7):
        checker.add(query, 7, 3, "x", 1, 0)
    checker.add(9, 8, None, None, 0, 0)
    checker.close()
    assert (checker.checked, checker.exposures_checked, checker.unknown_users) == (8, 1, 8)
    assert checker.wrong == 8
    assert len(checker.examples) == Checker.QUOTED
    assert checker.examples[0] == "k-exposure of #x as of second 0: got 5, expected 0"
    assert checker.examples[1] == "query 0 (user 7, as of second 0): got (3, 'x', 1), expected (None, None, 0)"
