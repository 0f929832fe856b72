"""Sealed frames: every frame after the handshake confidential, authentic and in order.

The handshake (`tcp`) proves that both ends hold the cluster secret and agrees on fresh
nonces and ephemeral X25519 public keys, all bound by its MACs. From them each connection
derives two keys with HKDF-SHA256, one per direction:

    ikm  = secret | X25519(own private, peer public)
    salt = listener nonce | joiner nonce
    info = "timely/1 frames" | channel | fingerprint | listener index | joiner index

and seals every frame's payload with AES-256-GCM under the direction's key, the nonce being
the frame's number on that connection (0, 1, 2, ...; never sent, each side counts: the
deterministic construction of NIST SP 800-38D, 8.2.1, so no nonce repeats under a key).
So a frame that was altered, cut short, injected, replayed, reordered or dropped fails to
open at the receiver (`IntegrityError`), and nothing of it is handed on. One seal and one open
per frame: a frame holds a batch (up to 1 MiB of records), never a single record.

Why the Diffie-Hellman term: the secret alone would let anyone who later learns it read
recorded traffic (the nonces travel in clear); with it, a past connection's keys die with the
connection (forward secrecy). Pure: no I/O.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from timely.errors import FrameError

__all__ = ["KEY_SHARE_BYTES", "TAG_BYTES", "IntegrityError", "KeyShare", "Opener", "Sealer", "session"]

TAG_BYTES = 16
"""What sealing adds to a frame: the GCM tag."""
KEY_SHARE_BYTES = 32
"""An X25519 public key."""
_INFO = b"timely/1 frames"
_nonce = struct.Struct("<Q4x").pack
"""A frame's number as a 96-bit nonce."""


class IntegrityError(FrameError):
    """A sealed frame did not open: it was altered, cut short, injected, replayed, reordered or
    dropped on the way, or sent by someone without the keys. The connection is done for."""


class KeyShare:
    """This side's ephemeral X25519 key for one connection's handshake."""

    __slots__ = ("_private", "public")

    def __init__(self) -> None:
        self._private = X25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes_raw()

    def shared(self, theirs: bytes) -> bytes:
        """The Diffie-Hellman secret with the peer's public key (refused if malformed or weak)."""
        if not isinstance(theirs, bytes) or len(theirs) != KEY_SHARE_BYTES:
            raise ValueError(f"a key share must be {KEY_SHARE_BYTES} bytes")
        return self._private.exchange(X25519PublicKey.from_public_bytes(theirs))


class Sealer:
    """Seals the frames of one direction of one connection, numbering them."""

    __slots__ = ("_encrypt", "sent")

    def __init__(self, key: bytes) -> None:
        self._encrypt = AESGCM(key).encrypt
        self.sent = 0

    def seal(self, payload: bytes) -> bytes:
        """The sealed frame body (payload length + `TAG_BYTES`)."""
        n = self.sent
        self.sent = n + 1
        return self._encrypt(_nonce(n), payload, None)


class Opener:
    """Opens the frames of one direction of one connection, in the order they were sealed.

    ``where`` names the connection in errors ("the data connection from process 2")."""

    __slots__ = ("_decrypt", "opened", "where")

    def __init__(self, key: bytes, where: str) -> None:
        self._decrypt = AESGCM(key).decrypt
        self.opened = 0
        self.where = where

    def open(self, sealed: bytes) -> bytes:
        """The payload of the next frame, or `IntegrityError` if it is not that frame intact."""
        n = self.opened
        try:
            payload = self._decrypt(_nonce(n), sealed, None)
        except InvalidTag:
            raise IntegrityError(
                f"frame {n} on {self.where} failed its integrity check ({len(sealed)} bytes): it was altered, "
                "cut short, injected, replayed or dropped on the way, or sent by someone without the cluster "
                "secret; nothing of it was used"
            ) from None
        self.opened = n + 1
        return payload


def session(
    secret: bytes,
    shared: bytes,
    listener_nonce: bytes,
    joiner_nonce: bytes,
    fingerprint: str,
    listener: int,
    joiner: int,
    channel: str,
) -> tuple[bytes, bytes]:
    """The keys of one connection: (listener -> joiner, joiner -> listener)."""
    info = b"|".join((_INFO, channel.encode(), fingerprint.encode(), struct.pack(">II", listener, joiner)))
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=listener_nonce + joiner_nonce, info=info).derive(
        secret + shared
    )
    return okm[:32], okm[32:]
