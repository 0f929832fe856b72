"""`Vertex.urgent`: messages for an urgent vertex are delivered ahead of the bulk queued on its
worker, and nothing else changes (every record once, notifications after all of a time)."""

from __future__ import annotations

from typing import Any

import pytest

import timely
from tests.support import TIMEOUT


class Fan(timely.Vertex):
    """On one record at time t: five batches to the bulk stage (times t..t+4), then one to
    the query stage; so that both are queued before either runs."""

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        for k in range(5):
            self.send_by(self.outputs[0], [("bulk", k)], (time.epoch + k,))
        self.send_by(self.outputs[1], [("query", 0)], time)


class Log(timely.Vertex):
    def __init__(self, log: list[Any], done: list[Any], urgent: bool) -> None:
        self.log = log
        self.done = done
        self.urgent = urgent
        self.seen: dict[timely.Timestamp, int] = {}

    def on_recv(self, edge: int, records: list[Any], time: timely.Timestamp) -> None:
        if time not in self.seen:
            self.seen[time] = 0
            self.notify_at(time)
        self.seen[time] += len(records)
        self.log.extend(records)

    def on_notify(self, time: timely.Timestamp) -> None:
        self.done.append((time.epoch, self.seen.pop(time)))


@pytest.mark.parametrize("urgent", [False, True])
def test_urgent_messages_jump_the_queue(urgent: bool) -> None:
    log: list[Any] = []
    done: list[Any] = []

    def build(scope: timely.Scope) -> Any:
        source = scope.new_input("in")
        bulk, queries = source.stage("fan", Fan, outputs=2)
        bulk.stage("bulk", lambda: Log(log, done, False))
        queries.stage("queries", lambda: Log(log, done, urgent))
        return source

    with timely.execute(build, timeout=TIMEOUT) as (comp, source):
        source.send([1])
        source.close()
        comp.run()
    assert sorted(log) == sorted([("bulk", k) for k in range(5)] + [("query", 0)])
    assert log.index(("query", 0)) == (0 if urgent else 5)
    assert sorted(done) == sorted([(k, 1) for k in range(5)] + [(0, 1)])
