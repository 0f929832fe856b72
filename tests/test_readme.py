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


def test_readme_linq_example_reports_what_it_says() -> None:
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "libs import linq" in b)
    namespace: dict[str, object] = {"__name__": "readme", "timely": __import__("timely")}
    exec(compile(block, "README.md", "exec"), namespace)
    out = namespace["out"]
    assert out.contents() == {(1, 1): 1, (2, 1): 1, (5, 5): 1, (6, 5): 1}  # type: ignore[attr-defined]
    assert out.changes[1] == [((3, 1), -1)]  # type: ignore[attr-defined]


def test_readme_pregel_example_matches_networkx() -> None:
    import networkx as nx

    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "libs import pregel" in b)
    namespace: dict[str, object] = {"__name__": "readme", "timely": __import__("timely")}
    exec(compile(block, "README.md", "exec"), namespace)
    expected = nx.pagerank(nx.DiGraph([(1, 2), (2, 3), (3, 1), (4, 1)]), tol=1e-12, max_iter=1000)
    result = namespace["result"]
    assert result.keys() == expected.keys()  # type: ignore[attr-defined]
    assert all(abs(result[v] - expected[v]) < 1e-6 for v in expected)  # type: ignore[index]


def test_readme_bloom_example_prints_what_it_says_without_notifications(capsys: pytest.CaptureFixture[str]) -> None:
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "libs import bloom" in b)
    namespace: dict[str, object] = {"__name__": "readme", "timely": __import__("timely")}
    exec(compile(block, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["['a']", "['a', 'b']"]  # b gets its second voter in epoch 1; a's repeat counts once
    said = re.findall(r"print\(.*\)\s+# (\[.*?\])", block)
    assert said == printed  # the comments say what is printed
    comp = namespace["comp"]
    stages = [s.name for s in comp.graph.stages if s.name.startswith("quorum.")]  # type: ignore[attr-defined]
    assert "quorum.tally" in stages and "quorum.committed" in stages
    asked = sum(v.statistics().notifications_requested for s in stages for v in comp.vertices(s))  # type: ignore[attr-defined]
    assert asked == 0
