"""core/client against a real host on both transports: one API, the same behaviour."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from infertui.core.client import Client, ConnectionState, Reconnector, connect, explain
from infertui.core.engine import bundled_model_path
from infertui.core.protocol.common import ChatMessage
from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.host_api import AddEngineRequest

from ..conftest import CLIENT_SEED, ServedHost, ServedHostFactory, SharedHost, over_p2p, wait_until

pytestmark = pytest.mark.model

HELLO = [ChatMessage(role="user", content="Name three colours.")]


@pytest.fixture
async def host(shared_host: SharedHost, request: pytest.FixtureRequest) -> ServedHost:
    """The shared host (tests/conftest.py, SharedHosts), on Hyperswarm too unless the test runs over HTTP alone; a test marked `fresh_host` gets its own."""
    return await shared_host(p2p=over_p2p(request, default=True))


@pytest.fixture(params=["http", "p2p"])
async def client(request: pytest.FixtureRequest, host: ServedHost) -> AsyncIterator[Client]:
    client = await connect(host.target(request.param), bootstrap=host.bootstrap, seed=CLIENT_SEED)
    yield client
    await client.close()


async def test_server_info_names_the_host_and_its_model(client: Client) -> None:
    assert client.info.host_name == "test-host"
    assert client.info.model == "smollm2-135m"
    assert client.info.models == ("smollm2-135m",)
    assert client.info.admin  # the tests' client key is on the host's admin list


async def test_chat_streams_text_then_reports_stats(client: Client) -> None:
    reply = client.chat(HELLO, temperature=0, max_tokens=12)
    pieces = [piece async for piece in reply]
    assert len(pieces) > 1 and "".join(pieces).strip()
    assert reply.stats is not None
    assert reply.stats.finish_reason in ("stop", "length")
    assert 0 < reply.stats.tokens_out <= 12
    assert reply.stats.ttft_ms is not None and reply.stats.ttft_ms > 0


@pytest.mark.deterministic
async def test_both_transports_give_the_same_greedy_text(host: ServedHost) -> None:
    """The host is deterministic: the second request reads its prompt afresh as the first did,
    not on the cells the first left, so the transport is all that differs."""
    texts = []
    for transport in ("http", "p2p"):
        async with await connect(host.target(transport), bootstrap=host.bootstrap) as client:
            texts.append(await client.chat(HELLO, temperature=0, max_tokens=16).text())
    assert texts[0] == texts[1]


async def test_abort_stops_the_host_and_frees_its_slot(client: Client, host: ServedHost) -> None:
    reply = client.chat(HELLO, temperature=0, max_tokens=400, ignore_eos=True)
    pieces = 0
    async for _ in reply:
        pieces += 1
        if pieces == 3:
            reply.abort()
    assert reply.stats is not None and reply.stats.finish_reason == "abort"
    assert reply.stats.host_stopped is None  # this client stopped it
    assert pieces < 50  # nothing like the 400 asked for
    await wait_until(lambda: host.busy_slots() == 0)


@pytest.mark.fresh_host
async def test_abort_from_another_task_while_the_reader_waits_cancels_on_the_host(
    client: Client, host: ServedHost
) -> None:
    """The app's pattern: Esc calls abort() while the chat loop awaits the next piece. Over
    HTTP this once left the connection open (a second cancel interrupted its close), so the
    host generated all 400 tokens for nobody while the app showed "aborted"."""
    reply = client.chat(HELLO, temperature=0, max_tokens=400, ignore_eos=True)
    started = asyncio.Event()

    async def read() -> int:
        pieces = 0
        async for _ in reply:
            pieces += 1
            started.set()
        return pieces

    reader = asyncio.create_task(read())
    await started.wait()
    reply.abort()
    await reader
    assert reply.stats is not None and reply.stats.finish_reason == "abort"
    await wait_until(lambda: host.busy_slots() == 0)
    (metrics,) = host.service.metrics()
    assert metrics.cancelled == 1 and metrics.completed == 0
    assert metrics.tokens_out_total < 100


async def test_snapshots_show_engines_queue_and_metrics(client: Client) -> None:
    await client.chat(HELLO, max_tokens=4).text()
    (engine,) = await client.engines()
    assert engine.engine_id == "smollm2-135m" and engine.status == "loaded"
    (queue,) = await client.queue()
    assert queue.pool_id == "smollm2-135m" and len(queue.slots) == 2
    (metrics,) = await client.metrics()
    assert metrics.completed >= 1 and metrics.tokens_out_total >= 1


async def test_watch_metrics_delivers_repeatedly(client: Client) -> None:
    seen = 0
    async for snapshot in client.watch_metrics(interval_ms=200):
        assert snapshot[0].pool_id == "smollm2-135m"
        seen += 1
        if seen == 3:
            break


async def test_admin_adds_and_removes_an_engine(client: Client) -> None:
    await client.add_engine(
        AddEngineRequest(engine_id="second", model_path=str(bundled_model_path()), n_ctx=512)
    )
    assert {e.engine_id for e in await client.engines()} == {"smollm2-135m", "second"}
    text = await client.chat(HELLO, model="second", max_tokens=4).text()
    assert text
    await client.remove_engine("second")
    assert [e.engine_id for e in await client.engines()] == ["smollm2-135m"]


async def test_admin_drains_and_resumes_an_engine(client: Client, host: ServedHost) -> None:
    await client.drain_engine("smollm2-135m", deadline_ms=0)
    await wait_until(lambda: host.service.pool_health("smollm2-135m").state.value == "drained")
    with pytest.raises(InferError) as caught:
        await client.chat(HELLO, max_tokens=4).text()
    assert caught.value.kind is ErrorKind.POOL_UNREADY
    await client.resume_engine("smollm2-135m")
    assert await client.chat(HELLO, max_tokens=4).text()
    await client.resume_engine("smollm2-135m")  # already taking jobs: nothing to do


async def test_errors_carry_the_spec_kind_and_a_sentence(client: Client, tmp_path) -> None:
    with pytest.raises(InferError) as caught:
        await client.chat(HELLO, model="no-such-model", max_tokens=4).text()
    assert caught.value.kind is ErrorKind.MODEL_NOT_FOUND
    assert explain(caught.value).startswith("The host does not serve that model.")
    with pytest.raises(InferError) as caught:
        await client.add_engine(
            AddEngineRequest(engine_id="missing", model_path=str(tmp_path / "missing.gguf"))
        )
    assert caught.value.kind is ErrorKind.MODEL_FILE_NOT_FOUND


async def test_a_malformed_server_id_fails_before_any_network() -> None:
    started = time.monotonic()
    with pytest.raises(InferError) as caught:
        await connect("not-a-server-id")
    assert caught.value.kind is ErrorKind.INVALID_SERVER_ID
    assert time.monotonic() - started < 0.5


async def test_nothing_listening_is_host_offline() -> None:
    with pytest.raises(InferError) as caught:
        await connect("http://127.0.0.1:9")
    assert caught.value.kind is ErrorKind.HOST_OFFLINE
    assert explain(caught.value).startswith("No host is answering")


@pytest.mark.parametrize("transport", ["http", "p2p"])
@pytest.mark.fresh_host
async def test_reconnector_says_so_and_recovers_when_the_host_returns(
    transport: str, host: ServedHost, start_served_host: ServedHostFactory
) -> None:
    states: list[ConnectionState] = []
    keeper = Reconnector(host.target(transport), states.append, bootstrap=host.bootstrap)
    task = asyncio.create_task(keeper.run())
    try:
        await wait_until(lambda: states and states[-1].phase == "connected", 20)
        await host.service.stop()
        await wait_until(lambda: states[-1].phase == "waiting", 20)
        assert states[-1].retry_in_s is not None and states[-1].message
        port = int(host.url.rsplit(":", 1)[1])
        await start_served_host(seed=host.seed, port=port)
        keeper.retry_now()
        await wait_until(lambda: states[-1].phase == "connected", 30)
        assert keeper.client is not None
        assert await keeper.client.chat(HELLO, max_tokens=4).text()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.fresh_host
async def test_a_reply_the_host_cuts_short_ends_as_aborted(
    client: Client, host: ServedHost
) -> None:
    """A drain's deadline (or the engine removed, the host stopping) mid-reply: over either
    transport the reply ends as "abort", not as a whole one (over HTTP it said "stop"), and
    says the host stopped it, so that an app does not show it as the user's own abort."""
    reply = client.chat(HELLO, temperature=0, max_tokens=400, ignore_eos=True)
    pieces = 0
    async for _ in reply:
        pieces += 1
        if pieces == 3:
            await host.service.drain_engine("smollm2-135m", deadline_ms=0)
    assert reply.stats is not None and reply.stats.finish_reason == "abort"
    assert reply.stats.host_stopped is not None
    assert pieces < 50


