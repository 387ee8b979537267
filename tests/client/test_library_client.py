"""Issue 36 §3, §4: the library through the Client API on both transports, as the engine
manager uses it: pull with progress, load, unload, delete. Pulls and deletes are for admins (an
admin key over HTTP, an --admin peer over Hyperswarm); loading and unloading, as any request
that names a model, for anyone. A loopback Hub serves the cut bundled model."""

from __future__ import annotations

import secrets

import pytest

from infertui.core.client import connect
from infertui.core.protocol import ErrorKind, InferError

from ..conftest import CLIENT_SEED, CUT_NAME, HostFactory
from ..library.fake_sources import Sources

pytestmark = pytest.mark.p2p
NAME = CUT_NAME


@pytest.mark.parametrize("transport", ["http", "p2p"])
async def test_an_admin_pulls_loads_unloads_and_deletes_a_model(
    start_host: HostFactory, cut_hub: Sources, transport: str
) -> None:
    host = await start_host(p2p=transport == "p2p", admin_key="root")
    async with await connect(
        host.target(transport), bootstrap=host.bootstrap, seed=CLIENT_SEED, api_key="root"
    ) as client:
        events = [event async for event in client.pull_model(NAME)]
        assert events[0]["status"] == "pulling manifest" and events[-1]["status"] == "success"
        size = len(cut_hub.repos["tiny-org/Cut-GGUF"]["Cut-Q4_K_M.gguf"].data)
        assert any(e.get("completed") == e.get("total") == size for e in events)
        assert [e.name for e in await client.library()] == [NAME]

        await client.load_model(NAME)
        [loaded] = [e for e in await client.engines() if e.engine_id == NAME]
        assert loaded.on_demand and loaded.expires_at is not None
        assert (await client.library())[0].loaded
        await client.unload_model(NAME)
        assert NAME not in [e.engine_id for e in await client.engines()]

        await client.copy_model(NAME, "team/cut:prod")
        assert {e.name for e in await client.library()} == {NAME, "team/cut:prod"}
        with pytest.raises(InferError) as taken:
            await client.copy_model(NAME, "team/cut:prod")
        assert taken.value.kind is ErrorKind.CONFLICT
        await client.delete_model("team/cut:prod")
        await client.delete_model(NAME)
        assert await client.library() == []
        with pytest.raises(InferError) as missing:
            await client.delete_model(NAME)
        assert missing.value.kind is ErrorKind.MODEL_NOT_FOUND
        with pytest.raises(InferError) as refused:  # a failure after the first event
            [event async for event in client.pull_model("hf.co/tiny-org/Cut-GGUF:Q2_K")]
        assert refused.value.kind is ErrorKind.MODEL_NOT_FOUND and "Q4_K_M" in str(refused.value)


@pytest.mark.parametrize("transport", ["http", "p2p"])
async def test_only_admins_change_the_library(
    start_host: HostFactory, cut_hub: Sources, transport: str
) -> None:
    host = await start_host(p2p=transport == "p2p", admin_key="root")
    stranger = secrets.token_bytes(32)  # not on the host's --admin list
    async with await connect(host.target(transport), bootstrap=host.bootstrap, seed=stranger) as c:
        assert await c.library() == []  # reading is open
        with pytest.raises(InferError) as refused:
            [event async for event in c.pull_model(NAME)]
        assert refused.value.kind in (ErrorKind.FORBIDDEN, ErrorKind.UNAUTHORIZED)
        assert cut_hub.sent == {}
        async for _ in host.service.pull_model(NAME):  # the host's admin pulls it
            pass
        with pytest.raises(InferError) as refused:
            await c.delete_model(NAME)
        assert refused.value.kind in (ErrorKind.FORBIDDEN, ErrorKind.UNAUTHORIZED)
        # as any request may name a model, anyone may load one, or unload it once idle
        await c.load_model(NAME)
        assert NAME in host.service.engine_ids()
        await c.unload_model(NAME)
        assert NAME not in host.service.engine_ids()
        assert [entry.name for entry in await c.library()] == [NAME]
