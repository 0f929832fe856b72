"""The driver's address book (`timely_libs.spark._rendezvous`): real sockets on loopback and one
thread per task, no Spark. Every task of a stage gets every address, in index order, once the
last one has written; a stranger, a killed task of an earlier attempt and a missing task
never make a task wait for ever or join the wrong cluster."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest

pytest.importorskip("pyspark")

from timely_libs.spark._errors import SparkBridgeError
from timely_libs.spark._rendezvous import AddressBook, gather


def _tasks(book: AddressBook, stage: int, ids: dict[int, int], processes: int, timeout: float = 20.0) -> dict[int, Any]:
    """Run ``gather`` for each ``index: task id`` on a thread of its own; index -> answer or error."""
    answers: dict[int, Any] = {}

    def one(index: int, task: int) -> None:
        try:
            answers[index] = gather(book.address, stage, task, index, processes, f"10.0.0.{index}:{task}", timeout)
        except SparkBridgeError as e:
            answers[index] = e

    threads = [threading.Thread(target=one, args=item) for item in ids.items()]
    for t in threads:
        t.start()
        time.sleep(0.02)  # arrivals in the order given
    for t in threads:
        t.join(timeout + 5)
    return answers


def _write(book: AddressBook, **request: Any) -> socket.socket:
    """A task's request written by hand, its connection left open (a task that waits)."""
    conn = socket.create_connection(book.address[:2])
    conn.sendall((json.dumps({"token": book.address[2], **request}) + "\n").encode())
    return conn


def _answered(conn: socket.socket) -> bytes:
    conn.settimeout(5.0)
    data = conn.recv(4096)
    conn.close()
    return data


@pytest.mark.timeout(60)
def test_every_task_gets_every_address_in_index_order() -> None:
    book = AddressBook("127.0.0.1")
    try:
        answers = _tasks(book, 3, {2: 12, 0: 10, 1: 11}, 3)
    finally:
        book.close()
    want = ["10.0.0.0:10", "10.0.0.1:11", "10.0.0.2:12"]
    assert answers == {0: want, 1: want, 2: want}


@pytest.mark.timeout(60)
def test_a_stranger_is_refused_and_changes_nothing() -> None:
    book = AddressBook("127.0.0.1")
    try:
        stranger = socket.create_connection(book.address[:2])
        request = {"token": "not-the-token", "stage": 1, "task": 99, "index": 0, "processes": 2, "address": "evil:1"}
        stranger.sendall((json.dumps(request) + "\n").encode())
        assert _answered(stranger) == b""  # closed, no addresses
        answers = _tasks(book, 1, {0: 5, 1: 6}, 2)
    finally:
        book.close()
    assert answers[0] == answers[1] == ["10.0.0.0:5", "10.0.0.1:6"]


@pytest.mark.timeout(60)
def test_a_killed_task_of_the_earlier_attempt_is_not_in_the_answer() -> None:
    """Attempt 1's task 11 (index 1) wrote, then was killed (its connection closed). Attempt 2's
    task 20 (index 0) comes next: it must not be answered with task 11's address, but wait for
    task 21; a late write of attempt 1 for an index a later task holds is refused."""
    book = AddressBook("127.0.0.1")
    try:
        _write(book, stage=4, task=11, index=1, processes=2, address="old:11").close()
        time.sleep(0.1)
        answers = _tasks(book, 4, {0: 20, 1: 21}, 2)
        waiting = _write(book, stage=4, task=30, index=0, processes=2, address="new:30")
        stale = _write(book, stage=4, task=29, index=0, processes=2, address="old:29")
        assert _answered(stale) == b""  # task 30 holds index 0
        waiting.close()
    finally:
        book.close()
    assert answers[0] == answers[1] == ["10.0.0.0:20", "10.0.0.1:21"]


@pytest.mark.timeout(60)
def test_a_later_stage_drops_the_tasks_of_an_earlier_one() -> None:
    book = AddressBook("127.0.0.1")
    try:
        waiting = _write(book, stage=2, task=3, index=0, processes=2, address="old:3")
        answers = _tasks(book, 5, {0: 7, 1: 8}, 2)
        assert _answered(waiting) == b""
    finally:
        book.close()
    assert answers[0] == answers[1] == ["10.0.0.0:7", "10.0.0.1:8"]


@pytest.mark.timeout(60)
def test_a_missing_task_is_an_error_after_the_timeout_not_a_hang() -> None:
    book = AddressBook("127.0.0.1")
    try:
        began = time.monotonic()
        answers = _tasks(book, 1, {0: 1}, 2, timeout=0.5)
        assert time.monotonic() - began < 10
    finally:
        book.close()
    assert isinstance(answers[0], SparkBridgeError)
    assert "did not all reach" in str(answers[0])


def test_an_unreachable_driver_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(SparkBridgeError, match="cannot reach the driver's rendezvous"):
            gather(("127.0.0.1", port, "t"), 1, 1, 0, 2, "a:1", 1.0)
