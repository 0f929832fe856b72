"""A module's note on its own length says the truth.

A long module says why it is one module ("Why over 400 lines in one module: ..."). Notes that
gave an exact-sounding size ("about 450 lines") went stale as the modules grew (computation.py
said 450 with 594); a note may say "over N" (true while the module is longer than N lines) or
"about N" (within a tenth of its length), and a module that has shrunk to N lines or fewer no
longer needs its note."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTE = re.compile(r"Why (about|over) (\d+) lines in one module")
MODULES = sorted(p for folder in ("timely", "libs", "jobs") for p in (ROOT / folder).rglob("*.py"))
NOTED = [p for p in MODULES if NOTE.search(p.read_text())]


def test_the_long_modules_have_notes_to_check() -> None:
    assert len(NOTED) >= 5


@pytest.mark.parametrize("path", NOTED, ids=[str(p.relative_to(ROOT)) for p in NOTED])
def test_a_modules_note_on_its_length_is_true(path: Path) -> None:
    text = path.read_text()
    lines = text.count("\n")
    for word, number in NOTE.findall(text):
        n = int(number)
        if word == "over":
            assert lines > n, f"{path.name} has {lines} lines: its note says over {n}"
        else:
            assert abs(lines - n) <= lines / 10, f"{path.name} has {lines} lines: its note says about {n}"
