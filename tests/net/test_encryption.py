"""Sealed connections between real processes, attacked by a real relay (tests/support/relay.py).

Two processes of ``timely run --hosts`` (one launcher each, as on two machines) run
tests/support/relay_program.py; process 1's hosts file gives the relay's port as process 0's
address, so every byte between them, on the data connection and on the heartbeat connection,
passes through the relay, which writes the wire to a file and tampers once on request. The
oracles: the wire file (no record text in it when sealed, and, as the control, the text is
there in clear), the run without the relay (same output), and for each attack the relay's own
word that it tampered, the launchers' exit status, the receiving process's error naming the peer
and the connection, and no record that was not sent ever reaching the program (``BAD`` lines);
with pickle, a pickled payload that creates a file when it is unpickled is injected, and the
file must not exist afterwards.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest

from tests.support import clean_env, free_addresses, relay, relay_program
from timely._runtime.cluster import DATA
from timely.net.codec import Codec

pytestmark = pytest.mark.skipif(os.name != "posix", reason="real processes are tested on POSIX")

LAUNCHER = [sys.executable, "-c", "import sys; from timely.cli import main; sys.exit(main())"]
RUN_TIMEOUT = 60.0
PEER_TIMEOUT = "2"
"""Heartbeats every 0.2 s, so that several cross the relay while the program runs (about 2 s)."""


@dataclass
class Run:
    codes: list[int]
    outs: list[str]
    errs: list[str]
    relay_out: str
    wire: bytes

    def got(self, process: int) -> list[str]:
        """The program's GOT and BAD lines (without the launcher's ``[pN]`` prefix)."""
        lines = (line.split("] ", 1)[-1] for line in self.outs[process].splitlines())
        return [line for line in lines if line.startswith(("GOT", "BAD"))]

    def describe(self) -> str:
        parts = [f"exit statuses {self.codes}; relay: {self.relay_out!r}"]
        for i, (out, err) in enumerate(zip(self.outs, self.errs, strict=True)):
            parts.append(f"--- p{i} stdout\n{out}--- p{i} stderr\n{err[-3000:]}")
        return "\n".join(parts)


class Cluster:
    """Runs relay_program.py on two processes, with or without the relay between them."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, argv: list[str], name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.dir / f"{name}.out", "wb") as out, open(self.dir / f"{name}.err", "wb") as err:
            proc = subprocess.Popen(
                argv, env=env, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        self.procs.append(proc)
        return proc

    def read(self, name: str, stream: str = "out") -> str:
        return (self.dir / f"{name}.{stream}").read_text(errors="replace")

    def run(
        self,
        *options: str,
        through_relay: bool = True,
        action: str = "none",
        channel: str = "data",
        direction: str = "to-joiner",
        index: int = 3,
        inject: bytes = b"",
    ) -> Run:
        p0, p1, listen = (port for _, port in free_addresses(3))
        tag = f"{action}-{channel}-{direction}-{len(self.procs)}"
        wire = self.dir / f"wire-{tag}"
        wire.write_bytes(b"")
        relay_proc = None
        if through_relay:
            inject_file = self.dir / f"inject-{tag}"
            inject_file.write_bytes(inject)
            argv = [sys.executable, relay.__file__, str(listen), str(p0), str(wire), action, channel, direction]
            relay_proc = self.spawn([*argv, str(index), str(inject_file)], f"relay-{tag}", clean_env())
            self._wait_ready(relay_proc, f"relay-{tag}")
        hosts = [self.dir / f"hosts0-{tag}", self.dir / f"hosts1-{tag}"]
        hosts[0].write_text(f"127.0.0.1:{p0}\n127.0.0.1:{p1}\n")
        hosts[1].write_text(f"127.0.0.1:{listen if through_relay else p0}\n127.0.0.1:{p1}\n")
        env = clean_env(TIMELY_SECRET=secrets.token_hex(32))
        launchers = [
            self.spawn(
                [
                    *LAUNCHER,
                    "run",
                    "--hosts",
                    str(hosts[i]),
                    "--process",
                    str(i),
                    "--peer-timeout",
                    PEER_TIMEOUT,
                    "--grace",
                    "3",
                    *options,
                    relay_program.__file__,
                ],
                f"p{i}-{tag}",
                env,
            )
            for i in range(2)
        ]
        codes = []
        for proc in launchers:
            try:
                codes.append(proc.wait(timeout=RUN_TIMEOUT))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"a launcher did not end within {RUN_TIMEOUT} s (a hang)\n" + self.read(f"p0-{tag}", "err"))
        if relay_proc is not None:
            relay_proc.kill()
            relay_proc.wait()
        return Run(
            codes,
            [self.read(f"p{i}-{tag}") for i in range(2)],
            [self.read(f"p{i}-{tag}", "err") for i in range(2)],
            self.read(f"relay-{tag}") if through_relay else "",
            wire.read_bytes(),
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], name: str) -> None:
        for _ in range(1000):
            if "READY" in self.read(name):
                return
            if proc.poll() is not None:
                pytest.fail(f"the relay ended at start: {self.read(name, 'err')}")
            subprocess.run(["sleep", "0.01"], check=False)
        pytest.fail("the relay did not start")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.kill()


