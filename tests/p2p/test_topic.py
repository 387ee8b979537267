"""Issue 15 §2: hosts on one topic, reached as one by `connect("topic:NAME")`: each chat goes
to the host with room, a refusal is retried on the next host, and a host that leaves is
replaced by the others. Real hosts, real Hyperswarm on a loopback testnet."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from textual.widgets import DataTable

from infertui.core.client import TopicClient, connect
from infertui.core.config import Settings
from infertui.core.protocol.common import ChatMessage
from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.tui.app import ClientApp
from infertui.tui.widgets.message import AssistantMessage
from infertui.tui.widgets.prompt import PromptArea

from ..conftest import ServedHost, ServedHostFactory, Testnet, until, wait_until

pytestmark = pytest.mark.model

TOPIC = "team-gpus"


@pytest.fixture
async def _testnet() -> AsyncIterator[Testnet]:
    """A DHT of each test's own: every test here announces on TOPIC, and a DHT keeps the
    records of the hosts a test before stopped for minutes."""
    net = Testnet()
    yield net
    await net.stop()


HELLO = [ChatMessage(role="user", content="Name a colour.")]


async def start_hosts(start: ServedHostFactory, n: int) -> list[ServedHost]:
    return [await start(topics=(TOPIC,), host_name=f"box{i}", queue=16) for i in range(n)]


async def topic_client(testnet: list[str]) -> TopicClient:
    client = await connect(f"topic:{TOPIC}", bootstrap=testnet, connect_timeout=30)
    assert isinstance(client, TopicClient)
    return client


async def test_a_busy_host_is_skipped_for_the_next_and_the_reply_names_its_host(
    start_served_host: ServedHostFactory, testnet: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    await start_hosts(start_served_host, 2)
    client = await topic_client(testnet)
    try:
        await wait_until(lambda: len(client.connected()) == 2, 30)
        assert client.info.models == ("smollm2-135m",)
        first = client.chat(HELLO, max_tokens=300, ignore_eos=True, temperature=0)
        pieces = aiter(first)
        await anext(pieces)  # running: this client's one job on that host (peer limit 1)
        busy = first.host
        caplog.set_level("INFO", logger="infertui.core.client.topic")
        second = client.chat(HELLO, max_tokens=4, temperature=0)
        for host in client.connected():  # make the busy host look the roomiest
            host.free_slots, host.queue_depth, host.sent = (9, 0, 0) if (
                host.info.host_name == busy
            ) else (1, 0, 0)  # fmt: skip
        answer = aiter(second)
        text = [await anext(answer)]  # picked with the figures above: no await in between
        text += [piece async for piece in answer]
        assert "".join(text)
        assert f"{busy} refused a chat" in caplog.text  # MODEL_BUSY there (one job per peer)
        assert second.host and second.host != busy  # and served by the other
        assert second.stats is not None and second.stats.host == second.host
        first.abort()
        async for _ in pieces:
            pass
        assert first.stats is not None and first.stats.finish_reason == "abort"
        loads = await client.hosts()
        assert sorted(h.host_name for h in loads) == ["box0", "box1"]
        assert all(h.slots == 2 for h in loads)
        with pytest.raises(InferError) as refused:
            await client.add_engine(None)  # type: ignore[arg-type]
        assert refused.value.kind is ErrorKind.INVALID_PARAMS
    finally:
        await client.close()


async def test_thirty_clients_spread_over_three_hosts_and_survive_one_leaving(
    start_served_host: ServedHostFactory, testnet: list[str]
) -> None:
    hosts = await start_hosts(start_served_host, 3)
    clients = list(await asyncio.gather(*(topic_client(testnet) for _ in range(30))))
    try:
        await wait_until(lambda: all(len(c.connected()) == 3 for c in clients), 60)

        async def ask(client: TopicClient) -> str:
            reply = client.chat(HELLO, max_tokens=6, temperature=0)
            assert await asyncio.wait_for(reply.text(), 120)
            return reply.host

        served = Counter(await asyncio.gather(*(ask(c) for c in clients)))
        assert set(served) == {"box0", "box1", "box2"}, served  # every host served some

        async def ask_through_a_departure(client: TopicClient) -> tuple[str, str]:
            """(the host, how the reply ended): never a hang, and text unless it was cut."""
            reply = client.chat(HELLO, max_tokens=24, temperature=0)
            try:
                text = await asyncio.wait_for(reply.text(), 120)
            except InferError as err:
                return reply.host, err.kind.value
            assert reply.stats is not None and text
            return reply.host, reply.stats.finish_reason

        during = asyncio.gather(*(ask_through_a_departure(c) for c in clients))
        serving: list[int] = []  # a host that serves: it leaves while it does

        def one_serves() -> bool:
            serving[:] = [i for i, host in enumerate(hosts) if host.busy_slots() > 0][:1]
            return bool(serving)

        await wait_until(one_serves)
        left = f"box{serving[0]}"
        await hosts[serving[0]].service.stop()
        finished = await during
        cut = [(host, end) for host, end in finished if end not in ("stop", "length")]
        # only streams that had begun on the host that left, which its drain cut short
        assert all(host == left and end in ("abort", "HOST_DISCONNECTED") for host, end in cut)
        after = Counter(await asyncio.gather(*(ask(c) for c in clients)))
        assert sum(after.values()) == 30 and left not in after
        assert set(after) == {"box0", "box1", "box2"} - {left}
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def test_no_host_on_the_topic_is_host_offline(testnet: list[str]) -> None:
    with pytest.raises(InferError) as offline:
        await connect("topic:nobody-here", bootstrap=testnet, connect_timeout=3)
    assert offline.value.kind is ErrorKind.HOST_OFFLINE


async def test_the_chat_app_on_a_topic_names_the_host_that_answered_and_lists_the_hosts(
    start_served_host: ServedHostFactory, testnet: list[str]
) -> None:
    await start_hosts(start_served_host, 2)
    app = ClientApp(f"topic:{TOPIC}", Settings(bootstrap=testnet, client={"max_tokens": 8}))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.client, TopicClient), 30)
        client = app.client
        assert isinstance(client, TopicClient)
        await until(pilot, lambda: len(client.connected()) == 2, 30)
        app.screen.query_one("#prompt", PromptArea).value = "Name a colour."
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.query(AssistantMessage), 30)
        view = app.screen.query(AssistantMessage).last()
        await until(pilot, lambda: "tok/s" in str(view.stats_line.render()), 60)
        assert str(view.stats_line.render()).split(" · ")[0] in ("box0", "box1")
        await pilot.press("f6")
        table = app.screen.query_one("#hosts", DataTable)
        await until(pilot, lambda: table.row_count == 2, 30)
        assert {str(table.get_row_at(i)[0]) for i in range(2)} == {"box0", "box1"}


async def test_a_host_that_announces_later_joins_the_choice(
    start_served_host: ServedHostFactory, testnet: list[str]
) -> None:
    """Hyperswarm looks a topic up again only every 10 minutes; the client asks sooner."""
    await start_served_host(topics=(TOPIC,), host_name="early")
    client = await topic_client(testnet)
    try:
        assert [h.info.host_name for h in client.connected()] == ["early"]
        await start_served_host(topics=(TOPIC,), host_name="late")
        await wait_until(lambda: len(client.connected()) == 2, seconds=20)
        assert "late" in client.info.host_name
    finally:
        await client.close()
