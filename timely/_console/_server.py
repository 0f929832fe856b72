"""The console's web server: aiohttp on a thread of its own, fed samples by the runtime.

Why a thread: a synchronous program runs timely's event loop only inside timely calls (see
`timely.execute`), so a server on that loop would not answer while the program prepares its
next batch. The server thread only reads what the runtime hands it (`publish`, a plain dict
per sample, passed with ``call_soon_threadsafe``) and never touches the runtime's objects;
a process whose samples stop coming shows as gone quiet.

Routes: ``/`` the page (its script and style from ``/static/``, all in this package),
``/api/graph`` the graph's shape and SVG, ``/api/state`` the live view, ``/api/events`` the
view as server-sent events on every sample of process 0 (and at once when a process reports
that it has stalled or moved again), ``/metrics`` for Prometheus. With a
token (any address but loopback), every route but ``/static/`` asks for ``?token=``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
from importlib import resources
from typing import Any

from aiohttp import web

from ..graph import FrozenGraph
from ._draw import graph_svg
from ._metrics import metrics_text
from ._view import View, graph_info

__all__ = ["ConsoleServer"]

STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
KEEPALIVE_SECONDS = 15.0


class ConsoleServer:
    """Serves the console of one computation from process 0 (`start`, `publish`, `stop`)."""

    def __init__(self, graph: FrozenGraph, processes: int, host: str, port: int, token: str | None) -> None:
        self.graph = graph
        self.view = View(graph, processes)
        self.host = host
        self.port = port
        self.token = token
        self._graph: dict[str, Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._version = 0
        self._tick: asyncio.Event | None = None
        self._state_cache: tuple[int, bytes] | None = None

    # The runtime's side ---------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> int:
        """Serve on a thread; return the port bound (``port=0`` picks a free one)."""
        self._thread = threading.Thread(target=self._serve_thread, name="timely-console", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise OSError(f"the console did not start on {self.host}:{self.port} within {timeout} s")
        if self._error is not None:
            raise OSError(f"cannot serve the console on {self.host}:{self.port}: {self._error}") from self._error
        return self.port

    def publish(self, process: int, sample: dict[str, Any]) -> None:
        """A process's sample (from the runtime's thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._accept, process, sample)
            except RuntimeError:  # the server has just stopped
                pass

    def stop(self, timeout: float = 5.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    # The server thread ------------------------------------------------------------------------------
    def _serve_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._tick = asyncio.Event()
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/graph", self._api_graph)
        app.router.add_get("/api/state", self._api_state)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        try:
            await runner.setup()
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            await site.start()
            server = site._server
            if server is not None and server.sockets:  # type: ignore[attr-defined]
                self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        except BaseException as exc:
            self._error = exc
            self._started.set()
            await runner.cleanup()
            return
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            self._version = -1
            self._bump()
            await runner.shutdown()
            await runner.cleanup()

    def _accept(self, process: int, sample: dict[str, Any]) -> None:
        before = self.view.latest.get(process)
        self.view.add(process, sample)
        stall_news = before is not None and (before["stall"] is None) != (sample["stall"] is None)
        if process == 0 or 0 not in self.view.latest or stall_news:
            self._bump()

    def _bump(self) -> None:
        """A new view: wake every event stream (each waits on the current tick)."""
        if self._version >= 0:
            self._version += 1
        tick, self._tick = self._tick, asyncio.Event()
        if tick is not None:
            tick.set()

    def _state_bytes(self) -> bytes:
        cached = self._state_cache
        if cached is not None and cached[0] == self._version:
            return cached[1]
        data = json.dumps(self.view.state()).encode()
        self._state_cache = (self._version, data)
        return data

    # Routes --------------------------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.token is not None and not request.path.startswith("/static/"):
            given = request.query.get("token", "")
            auth = request.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                given = auth[7:]
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.Response(
                    status=403, text="timely console: this address needs the token the launcher printed (?token=...)\n"
                )
        response: web.StreamResponse = await handler(request)
        return response

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(body=_asset("index.html"), content_type="text/html", charset="utf-8")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=_asset(name), content_type=STATIC[name], charset="utf-8")

    async def _api_graph(self, request: web.Request) -> web.Response:
        if self._graph is None:
            svg = await asyncio.get_running_loop().run_in_executor(None, graph_svg, self.graph)
            self._graph = {**graph_info(self.graph), "svg": svg, "dot": self.graph.to_dot()}
        return web.json_response(self._graph)

    async def _api_state(self, request: web.Request) -> web.Response:
        return web.Response(body=self._state_bytes(), content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=metrics_text(self.view.state), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the view now, then on every sample of process 0."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        seen = None
        try:
            while self._version >= 0:
                tick = self._tick
                if seen != self._version:
                    seen = self._version
                    await response.write(b"data: " + self._state_bytes() + b"\n\n")
                    continue
                assert tick is not None
                try:
                    await asyncio.wait_for(tick.wait(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("page", name).read_bytes()
