"""Where this process stands in a cluster: parsed from the environment the launcher sets.

`timely run` (and the Spark integration) start every process of a computation with
TIMELY_PROCESSES, TIMELY_PROCESS_INDEX, TIMELY_ADDRESSES, TIMELY_WORKERS and TIMELY_SECRET;
`cluster_from_env` reads them back, with an error naming the variable when one is wrong.
This lives in the runtime so that `timely.execute` can join a cluster; the launcher
(`timely.cli`) imports it from here.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import TimelyError

__all__ = [
    "ENV_ADDRESSES",
    "ENV_CHECKPOINT_DIR",
    "ENV_CHECKPOINT_EVERY",
    "ENV_DEBUG",
    "ENV_LAUNCHER",
    "ENV_PICKLE",
    "ENV_PROCESSES",
    "ENV_PROCESS_INDEX",
    "ENV_RESTART",
    "ENV_SECRET",
    "ENV_WORKERS",
    "LAUNCHER_HOSTS",
    "LAUNCHER_LOCAL",
    "SECRET_BYTES",
    "ClusterConfig",
    "ClusterConfigError",
    "cluster_from_env",
    "format_address",
    "parse_address",
    "pickle_from_env",
]

ENV_PROCESSES = "TIMELY_PROCESSES"
ENV_PROCESS_INDEX = "TIMELY_PROCESS_INDEX"
ENV_ADDRESSES = "TIMELY_ADDRESSES"
ENV_WORKERS = "TIMELY_WORKERS"
ENV_SECRET = "TIMELY_SECRET"
# Fault tolerance: set by `timely run` (--restarts, --checkpoint-dir, --checkpoint-every).
ENV_RESTART = "TIMELY_RESTART"
"""Which attempt this is: 0 for the first start, k for the k-th restart after a failure."""
ENV_CHECKPOINT_DIR = "TIMELY_CHECKPOINT_DIR"
"""Absolute path of the directory the computation checkpoints to and resumes from."""
ENV_CHECKPOINT_EVERY = "TIMELY_CHECKPOINT_EVERY"
"""Checkpoint every this many epochs."""
ENV_DEBUG = "TIMELY_DEBUG"
"""``1``: print a failure with every frame, the runtime's included (``timely run --debug``)."""
ENV_LAUNCHER = "TIMELY_LAUNCHER"
"""Set by ``timely run`` for the processes it starts: `LAUNCHER_LOCAL` when it runs every process
of the computation (so its summary reports each one's exit), `LAUNCHER_HOSTS` when it runs this
machine's process of a multi-machine cluster."""
LAUNCHER_LOCAL = "local"
LAUNCHER_HOSTS = "hosts"
ENV_PICKLE = "TIMELY_PICKLE"
"""``1``: records the codec cannot encode otherwise travel pickled (``timely run --pickle``)."""

SECRET_BYTES = 32
_SECRET_HINT = "create one with: python -c 'import secrets; print(secrets.token_hex(32))' > secret.hex"


class ClusterConfigError(TimelyError, ValueError):
    """The cluster description (environment variables, hosts file or secret file) is malformed."""


