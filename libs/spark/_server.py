"""A TCP server on one host and a free port, a thread per connection: the driver's progress
listener and a stream process's data port are both one."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

__all__ = ["Server"]


class Server:
    """Listens on ``host`` (any free port) and calls ``handle(conn)`` on a thread of its own
    for each connection (named ``name``); ``threads`` are those handlers, ``close()`` stops
    accepting."""

    def __init__(self, host: str, handle: Callable[[socket.socket], None], name: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.bind((host, 0))
        self._socket.listen(64)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self.threads: list[threading.Thread] = []
        self._handle = handle
        self._name = name
        self._closed = False
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._handle, args=(conn,), name=self._name, daemon=True)
            self.threads.append(thread)
            thread.start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._socket.close()
