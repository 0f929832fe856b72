"""The README's programs print the whole answer whatever the process count.

Each ```python block the README follows with what it prints runs under ``timely run -n 2
--workers 2``: process 0 must print exactly those lines (gathered there) and process 1 nothing.
tests/test_readme.py runs the same blocks in one process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.launcher import lines_of, timely

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)


def printing_blocks() -> list[tuple[int, str, str]]:
    """``(line, code, printed)`` of every python block followed by the text block it prints."""
    text = README.read_text()
    found = [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in BLOCK.finditer(text)]
    return [
        (line, code, found[i + 1][1])
        for i, (language, code, line) in enumerate(found[:-1])
        if language == "python" and found[i + 1][0] == "text"
    ]


BLOCKS = printing_blocks()


def test_the_readme_has_programs_to_run_on_two_processes() -> None:
    assert len(BLOCKS) >= 6
    assert any("timely run -n" in README.read_text().split(code)[1][:400] for _, code, _ in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize(("line", "code", "printed"), BLOCKS, ids=[f"line{line}" for line, _, _ in BLOCKS])
def test_each_readme_program_prints_its_whole_answer_once_on_two_processes(
    line: int, code: str, printed: str, tmp_path: Path
) -> None:
    prog = tmp_path / f"readme_line_{line}.py"
    prog.write_text(code)
    result = timely("run", "-n", "2", "--workers", "2", prog, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, f"README.md line {line}:\n{result.stderr[-3000:]}"
    assert lines_of(result.stdout, 0) == printed.splitlines(), result.stdout
    assert lines_of(result.stdout, 1) == [], result.stdout