async def test_calls_on_a_closed_http_connection_are_host_errors(host: ServedHost) -> None:
    """The app's metrics and engine pollers may call after the connection was closed (the
    host went away): that is a HOST_DISCONNECTED error they handle, not a RuntimeError that
    crashed the app, and a chat on it ends with the error instead of waiting forever."""
    client = await connect(host.target("http"))
    await client.close()
    with pytest.raises(InferError) as closed:
        await client.metrics()
    assert closed.value.kind is ErrorKind.HOST_DISCONNECTED
    with pytest.raises(InferError) as chat:
        await asyncio.wait_for(client.chat(HELLO, max_tokens=4).text(), 10)
    assert chat.value.kind is ErrorKind.HOST_DISCONNECTED


async def test_a_url_no_connection_could_use_is_refused_before_trying() -> None:
    """A port past 65535 was an OverflowError traceback from the socket layer."""
    with pytest.raises(InferError) as refused:
        await connect("http://127.0.0.1:99999")
    assert refused.value.kind is ErrorKind.CONNECT_FAILED and "99999" in refused.value.message


async def test_https_to_a_host_that_speaks_plain_http_says_to_use_http(host: ServedHost) -> None:
    """It said "nothing is listening there", though something answered."""
    with pytest.raises(InferError) as refused:
        await connect(host.target("http").replace("http://", "https://"))
    assert refused.value.kind is ErrorKind.CONNECT_FAILED
    assert "use http://" in refused.value.message
