"""What the Spark benchmarks share (private; not a benchmark)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from bench._harness import Context

__all__ = ["ProgressOut", "TreeMemory", "stop_spark"]


def stop_spark(spark: Any = None) -> None:
    """Stop the session (if any) and the JVM pyspark started, so it does not linger through
    later benchmarks and the next session starts a JVM of its own."""
    from pyspark import SparkContext

    if spark is not None:
        with contextlib.suppress(Exception):  # a JVM that died already cannot be stopped
            spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


class TreeMemory:
    """The peak memory of this process and all its descendants (the JVM, PySpark's Python
    workers, the timely processes inside them), sampled every ``every`` seconds while the
    block runs: the sum of each process's proportional set size (PSS: a page shared by k
    processes counts 1/k in each, so forked Python workers are not counted twice), or of
    their resident sizes where the kernel gives no PSS. ``peak_mib`` after the block."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="tree-memory", daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            self.peak_mib = max(self.peak_mib, sum(map(_memory_kib, _tree(os.getpid()))) / 1024)
            if self._stop.wait(self.every):
                return


def _tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _memory_kib(pid: int) -> int:
    for name, field in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(field):
                    return int(line.split()[1])
    return 0


class ProgressOut:
    """A file-like object that turns a job's progress lines into the benchmark's (the Spark
    benchmarks hand it to the job as its ``out``)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.ctx.progress(line.strip())
        return len(text)

    def flush(self) -> None:
        pass
