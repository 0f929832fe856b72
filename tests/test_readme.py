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
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import clean_env

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


# Every command a user is shown ---------------------------------------------------------------------
# The README's and the docs' bash blocks and the examples `timely --help` and `timely run --help`
# print: each runs here, as printed, in a temporary directory that holds what it names (prog.py,
# data.csv, hosts.txt, ...), or is listed below with the reason it does not and what runs it instead.
DOCS = sorted((ROOT / "docs").glob("*.md"))
NOT_RUN_HERE = {
    r"^python3 -m venv \.venv && ": "an installation: .ci/run runs the test line (checked above) in a fresh clone",
    r"^\.venv/bin/python -m pytest\b": "the test suite itself: .ci/run",
    r"^source \.venv/bin/activate$": "changes its shell: the commands here run with this environment first on the PATH, as it does",
    r"^\.venv/bin/ruff ": "the linters of the dev extra; mypy and the import contracts run in tests/test_layers.py",
    r"^python3 -m bench (?!--list$)": "a benchmark of minutes; the names it uses are checked against --list above",
    r"spark://|^spark-submit ": "needs a Spark cluster; tests/spark/test_cluster.py runs the job on a standalone one",
    r"^pip wheel |^cp dist/": "building the wheel: .ci/wheel (run by .ci/run) builds it so and runs the README from it",
    r"-m timely_jobs\.streaming_analytics (?!--help)": "a stream of a minute on Spark: "
    "tests/jobs/test_streaming_analytics.py runs the job end to end, every answer checked",
}
PROG = ROOT / "tests" / "support" / "printed_prog.py"


def printed_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every command line a user is shown, continuation lines joined."""
    found: list[tuple[str, str]] = []
    for path in [README, *DOCS]:
        for m in BLOCK.finditer(path.read_text()):
            if m.group(1) == "bash":
                code = m.group(2).replace("\\\n", " ")
                found += [(path.name, re.sub(r"\s+#.*$", "", s).strip()) for s in code.splitlines() if s.strip()]
    for words in (["--help"], ["run", "--help"]):
        text = subprocess.run(
            [sys.executable, "-m", "timely.cli", *words], capture_output=True, text=True, timeout=RUN_TIMEOUT
        ).stdout
        listed = text.partition("\nexamples:\n")[2].split("\n\n")[0]
        found += [(f"timely {' '.join(words)}", s.strip()) for s in listed.splitlines() if s.strip()[:1] not in "#"]
    return found


PRINTED = printed_commands()
RUN_HERE = list(
    {c: (where, c) for where, c in reversed(PRINTED) if not any(re.search(p, c) for p in NOT_RUN_HERE)}.values()
)[::-1]
"""Each command once, where it is first printed."""
SLOW = re.compile(r"-m timely_jobs\.graph_analytics (?!--help)")
"""The main job's runs: Spark starts in seconds, so they run with the slow tests."""


def test_the_printed_commands_are_found() -> None:
    """The collection above could find nothing and pass everything: it finds the commands it must."""
    commands = [c for _, c in PRINTED]
    assert "timely run -n 2 --workers 3 -m timely_examples.connected_components --nodes 20000 --edges 30000" in commands
    assert any(where == "network.md" for where, _ in PRINTED) and any(w == "README.md" for w, _ in PRINTED)
    assert len(RUN_HERE) >= 8 and all(any(re.search(p, c) for c in commands) for p in NOT_RUN_HERE)


def _materials(where: Path) -> None:
    """What the printed commands name, in ``where``: the program, its data, a two-host cluster."""
    import secrets
    import socket

    (where / "prog.py").write_text(PROG.read_text())
    (where / "mypackage").mkdir()
    (where / "mypackage" / "__init__.py").write_text("")
    (where / "mypackage" / "job.py").write_text(PROG.read_text())
    (where / "data.csv").write_text("".join(f"w{i % 5} w{i % 9} w{i % 4}\n" for i in range(200)))
    (where / "edges.csv").write_text("src,dst\n" + "".join(f"{i},{(i * 7 + 3) % 60}\n" for i in range(0, 60, 2)))
    (where / "secret.hex").write_text(secrets.token_hex(32) + "\n")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    (where / "hosts.txt").write_text("".join(f"127.0.0.1:{p}\n" for p in ports))


def _run_printed(command: str, where: Path) -> str:
    """Run ``command`` as a shell would, with this environment's commands first on the PATH:
    every process of it (each ``--process`` of a hosts file at once); what they printed. The
    benchmarks run from the checkout (``bench/`` is not installed)."""
    env = {k: v for k, v in clean_env().items() if k != "PYTHONPATH"}  # from what is installed, as a user
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if "--hosts" in command:
        hosts = (where / "hosts.txt").read_text().split()
        commands = [re.sub(r"--process \S+", f"--process {k}", command) for k in range(len(hosts))]
    else:
        commands = [command]
    children = [
        subprocess.Popen(
            ["bash", "-c", c],
            cwd=ROOT if "-m bench" in c else where,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for c in commands
    ]
    out = []
    try:
        for child, c in zip(children, commands):
            printed, _ = child.communicate(timeout=RUN_TIMEOUT)
            assert child.returncode == 0, f"{c}\nexited {child.returncode}:\n{printed[-3000:]}"
            out.append(printed)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return "".join(out)


@pytest.mark.parametrize(
    ("where", "command"),
    [pytest.param(w, c, marks=[pytest.mark.slow] if SLOW.search(c) else []) for w, c in RUN_HERE],
    ids=[f"{w}: {c}" for w, c in RUN_HERE],
)
def test_every_printed_command_runs_green(where: str, command: str, tmp_path: Path) -> None:
    _materials(tmp_path)
    printed = _run_printed(command, tmp_path)
    if re.search(r"\bprog\.py\b|mypackage\.job", command):
        words = len((tmp_path / "data.csv").read_text().split()) if "--input data.csv" in command else 900
        assert f"[p0] counted {words} words: equal" in printed, printed[-3000:]
    elif "timely_examples.connected_components" in command:
        assert "checked against a breadth-first search: equal" in printed, printed[-3000:]
    elif SLOW.search(command):
        import networkx as nx
        import pyarrow.parquet as pq

        lines = (tmp_path / "edges.csv").read_text().split()[1:]
        graph = nx.Graph([tuple(map(int, line.split(","))) for line in lines])
        got = pq.read_table(tmp_path / "out" / "components.parquet").to_pydict()
        assert dict(zip(got["node"], got["cc"])) == {v: min(c) for c in nx.connected_components(graph) for v in c}
    else:
        assert printed.strip(), f"{command} printed nothing"
