"""The public surface and the layering rules of DESIGN.md section 2."""

from __future__ import annotations

import ast
import pathlib

import pytest

import timely

ROOT = pathlib.Path(__file__).resolve().parent.parent
PURE = [
    "timely/timestamp.py",
    "timely/errors.py",
    "timely/progress",
    "timely/graph",
    "timely/vertex.py",
    "timely/loop_context.py",
    "timely/dataflow.py",
    "timely/operators.py",
]


def test_everything_in_all_is_exported_and_documented() -> None:
    assert sorted(timely.__all__) == sorted(set(timely.__all__))
    for name in timely.__all__:
        obj = getattr(timely, name)
        assert obj.__doc__, f"timely.{name} has no docstring"


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((base, node.lineno))
    return found


def _files(entries: list[str]) -> list[pathlib.Path]:
    out: list[pathlib.Path] = []
    for e in entries:
        p = ROOT / e
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


@pytest.mark.parametrize("path", _files(PURE), ids=lambda p: str(p.relative_to(ROOT)))
def test_layers_0_to_3_never_import_asyncio_or_the_runtime(path: pathlib.Path) -> None:
    for module, line in _imports(path):
        assert module.split(".")[0] not in {"asyncio", "anyio", "uvloop"}, f"{path}:{line} imports {module}"
        assert "_runtime" not in module, f"{path}:{line} imports the runtime"


def test_libraries_import_only_the_public_api() -> None:
    libs = ROOT / "libs"
    for path in sorted(libs.rglob("*.py")) if libs.exists() else []:
        for module, line in _imports(path):
            if module.startswith("timely."):
                pytest.fail(f"{path}:{line} imports {module}; libraries may use only 'timely'")


def test_vertex_contract_has_the_papers_methods() -> None:
    for name in ("on_recv", "on_notify", "send_by", "notify_at"):
        assert callable(getattr(timely.Vertex, name))
