"""The console's JSON and metrics against a running computation on real processes, checked
against what each process's own `statistics()` and `explain()` say."""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import timely
from tests.support.console import watched
from tests.support.console_program import EPOCHS, PER_EPOCH
from tests.support.launcher import SECRET
from timely._runtime.config import ClusterConfigError, console_token

pytestmark = pytest.mark.slow

STAGES = ["numbers", "key", "count", "done"]


def _totals(printed: list[dict]) -> dict[str, list[int]]:
    totals = {name: [0, 0] for name in STAGES}
    for stats in printed:
        for name, (received, sent) in stats["stages"].items():
            totals[name][0] += received
            totals[name][1] += sent
    return totals


@pytest.mark.parametrize("processes,workers", [(1, 1), (3, 2)], ids=["p1", "p3w2"])
def test_state_and_metrics_agree_with_each_process_statistics(tmp_path: Path, processes: int, workers: int) -> None:
    with watched("steady", tmp_path, processes, workers) as run:
        printed = run.wait_for(lambda: run.printed("STATS") if len(run.printed("STATS")) == processes else None)
        totals = _totals(printed)
        assert totals["key"][0] == EPOCHS * PER_EPOCH  # the processes' own figures are the whole input

        def caught_up() -> dict | None:
            state = run.get("/api/state")
            shown = {s["name"]: [s["records_in"], s["records_out"]] for s in state["stages"]}
            return state if state["reporting"] == processes and shown == totals else None

        state = run.wait_for(caught_up, 10, "for the console to show every process's figures")
        delivered = {str(w): n for stats in printed for w, n in stats["workers"].items()}
        assert {str(w["worker"]): w["records_delivered"] for w in state["workers"]} == delivered
        assert len(state["workers"]) == processes * workers
        # each process's Count keeps the open epoch's count: no epoch is open any more
        assert state["stages"][STAGES.index("count")]["state_rows"] == 0
        assert [i["name"] for i in state["inputs"]] == ["numbers"] and state["inputs"][0]["epoch"] == EPOCHS
        assert state["probes"] == [{"name": "done", "frontier": [f"({EPOCHS})"]}]
        completions = state["completions"]["done"]
        assert [c[0] for c in completions] == list(range(EPOCHS))
        # a count a key, emitted once per epoch by each worker: what reached the probe in the
        # epochs completed, over all processes (epochs completing together count at the last)
        counted = sum(c[2] for c in completions if c[2] is not None)
        assert counted == totals["done"][0]
        assert sorted(p["process"] for p in state["process_stats"]) == list(range(processes))
        if processes > 1:  # records crossed between the processes, and the console counted the bytes
            assert all(p["data_bytes_sent"] > 0 and p["data_bytes_received"] > 0 for p in state["process_stats"])

        metrics = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for m in text_string_to_metric_families(run.get("/metrics", raw=True))
            for s in m.samples
        }
        for name, (received, sent) in totals.items():
            assert metrics["timely_stage_records_received_total", (("stage", name),)] == received
            assert metrics["timely_stage_records_sent_total", (("stage", name),)] == sent
        assert metrics["timely_input_epoch", (("input", "numbers"),)] == EPOCHS

        graph = run.get("/api/graph")
        assert [s["name"] for s in graph["stages"]] == STAGES
        exchanges = Counter((c["source"], c["target"]) for c in graph["connectors"] if c["exchange"])
        assert exchanges == Counter({(1, 2): 1})  # key -> count exchanges by key
        if graph["svg"] is not None:
            assert all(f"<title>s{i}</title>" in graph["svg"] for i in range(len(STAGES)))


def test_a_process_busy_from_its_first_step_is_on_the_console_at_once(tmp_path: Path) -> None:
    """Each process samples itself before its first step: process 1, whose first callback runs
    long (here, until the test lets it go), is on the console all the same. Its first sample
    used to wait for that callback: a short computation could end before the console heard of
    all its processes."""
    with watched("busy", tmp_path, processes=2) as run:
        state = run.wait_for(lambda: s if (s := run.get("/api/state"))["reporting"] == 2 else None, 10, "for both")
        assert [p["process"] for p in state["process_stats"]] == [0, 1]
        assert state["complete"] is False  # process 1 is still held


