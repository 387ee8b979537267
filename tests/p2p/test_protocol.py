"""Spec 000 over real Hyperswarm (loopback testnet): every scenario, plus the misbehaving peers,
allow list, two clients at once, a key nobody serves, and a host killed mid-stream."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import signal

import pytest

from infertui.core.config import Settings
from infertui.core.protocol import p2p
from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.transport.p2p.bridge import Bridge
from infertui.core.transport.p2p.client import P2PClient, error_from
from infertui.core.transport.p2p.ids import parse_server_id, public_key, z32_encode
from infertui.tui.app import HostApp
from infertui.tui.local import LocalClient
from infertui.tui.widgets.host_bar import HostBar

from ..conftest import wait_until
from .conftest import P2PHost

pytestmark = pytest.mark.model


class RawPeer:
    """A peer that writes raw bytes and reads the host's messages one by one."""

    def __init__(self, bridge: Bridge, conn) -> None:
        self.bridge, self.conn = bridge, conn

    @classmethod
    async def open(cls, testnet: list[str], host: P2PHost, seed: bytes | None = None) -> RawPeer:
        bridge = await Bridge.start(bootstrap=testnet, seed=seed)
        return cls(bridge, await bridge.connect(parse_server_id(host.server_id)))

    def send(self, raw: bytes) -> None:
        self.conn.write(raw)

    async def next(self, timeout: float = 20) -> dict:
        line = await asyncio.wait_for(self.conn.reader.readuntil(b"\n"), timeout)
        return json.loads(line)

    async def until(self, type_: str, timeout: float = 30) -> dict:
        while True:
            message = await self.next(timeout)
            if message["type"] == type_:
                return message

    async def close(self) -> None:
        await self.bridge.close()


@pytest.fixture
async def raw_peer(testnet, p2p_host):
    peers: list[RawPeer] = []

    async def open_peer(host: P2PHost = p2p_host, seed: bytes | None = None) -> RawPeer:
        peer = await RawPeer.open(testnet, host, seed)
        peers.append(peer)
        return peer

    yield open_peer
    for peer in peers:
        await peer.close()


def chat_start(rid: str, prompt: str = "Once upon a time", **payload) -> bytes:
    return p2p.encode("chat_start", {"prompt": prompt, **payload}, rid)


async def test_server_info_message_client_connects(p2p_host, raw_peer) -> None:
    peer = await raw_peer()
    info = await peer.next()
    assert info["type"] == "server_info"
    payload = info["payload"]
    assert payload["host_name"] == "test-host"
    assert payload["model"] == "smollm2-135m"
    assert payload["status"] == "ready"
    assert payload["protocol_version"] == p2p.PROTOCOL_VERSION
    assert payload["server_id"] == p2p_host.server_id
    assert payload["capabilities"]["max_prompt_bytes"] == 8192


async def test_streaming_lifecycle_normal(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("req-1", max_tokens=8, temperature=0))
    messages = []
    while not messages or messages[-1]["type"] != "chat_end":
        messages.append(await peer.next())
    assert messages[0]["type"] == "chat_chunk"
    assert all(m["type"] == "chat_chunk" for m in messages[:-1])
    assert all(m["request_id"] == "req-1" for m in messages)
    assert all(isinstance(m["payload"]["text"], str) for m in messages[:-1])
    assert messages[-1]["payload"]["finish_reason"] in ("stop", "length")


async def test_streaming_lifecycle_aborted(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("long", max_tokens=400, ignore_eos=True))
    await peer.until("chat_chunk")
    peer.send(p2p.encode("abort", {}, "long"))
    while (message := await peer.next())["type"] == "chat_chunk":
        pass
    assert message["type"] == "chat_end"
    assert message["request_id"] == "long"
    assert message["payload"]["finish_reason"] == "abort"
    peer.send(chat_start("after", max_tokens=2))  # the connection still serves
    with pytest.raises(TimeoutError):
        while True:  # no chunk of the aborted request ever follows its chat_end
            follow = await peer.next(timeout=1.5)
            assert follow["request_id"] == "after"


