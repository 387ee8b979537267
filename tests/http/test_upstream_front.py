"""An infertui host in front of an upstream, over HTTP: its context travels in /v1/models
(vLLM's `max_model_len`), and /v1/health names the upstream's model, as the pool's health does.

The upstream is either integration/fake_upstream.py's small server (no model)
or a second infertui host on the bundled model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest

from ..upstream.fake_upstream import FakeUpstream
from .conftest import Host, HostFactory

Front = Callable[[str], Coroutine[Any, Any, httpx.AsyncClient]]


@pytest.fixture
def front(start_host: HostFactory) -> Front:
    """Start hosts whose one engine, "up", is the upstream at a URL (stopped at teardown)."""

    async def start(url: str) -> httpx.AsyncClient:
        settings = {"urls": [f"up={url}"], "health_interval_s": 0.2}
        host = await start_host(upstream=settings, queue=64)
        assert host.client is not None
        return host.client

    return start


async def cards(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    listed = (await http.get("/v1/models")).json()["data"]
    return {card["id"]: card for card in listed}


async def test_the_front_passes_on_the_upstream_context_and_names_its_model_in_health(
    front: Front,
) -> None:
    upstream = FakeUpstream({"id": "far-model", "object": "model", "max_model_len": 8192})
    await upstream.start()
    try:
        http = await front(upstream.url)
        listed = await cards(http)
        assert {name: card.get("max_model_len") for name, card in listed.items()} == {
            "up": 8192, "far-model": 8192,
        }  # fmt: skip
        assert (await http.get("/v1/models/far-model")).json()["max_model_len"] == 8192
        status = (await http.get("/engines/up/status")).json()
        assert status["parameters"]["n_ctx"] == 8192
        health = (await http.get("/v1/health")).json()
        pool = (await http.get("/v1/pools/up/health")).json()
        assert health["engines_summary"][0]["model_path"] == pool["model_path"] == "far-model"
    finally:
        await upstream.stop()


async def test_an_upstream_context_not_known_is_not_advertised(front: Front) -> None:
    upstream = FakeUpstream({"id": "far-model", "object": "model"})
    await upstream.start()
    try:
        http = await front(upstream.url)
        listed = await cards(http)
        assert set(listed) == {"up", "far-model"}
        assert all("max_model_len" not in card for card in listed.values())
        assert (await http.get("/engines/up/status")).json()["parameters"]["n_ctx"] == 0
        props = (await http.get("/props")).json()
        assert props["default_generation_settings"]["n_ctx"] == 0  # not known, not made up
        assert props["model_alias"] == "up" and props["chat_template"] == ""
    finally:
        await upstream.stop()


async def test_health_names_no_model_for_an_upstream_not_reached_yet(front: Front) -> None:
    upstream = FakeUpstream({"id": "far-model"})
    await upstream.start()
    await upstream.stop()  # its port, with nothing listening
    http = await front(upstream.url)
    health = (await http.get("/v1/health")).json()
    (engine,) = health["engines_summary"]
    assert engine["engine_id"] == "up" and engine["model_path"] is None  # was "v1"


async def test_an_infertui_upstream_tells_the_front_its_context_per_sequence(
    host: Host, front: Front
) -> None:
    upstream = host  # ctx 1024, 2 slots
    direct = await cards(upstream.client)
    assert direct and all(card["max_model_len"] == 1024 for card in direct.values())
    http = await front(f"{upstream.url}/v1")
    status = (await http.get("/engines/up/status")).json()
    assert status["parameters"]["n_ctx"] == 1024  # was 32768, made up
    listed = await cards(http)
    assert listed["up"]["max_model_len"] == 1024
    health = (await http.get("/v1/health")).json()
    (engine,) = health["engines_summary"]
    assert engine["model_path"] == (await http.get("/v1/pools/up/health")).json()["model_path"]
    assert engine["model_path"] == next(iter(direct))  # the first the upstream lists, not "v1"


async def test_the_responses_api_works_in_front_of_an_upstream(host: Host, front: Front) -> None:
    """/v1/responses is a chat completion underneath, so a front serves it over any upstream
    engine: whole and streamed, with the upstream's usage."""
    upstream = host
    http = await front(f"{upstream.url}/v1")
    body = {"model": "up", "instructions": "Be brief.", "input": "Name a colour.",
            "max_output_tokens": 8, "temperature": 0}  # fmt: skip
    through = (await http.post("/v1/responses", json=body)).json()
    direct = await upstream.client.post("/v1/responses", json={**body, "model": "smollm2-135m"})
    assert through["status"] in ("completed", "incomplete") and through["model"] == "up"
    assert through["output"][0]["content"][0]["text"]
    assert through["usage"]["input_tokens"] == direct.json()["usage"]["input_tokens"]
    async with http.stream("POST", "/v1/responses", json={**body, "stream": True}) as reply:
        events = [json.loads(line[6:]) async for line in reply.aiter_lines()
                  if line.startswith("data: ")]  # fmt: skip
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    last = events[-1]
    assert last["type"] in ("response.completed", "response.incomplete")
    assert last["response"]["output"][0]["content"][0]["text"] == deltas != ""
