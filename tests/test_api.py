"""The public surface: exactly the names docs/api.md lists, each documented, and one error tree.

`__all__` of `timely` and of each library is compared with the page, both ways: a name added
to the code but not to the page fails, and so does a name the page promises that the code does
not export. docs/architecture.md says which layers may import what (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

import pytest

import timely
from tests.support import ROOT

PACKAGES = ["timely", "timely_libs.linq", "timely_libs.pregel", "timely_libs.bloom", "timely_libs.spark"]
API_PAGE = ROOT / "docs" / "api.md"


def documented() -> dict[str, list[str]]:
    """Per package, the names docs/api.md lists under its ``## `package``` heading, in order."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in API_PAGE.read_text().splitlines():
        heading = re.fullmatch(r"## `([\w.]+)`", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
            continue
        item = re.match(r"- `(\w+)` — ", line)
        if item and current is not None:
            current.append(item.group(1))
    return sections


def module(name: str) -> ModuleType:
    return importlib.import_module(name)


def test_the_page_has_a_section_for_every_package_and_no_other() -> None:
    assert sorted(documented()) == sorted(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_exactly_what_the_api_page_lists(package: str) -> None:
    names = list(module(package).__all__)
    listed = documented()[package]
    assert len(names) == len(set(names)), f"{package}.__all__ has duplicates"
    assert len(listed) == len(set(listed)), f"docs/api.md lists a name of {package} twice"
    assert sorted(set(names) - set(listed)) == [], f"exported by {package} but not in docs/api.md"
    assert sorted(set(listed) - set(names)) == [], f"in docs/api.md but not exported by {package}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists_and_every_class_and_function_has_a_docstring(package: str) -> None:
    mod = module(package)
    for name in mod.__all__:
        obj: Any = getattr(mod, name)  # AttributeError: exported but missing
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__")):
            assert (obj.__doc__ or "").strip(), f"{package}.{name} has no docstring"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_error_is_a_timely_error(package: str) -> None:
    """One tree: ``except timely.TimelyError`` catches the libraries' errors too."""
    mod = module(package)
    errors = [getattr(mod, n) for n in mod.__all__ if isinstance(getattr(mod, n), type)]
    errors = [e for e in errors if issubclass(e, BaseException)]
    assert errors, f"{package} exports no error type"
    for error in errors:
        assert issubclass(error, timely.TimelyError), f"{package}.{error.__name__} is not a timely.TimelyError"
        if package != "timely":
            assert issubclass(error, timely.LibraryError), f"{package}.{error.__name__} is not a LibraryError"


def test_the_vertex_contract_has_the_papers_methods() -> None:
    """Naiad's vertex interface (§2.2): the two callbacks a vertex overrides and the two calls it
    makes, with the parameters the paper gives them."""
    import inspect

    expected = {
        "on_recv": ["self", "edge", "records", "time"],
        "on_notify": ["self", "time"],
        "send_by": ["self", "output", "records", "time"],
        "notify_at": ["self", "time", "capability"],
    }
    for name, parameters in expected.items():
        assert list(inspect.signature(getattr(timely.Vertex, name)).parameters) == parameters, name
