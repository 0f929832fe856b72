"""Where this process stands in a cluster, and the run's settings: the one home of the
description the launcher writes into every process's environment and the runtime reads back.

A process learns its place from these variables (``timely run`` and the Spark integration set
them)::

    TIMELY_PROCESSES      number of processes N
    TIMELY_PROCESS_INDEX  this process's index, 0..N-1
    TIMELY_ADDRESSES      host:port of every process, comma-separated, in index order
                          (process i listens on entry i; IPv6 hosts in brackets: [::1]:7000)
    TIMELY_WORKERS        workers per process (default 1)
    TIMELY_SECRET         the shared secret, hex (HMAC authentication between processes)
    PYTHONHASHSEED        "0" unless the user set it, so that hash(str) agrees across processes
    TIMELY_RESTART        which attempt this is: 0 at first, k after the k-th restart (--restarts)
    TIMELY_CHECKPOINT_DIR   with --checkpoint-dir: where to checkpoint and resume from (absolute)
    TIMELY_CHECKPOINT_EVERY with --checkpoint-every: checkpoint every K epochs
    TIMELY_PICKLE         "1" with --pickle: records without a codec travel pickled (trusted clusters)
    TIMELY_ENCRYPT        "1" with --encrypt, "0" with --no-encrypt: seal every connection between
                          processes (default: sealed when a peer is off loopback, or with --pickle)
    TIMELY_PEER_TIMEOUT   with --peer-timeout: seconds of silence after which a peer counts as hung (30)
    TIMELY_DECODE_BUDGET  MiB one frame from a peer may take once decoded (256); a frame past it is refused
    TIMELY_DEBUG          "1" with --debug: failures print with the runtime's frames too
    TIMELY_LAUNCHER       "local" (this launcher runs every process) or "hosts" (this machine's one)
    TIMELY_CONSOLE        with --console: [host:]port where process 0 serves the live console

`ClusterConfig.to_env` writes the cluster's part and `cluster_from_env` reads it back, with an
error naming the variable when one is wrong; `pickle_from_env` and `checkpoints_from_env` read
the settings. The launcher (`timely.cli`) also reads the hosts and secret files here. This lives
in the runtime so that `timely.execute` can join a cluster by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..checkpoint import Checkpoints
from ..errors import TimelyError
from ..net.tcp import PEER_TIMEOUT, check_secret, off_loopback

__all__ = [
    "ENV_CONSOLE",
    "ENV_CONSOLE_LINGER",
    "ConsoleSettings",
    "console_from",
    "console_from_env",
    "console_linger",
    "console_token",
    "ENV_ADDRESSES",
    "ENV_CHECKPOINT_DIR",
    "ENV_CHECKPOINT_EVERY",
    "ENV_DEBUG",
    "ENV_ENCRYPT",
    "ENV_LAUNCHER",
    "ENV_DECODE_BUDGET",
    "ENV_FAILURE_FILE",
    "ENV_PEER_TIMEOUT",
    "ENV_PICKLE",
    "ENV_PROCESSES",
    "ENV_PROCESS_INDEX",
    "ENV_RESTART",
    "ENV_SECRET",
    "ENV_WORKERS",
    "LAUNCHER_HOSTS",
    "LAUNCHER_LOCAL",
    "SECRET_BYTES",
    "SECRET_HINT",
    "ClusterConfig",
    "ClusterConfigError",
    "check_distinct",
    "checkpoints_from_env",
    "cluster_from_env",
    "format_address",
    "parse_address",
    "parse_secret",
    "decode_budget_from_env",
    "encrypt_from_env",
    "encryption_for",
    "peer_timeout_from_env",
    "pickle_from_env",
    "read_hosts_file",
    "read_secret_file",
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
ENV_FAILURE_FILE = "TIMELY_FAILURE_FILE"
"""Set by ``timely run``: a file where the process writes why its computation failed, ``peer``
(another process failed or was lost) or ``own``, so the launcher's summary can say which
process failed first even when the consequence ended sooner than the cause."""
ENV_PICKLE = "TIMELY_PICKLE"
"""``1``: records the codec cannot encode otherwise travel pickled (``timely run --pickle``)."""

ENV_ENCRYPT = "TIMELY_ENCRYPT"
"""``1``: seal every connection between processes (``timely run --encrypt``); ``0``: leave them in
clear (``--no-encrypt``); unset: sealed when a peer is off loopback or pickle is on."""

ENV_CONSOLE = "TIMELY_CONSOLE"
"""``[host:]port`` where process 0 serves the live console (``timely run --console``)."""
ENV_CONSOLE_LINGER = "TIMELY_CONSOLE_LINGER"
"""Seconds process 0 keeps serving the console's final state once the computation has completed
(``timely run --console-linger``); by default the console goes with the computation."""

ENV_PEER_TIMEOUT = "TIMELY_PEER_TIMEOUT"
"""Seconds without a heartbeat from a peer after which it counts as hung (``timely run --peer-timeout``)."""

ENV_DECODE_BUDGET = "TIMELY_DECODE_BUDGET"
"""MiB one frame from a peer may take once decoded; a frame that could take more is refused."""
DECODE_BUDGET_MIB = 256

SECRET_BYTES = 32
SECRET_HINT = "create one with: python -c 'import secrets; print(secrets.token_hex(32))' > secret.hex"


class ClusterConfigError(TimelyError, ValueError):
    """The cluster description (environment variables, hosts file or secret file) is malformed."""


# ---------------------------------------------------------------------------------------------
# The cluster description


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(text: str, where: str = "address", lowest_port: int = 1) -> tuple[str, int]:
    """Parse ``host:port`` (``[v6]:port`` for IPv6); `where` names the source in errors;
    ``lowest_port=0`` lets port 0 (any free port) through."""
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
    if not lowest_port <= port <= 65535:
        raise ClusterConfigError(f"{where}: the port in {text!r} is not in {lowest_port}..65535")
    return host, port


def check_distinct(addresses: Sequence[tuple[str, int]], where: str) -> None:
    seen: dict[tuple[str, int], int] = {}
    for i, address in enumerate(addresses):
        if address in seen:
            raise ClusterConfigError(
                f"{where}: processes {seen[address]} and {i} both have the address {format_address(*address)}"
            )
        seen[address] = i


def parse_secret(text: str, where: str) -> bytes:
    value = text.strip()
    if not value:
        raise ClusterConfigError(f"{where} is empty; the shared secret must be hex ({SECRET_HINT})")
    try:
        secret = bytes.fromhex(value)
    except ValueError:
        raise ClusterConfigError(f"{where} is not hex; the shared secret must be hex ({SECRET_HINT})") from None
    weak = check_secret(secret, where)
    if weak is not None:
        raise ClusterConfigError(f"{weak}; {SECRET_HINT}")
    return secret


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
        if self.processes > 1:
            weak = check_secret(self.secret)
            if weak is not None:
                raise ClusterConfigError(f"a cluster of more than one process needs a strong secret: {weak}")

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
    check_distinct(addresses, ENV_ADDRESSES)

    workers = _env_int(env, ENV_WORKERS, 1) if ENV_WORKERS in env else 1

    if ENV_SECRET in env:
        secret = parse_secret(env[ENV_SECRET], ENV_SECRET)
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


def encrypt_from_env(environ: Mapping[str, str] | None = None) -> bool | None:
    """What ``TIMELY_ENCRYPT`` asks for (``timely run --encrypt`` / ``--no-encrypt``): True, False,
    or None when it is unset or empty (the default decides); anything else is a `ClusterConfigError`."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_ENCRYPT, "").strip().lower()
    if not text:
        return None
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise ClusterConfigError(f"{ENV_ENCRYPT}={env[ENV_ENCRYPT]!r}: expected 1 (encrypt) or 0 (in clear)")


