"""mypy over all the code, each folder under the name it is imported by.

The libraries, jobs and examples live in libs/, jobs/ and examples/ but are imported as
timely_libs, timely_jobs and timely_examples (pyproject.toml's ``[tool.timely.installed-names]``).
mypy names a module by its path, so run in the repository it would name libs/linq/ after its folder and could not
follow an ``import timely_libs.linq``. This lays a tree of symbolic links with the imported names
and runs mypy there: ``python -m tests.support.typecheck``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = ("timely", "bench", "tests")
"""Folders checked under their own names: the core package, and what runs only from the repository."""


def checked_names() -> dict[str, str]:
    """Imported name -> folder, for every folder mypy checks."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {**{name: name for name in NOT_INSTALLED}, **config["tool"]["timely"]["installed-names"]}


def run_mypy(cache_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    cache = cache_dir or Path(sys.prefix) / ".mypy_cache"
    with tempfile.TemporaryDirectory(prefix="timely-mypy-") as tree:
        names = checked_names()
        for name, folder in names.items():
            (Path(tree) / name).symlink_to(ROOT / folder, target_is_directory=True)
        config = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache)]
        return subprocess.run(
            [sys.executable, "-m", "mypy", *config, *sorted(names)],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=600,
        )


if __name__ == "__main__":
    done = run_mypy()
    print(done.stdout + done.stderr, end="")
    sys.exit(done.returncode)
