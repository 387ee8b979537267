"""Server IDs: a host's Ed25519 public key, written in z-base-32 (the holepunch convention).

The key pair comes from a 32-byte seed kept with 0600 permissions under the XDG data
directory, so the ID is stable across restarts; Python derives the same public key as
hyperdht's `DHT.keyPair(seed)`, so `infertui id` needs no Node.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ...paths import data_dir, list_entries
from ...protocol.errors import ErrorKind, InferError

Z32 = "ybndrfg8ejkmcpqxot1uwisza345h769"
_Z32_INDEX = {c: i for i, c in enumerate(Z32)}


def z32_encode(data: bytes) -> str:
    bits = int.from_bytes(data, "big")
    n = (len(data) * 8 + 4) // 5
    bits <<= n * 5 - len(data) * 8
    return "".join(Z32[(bits >> (5 * (n - 1 - i))) & 31] for i in range(n))


def z32_decode(text: str) -> bytes:
    n_bytes = len(text) * 5 // 8
    bits = 0
    for char in text:
        bits = (bits << 5) | _Z32_INDEX[char]
    bits >>= len(text) * 5 - n_bytes * 8
    return bits.to_bytes(n_bytes, "big")


def parse_server_id(text: str) -> bytes:
    """A 32-byte public key from a server ID in z32 (52 characters) or hex (64); anything
    else is INVALID_SERVER_ID, before any network."""
    value = text.strip()
    try:
        if len(value) == 64:
            return bytes.fromhex(value)
        if len(value) == 52 and set(value) <= set(Z32):
            key = z32_decode(value)
            if z32_encode(key) == value:
                return key
    except ValueError:
        pass
    raise InferError(
        ErrorKind.INVALID_SERVER_ID,
        f"'{value[:80]}' is not a server ID (52 z-base-32 characters, or 64 hex digits)",
    )


def parse_peer(value: str) -> tuple[bytes, str | None]:
    """A peer as the allow, admin and share lists name it: `SERVER_ID`, or `NAME=SERVER_ID`,
    whose name is who the peer is in fair shares, limits, logs and the ledger."""
    name, equals, key = value.rpartition("=")
    if equals and name.strip():
        return parse_server_id(key.strip()), name.strip()
    return parse_server_id(value.strip()), None


def read_allow_file(path: Path) -> list[str]:
    """Peers from a file, one `SERVER_ID` or `NAME=SERVER_ID` per line; `#` starts a comment.
    A bad line is an error that names it (a typo must not silently let nobody, or everybody,
    in)."""
    keys = []
    for number, entry in list_entries(path, "allow file"):
        try:
            parse_peer(entry)
            keys.append(entry)
        except InferError as err:
            raise InferError(
                ErrorKind.INVALID_SERVER_ID, f"{path}:{number}: {err.message}"
            ) from None
    return keys


def public_key(seed: bytes) -> bytes:
    private = Ed25519PrivateKey.from_private_bytes(seed)
    return private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def server_id(seed: bytes) -> str:
    return z32_encode(public_key(seed))


Role = Literal["host", "client"]


def seed_file(role: Role = "host") -> Path:
    return data_dir() / f"{role}-key.seed"


def load_seed(*, reset: bool = False, role: Role = "host") -> bytes:
    """This machine's seed for hosting (its server ID) or as a client (the key a host's
    --admin and --allow lists name), created (0600) on first use or when `reset` asks."""
    path = seed_file(role)
    if path.exists() and not reset:
        seed = bytes.fromhex(path.read_text().strip())
        if len(seed) == 32:
            return seed
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = secrets.token_bytes(32)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(seed.hex() + "\n")
    os.replace(tmp, path)
    return seed


def topic_key(name: str) -> bytes:
    """The 32-byte DHT topic for a human topic name."""
    return hashlib.sha256(f"infertui/topic/{name}".encode()).digest()
