"""Length-prefixed frames: a 4-byte big-endian unsigned length, then that many bytes.

`frame` (or `frame_header` + the payload, for ``writelines`` without a copy) makes a frame;
a `FrameReader` cuts an incoming byte stream, delivered in chunks of any size, back into
frames. A declared length above the reader's limit is refused with a `FrameError` as soon
as its 4-byte header has arrived, before any of the body is buffered beyond the chunk that
carried the header, so a peer cannot make us allocate a huge buffer. Pure: no I/O.
"""

from __future__ import annotations

import struct

from timely.errors import FrameError

__all__ = ["HEADER_SIZE", "MAX_FRAME", "FrameReader", "frame", "frame_header"]

HEADER_SIZE = 4
"""Bytes in a frame header."""
MAX_FRAME = 64 * 1024 * 1024
"""Default limit on a frame's payload: 64 MiB."""
_LENGTH_LIMIT = 0xFFFF_FFFF  # what 4 bytes can say

_header = struct.Struct(">I")
_pack_header = _header.pack
_unpack_header = _header.unpack_from


def frame_header(length: int, max_frame: int | None = None) -> bytes:
    """The 4-byte header of a frame whose payload has ``length`` bytes."""
    limit = _LENGTH_LIMIT if max_frame is None else max_frame
    if not 0 <= length <= limit:
        raise FrameError(f"cannot send a frame of {length} bytes: the limit is {limit} bytes")
    return _pack_header(length)


def frame(payload: bytes, max_frame: int | None = None) -> bytes:
    """``payload`` with its length header. ``max_frame`` (if given) is checked here too, so a
    sender learns of an oversized frame before its peer refuses it."""
    return frame_header(len(payload), max_frame) + payload


class FrameReader:
    """Cuts a byte stream into frames.

    >>> r = FrameReader()
    >>> data = frame(b"hello") + frame(b"") + frame(b"world")
    >>> r.feed(data[:7]), r.feed(data[7:])
    ([], [b'hello', b'', b'world'])

    After a `FrameError` the stream is out of step for good: every later ``feed`` raises it
    again.
    """

    __slots__ = ("_buf", "_error", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        if type(max_frame) is not int or not 0 <= max_frame <= _LENGTH_LIMIT:
            raise ValueError(f"max_frame must be an int in 0..{_LENGTH_LIMIT}, got {max_frame!r}")
        self.max_frame = max_frame
        self._buf = bytearray()  # the bytes of an incomplete frame (header included)
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take the next chunk of the stream; return the frames it completes, in order."""
        if self._error is not None:
            raise FrameError(str(self._error))
        buf = self._buf
        if buf:
            if len(buf) < HEADER_SIZE:
                # Complete the header first, so an oversized length is refused without
                # buffering any of this chunk's body.
                take = HEADER_SIZE - len(buf)
                buf += data[:take]
                if len(buf) < HEADER_SIZE:
                    return []
                self._check(_unpack_header(buf)[0])
                data = memoryview(data)[take:]
            buf += data
            with memoryview(buf) as pending:
                frames, pos = self._scan(pending)
            if pos:
                del buf[:pos]
            return frames
        # Nothing pending: cut frames straight out of the chunk; buffer only its tail.
        chunk = data if type(data) is bytes else memoryview(data)
        frames, pos = self._scan(chunk)
        if pos < len(chunk):
            buf += chunk[pos:] if pos else chunk
        return frames

    def _scan(self, view: bytes | memoryview) -> tuple[list[bytes], int]:
        """The whole frames at the start of ``view``, and where the first incomplete one begins."""
        frames = []
        n = len(view)
        pos = 0
        max_frame = self.max_frame
        while n - pos >= HEADER_SIZE:
            length = _unpack_header(view, pos)[0]
            if length > max_frame:
                self._fail(length)
            start = pos + HEADER_SIZE
            end = start + length
            if end > n:
                break
            frames.append(bytes(view[start:end]))
            pos = end
        return frames, pos

    def _check(self, length: int) -> None:
        if length > self.max_frame:
            self._fail(length)

    def _fail(self, length: int) -> None:
        self._buf = bytearray()
        self._error = FrameError(
            f"refusing a frame of {length} bytes: the limit is {self.max_frame} bytes "
            f"(a peer running a different protocol, or a corrupted stream?)"
        )
        raise self._error

    def eof(self) -> None:
        """The stream has ended: raise `FrameError` if it ended in the middle of a frame."""
        if self._error is not None:
            raise FrameError(str(self._error))
        n = len(self._buf)
        if n == 0:
            return
        if n < HEADER_SIZE:
            raise FrameError(f"the stream ended in the middle of a frame header ({n} of {HEADER_SIZE} bytes)")
        length = _unpack_header(self._buf)[0]
        raise FrameError(f"the stream ended in the middle of a frame: {n - HEADER_SIZE} of {length} bytes arrived")
