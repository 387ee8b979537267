"""Issue 37 over Hyperswarm: a peer named in the allow list (`NAME=SERVER_ID`) is who asks, in
fair shares, limits and the ledger; its limits refuse with spec 000's MODEL_BUSY; the `usage`
message gives a peer its own rows."""

from __future__ import annotations

import secrets

import pytest

from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.transport.p2p.ids import public_key, z32_encode

pytestmark = pytest.mark.model


async def test_a_named_peer_is_who_asks_and_reads_its_own_usage(start_p2p_host, connect) -> None:
    carol, dave = secrets.token_bytes(32), secrets.token_bytes(32)
    named = [f"carol={z32_encode(public_key(carol))}", z32_encode(public_key(dave))]
    host = await start_p2p_host(
        more={
            "p2p": {"enabled": True, "allow": named},
            "shares": {"users": {"carol": {"requests_per_minute": 1}}},
        }
    )
    client = await connect(host.server_id, seed=carol)
    stream = client.chat(prompt="Hello", max_tokens=6, priority="batch")
    await stream.text()
    assert stream.end is not None and stream.end.tokens_out > 0
    with pytest.raises(InferError) as refused:  # her one request a minute is spent
        await client.chat(prompt="Again", max_tokens=6).text()
    assert refused.value.kind is ErrorKind.RATE_LIMITED
    assert refused.value.mapping.p2p_code == "MODEL_BUSY" and refused.value.retry_after_ms
    other = await connect(host.server_id, seed=dave)  # an unnamed peer: its id, unlimited
    await other.chat(prompt="Hi", max_tokens=4).text()
    usage = await client.request("usage")
    assert [u["identity"] for u in usage["users"]] == ["carol"]
    assert [(d["identity"], d["jobs"]) for d in usage["days"]] == [("carol", 1)]
    users = {u.identity: u for u in host.service.shares.users()}
    assert users["carol"].jobs_total == 1
    assert users[f"p2p:{z32_encode(public_key(dave))[:12]}"].jobs_total == 1
