"""The live console: a web page, JSON and Prometheus metrics of a running computation.

Layer 4 below the runtime: it knows the frozen graph (to draw it and name its stages) and the
samples the runtime hands it (`timely._runtime.sampling`), never the runtime's objects; the
runtime starts a `ConsoleServer` on process 0 when ``execute(console=...)`` or ``timely run
--console`` asks for one. See docs/console.md.
"""

from ._server import ConsoleServer

__all__ = ["ConsoleServer"]