async def test_error_message_host_busy_is_model_busy(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("first", max_tokens=200, ignore_eos=True))
    await peer.until("chat_chunk")
    peer.send(chat_start("second", max_tokens=5))
    error = await peer.until("error")
    assert error["request_id"] == "second"
    assert error["payload"]["code"] == "MODEL_BUSY"
    assert error["payload"]["retry_after_ms"] >= 0
    peer.send(p2p.encode("abort", {}, "first"))


async def test_message_envelope_missing_type_field(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(b'{"payload": {"prompt": "hi"}, "request_id": "x1"}\n')
    error = await peer.until("error")
    assert error["payload"]["code"] == "BAD_MESSAGE"
    assert error["request_id"] == "x1"


async def test_chat_start_prompt_exceeds_max_size(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("big", prompt="x" * (8 * 1024 + 1)))
    error = await peer.until("error")
    assert error["payload"]["code"] == "BAD_MESSAGE"
    assert "8192" in error["payload"]["message"]


async def test_unknown_model_is_model_not_available(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("m1", model="no-such-model"))
    error = await peer.until("error")
    assert error["payload"]["code"] == "OLLAMA_MODEL_NOT_AVAILABLE"


async def test_chat_start_accepts_messages_and_sampling(p2p_host, connect) -> None:
    client = await connect(p2p_host.server_id)
    from infertui.core.protocol.common import ChatMessage

    stream = client.chat(
        messages=[ChatMessage(role="user", content="Say hello.")],
        max_tokens=6, temperature=0, seed=1, top_k=20,
    )  # fmt: skip
    text = await stream.text()
    assert stream.end is not None and stream.end.tokens_out <= 6
    assert isinstance(text, str)


async def test_two_clients_on_one_host_at_once(p2p_host, connect) -> None:
    a, b = await asyncio.gather(connect(p2p_host.server_id), connect(p2p_host.server_id))
    streams = [
        c.chat(prompt=f"Story {i}:", max_tokens=12, temperature=0) for i, c in enumerate((a, b))
    ]
    texts = await asyncio.gather(*(s.text() for s in streams))
    assert all(texts)
    assert all(s.end.finish_reason in ("stop", "length") for s in streams)


async def test_one_key_holds_several_connections_each_with_its_own_replies(
    p2p_host, connect
) -> None:
    """Issue 13: a chat window streams while `ask` runs in another terminal under the same
    key. Neither connection closes the other, and the job limit counts per connection."""
    seed = secrets.token_bytes(32)
    window = await connect(p2p_host.server_id, seed=seed)
    story = window.chat(prompt="A long story:", max_tokens=48, temperature=0, ignore_eos=True)
    parts = aiter(story)
    first = await anext(parts)  # the window is streaming
    asks = await asyncio.gather(*(connect(p2p_host.server_id, seed=seed) for _ in range(3)))
    streams = [ask.chat(prompt=f"Question {i}:", max_tokens=6) for i, ask in enumerate(asks)]
    await asyncio.gather(*(stream.text() for stream in streams))
    rest = "".join([part async for part in parts])
    assert story.end is not None and story.end.finish_reason == "length", story.end
    assert story.end.tokens_out == 48 and first + rest
    for stream in streams:
        assert stream.end is not None and stream.end.finish_reason in ("stop", "length")
        assert stream.end.tokens_out > 0


@pytest.mark.fresh_host
async def test_one_key_is_refused_beyond_its_connection_cap(
    p2p_host, raw_peer, monkeypatch
) -> None:
    from infertui.core.transport.p2p import host as p2p_host_module

    monkeypatch.setattr(p2p_host_module, "MAX_CONNECTIONS_PER_KEY", 2)
    seed = secrets.token_bytes(32)
    held = [await raw_peer(seed=seed) for _ in range(2)]
    for peer in held:
        assert (await peer.next())["type"] == "server_info"
    refused = await raw_peer(seed=seed)
    error = await refused.next()
    assert error["type"] == "error" and error["payload"]["code"] == "MODEL_BUSY"
    assert "2 connections" in error["payload"]["message"]
    await asyncio.wait_for(refused.conn.closed.wait(), 10)
    await held[0].close()  # one closes: the key may connect again
    await wait_until(lambda: p2p_host.p2p.connections_by_key[public_key(seed)] < 2)
    again = await raw_peer(seed=seed)
    assert (await again.next())["type"] == "server_info"


async def test_additive_engine_metrics_and_queue_messages(p2p_host, connect) -> None:
    client = await connect(p2p_host.server_id)
    engines = await client.request("engines")
    assert engines["engines"][0]["engine_id"] == "smollm2-135m"
    metrics = await client.request("metrics")
    assert metrics["pools"][0]["slots_total"] == 2
    queue = await client.request("queue")
    assert queue["pools"][0]["capacity"] == 8


async def test_invalid_server_id_fails_before_any_network() -> None:
    with pytest.raises(InferError) as caught:
        await P2PClient.connect("not-a-server-id", bootstrap=["127.0.0.1:9"])
    assert caught.value.kind is ErrorKind.INVALID_SERVER_ID


async def test_a_key_nobody_serves_is_host_offline(testnet) -> None:
    nobody = z32_encode(public_key(secrets.token_bytes(32)))
    with pytest.raises(InferError) as caught:
        await P2PClient.connect(nobody, bootstrap=testnet, connect_timeout=10)
    assert caught.value.kind in (ErrorKind.HOST_OFFLINE, ErrorKind.CONNECT_FAILED)


@pytest.mark.fresh_host
async def test_a_host_killed_mid_stream_is_host_disconnected(p2p_host, connect) -> None:
    client = await connect(p2p_host.server_id)
    stream = client.chat(prompt="A very long story:", max_tokens=400)
    with pytest.raises(InferError) as caught:
        async for _ in stream:
            p2p_host.p2p.bridge._proc.kill()  # the host's network process dies
    assert caught.value.kind is ErrorKind.HOST_DISCONNECTED


async def test_a_stopping_host_finishes_hyperswarm_replies_within_its_grace(
    start_p2p_host, connect
) -> None:
    """Issue 13: stopping a host drains P2P jobs as it does HTTP ones: a reply under way
    ends whole, with its chat_end, before the connection goes."""
    host = await start_p2p_host(drain_ms=20_000)
    client = await connect(host.server_id)
    story = client.chat(prompt="A long story:", max_tokens=40, temperature=0, ignore_eos=True)
    parts = aiter(story)
    await anext(parts)
    stopping = asyncio.create_task(host.service.stop())
    rest = [part async for part in parts]
    assert story.end is not None and story.end.finish_reason == "length"
    assert story.end.tokens_out == 40 and rest
    await stopping


@pytest.mark.fresh_host
async def test_the_bridge_outlives_a_terminal_interrupt(p2p_host, connect) -> None:
    """Ctrl+C (or systemd's stop) signals the whole process group: the bridge leaves it to
    its parent to say when to stop, so that replies can drain through it."""
    bridge = p2p_host.p2p.bridge
    bridge._proc.send_signal(signal.SIGINT)
    bridge._proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    assert bridge._proc.returncode is None
    client = await connect(p2p_host.server_id)
    assert await client.chat(prompt="Still here?", max_tokens=3).text() is not None


async def test_without_a_dht_node_both_ends_say_so(start_p2p_host, tmp_path, caplog) -> None:
    """Issue 13: a host no DHT node answers is not "announced" (nobody can find it), and a
    client whose DHT is unreachable says the trouble is on its side."""
    nowhere = ["127.0.0.1:9"]  # loopback, and nothing there
    caplog.set_level(logging.INFO, logger="infertui.core.transport.p2p.host")
    host = await start_p2p_host(bootstrap=nowhere)
    assert host.p2p.status().startswith("not announced"), host.p2p.status()
    assert "no DHT node answered" in caplog.text and "announced as" not in caplog.text
    assert host.service.transport_status()["p2p"] == host.p2p.status()
    dashboard = HostApp(Settings(), LocalClient(host.service), start=False)
    async with dashboard.run_test(size=(100, 24)) as pilot:
        await pilot.pause(0.3)
        bar = dashboard.screen.query_one(HostBar)
        assert str(bar.render()).startswith("◐ "), "not the green dot of a host all can reach"
        assert "Hyperswarm not announced" in bar.tooltip
    with pytest.raises(InferError) as caught:
        await P2PClient.connect(host.server_id, bootstrap=nowhere, connect_timeout=5)
    assert caught.value.kind is ErrorKind.CONNECT_FAILED
    assert "no Hyperswarm DHT node answers this machine" in caught.value.message


async def test_a_reachable_host_says_announced(p2p_host) -> None:
    assert p2p_host.p2p.status().startswith("announced · ")
    dashboard = HostApp(Settings(), LocalClient(p2p_host.service), start=False)
    async with dashboard.run_test(size=(100, 24)) as pilot:
        await pilot.pause(0.3)
        bar = dashboard.screen.query_one(HostBar)
        assert str(bar.render()).startswith("● ") and "announced" not in str(bar.render())


async def test_the_allow_list_closes_other_peers(start_p2p_host, raw_peer, testnet) -> None:
    friend = secrets.token_bytes(32)
    host = await start_p2p_host(allow=[public_key(friend)])
    stranger = await raw_peer(host)
    error = await stranger.next()
    assert error["type"] == "error" and error["payload"]["code"] == "FORBIDDEN"
    welcome = await raw_peer(host, seed=friend)
    assert (await welcome.next())["type"] == "server_info"


async def test_garbage_gets_errors_then_the_peer_is_dropped_and_others_carry_on(
    p2p_host, raw_peer, connect
) -> None:
    bystander = await connect(p2p_host.server_id)
    vandal = await raw_peer()
    await vandal.until("server_info")
    for junk in (
        b"\x00\xff\xfe garbage\n",
        b"{not json\n",
        b"[1,2]\n",
        b'{"type": 7}\n',
        b"\x80\n",
    ):
        vandal.send(junk)
    codes = [(await vandal.until("error"))["payload"]["code"] for _ in range(5)]
    assert set(codes) == {"BAD_MESSAGE"}
    await asyncio.wait_for(vandal.conn.closed.wait(), 10)
    assert await bystander.chat(prompt="Still fine?", max_tokens=4).text() is not None


async def test_a_ten_megabyte_line_drops_the_peer(p2p_host, raw_peer, connect) -> None:
    vandal = await raw_peer()
    await vandal.until("server_info")
    vandal.send(b'{"type":"chat_start","payload":{"prompt":"' + b"a" * (10 * 2**20) + b'"}}\n')
    error = await vandal.until("error", timeout=60)
    assert error["payload"]["code"] == "BAD_MESSAGE"
    await asyncio.wait_for(vandal.conn.closed.wait(), 20)
    client = await connect(p2p_host.server_id)
    assert client.server_info is not None


async def test_a_flood_drops_the_peer(p2p_host, raw_peer) -> None:
    vandal = await raw_peer()
    await vandal.until("server_info")
    vandal.send(b"".join(p2p.encode("queue", {}, f"q{i}") for i in range(1000)))
    await asyncio.wait_for(vandal.conn.closed.wait(), 20)


def test_unknown_error_code_received_is_a_generic_error() -> None:
    err = error_from(p2p.ErrorPayload(code="BRAND_NEW_CODE", message="something odd"))
    assert err.kind is ErrorKind.INTERNAL
    assert err.message == "something odd"
    assert err.details["code"] == "BRAND_NEW_CODE"


async def test_hosts_on_a_topic_are_found_with_their_server_info(start_p2p_host, testnet) -> None:
    from infertui.core.transport.p2p.discovery import find_hosts

    first = await start_p2p_host(topics=["lab"])
    second = await start_p2p_host(topics=["lab"])
    await start_p2p_host(topics=["elsewhere"])
    found = await find_hosts("lab", bootstrap=testnet, wait_s=4)
    assert {info.server_id for info in found} == {first.server_id, second.server_id}
    assert all(info.status == "ready" and info.model == "smollm2-135m" for info in found)


async def test_metrics_subscription_pushes_until_unsubscribed(p2p_host, connect) -> None:
    client = await connect(p2p_host.server_id)
    received = []
    async for snapshot in client.metrics(interval_ms=200):
        received.append(snapshot)
        if len(received) == 3:
            break
    assert all(r["pools"][0]["pool_id"] == "smollm2-135m" for r in received)
    await asyncio.sleep(0.5)
    assert await client.request("queue")  # and the connection still answers


async def test_admin_operations_only_for_admin_peers(
    start_p2p_host, testnet, model_path, tmp_path
) -> None:
    import shutil

    admin_seed = secrets.token_bytes(32)
    host = await start_p2p_host(admins=[public_key(admin_seed)])
    stranger = await P2PClient.connect(host.server_id, bootstrap=testnet)
    try:
        with pytest.raises(InferError) as refused:
            await stranger.request("engine_remove", {"engine_id": "smollm2-135m"})
        assert refused.value.kind is ErrorKind.FORBIDDEN
    finally:
        await stranger.close()

    copy = tmp_path / "extra.gguf"
    shutil.copy(model_path, copy)
    peer = await RawPeer.open(testnet, host, seed=admin_seed)
    try:
        info = await peer.next()
        assert info["payload"]["capabilities"]["admin"] is True

        async def ask(kind: str, **payload) -> dict:
            peer.send(p2p.encode(kind, payload, f"{kind}-1"))
            while (message := await peer.next(timeout=60))["request_id"] != f"{kind}-1":
                pass
            return message

        added = await ask("engine_add", engine_id="extra", model_path=str(copy), n_ctx=512)
        assert added["payload"]["engine"]["status"] == "loaded"
        missing = await ask("engine_add", engine_id="nope", model_path=str(tmp_path / "no.gguf"))
        assert missing["type"] == "error" and "not found" in missing["payload"]["message"]
        reloaded = await ask("engine_reload", engine_id="extra")
        assert reloaded["payload"]["engine"]["pool_state"] == "ready"
        drained = await ask("engine_drain", engine_id="extra", deadline_ms=100)
        assert drained["payload"] == {"engine_id": "extra", "cancelled": 0}
        resumed = await ask("engine_resume", engine_id="extra")
        assert resumed["payload"]["engine"]["pool_state"] == "ready"
        removed = await ask("engine_remove", engine_id="extra")
        assert removed["payload"]["status"] == "removed"
        assert host.service.engine_ids() == ["smollm2-135m"]
    finally:
        await peer.close()


async def test_a_newer_protocol_version_is_unsupported_version(raw_peer) -> None:
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(chat_start("v9", protocol_version=p2p.PROTOCOL_VERSION + 1))
    error = await peer.until("error")
    assert error["request_id"] == "v9"
    assert error["payload"]["code"] == "UNSUPPORTED_VERSION"


async def test_fuzzed_garbage_never_hurts_the_host(p2p_host, raw_peer, connect) -> None:
    import random

    rng = random.Random(20261122)
    bystander = await connect(p2p_host.server_id)
    for _ in range(4):
        vandal = await raw_peer()
        await vandal.until("server_info")
        for _ in range(5):
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
            vandal.send(b"\x01" + junk.replace(b"\n", b"\x02") + b"\n")
        for _ in range(5):
            error = await vandal.until("error")
            assert error["payload"]["code"] == "BAD_MESSAGE"
            assert isinstance(error["payload"]["message"], str)
        await asyncio.wait_for(vandal.conn.closed.wait(), 10)
    stream = bystander.chat(prompt="Still serving?", max_tokens=4)
    assert isinstance(await stream.text(), str)
    assert stream.end is not None


async def test_our_client_reports_a_refusal_as_forbidden(start_p2p_host, testnet) -> None:
    host = await start_p2p_host(allow=[public_key(secrets.token_bytes(32))])
    with pytest.raises(InferError) as caught:
        await P2PClient.connect(host.server_id, bootstrap=testnet)
    assert caught.value.kind is ErrorKind.FORBIDDEN


async def test_a_lone_surrogate_is_bad_message_and_the_session_lives_on(raw_peer) -> None:
    """Python's json accepts "\\ud800"; the text then failed at tokenization and the session
    ended without a word. It is refused at the door instead (issue 12)."""
    peer = await raw_peer()
    await peer.until("server_info")
    peer.send(b'{"type":"chat_start","request_id":"bad","payload":{"prompt":"\\ud800x"}}\n')
    error = await peer.until("error")
    assert error["payload"]["code"] == "BAD_MESSAGE"
    assert "surrogate" in error["payload"]["message"]
    peer.send(chat_start("good", max_tokens=2, temperature=0))
    end = await peer.until("chat_end")
    assert end["request_id"] == "good"
