"""A Spark standalone cluster on this machine, started from the pip-installed pyspark: a master
and workers, each its own JVM, on loopback.

The pip package has no ``sbin/start-master.sh``; ``bin/spark-class`` runs a Spark class in a
JVM of its own and replaces itself with it (``exec``), so the process started here *is* the
master's or a worker's JVM. A worker starts an executor JVM per application, and the executor
starts PySpark's Python daemon, which forks the Python workers (the timely processes): all of
them descend from a worker and run in its directory (``work<i>/app-.../<executor>``), but the
Python daemon makes a process group of its own. So `stop` signals every descendant of the
daemons, and then checks that nothing is left: no descendant, and no process whose command
line or working directory is in the cluster's directory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ClusterError", "StandaloneCluster", "spark_home"]

START_TIMEOUT = 180.0
"""Seconds a daemon may take to come up (a JVM start on a loaded 2-core machine: 10-40 s)."""
STOP_TIMEOUT = 20.0


class ClusterError(RuntimeError):
    """The cluster did not start, or left processes behind."""


def spark_home() -> Path:
    """The pyspark installation's directory: it is a Spark distribution (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """``StandaloneCluster(directory, workers=2).start()``; `master_url` to connect; `stop`."""

    directory: Path
    workers: int = 2
    cores: int = 1
    """Cores each worker offers (one task slot each)."""
    memory: str = "1g"
    """Memory each worker offers its executors."""
    master_url: str = ""
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        """What the daemons (and the applications a test starts) need: Spark's home, loopback."""
        return dict(
            os.environ,
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.directory / "logs"),
            SPARK_PID_DIR=str(self.directory),
            # No REST submission server: it would take port 6066, shared by every cluster on the machine.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )

    def start(self) -> StandaloneCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            where = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
            master = self._daemon("master", "org.apache.spark.deploy.master.Master", *where)
            found = self._wait_for(master, re.compile(r"Starting Spark master at (spark://\S+)"), "the master")
            self.master_url = found.group(1)
            self._wait_for(master, re.compile(r"I have been elected leader"), "the master")
            offer = ["--host", "127.0.0.1", "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory]
            workers = [
                self._daemon(
                    f"worker{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    *offer,
                    "--work-dir",
                    str(self.directory / f"work{i}"),
                    self.master_url,
                )
                for i in range(self.workers)
            ]
            for log in workers:
                self._wait_for(log, re.compile(r"Successfully registered with master"), log.stem)
        except BaseException:
            self.stop()
            raise
        return self

    def _daemon(self, name: str, main_class: str, *args: str) -> Path:
        log = self.directory / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                env=self.environment(),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not in the test's group: a Ctrl-C reaches the test, which stops it
            )
        self.daemons.append(process)
        self.logs.append(log)
        return log

    def _wait_for(self, log: Path, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            found = pattern.search(log.read_text(errors="replace"))
            if found is not None:
                return found
            dead = [p for p in self.daemons if p.poll() is not None]
            if dead:
                raise ClusterError(f"{what} exited ({dead[0].returncode}) before it was ready:\n{self.tail(log)}")
            time.sleep(0.2)
        raise ClusterError(f"{what} was not ready after {START_TIMEOUT:.0f} s:\n{self.tail(log)}")

    @staticmethod
    def tail(log: Path, lines: int = 30) -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """End every process the cluster started (daemons, executors, Python workers), and raise
        `ClusterError` if any is still there afterwards."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            doomed = self.processes()
            for pid in doomed:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + STOP_TIMEOUT
            while time.monotonic() < deadline and self.processes():
                time.sleep(0.2)
            if not self.processes():
                break
        for process in self.daemons:
            process.wait(timeout=STOP_TIMEOUT)
        self.daemons.clear()
        left = self.processes()
        if left:
            raise ClusterError(f"processes of the cluster survived its stop: {self.describe(left)}")

    def processes(self) -> list[int]:
        """The live processes of the cluster: the daemons and their descendants, and any process
        whose command line or working directory is in the cluster's directory."""
        mine = str(self.directory)
        children: dict[int, list[int]] = {}
        found = set()
        for pid, (ppid, cmdline, cwd) in _processes().items():
            children.setdefault(ppid, []).append(pid)
            if mine in cmdline or cwd.startswith(mine):
                found.add(pid)
        todo = [p.pid for p in self.daemons if p.poll() is None]
        while todo:
            pid = todo.pop()
            found.add(pid)
            todo.extend(children.get(pid, []))
        return sorted(p for p in found if _alive(p))

    def contains(self, pid: int) -> bool:
        """Whether ``pid`` is one of the cluster's processes (such as an executor's Python worker)."""
        return pid in self.processes()

    @staticmethod
    def describe(pids: list[int]) -> str:
        return "; ".join(f"{pid}: {_processes().get(pid, (0, '?', ''))[1][:160]}" for pid in pids)


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (parent pid, command line, working directory)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        out[int(entry.name)] = (ppid, cmdline, cwd)
    return out


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
