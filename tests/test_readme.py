"""The README's example must keep working and printing what it says."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs_and_prints_per_epoch_counts(capsys: pytest.CaptureFixture[str]) -> None:
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.splitlines() == ["(0) [('a', 2), ('b', 1)]", "(1) [('b', 1)]"]


def test_readme_commands_match_ci() -> None:
    text = README.read_text()
    test_command = re.search(r"^(python3 -m pip install -e '\.\[test\]' && python3 -m pytest)", text, re.M)
    assert test_command is not None
    ci = (README.parent / ".ci" / "run").read_text()
    assert test_command.group(1) in ci
