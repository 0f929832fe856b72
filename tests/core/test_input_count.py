"""``Input.send(items, count=n)``: items that are batches count as the records they hold, in
the statistics (and so the console), exactly, however the items are cut into messages."""

from __future__ import annotations

import pytest

import timely
from tests.support import TIMEOUT


def test_the_count_given_is_what_the_input_counts_as_sent() -> None:
    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        items = scope.new_input("items")
        return items, items.probe("seen")

    with timely.execute(build, workers=3, timeout=TIMEOUT) as (comp, (items, seen)):
        items.send(range(2500), count=7919)  # cut into three messages, over three workers
        items.send(range(10))  # without a count: one an item
        with pytest.raises(ValueError, match=r"input 'items': count must be an int >= 0, not -1"):
            items.send([1], count=-1)
        items.advance_to(1)
        comp.wait_passed(seen, 0)
        per_worker = [v.statistics().records_sent for v in comp.vertices("items")]
    assert sum(per_worker) == 7919 + 10
    assert all(n > 0 for n in per_worker)
