"""The ``timely`` command: its arguments, and the children of a run built from them.

A timely program is an ordinary Python script that every process runs (SPMD)::

    timely run -n 4 prog.py [args...]                       # four local processes
    timely run -n 2 --workers 3 -m package.module [args...] # like python -m
    timely run --hosts hosts.txt --process 2 prog.py        # process 2 of a multi-machine cluster

This module parses the command line, chooses the addresses and the secret, and gives each child
the environment that places it in the cluster (`timely._runtime.config` is the one home of that
description: the variables, their parsing, the hosts and secret files). `timely._supervisor`
runs the children: output, exit statuses, signals, restarts.

With ``--restarts R`` a failure (a process exiting non-zero or killed by a signal the launcher
did not send) instead stops the other processes at once and starts all of them again, with
fresh ports and ``TIMELY_RESTART`` counting the restarts, up to R times; a program that
checkpoints (``--checkpoint-dir``) resumes from its last complete checkpoint. In the hosts-file
mode only this machine's process restarts, at the same address; the launchers of the other
machines restart theirs.

Why over 400 lines in one module: half of it is the arguments and the help texts users read in
``timely run --help``, kept next to the checks that give each option its meaning.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib
import os
import secrets
import socket
import stat
import sys
from collections.abc import Callable, Mapping, Sequence

from ._runtime.config import (
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_EVERY,
    ENV_CONSOLE,
    ENV_CONSOLE_LINGER,
    ENV_DEBUG,
    ENV_ENCRYPT,
    ENV_LAUNCHER,
    ENV_PEER_TIMEOUT,
    ENV_PICKLE,
    ENV_RESTART,
    ENV_SECRET,
    ENV_WORKERS,
    LAUNCHER_HOSTS,
    LAUNCHER_LOCAL,
    SECRET_BYTES,
    SECRET_HINT,
    ClusterConfig,
    ClusterConfigError,
    console_from,
    console_linger,
    format_address,
    parse_secret,
    read_hosts_file,
    read_secret_file,
)
from ._supervisor import DEFAULT_GRACE, DEFAULT_KILL_AFTER, Child, Supervisor
from .net.tcp import PEER_TIMEOUT

__all__ = ["main"]


DEFAULT_HASH_SEED = "0"


# ---------------------------------------------------------------------------------------------
# The command line


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        return value

    return parse


_positive_int = _int_at_least(1)
_index = _int_at_least(0)


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1..65535)")
    return value


def _seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds_arg(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


_RUN_DESCRIPTION = """\
Run a timely program: N processes on this machine (-n), or one process of a
multi-machine cluster (--hosts, --process). Every process runs the same program
with `python prog.py args...` (or `python -m module args...`), learning its place
from TIMELY_PROCESSES, TIMELY_PROCESS_INDEX, TIMELY_ADDRESSES, TIMELY_SECRET and,
with --workers, TIMELY_WORKERS; PYTHONHASHSEED is set to 0 (and PYTHONUNBUFFERED
to 1) unless already set. The workers per process are --workers W, or else the
program's execute(..., workers=W), or else 1; a program whose workers= differs
from --workers fails at once, saying so.

Each line a process prints is shown prefixed with [p<index>] (stderr on stderr).
The exit status is 0 only if every process exited 0. When one fails, the others
get --grace seconds to stop by themselves, then SIGTERM, then SIGKILL
--kill-after seconds later; the status is then the first failure's (128+signal
for a signal). Ctrl-C or SIGTERM is forwarded to every process. Process 0 (or
the one process with --hosts) reads the launcher's stdin unless it is a terminal;
the others read an empty stdin.

