"""The package list, which pyproject.toml cannot spell: the libraries, jobs and examples keep their
folders in the repository (libs/, jobs/, examples/) but install under the project-prefixed names of
pyproject.toml's ``[tool.timely.installed-names]``, so a wheel puts no generic top-level ``libs`` or
``jobs`` into site-packages."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
RENAMED: dict[str, str] = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["timely"]["installed-names"]

PACKAGES = find_packages(where=str(HERE), include=["timely", "timely.*"])
for name, folder in RENAMED.items():
    PACKAGES += [name] + [f"{name}.{sub}" for sub in find_packages(where=str(HERE / folder))]

if __name__ == "__main__":  # as setuptools runs it (tests read the lists above without building)
    setup(packages=PACKAGES, package_dir=RENAMED)
