"""Streaming graph analytics on Spark, with timely inside: Naiad §6.4's interactive application.

    python -m timely_jobs.streaming_analytics [--duration S] [--rate N] [--fresh] [--stale S] [--window W]
                                       [--posts DIR --queries DIR] [--output DIR] [--master URL]

A stream of posts ``(time, user, text)`` and a stream of queries ``(query_id, user)`` come in
through Spark Structured Streaming (directories of Parquet files; by default a built-in
generator writes them, in real time, at ``--rate`` posts and ``--query-rate`` queries a second).
Each micro-batch is one epoch of one long-running timely computation
(`timely_libs.spark.run_stream`) that parses mentions and hashtags, keeps the connected
components of the mention graph of the last ``--window`` seconds and each component's top
hashtag up to date with `timely_libs.linq`, and answers each query with its user's component and
that component's top hashtag: *fresh* (once the query's own epoch is complete) and/or
*stale* (at once, against the last complete epoch if it is at most S seconds old). Spark
writes the answers. On the generated stream every answer is checked against a recomputation
from the posts of its window, in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from timely_jobs._cli import run_main
from timely_jobs._posts import POSTS_SCHEMA, QUERIES_SCHEMA, Second, StreamSpec, StreamWriter, generate
from timely_jobs._stream_check import Checker
from timely_jobs._stream_dataflow import ANSWER_SCHEMA, DataflowOptions, build

__all__ = ["JobError", "StreamOptions", "StreamResult", "main", "run_job"]

ANSWER_COLUMNS = ("epoch", "mode", "query_id", "user", "component", "hashtag", "count", "as_of", "latency_ms", "note")
"""The columns of the answers Spark writes under ``--output``/answers."""


ANALYSES = ("components", "kexposure")


class JobError(Exception):
    """The job cannot run as asked; one line that says why."""


@dataclass
class StreamOptions:
    duration: float = 60.0
    """Seconds of stream to generate (or to run, on the user's directories); 0: until stopped."""
    rate: int = 32_000
    query_rate: float = 10.0
    window: int = 60
    fresh: bool = True
    stale: float | None = 5.0
    analyses: tuple[str, ...] = ("components",)
    """``components`` (answers to queries) and/or ``kexposure``."""
    k: int = 2
    """k-exposure's k."""
    query_priority: bool = True
    """Queries overtake the bulk work queued in their process (`timely.Vertex.urgent`)."""
    seed: int = 7
    users: int = 500_000
    hashtags: int = 50_000
    malformed: float = 0.0005
    posts: str | None = None
    """A directory Spark reads posts from (Parquet files ``time, user, text``; any Hadoop file
    system path); None: generated."""
    queries: str | None = None
    output: Path = Path("streaming-analytics-out")
    processes: int = 1
    master: str | None = None
    trigger: float = 0.5
    """Seconds between micro-batches when data is waiting."""
    files_per_batch: int = 4
    """At most this many new files per source per micro-batch (a stream that fell behind
    catches up in larger epochs)."""
    drain: float = 60.0
    """Seconds to wait, after the last post is written, for the computation to take it in."""
    timeout: float | None = None
    checkpoint_dir: str | None = None
    """Where Spark and timely checkpoint (`run_stream`'s ``checkpoint_dir``): started again on
    it, with the same ``output``, the job resumes; None: no checkpoints."""
    checkpoint_every: int = 10
    pipeline: bool = False
    """Spark feeds the next micro-batch while timely computes this one (`run_stream`'s
    ``pipeline``)."""


@dataclass
class StreamResult:
    posts: int = 0
    malformed: int = 0
    skipped_quotes: list[str] = field(default_factory=list)
    queries: int = 0
    epochs: int = 0
    answers: dict[str, list[float]] = field(default_factory=dict)
    """In-computation latency (ms) of every answer, by mode."""
    end_to_end: dict[str, list[float]] = field(default_factory=dict)
    """From a query's issue to its answer written by Spark (ms), by mode."""
    lags: list[float] = field(default_factory=list)
    """Per epoch: seconds from the end of the latest second it reflects to its completion."""
    exposures: int = 0
    """k-exposure figures the computation reported (one per hashtag whose figure changed, per epoch)."""
    exposures_checked: int = 0
    checked: int = 0
    wrong: int = 0
    unknown_users: int = 0
    wrong_examples: list[str] = field(default_factory=list)
    check_cpu: float = 0.0
    """Seconds of CPU the check used (in the driver, beside the stream)."""
    epoch_seconds: dict[str, list[float]] = field(default_factory=dict)
    """Per epoch, as Spark's driver saw it: ``total`` (micro-batch start to written), of which
    ``feeding`` (Spark handing the rows over) and ``computing`` (timely)."""
    steady: tuple[int, float] | None = None
    """``(posts, seconds)`` taken in after the first epoch: the rate once started."""
    first_epoch: float | None = None
    """Seconds from the stream's start to its first epoch (second 0 of the generated stream)
    done: the warm-up, after which the generator's clock starts."""
    seconds: float = 0.0
    """From the stream's start (the computation up) to its last epoch written."""
    generator_behind: float = 0.0

    def steady_rate(self) -> float | None:
        """Posts per second taken in after the first epoch (start-up left out)."""
        if self.steady is None or self.first_epoch is None or self.seconds <= self.first_epoch:
            return None
        return round((self.posts - self.steady[0]) / (self.seconds - self.first_epoch), 1)

    def percentile(self, mode: str, q: float, end_to_end: bool = False) -> float | None:
        values = (self.end_to_end if end_to_end else self.answers).get(mode)
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "posts": self.posts,
            "malformed_skipped": self.malformed,
            "skipped_examples": self.skipped_quotes,
            "queries": self.queries,
            "epochs": self.epochs,
            "seconds": round(self.seconds, 3),
            "posts_per_second": round(self.posts / self.seconds, 1) if self.seconds else None,
            "posts_per_second_after_first_epoch": self.steady_rate(),
            "kexposure_figures": self.exposures,
            "kexposure_checked": self.exposures_checked,
            "answers_checked": self.checked,
            "answers_wrong": self.wrong,
            "answers_unknown_user": self.unknown_users,
            "wrong_examples": self.wrong_examples,
            "check_cpu_s": round(self.check_cpu, 3),
            "input_lag_s": _stats(self.lags),
            "generator_behind_s": round(self.generator_behind, 3),
            "first_epoch_s": self.first_epoch,
            "epoch_seconds": {k: _stats(v) for k, v in self.epoch_seconds.items()},
        }
        for mode in sorted(self.answers):
            out[f"{mode}_latency_ms"] = {
                "answers": len(self.answers[mode]),
                "p50": self.percentile(mode, 50),
                "p99": self.percentile(mode, 99),
                "max": max(self.answers[mode]),
                "end_to_end_p50": self.percentile(mode, 50, True),
                "end_to_end_p99": self.percentile(mode, 99, True),
            }
        return out


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "median": round(ordered[len(ordered) // 2], 3),
        "max": round(ordered[-1], 3),
        "last": round(values[-1], 3),
    }


class _Say:
    """Progress lines, ``[  12.3s] ...``, from any thread."""

    def __init__(self, out: Any) -> None:
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=self.out, flush=True)