With --restarts R, a failure instead stops the others at once (SIGTERM, then
SIGKILL after --kill-after) and starts every process again, up to R times, with
fresh ports and TIMELY_RESTART=k for the k-th restart (0 at first); a restarted
process reads an empty stdin. With --hosts only this machine's process restarts,
at the same address: run every machine's launcher with the same --restarts.
A program that checkpoints (--checkpoint-dir, which sets TIMELY_CHECKPOINT_DIR,
and --checkpoint-every, TIMELY_CHECKPOINT_EVERY) resumes from its last complete
checkpoint; one that does not starts over. Ctrl-C never restarts.
"""

_RUN_EPILOG = """\
examples:
  timely run -n 4 prog.py --input data.csv
  timely run -n 2 --workers 3 -m timely_examples.connected_components --nodes 20000 --edges 30000
  # on machine k of a cluster (hosts.txt: one host:port per line, the same file everywhere);
  # off loopback every connection is encrypted and tamper-proof, keyed from the secret
  TIMELY_SECRET=$(cat secret.hex) timely run --hosts hosts.txt --process k prog.py
  # survive up to 3 failures, resuming from a checkpoint taken every 10 epochs
  timely run -n 4 --restarts 3 --checkpoint-dir ckpt --checkpoint-every 10 prog.py

Everything after the program (or -m module) is passed to it unchanged.
"""


def _build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="timely",
        description="Naiad's timely dataflow for Python: run timely programs on one or many processes.",
        epilog="Run `timely run --help` for the options of a run.",
        allow_abbrev=False,
    )
    try:
        from importlib.metadata import version

        parser.add_argument("--version", action="version", version=f"timely {version('timely-dataflow')}")
    except Exception:  # pragma: no cover - not installed
        pass
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a timely program on N local processes, or as one process of a cluster",
        description=_RUN_DESCRIPTION,
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    run.prog = "timely run"
    run.usage = (
        "timely run [-n N] [--base-port P] [--hosts FILE --process I] [--workers W] [--secret-file F]\n"
        "                  [--grace S] [--kill-after S] [--restarts R] [--checkpoint-dir DIR]\n"
        "                  [--checkpoint-every K] [--peer-timeout S] [--encrypt | --no-encrypt] [--pickle] [--debug]\n"
        "                  (prog.py | -m module) [args...]"
    )
    local = run.add_argument_group("on this machine")
    local.add_argument(
        "-n", "--processes", type=_positive_int, metavar="N", help="number of processes to start (default 1)"
    )
    local.add_argument(
        "--base-port",
        type=_port,
        metavar="P",
        help="give process i the port P+i on 127.0.0.1 (default: free ports chosen by the system)",
    )
    cluster = run.add_argument_group("one process of a multi-machine cluster")
    cluster.add_argument(
        "--hosts",
        metavar="FILE",
        help="the cluster: one host:port per line, process 0 first (blank lines and # comments ignored)",
    )
    cluster.add_argument("--process", type=_index, metavar="I", help="the index of the process to run here")
    both = run.add_argument_group("either way")
    both.add_argument(
        "--workers",
        type=_positive_int,
        metavar="W",
        help="workers per process (default: the program's execute(workers=), else 1; both given must agree)",
    )
    both.add_argument(
        "--secret-file",
        metavar="F",
        help="file holding the shared secret in hex (default: $TIMELY_SECRET; on one machine, a fresh random one)",
    )
    both.add_argument(
        "--grace",
        type=_seconds_arg,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"after a process fails, seconds the others get to exit by themselves (default {DEFAULT_GRACE:g})",
    )
    both.add_argument(
        "--kill-after",
        type=_seconds_arg,
        default=DEFAULT_KILL_AFTER,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_KILL_AFTER:g})",
    )
    both.add_argument(
        "--peer-timeout",
        type=_positive_seconds,
        metavar="S",
        help="seconds without a heartbeat after which a process counts as hung, stopped or cut off, and every "
        f"process fails naming it (sets {ENV_PEER_TIMEOUT}; default {PEER_TIMEOUT:g}); make it longer than any "
        "call into C code that holds the GIL",
    )
    both.add_argument(
        "--encrypt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"seal every connection between processes: confidential, and a frame altered, replayed or injected "
        f"on the way fails the run (sets {ENV_ENCRYPT}=1; keys come from the secret); by default on when a "
        "process is off loopback, or with --pickle. --no-encrypt leaves the connections in clear",
    )
    both.add_argument(
        "--pickle",
        action="store_true",
        help=f"let records that have no codec (timely.register_codec) cross processes pickled (sets {ENV_PICKLE}=1); "
        "unpickling runs code the sender chooses: only on a trusted cluster, and never in clear (turns "
        "--encrypt on; refused with --no-encrypt)",
    )
    both.add_argument(
        "--debug",
        action="store_true",
        help=f"print a failure with every frame, the runtime's too (sets {ENV_DEBUG}=1); by default a "
        "process shows only the program's own frames",
    )
    both.add_argument(
        "--console",
        metavar="[HOST:]PORT",
        help=f"serve a live page of the computation from process 0 (sets {ENV_CONSOLE}); on loopback unless "
        "HOST says otherwise, and then behind a token printed here (derived from the secret); see docs/console.md",
    )
    both.add_argument(
        "--console-linger",
        metavar="SECONDS",
        help=f"keep serving the console's final state this long once the computation completes (sets "
        f"{ENV_CONSOLE_LINGER}); by default the page goes with the computation",
    )
    recovery = run.add_argument_group("fault tolerance")
    recovery.add_argument(
        "--restarts",
        type=_index,
        default=0,
        metavar="R",
        help="when a process fails, restart all of them (with --hosts, this one), up to R times (default 0)",
    )
    recovery.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help=f"checkpoint to DIR and resume from it after a restart (sets {ENV_CHECKPOINT_DIR}, made absolute)",
    )
    recovery.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        metavar="K",
        help=f"checkpoint every K epochs (sets {ENV_CHECKPOINT_EVERY}; default: the runtime's)",
    )
    program = run.add_argument_group("the program")
    program.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    program.add_argument("prog", nargs="?", help="the program's script")
    program.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    return parser, run


def _split_run_args(argv: list[str], parser: argparse.ArgumentParser) -> tuple[list[str], str | None, list[str]]:
    """Split ``timely run`` arguments into the launcher's options, ``-m``'s module, and the
    program with its arguments (which may look like options: they are the program's)."""
    takes_value = {
        option
        for action in parser._actions
        if action.option_strings and action.nargs != 0 and action.dest != "module"
        for option in action.option_strings
    }
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], None, argv[i + 1 :]
        if token == "-m":
            if i + 1 == len(argv):
                parser.error("argument -m: expected a module name")
            return argv[:i], argv[i + 1], argv[i + 2 :]
        if token.startswith("-m") and not token.startswith("--"):
            return argv[:i], token[2:], argv[i + 1 :]
        if token.startswith("-") and token != "-":
            i += 2 if token in takes_value else 1
            continue
        return argv[:i], None, argv[i:]
    return argv, None, []