def encryption_for(
    cluster: ClusterConfig | None,
    requested: bool | None,
    pickle: bool,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether this process seals its connections to its peers.

    ``requested`` (``execute(encrypt=...)``; None: ``TIMELY_ENCRYPT`` decides, and when that is
    unset too, the cluster does) wins; by default a cluster with any address off loopback is
    sealed, and so is one with pickle on. Pickle never runs over connections in clear: asking for
    both is a `ClusterConfigError`. Every process of a cluster must come to the same answer (the
    handshake refuses a peer that does not), which the default does, since every process has the
    same addresses.
    """
    if cluster is None or cluster.processes == 1:
        return False  # no connection to seal
    if requested is None:
        requested = encrypt_from_env(environ)
    outside = off_loopback([host for host, _ in cluster.addresses])
    if requested is None:
        requested = bool(outside) or pickle
    if pickle and not requested:
        raise ClusterConfigError(
            "pickle refuses to run over connections in clear: an injected frame would run code in the receiver; "
            "drop encrypt=False (timely run --no-encrypt, TIMELY_ENCRYPT=0) or pickle"
        )
    if outside and not requested:
        logging.getLogger("timely.net").warning(
            "process %d: connections to %s travel in clear (encryption turned off): anyone on the path can read "
            "and alter every record",
            cluster.process_index,
            ", ".join(sorted(set(outside))),
        )
    return requested


def _positive_from_env(env: Mapping[str, str], name: str, unit: str) -> float | None:
    """The positive number the variable ``name`` holds, None when it is unset or empty."""
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ClusterConfigError(f"{name}={text!r}: expected a positive number of {unit}")
    return value


def peer_timeout_from_env(environ: Mapping[str, str] | None = None) -> float:
    """The peer timeout ``TIMELY_PEER_TIMEOUT`` sets (``timely run --peer-timeout``), else the default."""
    value = _positive_from_env(os.environ if environ is None else environ, ENV_PEER_TIMEOUT, "seconds")
    return PEER_TIMEOUT if value is None else value


def decode_budget_from_env(environ: Mapping[str, str] | None = None) -> int:
    """Bytes one frame from a peer may take once decoded (``TIMELY_DECODE_BUDGET``, in MiB)."""
    value = _positive_from_env(os.environ if environ is None else environ, ENV_DECODE_BUDGET, "MiB")
    return DECODE_BUDGET_MIB << 20 if value is None else int(value * (1 << 20))


def checkpoints_from_env(environ: Mapping[str, str] | None = None) -> Checkpoints | None:
    """The policy ``timely run --checkpoint-dir DIR [--checkpoint-every K]`` set, if any."""
    env = os.environ if environ is None else environ
    directory = env.get(ENV_CHECKPOINT_DIR)
    if not directory:
        return None
    every = env.get(ENV_CHECKPOINT_EVERY)
    return Checkpoints(directory, every_epochs=int(every) if every else 10)


# ---------------------------------------------------------------------------------------------
# Files the launcher reads


def read_hosts_file(path: str) -> list[tuple[str, int]]:
    """One ``host:port`` per line, in process order; blank lines and ``#`` comments are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ClusterConfigError(f"cannot read the hosts file: {e}") from None
    addresses = []
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            addresses.append(parse_address(entry, f"{path}:{number}"))
    if not addresses:
        raise ClusterConfigError(f"{path}: no host:port lines")
    check_distinct(addresses, path)
    return addresses


def read_secret_file(path: str) -> bytes:
    """The shared secret: a file holding it in hex (whitespace around it is ignored)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ClusterConfigError(f"cannot read the secret file: {e}") from None
    return parse_secret(text, f"the secret file {path}")


# ---------------------------------------------------------------------------------------------
# The live console


@dataclass(frozen=True)
class ConsoleSettings:
    """Where process 0 serves the console, and the token a page must carry (None on loopback)."""

    host: str
    port: int
    token: str | None = field(default=None, repr=False)
    linger: float = 0.0
    """Seconds to keep serving the final state after the computation completes."""

    def url(self, port: int | None = None) -> str:
        """The page's address (with ``port``, the one actually bound, when asked for port 0)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else "::1" if self.host == "::" else self.host
        query = f"?token={self.token}" if self.token else ""
        return f"http://{format_address(host, self.port if port is None else port)}/{query}"


def console_token(secret: bytes) -> str:
    """The token a console away from loopback asks for: derived from the cluster's secret, so
    the launcher can print it and no one without the secret can work it out."""
    return hmac.new(secret, b"timely console", hashlib.sha256).hexdigest()[:32]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def console_from(value: int | str, secret: bytes | None) -> ConsoleSettings:
    """``execute(console=...)`` or ``--console``: a port (on loopback) or ``host:port``. A host
    other than loopback is served only behind a token: derived from ``secret`` (the cluster's),
    or random in a process of its own."""
    where = "console"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ClusterConfigError(f"{where}: expected a port or 'host:port', not {value!r}")
    text = str(value).strip()
    if ":" not in text and not text.isdigit():
        raise ClusterConfigError(f"{where}: expected a port or 'host:port', got {text!r}")
    host, port = parse_address(text if ":" in text else f"127.0.0.1:{text}", where, lowest_port=0)
    token = None
    if not _loopback(host):
        token = console_token(secret) if secret else secrets.token_hex(16)
    return ConsoleSettings(host, port, token, console_linger(os.environ.get(ENV_CONSOLE_LINGER, "")))


def console_linger(text: str) -> float:
    """``TIMELY_CONSOLE_LINGER`` / ``--console-linger``: seconds, 0 or more (empty: 0)."""
    if not text.strip():
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ClusterConfigError(f"{ENV_CONSOLE_LINGER}: expected seconds (0 or more), got {text!r}")
    return seconds


def console_from_env(secret: bytes | None, environ: Mapping[str, str] | None = None) -> ConsoleSettings | None:
    """The console ``timely run --console`` asked for, if any."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_CONSOLE, "").strip()
    if not text:
        return None
    try:
        return console_from(text, secret)
    except ClusterConfigError as e:
        raise ClusterConfigError(f"{ENV_CONSOLE}: {e}") from None
