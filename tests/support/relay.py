"""A man in the middle for tests/net/test_encryption.py: a real process that sits between two
timely processes, relays every byte, writes the wire to a file, and tampers once on request.

    python relay.py LISTEN_PORT TARGET_PORT WIRE_FILE ACTION CHANNEL DIRECTION INDEX [INJECT_FILE]

It listens on 127.0.0.1:LISTEN_PORT and relays each connection to 127.0.0.1:TARGET_PORT (the
real process 0; process 1's hosts file names the relay as process 0). It follows the frames
(4-byte length, then the body) both ways, tells the data connection from the heartbeat one by
the joiner's hello (which names the channel), and, on connection CHANNEL (``data`` or ``beat``)
in DIRECTION (``to-joiner``: from process 0 to process 1; ``to-listener``: the other way), on the
INDEX-th frame after the handshake (0-based), does ACTION once:

    none      relay it
    flip      flip one bit in the middle of its body
    replay    relay it, then send it again
    inject    send a frame of its own first (body: INJECT_FILE's bytes), then relay it
    truncate  relay it without its last 8 bytes, its length header fixed to match
    cut       relay its header and half of its body, then close both ends

It prints ``READY`` once listening and ``ACTED <action> <channel> <direction> <index>`` once it has
tampered, so a test can tell that the attack happened. A heartbeat connection in clear carries
single bytes, not frames, after the handshake: the relay passes those along untouched.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path

import msgpack

HANDSHAKE_FRAMES = {"to-joiner": 2, "to-listener": 1}
"""Frames of the handshake in each direction: the greeting and the answer; the hello."""


class Connection:
    def __init__(self) -> None:
        self.channel: str | None = None
        self.sealed: bool | None = None
        self.known = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []


class Relay:
    def __init__(self, argv: list[str]) -> None:
        self.listen_port = int(argv[0])
        self.target_port = int(argv[1])
        self.wire = open(argv[2], "ab")  # noqa: SIM115 - open for the relay's whole life
        self.action, self.channel, self.direction, self.index = argv[3], argv[4], argv[5], int(argv[6])
        self.inject = Path(argv[7]).read_bytes() if len(argv) > 7 else b""
        self.acted = False

    def log(self, data: bytes) -> None:
        self.wire.write(data)
        self.wire.flush()

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        for _ in range(300):  # process 0 may not listen yet: wait for it, as a joiner would
            try:
                up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            client_w.close()
            return
        conn = Connection()
        conn.writers = [client_w, up_w]
        await asyncio.gather(
            self.pump(up_r, client_w, "to-joiner", conn),
            self.pump(client_r, up_w, "to-listener", conn),
            return_exceptions=True,
        )
        for w in conn.writers:
            w.close()

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str, conn: Connection
    ) -> None:
        handshake = HANDSHAKE_FRAMES[direction]
        number = 0
        try:
            while True:
                if number >= handshake:
                    await conn.known.wait()
                    if conn.channel == "beat" and not conn.sealed:
                        data = await reader.read(4096)  # single bytes in clear
                        if not data:
                            break
                        self.log(data)
                        writer.write(data)
                        await writer.drain()
                        continue
                header = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack(">I", header)[0])
                if number == 0:
                    message = msgpack.unpackb(body, raw=False)
                    if direction == "to-joiner":
                        conn.sealed = "seal" in message
                    else:
                        conn.channel = message.get("channel", "data")
                        conn.known.set()
                after = number - handshake
                number += 1
                if (
                    not self.acted
                    and after == self.index
                    and direction == self.direction
                    and conn.channel == self.channel
                    and self.action != "none"
                ):
                    self.acted = True
                    print("ACTED", self.action, self.channel, self.direction, self.index, flush=True)
                    done = await self.tamper(header, body, writer, conn)
                    if done:
                        return
                    continue
                self.log(header + body)
                writer.write(header + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        if not writer.is_closing() and writer.can_write_eof():
            try:
                writer.write_eof()
            except OSError:
                pass

    async def tamper(self, header: bytes, body: bytes, writer: asyncio.StreamWriter, conn: Connection) -> bool:
        """Do the action on this frame; True if the connection is over."""
        frame = header + body
        if self.action == "flip":
            middle = len(body) // 2
            out = header + body[:middle] + bytes([body[middle] ^ 0x01]) + body[middle + 1 :]
        elif self.action == "replay":
            out = frame + frame
        elif self.action == "inject":
            out = struct.pack(">I", len(self.inject)) + self.inject + frame
        elif self.action == "truncate":
            kept = body[: max(1, len(body) - 8)]
            out = struct.pack(">I", len(kept)) + kept
        elif self.action == "cut":
            out = header + body[: len(body) // 2]
            self.log(out)
            writer.write(out)
            await writer.drain()
            for w in conn.writers:
                w.close()
            return True
        else:
            raise SystemExit(f"relay: unknown action {self.action!r}")
        self.log(out)
        writer.write(out)
        await writer.drain()
        return False

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", self.listen_port, reuse_address=True)
        print("READY", flush=True)
        async with server:
            await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(Relay(sys.argv[1:]).serve())
