"""Server IDs: z-base-32 of the Ed25519 public key, hex accepted, anything else refused early."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.transport.p2p import ids


@given(st.binary(min_size=32, max_size=32))
def test_z32_round_trips_any_key(key: bytes) -> None:
    text = ids.z32_encode(key)
    assert len(text) == 52
    assert set(text) <= set(ids.Z32)
    assert ids.z32_decode(text) == key
    assert ids.parse_server_id(text) == key
    assert ids.parse_server_id(key.hex()) == key


def test_known_vector_matches_hyperdht() -> None:
    # DHT.keyPair(Buffer.alloc(32, 0x11)).publicKey, as the bridge reports it
    key = ids.public_key(bytes([0x11]) * 32)
    assert key.hex() == "d04ab232742bb4ab3a1368bd4615e4e6d0224ab71a016baf8520a332c9778737"


@pytest.mark.parametrize(
    "bad", ["", "abc", "x" * 52, "0" * 63, "zz" * 32, "1" * 53, "not a server id at all"]
)
def test_malformed_ids_are_invalid_server_id(bad: str) -> None:
    with pytest.raises(InferError) as caught:
        ids.parse_server_id(bad)
    assert caught.value.kind is ErrorKind.INVALID_SERVER_ID


def test_the_seed_is_created_once_with_0600_and_reset_on_request(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INFERTUI_DATA_DIR", str(tmp_path))
    first = ids.load_seed()
    assert ids.load_seed() == first
    mode = stat.S_IMODE(os.stat(ids.seed_file()).st_mode)
    assert mode == 0o600
    assert ids.load_seed(reset=True) != first


def test_an_allow_file_lists_ids_with_comments(tmp_path) -> None:
    a, b = ids.public_key(bytes(32)), ids.public_key(bytes([1]) * 32)
    path = tmp_path / "allow"
    path.write_text(f"# teammates\nalice={ids.z32_encode(a)}  # named\n\n{b.hex()}\n")
    entries = ids.read_allow_file(path)
    assert [ids.parse_peer(entry) for entry in entries] == [(a, "alice"), (b, None)]
    path.write_text(f"{ids.z32_encode(a)}\nnot-an-id\n")
    with pytest.raises(InferError) as caught:
        ids.read_allow_file(path)
    assert ":2:" in caught.value.message
    with pytest.raises(InferError) as missing:
        ids.read_allow_file(tmp_path / "nope")
    assert missing.value.kind is ErrorKind.INVALID_PARAMS
