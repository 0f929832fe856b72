"""The console's picture of the whole computation, made from the processes' latest samples.

Each process sends a sample about once a second (`timely._runtime.sampling` says what is in
one). The view keeps the latest and the one before it for every process: rates are the
difference of two samples over the time between them; totals add the processes up. Pure
data in, plain dicts out (what ``/api/state`` and the page's live updates carry).
"""

from __future__ import annotations

import time as _time
from typing import Any

from ..graph import FrozenGraph
from ..timestamp import _from_flat

__all__ = ["QUIET_AFTER", "View", "graph_info", "show_time"]

QUIET_AFTER = 3.0
"""Seconds without a sample after which a process counts as gone quiet."""

# the columns of a sample's per-stage rows
RECORDS_IN, RECORDS_OUT, MESSAGES_IN, NOTIFICATIONS, QUEUED, PENDING, BUSY, CALLBACK_SECONDS = range(8)


def show_time(flat: Any) -> str:
    """A sampled time (a flat list, or None for a notification without capability) in words."""
    return "TOP" if flat is None else str(_from_flat(tuple(flat)))


def graph_info(graph: FrozenGraph) -> dict[str, Any]:
    """The graph's shape for the page and ``/api/graph``: stages, connectors, loops."""
    names = {c.index: c.name for c in graph.contexts}
    return {
        "stages": [
            {"index": s.index, "name": s.name, "kind": s.kind, "loop": names[s.context] or None, "depth": s.depth}
            for s in graph.stages
        ],
        "connectors": [
            {
                "index": c.index,
                "source": c.source,
                "source_port": c.source_port,
                "target": c.target,
                "target_port": c.target_port,
                "exchange": c.partition is not None,
            }
            for c in graph.connectors
        ],
        "loops": [{"index": c.index, "name": c.name, "parent": c.parent, "depth": c.depth} for c in graph.contexts[1:]],
    }