# ---------------------------------------------------------------------------------------------
# The cluster description


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(text: str, where: str = "address") -> tuple[str, int]:
    """Parse ``host:port`` (``[v6]:port`` for IPv6); `where` names the source in errors."""
    entry = text.strip()
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0 or entry[end + 1 : end + 2] != ":":
            raise ClusterConfigError(f"{where}: expected [ipv6]:port, got {text!r}")
        host, port_text = entry[1:end], entry[end + 2 :]
    else:
        host, colon, port_text = entry.rpartition(":")
        if not colon:
            raise ClusterConfigError(f"{where}: expected host:port, got {text!r}")
        if ":" in host:
            raise ClusterConfigError(f"{where}: an IPv6 host needs brackets, as in [::1]:7000; got {text!r}")
    if not host:
        raise ClusterConfigError(f"{where}: the host is missing in {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ClusterConfigError(f"{where}: the port in {text!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise ClusterConfigError(f"{where}: the port in {text!r} is not in 1..65535")
    return host, port


def _check_distinct(addresses: Sequence[tuple[str, int]], where: str) -> None:
    seen: dict[tuple[str, int], int] = {}
    for i, address in enumerate(addresses):
        if address in seen:
            raise ClusterConfigError(
                f"{where}: processes {seen[address]} and {i} both have the address {format_address(*address)}"
            )
        seen[address] = i


def _parse_secret(text: str, where: str) -> bytes:
    value = text.strip()
    if not value:
        raise ClusterConfigError(f"{where} is empty; the shared secret must be hex ({_SECRET_HINT})")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ClusterConfigError(f"{where} is not hex; the shared secret must be hex ({_SECRET_HINT})") from None


@dataclass(frozen=True)
class ClusterConfig:
    """Where this process stands in a cluster of `processes` processes of `workers` workers each.

    ``addresses[i]`` is where process ``i`` listens; ``secret`` authenticates processes to each
    other (it is left out of ``repr``).
    """

    processes: int
    process_index: int
    addresses: list[tuple[str, int]]
    workers: int
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.processes, int) or self.processes < 1:
            raise ClusterConfigError(f"processes must be an int >= 1, not {self.processes!r}")
        if not isinstance(self.process_index, int) or not 0 <= self.process_index < self.processes:
            raise ClusterConfigError(f"process_index {self.process_index!r} is not in 0..{self.processes - 1}")
        if len(self.addresses) != self.processes:
            raise ClusterConfigError(f"{len(self.addresses)} addresses for {self.processes} processes")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ClusterConfigError(f"workers must be an int >= 1, not {self.workers!r}")
        if not isinstance(self.secret, bytes):
            raise ClusterConfigError("secret must be bytes")
        if self.processes > 1 and not self.secret:
            raise ClusterConfigError("a cluster of more than one process needs a non-empty secret")

    @property
    def address(self) -> tuple[str, int]:
        """Where this process listens."""
        return self.addresses[self.process_index]

    @property
    def total_workers(self) -> int:
        return self.processes * self.workers

    def to_env(self) -> dict[str, str]:
        """The environment variables that `cluster_from_env` reads back as this configuration."""
        return {
            ENV_PROCESSES: str(self.processes),
            ENV_PROCESS_INDEX: str(self.process_index),
            ENV_ADDRESSES: ",".join(format_address(h, p) for h, p in self.addresses),
            ENV_WORKERS: str(self.workers),
            ENV_SECRET: self.secret.hex(),
        }


def _env_int(env: Mapping[str, str], name: str, minimum: int) -> int:
    text = env[name]
    try:
        value = int(text.strip())
    except ValueError:
        raise ClusterConfigError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise ClusterConfigError(f"{name}={text!r} must be at least {minimum}")
    return value


def cluster_from_env(environ: Mapping[str, str] | None = None) -> ClusterConfig | None:
    """This process's cluster, read from the ``TIMELY_*`` variables of `environ` (default
    ``os.environ``); None when ``TIMELY_PROCESSES`` is unset (a stand-alone process).

    ``TIMELY_PROCESS_INDEX`` and ``TIMELY_ADDRESSES`` are required with ``TIMELY_PROCESSES``;
    ``TIMELY_WORKERS`` defaults to 1; ``TIMELY_SECRET`` is required when there is more than one
    process (a single process gets a random one). Raises `ClusterConfigError` naming the variable.
    """
    env = os.environ if environ is None else environ
    if ENV_PROCESSES not in env:
        return None
    processes = _env_int(env, ENV_PROCESSES, 1)

    if ENV_PROCESS_INDEX not in env:
        raise ClusterConfigError(f"{ENV_PROCESS_INDEX} is not set (it is required with {ENV_PROCESSES})")
    index = _env_int(env, ENV_PROCESS_INDEX, 0)
    if index >= processes:
        raise ClusterConfigError(
            f"{ENV_PROCESS_INDEX} is {index} but {ENV_PROCESSES} is {processes} (valid indices: 0..{processes - 1})"
        )

    if ENV_ADDRESSES not in env:
        raise ClusterConfigError(f"{ENV_ADDRESSES} is not set (it is required with {ENV_PROCESSES})")
    entries = env[ENV_ADDRESSES].split(",")
    if len(entries) != processes:
        raise ClusterConfigError(
            f"{ENV_ADDRESSES} has {len(entries)} entries but {ENV_PROCESSES} is {processes}: {env[ENV_ADDRESSES]!r}"
        )
    addresses = [parse_address(e, f"{ENV_ADDRESSES} entry {i}") for i, e in enumerate(entries)]
    _check_distinct(addresses, ENV_ADDRESSES)

    workers = _env_int(env, ENV_WORKERS, 1) if ENV_WORKERS in env else 1

    if ENV_SECRET in env:
        secret = _parse_secret(env[ENV_SECRET], ENV_SECRET)
    elif processes > 1:
        raise ClusterConfigError(
            f"{ENV_SECRET} is not set; it is required when {ENV_PROCESSES} > 1 (the launcher `timely run` sets it)"
        )
    else:
        secret = secrets.token_bytes(SECRET_BYTES)
    return ClusterConfig(processes, index, addresses, workers, secret)


def pickle_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``TIMELY_PICKLE`` (set by ``timely run --pickle``) enables pickle: ``1``/``true``/
    ``yes``, or ``0``/``false``/``no``/empty for not; anything else is a `ClusterConfigError`."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_PICKLE, "").strip().lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise ClusterConfigError(f"{ENV_PICKLE}={env[ENV_PICKLE]!r}: expected 1 (pickle enabled) or 0")
