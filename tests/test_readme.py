"""The README's code runs as pasted and says what it prints.

Every ```python block runs alone in a fresh interpreter, in an empty directory, with nothing
put into its namespace: a block that needs a name must import or define it. Where a ```text
block follows a python block, it is what the block prints, compared line for line; a
``print(...)  # [...]`` comment's list must be what that line prints. The ```bash blocks'
commands are checked where that is cheap: ``--help``/``--list`` commands run, every option a
command uses is one its ``--help`` lists, every benchmark named is one ``--list`` lists, and the
two set-up commands are what CI runs.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)
RUN_TIMEOUT = 120.0
OURS = {"bench", "timely_jobs", "timely", "timely_examples"}
"""The packages whose commands the bash blocks' checks run (not pip's, pytest's or ruff's)."""


def blocks() -> list[tuple[str, str, int]]:
    """``(language, code, line)`` of every fenced block, in order."""
    text = README.read_text()
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in BLOCK.finditer(text)]


def python_blocks() -> list[tuple[str, str | None, int]]:
    """``(code, printed or None, line)``: each python block and the text block right after it."""
    found = blocks()
    text = README.read_text()
    out = []
    for i, (language, code, line) in enumerate(found):
        if language != "python":
            continue
        printed = None
        if i + 1 < len(found) and found[i + 1][0] == "text":
            between = text.split("\n")[line + code.count("\n") + 1 : found[i + 1][2] - 1]
            if all(not s.strip() or s.strip().endswith(":") for s in between):  # only "It prints:" lines
                printed = found[i + 1][1]
        out.append((code, printed, line))
    return out


PYTHON = python_blocks()


def run_block(code: str, line: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )


def test_the_readme_has_the_blocks_this_file_checks() -> None:
    assert len(PYTHON) >= 5
    assert all(printed is not None for _, printed, _ in PYTHON), "every python block shows what it prints"


@pytest.mark.parametrize(("code", "printed", "line"), PYTHON, ids=[f"line{line}" for _, _, line in PYTHON])
def test_each_python_block_runs_alone_and_prints_what_the_readme_shows(
    code: str, printed: str | None, line: int, tmp_path: Path
) -> None:
    done = run_block(code, line, tmp_path)
    assert done.returncode == 0, f"README.md line {line}:\n{done.stderr[-3000:]}"
    if printed is not None:
        assert done.stdout.splitlines() == printed.splitlines()
    said = [ast.literal_eval(m) for m in re.findall(r"print\(.*\)\s+# (\[.*?\])", code)]
    if said:
        assert said == [ast.literal_eval(s) for s in done.stdout.splitlines()[: len(said)]]
    assert list(tmp_path.iterdir()) == [tmp_path / f"readme_line_{line}.py"], "a block left files behind"


def test_the_pregel_block_prints_networkx_pagerank(tmp_path: Path) -> None:
    import networkx as nx

    code, _, line = next(b for b in PYTHON if "libs import pregel" in b[0])
    done = run_block(code, line, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = ast.literal_eval(done.stdout.strip())
    expected = nx.pagerank(nx.DiGraph([(1, 2), (2, 3), (3, 1), (4, 1)]), tol=1e-12, max_iter=1000)
    assert got == {v: round(r, 4) for v, r in sorted(expected.items())}


def test_the_loop_block_prints_networkx_components(tmp_path: Path) -> None:
    import networkx as nx

    code, _, line = next(b for b in PYTHON if "LoopContext" in b[0])
    done = run_block(code, line, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    edges = ast.literal_eval(re.search(r"edges\.send\((\[.*?\])\)", code).group(1))  # type: ignore[union-attr]
    expected = {v: min(c) for c in nx.connected_components(nx.Graph(edges)) for v in c}
    assert ast.literal_eval(done.stdout.strip()) == dict(sorted(expected.items()))


# The bash blocks ---------------------------------------------------------------------------------
def commands() -> list[str]:
    """Every command line of the bash blocks, without its trailing comment."""
    lines = []
    for language, code, _ in blocks():
        if language == "bash":
            lines += [re.sub(r"\s+#.*$", "", s).strip() for s in code.splitlines() if s.strip()]
    return lines


def _program(command: str) -> list[str] | None:
    """``[python, -m, module]`` or the launcher for a README command, or None."""
    words = shlex.split(command)
    if words[:2] == ["python3", "-m"] and words[2].split(".")[0] in OURS:
        return [sys.executable, "-m", words[2]]
    if words[:2] == ["timely", "run"]:
        return [sys.executable, "-m", "timely.cli", "run"]
    return None


def _help(program: tuple[str, ...]) -> str:
    done = subprocess.run([*program, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_set_up_commands_make_a_fresh_environment_and_ci_runs_the_test_one() -> None:
    text = README.read_text()
    job = re.search(r"^(.*?)\s+# set up, run the main job$", text, re.M)
    tests = re.search(r"^(.*?)\s+# set up, run the tests$", text, re.M)
    assert job is not None and tests is not None
    for line, extra, then in (
        (job.group(1), "spark", "-m timely_jobs.graph_analytics"),
        (tests.group(1), "test", "-m pytest"),
    ):
        # The project's own virtual environment, without the machine's packages.
        assert line.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[")
        assert f"'.[{extra}]'" in line and line.endswith(f".venv/bin/python {then}")
        assert "system-site-packages" not in line
    # CI runs the same steps and refuses a README that says otherwise.
    ci = (ROOT / ".ci" / "run").read_text()
    assert f'readme_line="{tests.group(1)}"' in ci
    assert all(step in ci.splitlines() for step in tests.group(1).split(" && "))


def test_help_and_list_commands_run() -> None:
    ran = 0
    for command in commands():
        words = shlex.split(command)
        program = _program(command)
        if program is None or not {"--help", "--list"} & set(words):
            continue
        done = subprocess.run([*program, *words[3:]], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
        assert done.stdout.strip()
        ran += 1
    assert ran >= 2


def test_every_option_a_readme_command_uses_is_in_its_help() -> None:
    helps: dict[tuple[str, ...], str] = {}
    checked = 0
    for command in commands():
        program = _program(command)
        if program is None:
            continue
        key = tuple(program)
        text = helps.get(key) or helps.setdefault(key, _help(key))
        for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", command.split(" && ")[-1]):
            if option != "-m":
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), f"{command}: {option} not in --help"
                checked += 1
    assert checked >= 10


def test_every_benchmark_the_readme_names_exists() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "--list"], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    named = 0
    for command in commands():
        words = shlex.split(command)
        if words[:3] != ["python3", "-m", "bench"]:
            continue
        for word in words[3:]:
            if word.startswith(("-", "[")) or word.endswith(("]", ".json")):
                continue
            assert any(n == word or n.startswith(word + ".") for n in names), f"{command}: no benchmark {word!r}"
            named += 1
    assert named >= 5
