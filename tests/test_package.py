"""The installed names: libs/, jobs/ and examples/ are imported as timely_libs, timely_jobs and
timely_examples everywhere (README, docs, code), one spelling, so that what a user reads is what an
installed wheel provides; and the wheel's package list holds nothing generic at the top level."""

from __future__ import annotations

import re
import runpy
import subprocess

from tests.support import ROOT
from tests.support.typecheck import checked_names

OLD = re.compile(
    r"(?<![\w/.\-])(?:(?:from|import) (?:libs|jobs|examples)\b|(?:libs|jobs|examples)\.(?!py\b|md\b)[a-z_]+)"
)


def _tracked(*patterns: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_no_file_spells_a_folder_name_as_an_import_name() -> None:
    files = [
        f for f in _tracked("*.py", "*.md", "*.toml", ".ci/run") if f != "tests/test_package.py"
    ]  # not its examples
    assert len(files) > 100  # the listing worked
    found = [
        f"{name}:{number}: {line.strip()}"
        for name in files
        if name != "tests/test_package.py"  # its own examples of the old spellings, below
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if OLD.search(line)
    ]
    assert found == []


def test_the_pattern_finds_the_old_spellings() -> None:
    """The check above could pass by matching nothing: these must match, the paths must not."""
    assert OLD.search("from libs import linq") and OLD.search("python -m jobs.graph_analytics")
    assert OLD.search("`libs.linq`'s trace") and OLD.search("import examples.connected_components")
    assert not OLD.search("see libs/linq/_trace and timely_libs.linq") and not OLD.search("jobs.py")


def test_the_package_list_has_only_prefixed_top_level_names() -> None:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_lists")
    assert sorted({p.split(".")[0] for p in setup["PACKAGES"]}) == [
        "timely",
        "timely_examples",
        "timely_jobs",
        "timely_libs",
    ]
    assert "timely_libs.linq._trace" in setup["PACKAGES"]  # subpackages come with their parents
    assert setup["RENAMED"] == {k: v for k, v in checked_names().items() if k != v}


def test_ci_checks_the_wheel_outside_the_checkout() -> None:
    """.ci/wheel (run by .ci/run before the tests) builds the wheel, refuses generic top-level
    names, and runs the README from an environment holding only the wheel, in a directory
    outside the checkout; this keeps its steps from being dropped quietly."""
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "bash .ci/wheel" in run
    assert run.index("bash .ci/wheel") < run.index(".venv/bin/python -m pytest")
    wheel = (ROOT / ".ci" / "wheel").read_text()
    for step in (
        'pip" wheel -q --no-deps',
        'expected = ["timely", "timely_examples", "timely_jobs", "timely_libs"]',
        '"$outside/env/bin/pip" install -q "$wheel"',
        'cd "$outside/run"',
        '.ci/readme_blocks.py" "$checkout/README.md"',
        "timely run -n 2 --workers 2 -m timely_examples.connected_components",
    ):
        assert step in wheel, step
