"""``/metrics``: the console's view as Prometheus metrics, with the official client library.

A collector that reads the view when scraped (nothing is kept twice); counters are the
runtime's totals, gauges its present state, labelled by stage, worker or process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["metrics_text"]


class _ViewCollector(Collector):
    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        view = self.state()
        stage_metrics = [
            ("records_in", "timely_stage_records_received", "records delivered to the stage's callbacks", True),
            ("records_out", "timely_stage_records_sent", "records the stage sent", True),
            ("messages_in", "timely_stage_messages_received", "message batches delivered to the stage", True),
            ("notifications", "timely_stage_notifications_delivered", "notifications delivered to the stage", True),
            ("queued", "timely_stage_queued_messages", "messages queued for the stage", False),
            ("pending_notifications", "timely_stage_pending_notifications", "notifications waiting", False),
            ("callback_seconds", "timely_stage_callback_seconds", "time in the stage's callbacks (profiled)", True),
            ("in_per_s", "timely_stage_records_received_per_second", "records in per second (last sample)", False),
            ("out_per_s", "timely_stage_records_sent_per_second", "records out per second (last sample)", False),
            ("state_rows", "timely_stage_state_rows", "rows of state the stage's vertices report", False),
            ("state_bytes", "timely_stage_state_bytes", "bytes of state the stage's vertices report", False),
        ]
        for key, name, doc, counter in stage_metrics:
            family = CounterMetricFamily if counter else GaugeMetricFamily
            metric = family(name, doc, labels=["stage"])
            for row in view["stages"]:
                if row[key] is not None:
                    metric.add_metric([row["name"]], row[key])
            yield metric
        process_metrics = [
            ("cpu_seconds", "timely_process_cpu_seconds", "CPU time of the process", True),
            ("rss_bytes", "timely_process_resident_memory_bytes", "resident memory of the process", False),
            ("queued_messages", "timely_process_queued_messages", "messages waiting in the process", False),
            ("backpressure_waits", "timely_process_backpressure_waits", "times an input waited to drain", True),
            ("data_bytes_sent", "timely_process_data_bytes_sent", "bytes of data frames sent", True),
            ("data_frames_sent", "timely_process_data_frames_sent", "data frames sent", True),
            ("data_bytes_received", "timely_process_data_bytes_received", "bytes of data frames received", True),
            ("progress_bytes_sent", "timely_process_progress_bytes_sent", "bytes of progress frames sent", True),
            ("progress_frames_sent", "timely_process_progress_frames_sent", "progress frames sent", True),
            (
                "progress_bytes_received",
                "timely_process_progress_bytes_received",
                "bytes of progress frames received",
                True,
            ),
        ]
        for key, name, doc, counter in process_metrics:
            family = CounterMetricFamily if counter else GaugeMetricFamily
            metric = family(name, doc, labels=["process"])
            for row in view["process_stats"]:
                if key in row:
                    metric.add_metric([str(row["process"])], row[key])
            yield metric
        idle = GaugeMetricFamily(
            "timely_process_idle_seconds", "how long the scheduler has sat idle", labels=["process"]
        )
        for row in view["process_stats"]:
            idle.add_metric([str(row["process"])], row["idle_for"] or 0.0)
        yield idle
        callback = CounterMetricFamily(
            "timely_worker_callback_seconds", "time the worker spent in callbacks", labels=["worker"]
        )
        for row in view["workers"]:
            callback.add_metric([str(row["worker"])], row["callback_seconds"])
        yield callback
        epoch = GaugeMetricFamily(
            "timely_input_epoch", "the input's open epoch (earliest over processes)", labels=["input"]
        )
        for row in view["inputs"]:
            epoch.add_metric([row["name"]], row["epoch"])
        yield epoch
        stalled = GaugeMetricFamily("timely_stalled", "1 while nothing moves and something is still active")
        stalled.add_metric([], 1.0 if view["stall"] is not None else 0.0)
        yield stalled


def metrics_text(state: Callable[[], dict[str, Any]]) -> bytes:
    """The Prometheus text exposition of the view ``state()`` returns."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ViewCollector(state))
    return generate_latest(registry)