class Plant:
    """Unpickling it creates the file it names: what an injected pickle frame could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (Path.write_text, (Path(self.path), "planted"))  # type: ignore[return-value]


def pickle_bomb(path: Path) -> bytes:
    """A DATA frame whose one record, once decoded with pickle allowed, creates ``path``."""
    blob = Codec(allow_pickle=True).encode_records([Plant(str(path))])
    return msgpack.packb([DATA, [(0, 0, (0,), blob)]])


def forged_data() -> bytes:
    """A DATA frame in clear holding one record the program never sent."""
    blob = Codec().encode_records([f"record-0-0-0-forged-{relay_program.MARKER}"])
    return msgpack.packb([DATA, [(0, 0, (0,), blob)]])


# A clean run -----------------------------------------------------------------------------------


def test_a_sealed_run_through_the_relay_matches_a_run_without_it_and_shows_no_record(cluster: Cluster) -> None:
    direct = cluster.run("--encrypt", through_relay=False)
    relayed = cluster.run("--encrypt")
    assert direct.codes == [0, 0], direct.describe()
    assert relayed.codes == [0, 0], relayed.describe()
    for p in range(2):
        assert direct.got(p) and direct.got(p)[0].startswith("GOT"), direct.describe()
        assert relayed.got(p) == direct.got(p), relayed.describe()
    # both processes received records, so records crossed the relay: sealed, none readable
    total = relay_program.EPOCHS * relay_program.WORDS * 2
    assert sum(int(relayed.got(p)[0].split()[1]) for p in range(2)) == total
    assert len(relayed.wire) > total * 4  # the wire was written
    assert relay_program.MARKER.encode() not in relayed.wire
    assert b"record-" not in relayed.wire


def test_in_clear_the_records_are_on_the_wire(cluster: Cluster) -> None:
    # The control of the test above: the same run without encryption shows its records.
    relayed = cluster.run("--no-encrypt")
    assert relayed.codes == [0, 0], relayed.describe()
    assert relay_program.MARKER.encode() in relayed.wire


# Attacks ---------------------------------------------------------------------------------------

ACTIONS = ["flip", "replay", "inject", "truncate", "cut"]


def check_refused(run: Run, action: str, channel: str, receiver: int, sender: int) -> None:
    assert "ACTED" in run.relay_out, f"the relay never tampered\n{run.describe()}"
    assert run.codes[receiver] != 0 and run.codes[sender] != 0, run.describe()
    assert not any(line.startswith("BAD") for p in range(2) for line in run.got(p)), run.describe()
    err = run.errs[receiver]
    connection = "data connection" if channel == "data" else "heartbeat connection"
    if action == "cut":  # the frame cut short, or the connection broken: either way, the peer is named
        assert f"lost the connection to process {sender}" in err, run.describe()
    else:  # a frame that does not open, or (a heartbeat) that is too long to be one
        assert f"{connection} from process {sender}" in err, run.describe()
        assert "failed its integrity check" in err or "refusing a frame" in err, run.describe()


@pytest.mark.parametrize("channel", ["data", "beat"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_tampered_sealed_connection_fails_the_run_naming_the_peer(
    cluster: Cluster, action: str, channel: str
) -> None:
    inject = os.urandom(40) if channel == "beat" else forged_data()
    run = cluster.run("--encrypt", action=action, channel=channel, index=3, inject=inject)
    check_refused(run, action, channel, receiver=1, sender=0)


def test_a_frame_flipped_towards_process_0_fails_it_naming_process_1(cluster: Cluster) -> None:
    run = cluster.run("--encrypt", action="flip", channel="data", direction="to-listener", index=2)
    check_refused(run, "flip", "data", receiver=0, sender=1)


@pytest.mark.parametrize(
    "channel",
    # the heartbeat connection carries nothing pickled, and is attacked without pickle above: slow
    ["data", pytest.param("beat", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize(
    "action",
    # the pickled payload matters when it is injected; the other attacks are those above, with
    # pickle on: in the slow run
    [pytest.param(a, marks=pytest.mark.slow) if a != "inject" else a for a in ACTIONS],
)
def test_with_pickle_a_tampered_connection_fails_and_nothing_is_unpickled(
    cluster: Cluster, tmp_path: Path, action: str, channel: str
) -> None:
    planted = tmp_path / f"planted-{action}-{channel}"
    run = cluster.run("--pickle", action=action, channel=channel, index=3, inject=pickle_bomb(planted))
    check_refused(run, action, channel, receiver=1, sender=0)
    assert not planted.exists()


def test_the_injected_pickle_would_run_if_it_were_decoded(tmp_path: Path) -> None:
    # The oracle of the test above: the frame the relay injects does plant its file when decoded.
    planted = tmp_path / "planted"
    kind, messages = msgpack.unpackb(pickle_bomb(planted), use_list=False)
    assert kind == DATA
    Codec(allow_pickle=True).decode_records(messages[0][3])
    assert planted.read_text() == "planted"


def test_pickle_refuses_connections_in_clear(cluster: Cluster) -> None:
    refused = subprocess.run(
        [*LAUNCHER, "run", "-n", "2", "--pickle", "--no-encrypt", relay_program.__file__],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=RUN_TIMEOUT,
    )
    assert refused.returncode != 0
    assert "--pickle refuses to run over connections in clear" in refused.stderr
    # the environment's way to ask for it is refused by every process too
    refused = subprocess.run(
        [*LAUNCHER, "run", "-n", "2", "--pickle", relay_program.__file__],
        capture_output=True,
        text=True,
        env=clean_env(TIMELY_ENCRYPT="0"),
        timeout=RUN_TIMEOUT,
    )
    assert refused.returncode != 0
    assert "pickle refuses to run over connections in clear" in refused.stderr
    assert "GOT" not in refused.stdout