@pytest.mark.parametrize("processes", [1, 2])
def test_a_stall_names_the_waiting_stage_its_time_and_the_open_input(tmp_path: Path, processes: int) -> None:
    with watched("stall", tmp_path, processes) as run:

        def the_stall() -> dict | None:
            # (on a busy machine a process may also sit idle earlier, waiting for a slower one
            # to feed the first epochs: a true stall too, but not the one this test makes; and
            # each process samples itself on its own clock, so one may show the stall at (3)
            # while another's latest sample is from before it: wait for every process's)
            stall = run.get("/api/state")["stall"]
            if stall is None:
                return None
            at_3 = {w["process"] for w in stall["waiting"] if w["stage_name"] == "count" and w["time"] == "(3)"}
            return stall if at_3 == set(range(processes)) else None

        stall = run.wait_for(the_stall, 20, "for the console to show the stall")
        waiting = {(w["process"], w["stage_name"], w["time"]) for w in stall["waiting"]}
        assert {(p, "count", "(3)") for p in range(processes)} <= waiting
        held = [h["words"] for w in stall["waiting"] if w["stage_name"] == "count" for h in w["holders"]]
        assert held and all("input 'numbers' is still open at epoch 3" in words for words in held)
        assert {0, 2} <= set(stall["stages"])  # the open input and the waiting count
        assert "notification at (3) for stage 'count'" in stall["text"]
        assert stall["quiet_processes"] == []
        metrics = run.get("/metrics", raw=True)
        assert "timely_stalled 1.0" in metrics


def test_away_from_loopback_the_console_asks_for_the_token_derived_from_the_secret(tmp_path: Path) -> None:
    with watched("steady", tmp_path, 2, console="0.0.0.0:0", TIMELY_SECRET=SECRET) as run:
        token = console_token(bytes.fromhex(SECRET))
        assert run.url.endswith(f"?token={token}")
        for path in ("/", "/api/state", "/api/graph", "/metrics", "/api/events"):
            assert run.status(path, "") == 403
            assert run.status(path, "0" * 32) == 403
        assert run.get("/api/state", token)["processes"] == 2
        assert "timely_stage_records_received_total" in run.get("/metrics", token, raw=True)
        assert run.status("/static/console.js", "") == 200  # the page's own code holds no data


def test_on_loopback_no_token_is_needed(tmp_path: Path) -> None:
    with watched("steady", tmp_path) as run:
        assert "token" not in run.url
        assert run.status("/api/state", "") == 200


def test_a_malformed_console_address_is_refused_before_anything_runs() -> None:
    def build(scope: timely.Scope) -> None:
        scope.new_input("x").probe("p")

    for bad in ("nowhere", "host:port", "[::1:80", "127.0.0.1:70000", True):
        with pytest.raises(ClusterConfigError, match="console"):
            with timely.execute(build, console=bad, timeout=10):  # type: ignore[arg-type]
                pass


def test_a_console_port_in_use_is_a_clear_error() -> None:
    def build(scope: timely.Scope) -> None:
        scope.new_input("x").probe("p")

    with timely.execute(build, console=0, timeout=10) as (comp, _):
        port = int(comp.console_url.rsplit(":", 1)[1].strip("/"))  # type: ignore[union-attr]
        with pytest.raises(OSError, match=f"cannot serve the console on 127.0.0.1:{port}"):
            with timely.execute(build, console=port, timeout=10):
                pass


# A request in flight as the console stops can leave its server-side socket to the garbage
# collector, which then warns (ResourceWarning), at whatever moment it runs: here, polling to
# the last moment, that is this test's own doing, collected before it ends, not in a later test.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_lingering_console_serves_the_final_state_then_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIMELY_CONSOLE_LINGER keeps the page up, complete, that long after the computation; a
    value that is not seconds is refused before anything runs."""

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        numbers = scope.new_input("numbers")
        return numbers, numbers.map("twice", lambda x: 2 * x).probe("p")

    monkeypatch.setenv("TIMELY_CONSOLE_LINGER", "1.5")
    seen: list[dict] = []

    def watch(url: str) -> None:
        with contextlib.suppress(OSError):
            while True:
                seen.append(json.loads(urllib.request.urlopen(url + "api/state", timeout=2).read()))
                time.sleep(0.05)

    started = time.monotonic()
    with timely.execute(build, console=0, timeout=30) as (comp, (numbers, probe)):
        watcher = threading.Thread(target=watch, args=(comp.console_url,), daemon=True)
        watcher.start()
        numbers.send(range(100))
        numbers.close()
    lasted = time.monotonic() - started
    watcher.join(10)
    assert not watcher.is_alive()  # the page went
    assert lasted >= 1.5
    final = seen[-1]
    assert final["complete"] is True and final["reporting"] == 1
    assert {s["name"]: s["records_in"] for s in final["stages"]}["twice"] == 100
    gc.collect()

    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("TIMELY_CONSOLE_LINGER", bad)
        with pytest.raises(ClusterConfigError, match="TIMELY_CONSOLE_LINGER"):
            with timely.execute(build, console=0, timeout=10):
                pass