class _Truths:
    """The generator's ground truth per second, for the check (trimmed as the window moves)."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.seconds: dict[int, Second] = {}
        self.lock = threading.Lock()

    def __call__(self, second: int) -> Second | None:
        with self.lock:
            got = self.seconds.get(second)
        if got is None:
            got = generate(self.spec, second)
            with self.lock:
                self.seconds[second] = got
        return got

    def keep(self, second: Second) -> None:
        """Keep what the generator made (recomputing a second costs as much as making it)."""
        with self.lock:
            self.seconds[second.second] = second

    def trim(self, below: int) -> None:
        with self.lock:
            for s in [s for s in self.seconds if s < below]:
                del self.seconds[s]


class _Collector:
    """The ``write`` of `run_stream`: Spark appends each epoch's answers under ``output``; the
    rows come back to the driver for the progress lines, the summary and the check."""

    def __init__(
        self,
        options: StreamOptions,
        answers: Path,
        result: StreamResult,
        say: _Say,
        checker: Checker | None,
        truths: _Truths | None,
    ) -> None:
        self.options = options
        self.answers = answers
        self.result = result
        self.say = say
        self.checker = checker
        self.truths = truths
        self.as_of = -1
        self.writer: StreamWriter | None = None
        self.warmed_up = threading.Event()
        self.began = time.perf_counter()
        self.began_wall = time.time()
        self.last_line = 0.0
        self.changed = threading.Condition()

    def __call__(self, frame: Any, epoch: int) -> None:
        from pyspark.sql import functions as F

        rows = frame.collect()
        # A directory per epoch, overwritten: Spark runs a micro-batch cut short by a crash again,
        # and its answers then replace the partial ones instead of joining them.
        answers = frame.where(F.col("kind") == "answer").select(*ANSWER_COLUMNS).drop("epoch")
        answers.write.mode("overwrite").parquet(str(self.answers / f"epoch={epoch}"))
        if "kexposure" in self.options.analyses:
            exposures = frame.where(F.col("kind") == "kexposure").select("hashtag", "count", "as_of")
            exposures.write.mode("overwrite").parquet(str(self.answers.parent / "kexposure" / f"epoch={epoch}"))
        now = time.time()
        r = self.result
        for row in rows:
            kind = row["kind"]
            if kind == "answer":
                mode = row["mode"]
                r.answers.setdefault(mode, []).append(row["latency_ms"])
                if self.writer is not None:
                    issued = self.writer.started + row["issued"] if row["issued"] >= 1 else self.began_wall
                    r.end_to_end.setdefault(mode, []).append((now - issued) * 1000.0)
                if mode == self._modes()[0]:  # a query has an answer per mode: count it once
                    r.queries += 1
                if self.checker is not None:
                    self.checker.add(
                        row["query_id"], row["user"], row["component"], row["hashtag"], row["count"], row["as_of"]
                    )
            elif kind == "kexposure":
                r.exposures += 1
                if self.checker is not None:
                    self.checker.add_exposure(row["hashtag"], row["count"], row["as_of"])
            elif kind == "posts":
                r.posts += row["count"]
            elif kind == "malformed":
                r.malformed += row["count"]
            elif kind == "skipped":
                if len(r.skipped_quotes) < 5:
                    r.skipped_quotes.append(row["note"])
                    self.say(f"skipped a malformed post: {row['note']}")
            elif kind == "epoch" and row["as_of"] is not None and row["as_of"] >= 0:
                with self.changed:
                    self.as_of = max(self.as_of, row["as_of"])
                    self.changed.notify_all()
                if self.writer is not None:  # the generated stream: second s ends at started + s + 1
                    if self.warmed_up.is_set():
                        r.lags.append(now - (self.writer.started + row["as_of"] + 1))
                    else:
                        r.first_epoch = time.perf_counter() - self.began
                        r.steady = (r.posts, r.first_epoch)
                        self.warmed_up.set()
        r.epochs += 1
        r.seconds = time.perf_counter() - self.began
        if self.truths is not None and self.as_of >= 0:
            self.truths.trim(self.as_of - self.options.window - 5)
        if time.monotonic() - self.last_line >= 3.0:
            self.last_line = time.monotonic()
            self.say(self._line(epoch))

    def _modes(self) -> list[str]:
        return [m for m, on in (("fresh", self.options.fresh), ("stale", self.options.stale is not None)) if on]

    def _line(self, epoch: int) -> str:
        r = self.result
        parts = [f"epoch {epoch}", f"{r.posts:,} posts", f"{r.queries:,} queries", f"{r.malformed:,} malformed skipped"]
        if r.lags:
            parts.append(f"input lag {r.lags[-1]:.1f} s")
        for mode in self._modes():
            p50 = r.percentile(mode, 50)
            if p50 is not None:
                parts.append(f"{mode} p50 {p50:.1f} ms")
        if self.checker is not None:
            parts.append(f"{self.checker.checked:,} answers checked, {self.checker.wrong} wrong")
        return " · ".join(parts)


def run_job(options: StreamOptions, session: Any = None, out: Any = None) -> StreamResult:
    """Run the stream for ``options.duration`` seconds (0: until interrupted) and return what
    it did; raises `JobError` for options it cannot run with."""
    _check(options)
    say = _Say(out)
    result = StreamResult()
    output = Path(os.path.abspath(options.output))
    if output.exists() and any(output.iterdir()) and options.checkpoint_dir is None:
        raise JobError(f"--output {output}: exists and is not empty (resuming needs --checkpoint-dir)")
    output.mkdir(parents=True, exist_ok=True)
    generated = options.posts is None
    spec = StreamSpec(
        seed=options.seed,
        rate=options.rate,
        query_rate=options.query_rate,
        users=options.users,
        hashtags=options.hashtags,
        malformed=options.malformed,
    )
    scratch = Path(tempfile.mkdtemp(prefix=".stream-input-", dir=output)) if generated else None
    posts_dir = str(scratch / "posts") if scratch else str(options.posts)
    queries_dir = str(scratch / "queries") if scratch else str(options.queries)
    writer = None
    if scratch is not None:
        writer = StreamWriter(spec, scratch, int(options.duration) if options.duration else None)
    truths = _Truths(spec) if generated else None
    if writer is not None and truths is not None:
        writer.keep = truths.keep
    k = options.k if "kexposure" in options.analyses else None
    checker = Checker(options.window, truths, k) if truths is not None else None

    from timely_libs import spark as tspark

    own_session = session is None
    try:
        if own_session:
            say("starting Spark ...")
            session = tspark.session(options.master, cores=options.processes + 1, app_name="streaming_analytics")
        posts = (
            session.readStream.schema(POSTS_SCHEMA)
            .option("maxFilesPerTrigger", options.files_per_batch)
            .parquet(str(posts_dir))
        )
        queries = (
            session.readStream.schema(QUERIES_SCHEMA)
            .option("maxFilesPerTrigger", options.files_per_batch)
            .parquet(str(queries_dir))
        )
        dataflow = DataflowOptions(
            window=options.window,
            fresh=options.fresh,
            stale=options.stale,
            query_priority=options.query_priority,
            analyses=options.analyses,
            k=options.k,
        )
        collector = _Collector(options, output / "answers", result, say, checker, truths)
        say(
            f"stream: {options.rate:,} posts/s and {options.query_rate:g} queries/s, window {options.window} s, "
            f"modes {', '.join(collector._modes())}, for {options.duration:g} s"
            if generated
            else f"stream: posts from {posts_dir}, queries from {queries_dir}"
        )
        stream = tspark.run_stream(
            session,
            partial(build, dataflow),
            {"posts": posts, "queries": queries},
            ANSWER_SCHEMA,
            collector,
            processes=options.processes,
            trigger_seconds=options.trigger,
            timeout=options.timeout,
            checkpoint_dir=options.checkpoint_dir,
            checkpoint_every=options.checkpoint_every,
            pipeline=options.pipeline,
        )
        if stream.resumed_at:
            say(f"resumed from {options.checkpoint_dir} at epoch {stream.resumed_at}")
        collector.began = time.perf_counter()  # the stream's own time: Spark's and timely's start left out
        collector.began_wall = time.time()
        collector.writer = writer
        if writer is not None:  # the clock starts once the first second has gone through
            writer.start(warm_up=collector.warmed_up)
        try:
            _wait(options, writer, collector, stream, say)
        finally:
            try:
                stream.stop()
            finally:
                result.epoch_seconds = {
                    "total": [e.seconds for e in stream.epochs],
                    "feeding": [e.feeding for e in stream.epochs],
                    "computing": [e.computing for e in stream.epochs],
                }
    finally:
        if writer is not None:
            writer.stop()
            result.generator_behind = writer.behind
        if own_session and session is not None:
            session.stop()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if checker is not None:
        say(f"checking the last answers ({checker.checked:,} checked so far) ...")
        checker.close()
        result.checked, result.wrong = checker.checked, checker.wrong
        result.exposures_checked = checker.exposures_checked
        result.unknown_users, result.wrong_examples = checker.unknown_users, checker.examples
        result.check_cpu = checker.cpu_seconds
    (output / "summary.json").write_text(json.dumps(result.summary(), indent=2) + "\n")
    _print_summary(result, output, say.out)
    return result


def _wait(options: StreamOptions, writer: StreamWriter | None, collector: _Collector, stream: Any, say: _Say) -> None:
    """Until the generated stream is written and taken in (or ``duration`` passed)."""
    deadline = None if not options.duration else time.monotonic() + options.duration
    try:
        while deadline is None or time.monotonic() < deadline:
            if stream.failed:
                return
            if writer is not None and writer.error is not None:
                raise JobError(f"the generator failed: {writer.error}")
            time.sleep(0.2)
        if writer is not None:
            last = int(options.duration) - 1
            with collector.changed:
                if not collector.changed.wait_for(lambda: collector.as_of >= last, options.drain):
                    say(
                        f"stopping with the stream {last - collector.as_of} s behind (not taken in within "
                        f"{options.drain:g} s)"
                    )
    except KeyboardInterrupt:
        say("interrupted: stopping the stream")
        return
    _between_batches(stream)


def _between_batches(stream: Any, patience: float = 30.0) -> None:
    """Wait (a while) for a moment when no micro-batch runs, to stop the query there rather
    than interrupt one (Spark then prints a stack trace of its own stream thread)."""
    end = time.monotonic() + patience
    while stream.query is not None and time.monotonic() < end:
        if not stream.query.status.get("isTriggerActive"):
            return
        time.sleep(0.02)


def _check(options: StreamOptions) -> None:
    if (options.posts is None) != (options.queries is None):
        raise JobError("give both --posts and --queries, or neither (the built-in generator)")
    if options.checkpoint_dir is not None and options.posts is None:
        raise JobError(
            "--checkpoint-dir needs --posts and --queries: a resumed stream reads its input again from where "
            "Spark's checkpoint stands, and the built-in generator replays against the wall clock"
        )
    if options.checkpoint_every < 1:
        raise JobError(f"--checkpoint-every {options.checkpoint_every}: must be at least 1")
    for name in ("posts", "queries"):
        path = getattr(options, name)
        if path is not None and "://" not in str(path) and not Path(path).is_dir():
            raise JobError(f"--{name} {path}: not a directory")
    unknown = [a for a in options.analyses if a not in ANALYSES]
    if unknown or not options.analyses:
        raise JobError(f"--analyses: {', '.join(unknown) or 'nothing'}: choose from {', '.join(ANALYSES)}")
    if options.k < 1:
        raise JobError("--k must be at least 1")
    if not options.fresh and options.stale is None:
        raise JobError("nothing to answer with: give --fresh and/or --stale S")
    if options.duration < 0 or options.window < 1 or options.processes < 1 or options.files_per_batch < 1:
        raise JobError("--duration must be >= 0, --window, --processes and --files-per-batch >= 1")
    if options.stale is not None and options.stale < 0:
        raise JobError("--stale must be >= 0 seconds")


def _print_summary(result: StreamResult, output: Path, out: Any) -> None:
    p = partial(print, file=out)
    s = result.summary()
    p("\n== streaming analytics: summary ==")
    p(
        f"  posts handled: {result.posts:,} in {result.seconds:.1f} s ({s['posts_per_second'] or 0:,.0f}/s; "
        f"{s['posts_per_second_after_first_epoch'] or 0:,.0f}/s after the first epoch), "
        f"malformed skipped: {result.malformed:,}"
    )
    for quote in result.skipped_quotes:
        p(f"    skipped: {quote}")
    p(f"  queries answered: {result.queries:,} in {result.epochs} epochs")
    for mode in sorted(result.answers):
        m = s[f"{mode}_latency_ms"]
        line = (
            f"  {mode}: latency p50 {m['p50']:.2f} ms, p99 {m['p99']:.1f} ms, max {m['max']:.1f} ms in the computation"
        )
        if m["end_to_end_p50"] is not None:  # the generated stream knows when each query was issued
            line += f"; issue to written by Spark p50 {m['end_to_end_p50']:.0f} ms, p99 {m['end_to_end_p99']:.0f} ms"
        p(line)
    if result.lags:
        lag = s["input_lag_s"]
        p(f"  input lag: median {lag['median']:.2f} s, max {lag['max']:.2f} s, at the end {lag['last']:.2f} s")
    if result.epoch_seconds.get("total"):
        e = {k: _stats(v) or {} for k, v in result.epoch_seconds.items()}
        p(
            f"  epochs: median {e['total']['median']:.2f} s from micro-batch to written, of which Spark feeding "
            f"{e['feeding']['median']:.2f} s and timely computing {e['computing']['median']:.2f} s"
        )
    if result.exposures:
        p(f"  k-exposure: {result.exposures:,} figures reported, {result.exposures_checked:,} checked")
    p(
        f"  answers checked: {result.checked:,}, wrong: {result.wrong} ({result.unknown_users:,} for users not seen; "
        f"the check used {result.check_cpu:.1f} s of CPU)"
    )
    for example in result.wrong_examples:
        p(f"    wrong: {example}")
    p(f"  answers in {output}/answers, summary in {output}/summary.json")


# The command line ------------------------------------------------------------------------------------
class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown where there is one to show (not for flags off and options unset)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or isinstance(action.default, tuple):
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    d = StreamOptions()
    ap = argparse.ArgumentParser(
        prog="python -m timely_jobs.streaming_analytics",
        description=__doc__.split("\n\n")[0],
        formatter_class=_Help,
    )
    data = ap.add_argument_group("the stream")
    data.add_argument("--duration", type=float, default=d.duration, help="seconds of stream; 0: until interrupted")
    data.add_argument("--rate", type=int, default=d.rate, help="generated posts per second")
    data.add_argument("--query-rate", type=float, default=d.query_rate, help="generated queries per second")
    data.add_argument("--malformed", type=float, default=d.malformed, help="share of generated posts malformed")
    data.add_argument("--users", type=int, default=d.users, help="generated users")
    data.add_argument("--hashtags", type=int, default=d.hashtags, help="generated hashtags")
    data.add_argument("--seed", type=int, default=d.seed, help="generator seed")
    data.add_argument("--posts", help="read posts (Parquet: time, user, text) from this directory")
    data.add_argument("--queries", help="read queries (Parquet: query_id, user, time) from this directory")
    analysis = ap.add_argument_group("the analysis")
    analysis.add_argument("--window", type=int, default=d.window, help="seconds of posts in the mention graph")
    analysis.add_argument(
        "--analyses",
        type=lambda text: tuple(x.strip() for x in text.split(",") if x.strip()),
        default=d.analyses,
        help=f"comma-separated, of {', '.join(ANALYSES)} (default: {','.join(d.analyses)})",
    )
    analysis.add_argument(
        "--k", type=int, default=d.k, help="k-exposure: exposed once k mentioned users used a hashtag"
    )
    analysis.add_argument("--fresh", action="store_true", help="answer queries fresh (after their own epoch)")
    analysis.add_argument(
        "--stale",
        type=float,
        metavar="S",
        help="answer queries at once against the last complete epoch, if at most "
        f"S seconds old (default with neither flag: both modes, --stale {d.stale:g})",
    )
    run = ap.add_argument_group("running")
    run.add_argument("--output", type=Path, default=d.output, help="answers and summary directory (new or empty)")
    run.add_argument("--processes", type=int, default=d.processes, help="timely processes (Spark tasks)")
    run.add_argument("--master", help="Spark master URL (default: local[PROCESSES + 1])")
    run.add_argument(
        "--query-priority",
        action=argparse.BooleanOptionalAction,
        default=d.query_priority,
        help="queries overtake the bulk work queued in their process",
    )
    run.add_argument(
        "--console",
        metavar="[HOST:]PORT",
        help="serve timely's live console from the first timely process while the stream runs (docs/console.md)",
    )
    run.add_argument(
        "--checkpoint-dir",
        help="checkpoint Spark and timely here; run again with the same directory and --output to resume "
        "(needs --posts and --queries)",
    )
    run.add_argument(
        "--checkpoint-every", type=int, default=d.checkpoint_every, help="epochs between timely's checkpoints"
    )
    run.add_argument(
        "--pipeline",
        action="store_true",
        help="Spark reads and feeds the next micro-batch while timely computes this one (more throughput "
        "where cores are spare; on a busy machine the computing, and so fresh answers, get slower)",
    )
    run.add_argument("--trigger", type=float, default=d.trigger, help="seconds between micro-batches")
    run.add_argument("--files-per-batch", type=int, default=d.files_per_batch, help="new files per source per epoch")
    return ap


def _parse(argv: Sequence[str] | None) -> StreamOptions:
    a = _parser().parse_args(argv)
    fresh, stale = a.fresh, a.stale
    if not fresh and stale is None:
        fresh, stale = True, StreamOptions.stale
    values = {k: v for k, v in vars(a).items() if k in StreamOptions.__dataclass_fields__}
    values.update(fresh=fresh, stale=stale)
    return StreamOptions(**values)


def main(argv: Sequence[str] | None = None) -> int:
    options = _parse(argv)
    return run_main(partial(run_job, options), _parser().parse_args(argv).console, (JobError,))


if __name__ == "__main__":
    sys.exit(main())
