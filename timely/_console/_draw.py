"""The dataflow graph as SVG, drawn on the server by Graphviz's ``dot`` (when installed).

Drawing on the server keeps the page free of any JavaScript library: the browser gets a
finished SVG whose stage boxes (``<title>s3</title>`` for stage 3) the page colours and
labels with live figures. Without ``dot`` the page lists the stages instead.
"""

from __future__ import annotations

import shutil
import subprocess

from ..graph import FrozenGraph

__all__ = ["DETAIL", "graph_svg"]

DETAIL = "000.0k/s → 000.0k/s  q 0000"
"""What the second line of a stage's box is laid out for; the page writes live figures there."""


def graph_svg(graph: FrozenGraph, timeout: float = 20.0) -> str | None:
    """The graph drawn as SVG, or None when ``dot`` is not installed (or fails)."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        done = subprocess.run(
            [dot, "-Tsvg"], input=graph.to_dot(DETAIL).encode(), capture_output=True, timeout=timeout, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    svg = done.stdout.decode()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else None