def _free_ports(host: str, count: int) -> list[int]:
    """`count` distinct ports that are free now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _check_listenable(addresses: list[tuple[str, int]], indices: list[int], advice: str) -> None:
    """Fail now, naming the port, if a process started here could not listen on its address
    because another program holds the port: better than one process failing to start while the
    others wait for it. Binds as the runtime does (address reuse on: ports in TIME_WAIT pass)."""
    if len(addresses) < 2:
        return  # a single process listens on nothing
    for i in indices:
        host, port = addresses[i]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in infos:
                with socket.socket(family, kind, proto) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ClusterConfigError(
                    f"p{i} cannot listen on {format_address(host, port)}: it is in use by another program; {advice}"
                ) from None
            # Anything else (a host name this machine cannot resolve or bind): the process itself
            # reports it, if it runs a computation at all.


def _resolve_secret(args: argparse.Namespace, env: Mapping[str, str], required: bool) -> bytes:
    if args.secret_file is not None:
        secret = read_secret_file(args.secret_file)
        with contextlib.suppress(OSError):
            if os.stat(args.secret_file).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                print(
                    f"timely: warning: the secret file {args.secret_file} is readable by others (chmod 600 it)",
                    file=sys.stderr,
                )
        return secret
    if ENV_SECRET in env:
        return parse_secret(env[ENV_SECRET], ENV_SECRET)
    if required:
        raise ClusterConfigError(
            "a multi-machine cluster needs a shared secret, the same on every machine: "
            f"set {ENV_SECRET} (hex) or pass --secret-file FILE ({SECRET_HINT})"
        )
    return secrets.token_bytes(SECRET_BYTES)


def _settings_env(args: argparse.Namespace, env: Mapping[str, str], parser: argparse.ArgumentParser) -> dict[str, str]:
    """The run's settings for the children: what --checkpoint-dir and --checkpoint-every say
    (the directory made absolute, since a child may change directory), --pickle, --debug, and
    whether this launcher runs every process (and so reports each one's exit) or one."""
    extra = {ENV_LAUNCHER: LAUNCHER_HOSTS if args.hosts is not None else LAUNCHER_LOCAL}
    if args.pickle:
        if args.encrypt is False:
            parser.error("--pickle refuses to run over connections in clear: drop --no-encrypt (or --pickle)")
        extra[ENV_PICKLE] = "1"
    if args.encrypt is not None:
        extra[ENV_ENCRYPT] = "1" if args.encrypt else "0"
    if args.peer_timeout is not None:
        extra[ENV_PEER_TIMEOUT] = repr(args.peer_timeout)
    if args.debug:
        extra[ENV_DEBUG] = "1"
    if args.checkpoint_dir is not None:
        if not args.checkpoint_dir:
            parser.error("argument --checkpoint-dir: expected a directory")
        directory = os.path.abspath(args.checkpoint_dir)
        if os.path.exists(directory) and not os.path.isdir(directory):
            parser.error(f"--checkpoint-dir {args.checkpoint_dir}: not a directory")
        extra[ENV_CHECKPOINT_DIR] = directory
    elif args.checkpoint_every is not None and not env.get(ENV_CHECKPOINT_DIR):
        parser.error("--checkpoint-every needs --checkpoint-dir (where to checkpoint)")
    if args.checkpoint_every is not None:
        extra[ENV_CHECKPOINT_EVERY] = str(args.checkpoint_every)
    if args.console is not None:
        try:
            console_from(args.console, None)
        except ClusterConfigError as e:
            parser.error(f"argument --console: {e}")
        try:  # before the console's address is announced, not in process 0 after it
            importlib.import_module("timely._console")
        except ImportError as e:
            parser.error(f"argument --console needs the console extra ({e}): pip install 'timely-dataflow[console]'")
        extra[ENV_CONSOLE] = args.console
    if args.console_linger is not None:
        if args.console is None:
            parser.error("--console-linger needs --console")
        try:
            console_linger(args.console_linger)
        except ClusterConfigError as e:
            parser.error(f"argument --console-linger: {e}")
        extra[ENV_CONSOLE_LINGER] = args.console_linger
    return extra


def _print_console(console: str | None, indices: list[int], secret: bytes) -> None:
    """Say where the console is, when process 0 runs here and its port is known."""
    if console is None or 0 not in indices:
        return
    settings = console_from(console, secret)
    if settings.port:
        print(f"timely run: console at {settings.url()}", file=sys.stderr, flush=True)


def _child_env(
    base: Mapping[str, str], config: ClusterConfig, extra: Mapping[str, str] | None = None, workers_given: bool = True
) -> dict[str, str]:
    env = dict(base)
    env.update(config.to_env())
    if not workers_given:  # the program's execute(workers=) decides, else one (see _check_workers_agree)
        del env[ENV_WORKERS]
    if extra:
        env.update(extra)
    env.setdefault("PYTHONHASHSEED", DEFAULT_HASH_SEED)
    env.setdefault("PYTHONUNBUFFERED", "1")  # so that output streams live
    return env


def _run(argv: list[str], parser: argparse.ArgumentParser) -> int:
    options, module, rest = _split_run_args(argv, parser)
    args = parser.parse_args(options)
    if module is None and not rest:
        parser.error("give the program to run: prog.py [args...] or -m module [args...]")
    if module is not None:
        if not module:
            parser.error("argument -m: expected a module name")
        command = [sys.executable, "-m", module, *rest]
    else:
        prog = rest[0]
        if not os.path.exists(prog):
            parser.error(f"cannot find the program {prog!r}")
        command = [sys.executable, *rest]

    env = os.environ
    workers = args.workers if args.workers is not None else 1
    try:
        if args.hosts is not None:
            if args.base_port is not None:
                parser.error("--base-port is for processes on this machine; the hosts file gives the ports")
            if args.process is None:
                parser.error("--hosts needs --process I: the index of the process to run on this machine")
            addresses = read_hosts_file(args.hosts)
            if args.processes is not None and args.processes != len(addresses):
                parser.error(f"-n {args.processes} but {args.hosts} lists {len(addresses)} processes")
            if args.process >= len(addresses):
                parser.error(
                    f"--process {args.process}, but {args.hosts} lists {len(addresses)} processes "
                    f"(valid: 0..{len(addresses) - 1})"
                )
            secret = _resolve_secret(args, env, required=True)
            indices = [args.process]
            _check_listenable(
                addresses,
                indices,
                f"free the port, or give process {args.process} another in {args.hosts} (everywhere)",
            )
        else:
            if args.process is not None:
                parser.error("--process is for a multi-machine cluster; give --hosts too")
            processes = args.processes if args.processes is not None else 1
            if args.base_port is not None:
                if args.base_port + processes - 1 > 65535:
                    parser.error(f"--base-port {args.base_port} leaves no room for {processes} ports")
                ports = list(range(args.base_port, args.base_port + processes))
            else:
                ports = _free_ports("127.0.0.1", processes)
            addresses = [("127.0.0.1", port) for port in ports]
            secret = _resolve_secret(args, env, required=False)
            indices = list(range(processes))
            _check_listenable(addresses, indices, "choose other ports with --base-port, or leave it out for free ones")
        settings_env = _settings_env(args, env, parser)

        def children_of(attempt: int, addresses: list[tuple[str, int]], secret: bytes) -> list[Child]:
            extra = {ENV_RESTART: str(attempt), **settings_env}
            config = [ClusterConfig(len(addresses), i, addresses, workers, secret) for i in indices]
            given = args.workers is not None
            return [Child(i, _child_env(env, c, extra, given)) for i, c in zip(indices, config, strict=True)]

        children = children_of(0, addresses, secret)
        _print_console(args.console, indices, secret)
    except ClusterConfigError as e:
        print(f"timely run: error: {e}", file=sys.stderr)
        return 2
    # A restart on this machine gets fresh ports (the old ones may linger in TIME_WAIT) unless
    # they were given, and a fresh secret unless one was given; a cluster keeps both.
    fresh_ports = args.hosts is None and args.base_port is None
    fresh_secret = args.hosts is None and args.secret_file is None and ENV_SECRET not in env

    def renew(attempt: int) -> list[Child]:
        again = [("127.0.0.1", port) for port in _free_ports("127.0.0.1", len(addresses))] if fresh_ports else addresses
        renewed = secrets.token_bytes(SECRET_BYTES) if fresh_secret else secret
        if fresh_secret:  # a token derived from the old secret no longer opens the console
            _print_console(args.console, indices, renewed)
        return children_of(attempt, again, renewed)

    if env.get("PYTHONHASHSEED") == "random":
        print(
            "timely: warning: PYTHONHASHSEED=random makes hash(str) differ between processes; "
            "exchange functions that use hash() will send records to the wrong workers",
            file=sys.stderr,
        )
    stdin_index = None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if not os.isatty(sys.stdin.fileno()):
            stdin_index = indices[0]
    supervisor = Supervisor(
        command,
        children,
        grace=args.grace,
        kill_after=args.kill_after,
        stdin_index=stdin_index,
        restarts=args.restarts,
        renew=renew,
    )
    try:
        return asyncio.run(supervisor.run())
    except BaseException:
        supervisor.kill_all_now()  # whatever went wrong, no process is left behind
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """The ``timely`` command; returns the exit status."""
    parser, run = _build_parsers()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] == "run":
        return _run(arguments[1:], run)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return 0  # pragma: no cover - every command is handled above


if __name__ == "__main__":
    sys.exit(main())
