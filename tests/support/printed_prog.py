"""The ``prog.py`` of the commands the README, the docs and ``timely run --help`` print
(tests/test_readme.py copies it under that name, and as ``mypackage/job.py``): a user's
program written for any number of processes. Word counts per epoch, each process feeding its
share of the lines, gathered on process 0, which checks them against `collections.Counter`
and prints ``words: equal``.

``--input FILE`` reads lines from a file; without it the lines are generated. Everything else
on the command line (``args...``) is ignored, as a program of the README's commands would.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import timely

EPOCHS = 25
"""Epochs enough that ``--checkpoint-every 10`` takes checkpoints."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", help="a text file (default: generated lines)")
    args, _ = parser.parse_known_args()
    if args.input:
        with open(args.input) as f:
            lines = [line.strip() for line in f if line.strip()]
    else:
        lines = [f"w{i % 7} w{i % 11} w{i % 3}" for i in range(300)]
    epochs = [lines[e::EPOCHS] for e in range(EPOCHS)]
    counted: dict[int, Counter[str]] = {}

    def count(time: timely.Timestamp, batch: list[Any]) -> None:
        counted.setdefault(time.epoch, Counter()).update(batch)

    def build(scope: timely.Scope) -> tuple[timely.Input, int, int]:
        words = scope.new_input("words")
        words.flat_map("split", str.split).exchange("gather", lambda word: 0).subscribe(count)
        return words, scope.process_index, scope.processes

    with timely.execute(build, timeout=60) as (comp, (words, index, processes)):
        for epoch in range(words.epoch, EPOCHS):
            words.send(epochs[epoch][index::processes])
            words.advance_to(epoch + 1)
    if index == 0:
        expected = {e: Counter(w for line in part for w in line.split()) for e, part in enumerate(epochs) if part}
        verdict = "equal" if counted == expected else f"MISMATCH: {counted} against {expected}"
        print(f"counted {sum(sum(c.values()) for c in counted.values())} words: {verdict}")


if __name__ == "__main__":
    main()
