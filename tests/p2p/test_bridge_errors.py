"""Hyperswarm's failures, said once and plainly (the code at the end, not three times)."""

from __future__ import annotations

from infertui.core.client import explain
from infertui.core.protocol import ErrorKind
from infertui.core.transport.p2p.bridge import _bridge_error


def test_a_host_announced_but_silent_is_said_plainly() -> None:
    err = _bridge_error(
        {"code": "PEER_CONNECTION_FAILED",
         "message": "PEER_CONNECTION_FAILED: Could not connect to peer"}
    )  # fmt: skip
    assert err.kind is ErrorKind.CONNECT_FAILED
    said = explain(err)
    assert said.count("PEER_CONNECTION_FAILED") == 1 and "may have just stopped" in said


def test_other_codes_lose_their_prefix_and_keep_the_code_once() -> None:
    err = _bridge_error({"code": "HOLEPUNCH_ABORTED", "message": "HOLEPUNCH_ABORTED: Aborted"})
    assert err.message == "Aborted (HOLEPUNCH_ABORTED)"
    assert _bridge_error({"code": "PEER_NOT_FOUND"}).kind is ErrorKind.HOST_OFFLINE