class View:
    """The latest two samples of every process, and what the page shows from them."""

    def __init__(self, graph: FrozenGraph, processes: int) -> None:
        self.graph = graph
        self.processes = processes
        self.latest: dict[int, dict[str, Any]] = {}
        self.previous: dict[int, dict[str, Any]] = {}
        self.received: dict[int, float] = {}
        """When each process's latest sample arrived (monotonic)."""
        self.samples = 0

    def add(self, process: int, sample: dict[str, Any]) -> None:
        old = self.latest.get(process)
        if old is not None:
            self.previous[process] = old
        self.latest[process] = sample
        self.received[process] = _time.monotonic()
        self.samples += 1

    def _rate(self, process: int, column: int, stage: int) -> float:
        new, old = self.latest[process], self.previous.get(process)
        if old is None:
            return 0.0
        seconds = new["at"] - old["at"]
        if seconds <= 0:
            return 0.0
        return (new["stages"][stage][column] - old["stages"][stage][column]) / seconds

    def state(self) -> dict[str, Any]:
        """Everything the page shows now (JSON-ready)."""
        g = self.graph
        now = _time.monotonic()
        reporting = sorted(self.latest)
        stages = []
        for s in g.stages:
            row: dict[str, Any] = {"index": s.index, "name": s.name}
            for key, column in (
                ("records_in", RECORDS_IN),
                ("records_out", RECORDS_OUT),
                ("messages_in", MESSAGES_IN),
                ("notifications", NOTIFICATIONS),
                ("queued", QUEUED),
                ("pending_notifications", PENDING),
                ("busy", BUSY),
                ("callback_seconds", CALLBACK_SECONDS),
            ):
                row[key] = sum(self.latest[p]["stages"][s.index][column] for p in reporting)
            row["in_per_s"] = sum(self._rate(p, RECORDS_IN, s.index) for p in reporting)
            row["out_per_s"] = sum(self._rate(p, RECORDS_OUT, s.index) for p in reporting)
            # the share of a process's time in this stage's callbacks, the most of any process
            row["busy_share"] = max((self._rate(p, CALLBACK_SECONDS, s.index) for p in reporting), default=0.0)
            row["state_rows"] = row["state_bytes"] = None
            stages.append(row)
        for p in reporting:
            for stage, rows, nbytes in self.latest[p]["state"]:
                row = stages[stage]
                row["state_rows"] = (row["state_rows"] or 0) + rows
                row["state_bytes"] = (row["state_bytes"] or 0) + nbytes
        processes = []
        workers = []
        for p in reporting:
            sample = self.latest[p]
            old = self.previous.get(p)
            stats = dict(sample["process_stats"])
            cpu = None
            if old is not None and sample["at"] > old["at"]:
                cpu = (stats["cpu_seconds"] - old["process_stats"]["cpu_seconds"]) / (sample["at"] - old["at"])
            age = now - self.received[p]
            processes.append(
                {
                    "process": p,
                    **stats,
                    "cpu_percent": None if cpu is None else round(100 * cpu, 1),
                    "seconds_since_sample": age,
                    "quiet": age > QUIET_AFTER,
                    "idle_for": sample["idle_for"],
                    "elapsed": sample["elapsed"],
                }
            )
            for index, seconds, queued, notes, records in sample["workers"]:
                workers.append(
                    {
                        "worker": index,
                        "process": p,
                        "callback_seconds": seconds,
                        "queued_messages": queued,
                        "pending_notifications": notes,
                        "records_delivered": records,
                    }
                )
        first = self.latest.get(0) or (self.latest[reporting[0]] if reporting else None)
        return {
            "processes": self.processes,
            "reporting": len(reporting),
            "samples": self.samples,
            "stages": stages,
            "process_stats": processes,
            "workers": workers,
            "inputs": self._inputs(reporting),
            "probes": [] if first is None else [{"name": n, "frontier": _times(f)} for n, f in first["probes"]],
            "loops": [] if first is None else [self._loop(p, reporting) for p in range(len(first["loops"]))],
            "completions": self._completions(reporting),
            "frontier": [] if first is None else self._frontier(first["frontier"]),
            "stall": self._stall(reporting, processes),
            "complete": bool(reporting) and all(self.latest[p]["complete"] for p in reporting),
        }

    def _loop(self, index: int, reporting: list[int]) -> dict[str, Any]:
        """A loop: what can still arrive at it (process 0's view of the frontier) and the times
        active inside it on any process (where its iterations have got to)."""
        name, frontier, _ = self.latest[reporting[0]]["loops"][index]
        active = sorted({tuple(t) for p in reporting for t in self.latest[p]["loops"][index][2]})
        return {"name": name, "frontier": _times(frontier), "active": _times(active)}

    def _completions(self, reporting: list[int]) -> dict[str, list[list[Any]]]:
        """Per probe, [epoch, seconds, records] as each epoch completed: when the last process
        saw it (seconds since its start), and the records that reached the probe in all of them
        (None where several epochs completed at once and the count went to the last)."""
        merged: dict[str, dict[int, list[Any]]] = {}
        for p in reporting:
            for name, kept in self.latest[p]["completions"].items():
                epochs = merged.setdefault(name, {})
                for epoch, at, records in kept:
                    row = epochs.setdefault(epoch, [epoch, at, None])
                    row[1] = max(row[1], at)
                    if records is not None:
                        row[2] = (row[2] or 0) + records
        return {name: [epochs[e] for e in sorted(epochs)] for name, epochs in merged.items()}

    def _inputs(self, reporting: list[int]) -> list[dict[str, Any]]:
        """Each input across the processes: the earliest open epoch (what holds the others back)."""
        merged: dict[str, dict[str, Any]] = {}
        for p in reporting:
            for name, epoch, closed, waits in self.latest[p]["inputs"]:
                row = merged.setdefault(name, {"name": name, "epoch": epoch, "closed": True, "backpressure_waits": 0})
                if not closed:
                    row["epoch"] = min(row["epoch"], epoch) if not row["closed"] else epoch
                    row["closed"] = False
                row["backpressure_waits"] += waits
        return list(merged.values())

    def _frontier(self, frontier: list[Any]) -> list[dict[str, Any]]:
        n = len(self.graph.stages)
        out = []
        for location, flat, count in frontier:
            stage = location if location < n else self.graph.connectors[location - n].target
            out.append(
                {
                    "location": location,
                    "stage": stage,
                    "where": self.graph.describe_location(location),
                    "time": show_time(flat),
                    "count": count,
                }
            )
        return out

    def _stall(self, reporting: list[int], processes: list[dict[str, Any]]) -> dict[str, Any] | None:
        """What holds progress back, once every process that is still sampling has sat idle;
        and which processes have gone quiet."""
        quiet = [p["process"] for p in processes if p["quiet"]]
        live = [p for p in reporting if p not in quiet]
        stalled = [p for p in live if self.latest[p]["stall"] is not None]
        if not quiet and (not live or len(stalled) < len(live)):
            return None
        waiting: list[dict[str, Any]] = []
        stages: set[int] = set()
        for p in stalled:
            for h in self.latest[p]["stall"]["holdups"]:
                holders = h["holders"]
                waiting.append(
                    {
                        "process": p,
                        "waiter": h["waiter"],
                        "stage": h["stage"],
                        "stage_name": self.graph.stages[h["stage"]].name,
                        "time": h["time"],
                        "holders": None if holders is None else [dict(x) for x in holders],
                    }
                )
                stages.add(h["stage"])
                stages.update(x["stage"] for x in holders or ())
        idle = [self.latest[p]["idle_for"] for p in stalled]
        lines = []
        if stalled:
            lines.append(f"Nothing has moved for {min(idle):.1f} s. What holds progress back:")
            for p in stalled:
                text = self.latest[p]["stall"]["text"]
                prefix = f"process {p}: " if self.processes > 1 else ""
                lines.extend(prefix + line for line in text.splitlines())
        lines.extend(
            f"process {p} has gone quiet: no sample for {processes[reporting.index(p)]['seconds_since_sample']:.0f} s "
            "(its program may be away from timely calls, or it is hung)"
            for p in quiet
        )
        return {
            "idle_for": min(idle) if idle else None,
            "idle_since": max((self.latest[p]["at"] - self.latest[p]["idle_for"] for p in stalled), default=None),
            "quiet_processes": quiet,
            "waiting": waiting,
            "stages": sorted(stages),
            "text": "\n".join(lines),
        }


def _times(frontier: list[Any]) -> list[str]:
    return [show_time(t) for t in frontier]
