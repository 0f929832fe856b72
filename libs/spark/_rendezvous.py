"""How the barrier tasks of a run learn each other's addresses: through the driver.

Spark's own way, ``BarrierTaskContext.allGather``, costs at least a second: the executor's
side waits for the coordinator's answer in a loop that sleeps a whole second between looks
(`BarrierTaskContext.runBarrier`). On a small job that second was most of what a second
process added (`docs/spark.md`, "Where the time goes"). So the driver opens an `AddressBook`
for the run, on the host the tasks already reach it at (the progress listener's), and each
task sends it one line, ``{token, stage, task, index, processes, address}``, and reads the
list of every process's address back, sent to all of them as soon as the last one has
written: the wait is the spread of the tasks' starts, not a second more.

A retried barrier stage runs all its tasks again (PySpark does not tell a task its stage
attempt). Spark starts the new attempt only once the old one's tasks have given up their
slots, so a task of the old attempt still in the book has been killed and its connection
closed: the book drops closed connections before it answers, and a task that comes for an
index already waiting replaces it when its task attempt id is the later one. A line without
the run's token is refused and answered with nothing.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

from ._errors import SparkBridgeError
from ._server import Server

__all__ = ["AddressBook", "BookAddress", "address_book", "gather"]

BookAddress = tuple[str, int, str]
"""Where a task finds the run's book: ``(host, port, token)``."""
LINE_BYTES = 1 << 16
"""The longest line a task may send the book (an address is far shorter)."""


class AddressBook:
    """The driver's side: answers each stage attempt's tasks with all their addresses at once."""

    def __init__(self, host: str) -> None:
        self.token = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._stage: int | None = None
        """The newest Spark stage a task has written for; tasks of older ones are dropped."""
        self._waiting: dict[int, tuple[socket.socket, str, int]] = {}
        """The tasks waiting so far: index -> (connection, address, task attempt id)."""
        self._server = Server(host, self._take, "timely-spark-rendezvous")
        self.address: BookAddress = (host, self._server.port, self.token)

    def _take(self, conn: socket.socket) -> None:
        try:
            request = json.loads(_read_line(conn))
            if not isinstance(request, dict) or request.get("token") != self.token:
                conn.close()  # not one of this run's tasks
                return
            stage, task = int(request["stage"]), int(request["task"])
            index, processes, address = int(request["index"]), int(request["processes"]), str(request["address"])
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
            return
        if not 0 <= index < processes:
            conn.close()
            return
        with self._lock:
            if self._stage is None or stage > self._stage:
                self._drop_waiting()
                self._stage = stage
            elif stage < self._stage:
                conn.close()  # a task of a stage Spark has given up
                return
            old = self._waiting.get(index)
            if old is not None and old[2] > task:
                conn.close()  # an earlier attempt's task, late
                return
            if old is not None:
                old[0].close()
            self._waiting[index] = (conn, address, task)
            if len(self._waiting) < processes:
                return
            for i, (each, _, _) in list(self._waiting.items()):
                if _closed(each):  # killed with its stage attempt
                    each.close()
                    del self._waiting[i]
            if len(self._waiting) < processes:
                return
            everyone, self._waiting = self._waiting, {}
        reply = (json.dumps([everyone[i][1] for i in range(processes)]) + "\n").encode()
        for each, _, _ in everyone.values():
            try:
                each.sendall(reply)
            except OSError:
                pass  # that task is gone; Spark fails the stage
            finally:
                each.close()

    def _drop_waiting(self) -> None:
        for conn, _, _ in self._waiting.values():
            conn.close()
        self._waiting = {}

    def close(self) -> None:
        self._server.close()
        with self._lock:
            self._drop_waiting()


@contextlib.contextmanager
def address_book(host: str, processes: int) -> Iterator[BookAddress | None]:
    """A book on ``host`` for a run of ``processes`` tasks, open while the block runs; its
    address, or None for one process (it has nobody to learn of)."""
    if processes < 2:
        yield None
        return
    book = AddressBook(host)
    try:
        yield book.address
    finally:
        book.close()


def gather(
    book: BookAddress, stage: int, task: int, index: int, processes: int, mine: str, timeout: float | None = None
) -> list[str]:
    """The task's side: every process's address (``mine`` among them, at ``index``), once all
    ``processes`` tasks of Spark stage ``stage`` have written theirs (``task``: this one's task
    attempt id). `SparkBridgeError` if the driver cannot be reached or does not answer within
    ``timeout`` seconds (None: no limit)."""
    host, port, token = book
    request: dict[str, Any] = {
        "token": token,
        "stage": stage,
        "task": task,
        "index": index,
        "processes": processes,
        "address": mine,
    }
    try:
        with socket.create_connection((host, port), timeout=10.0) as conn:
            conn.sendall((json.dumps(request) + "\n").encode())
            conn.settimeout(timeout)
            line = _read_line(conn)
    except TimeoutError as e:
        raise SparkBridgeError(
            f"the other processes did not all reach the driver's rendezvous at {host}:{port} within {timeout:g} s"
        ) from e
    except OSError as e:
        raise SparkBridgeError(f"cannot reach the driver's rendezvous at {host}:{port}: {e}") from e
    if not line:
        raise SparkBridgeError(f"the driver's rendezvous at {host}:{port} closed without an answer")
    addresses = json.loads(line)
    if not isinstance(addresses, list) or len(addresses) != processes or addresses[index] != mine:
        raise SparkBridgeError(f"the driver's rendezvous at {host}:{port} answered {line[:200]!r}")
    return [str(a) for a in addresses]


def _closed(conn: socket.socket) -> bool:
    """Whether the other end of ``conn`` has closed it (a waiting task sends nothing more)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and not conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


def _read_line(conn: socket.socket) -> str:
    """One line from ``conn`` (without its newline; empty if it closed first)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            return ""
        data += chunk
        if len(data) > LINE_BYTES:
            raise ValueError("line too long")
    return data[:-1].decode()
