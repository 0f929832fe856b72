"""The program tests/net/test_encryption.py runs on two processes, with the relay between them.

Each process sends ``EPOCHS`` epochs of ``WORDS`` records, ``record-<epoch>-<process>-<i>-secretword``,
spread over both processes by ``i`` (so about half of them cross the connection each way), with a
short pause between epochs so that heartbeats flow while it runs. With ``TIMELY_PICKLE=1`` each
record travels wrapped in `Word`, a class without a codec: pickled on the wire.

Every process checks each record it receives against the set of records any process could have
sent, and prints ``BAD <record>`` for one that is not (a frame altered on the way and decoded);
then ``GOT <count> <digest of the sorted records>`` (what the test compares across runs).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import timely

EPOCHS = 30
WORDS = 40
PAUSE = 0.05
MARKER = "secretword"


class Word:
    """A record type without a codec: with pickle on, it crosses processes pickled."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def text(record: Any) -> str:
    return record.text if isinstance(record, Word) else record


def spread(record: Any) -> int:
    return int(text(record).split("-")[3])


def main() -> None:
    index = int(os.environ["TIMELY_PROCESS_INDEX"])
    processes = int(os.environ["TIMELY_PROCESSES"])
    pickled = os.environ.get("TIMELY_PICKLE") == "1"
    expected = {f"record-{e}-{p}-{i}-{MARKER}" for e in range(EPOCHS) for p in range(processes) for i in range(WORDS)}
    received: list[str] = []

    def take(time: timely.Timestamp, batch: list[Any]) -> None:
        for record in batch:
            word = text(record)
            if not isinstance(word, str) or word not in expected:
                print("BAD", repr(word)[:200], flush=True)
            received.append(word)

    def build(scope: timely.Scope) -> tuple[timely.Input, timely.Probe]:
        words = scope.new_input("words")
        moved = words.exchange("spread", spread)
        moved.subscribe(take, name="take")
        return words, moved.probe("done")

    with timely.execute(build, timeout=60) as (comp, (words, probe)):
        for epoch in range(EPOCHS):
            batch = [f"record-{epoch}-{index}-{i}-{MARKER}" for i in range(WORDS)]
            words.send([Word(w) for w in batch] if pickled else batch)
            words.advance_to(epoch + 1)
            comp.wait_passed(probe, epoch)
            time.sleep(PAUSE)
    digest = hashlib.sha256("\n".join(sorted(received)).encode()).hexdigest()[:16]
    print("GOT", len(received), digest, flush=True)


if __name__ == "__main__":
    main()
