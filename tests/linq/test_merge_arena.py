"""Malloc tuned for large arrays once the merge thread starts (glibc): the merge thread
allocates from the process's one heap, so the holes its merged batches leave once freed are
reused by the operator's thread, and columns of millions of rows are mappings of their own. Each case runs in a
fresh process: arenas are per process, and a thread takes its arena at its first malloc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from timely_libs.linq._trace import _spine

CHILD = """
import ctypes, sys
from timely_libs.linq._trace import _spine

if sys.argv[1] == "control":
    _spine._tune_malloc = lambda: False  # the merge thread as glibc would start it
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]


def allocate():
    for _ in range(1000):
        libc.malloc(1000)  # kept on purpose: the heap they came from must still exist below


class MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


libc.mallinfo.restype = MallInfo
libc.free.argtypes = [ctypes.c_void_p]
_spine._merger().submit(allocate).result()
libc.free(libc.malloc(30 << 20))  # by default, glibc's mmap threshold rises to 30 MiB here
before = libc.mallinfo().hblks
column = libc.malloc(16 << 20)  # two million int64s
mapped = libc.mallinfo().hblks - before
out = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
print(open(sys.argv[2]).read().count("<heap nr="), mapped)
"""

glibc = pytest.mark.skipif(
    not hasattr(os, "confstr") or not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"),
    reason="malloc arenas are glibc's",
)


def _heaps(tmp_path: Path, how: str, env: dict[str, str] | None = None) -> tuple[int, int]:
    """The heaps ``malloc_info`` lists once the merge thread has allocated, and the blocks
    mapped on their own once a 16 MiB block is held (after a 30 MiB one was freed)."""
    clean = {k: v for k, v in os.environ.items() if k not in _spine.MALLOC_ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, how, str(tmp_path / "info.xml")],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    heaps, mapped = done.stdout.split()
    return int(heaps), int(mapped)


@glibc
def test_the_merge_thread_shares_one_heap_and_large_columns_are_mapped(tmp_path: Path) -> None:
    """Once the merge thread runs, its allocations come from the main heap (one heap in all)
    and a column of two million int64s is a mapping of its own, which returns to the system
    when freed; without `_tune_malloc` (the control), glibc gives the thread a heap of its
    own and the column comes from the heap."""
    assert _heaps(tmp_path, "merger") == (1, 1)
    assert _heaps(tmp_path, "control") == (2, 0)


@glibc
def test_an_arena_count_in_the_environment_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``MALLOC_ARENA_MAX`` in the environment is the user's choice: not overridden."""
    assert _heaps(tmp_path, "merger", {"MALLOC_ARENA_MAX": "4"}) == (2, 0)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert _spine._tune_malloc() is False
