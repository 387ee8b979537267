"""The generation endpoints served direct (core/transport/http/direct_routes.py) answer every request as
FastAPI's own path does: two servers over one host, one app with the lane and one without,
asked the same things, good and bad, in each dialect."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from infertui.core.host import HostService
from infertui.core.transport.http import HttpServer, create_app, direct_routes, routes_openai
from infertui.core.transport.http.direct_routes import DirectRoutes

from .conftest import MODEL, HostFactory

pytestmark = pytest.mark.model

GOOD = {"temperature": 0, "seed": 1, "max_tokens": 4}
CHAT = [{"role": "user", "content": "Say hi"}]
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def lanes(
    start_host: HostFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """(with the lane, without it), both over HTTP on 127.0.0.1, serving one host. The host
    is deterministic: the plain app's request reads its prompt afresh as the lane's did, not
    on the cells that one left (the prompt cache), so their replies are one generation."""
    plain_servers: list[HttpServer] = []

    def plain_face(service: HostService) -> list[HttpServer]:
        plain = create_app(service)  # as the host's own app, less the direct routes
        plain.user_middleware = [m for m in plain.user_middleware if m.cls is not DirectRoutes]
        plain_servers.append(HttpServer(plain, "127.0.0.1:0"))
        return plain_servers

    host = await start_host(ctx=512, parallel=1, queue=64, deterministic=True, faces=plain_face)
    assert host.client is not None
    plain = httpx.AsyncClient(base_url=plain_servers[0].url, timeout=60)
    try:
        yield host.client, plain
    finally:
        await plain.aclose()


def _comparable(value: Any) -> Any:
    """A reply with what differs from one request to the next (ids, clocks) taken out."""
    if isinstance(value, dict):
        return {
            k: _comparable(v)
            for k, v in value.items()
            if k not in {"id", "created", "created_at", "system_fingerprint"}
            and not k.endswith("_duration")
        }
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


HEADERS = ("content-type", "cache-control", "retry-after", "x-backoff-ms", "www-authenticate")


async def _answer(client: httpx.AsyncClient, path: str, **request: Any) -> tuple[Any, ...]:
    reply = await client.post(path, **request)
    kind = reply.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        lines = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
        body: Any = [_comparable(json.loads(x)) if x.startswith("{") else x for x in lines]
    elif reply.text.startswith("{") and "\n{" in reply.text.strip():  # NDJSON
        body = [_comparable(json.loads(x)) for x in reply.text.splitlines() if x]
    else:
        body = _comparable(reply.json())
    headers = {name: reply.headers.get(name) for name in HEADERS}
    return reply.status_code, body, headers, "x-correlation-id" in reply.headers


CASES: list[tuple[str, dict[str, Any]]] = [
    # good requests, streamed or not
    ("/v1/completions", {"json": {"model": MODEL, "prompt": "Hello", **GOOD}}),
    ("/v1/completions", {"json": {"model": MODEL, "prompt": "Hello", "stream": True, **GOOD}}),
    ("/v1/chat/completions", {"json": {"model": MODEL, "messages": CHAT, **GOOD}}),
    (
        "/v1/chat/completions",
        {"json": {"model": MODEL, "messages": CHAT, "stream": True, **GOOD}},
    ),
    ("/api/chat", {"json": {"model": MODEL, "messages": CHAT, "stream": False,
                            "options": {"temperature": 0, "seed": 1, "num_predict": 4}}}),
    ("/api/generate", {"json": {"model": MODEL, "prompt": "Hello", "stream": True,
                                "options": {"temperature": 0, "seed": 1, "num_predict": 4}}}),
    ("/chat/completions", {"json": {"model": MODEL, "messages": CHAT, "stream": True,
                                    "max_tokens": 4, "temperature": 0, "seed": 1}}),
    # bad ones: each must be the same refusal
    ("/v1/completions", {"content": b'{"model": ', "headers": JSON}),
    ("/v1/completions", {"content": b'{"model": "\\ud800", "prompt": "x"}', "headers": JSON}),
    ("/v1/completions", {"content": b"", "headers": JSON}),
    ("/v1/completions", {"content": b"[1, 2]", "headers": JSON}),
    ("/v1/completions", {"content": b'{"prompt": "x"}', "headers": {"Content-Type": "text/plain"}}),
    ("/v1/completions", {"content": b'{"prompt": "x"}'}),
    ("/v1/completions", {"json": {"model": MODEL}}),
    ("/v1/completions", {"json": {"model": MODEL, "prompt": "x", "max_tokens": "many"}}),
    ("/v1/completions", {"json": {"model": "no-such-model", "prompt": "x"}}),
    ("/v1/completions", {"json": {"model": MODEL, "prompt": "word " * 5000, "max_tokens": 8}}),
    ("/v1/chat/completions", {"json": {"model": MODEL, "messages": []}}),
    ("/v1/chat/completions", {"json": {"model": MODEL, "messages": CHAT, "n": 1000}}),
    (
        "/v1/chat/completions",
        {"content": b'{"model": 1}', "headers": {"Content-Type": "application/vnd.x+json"}},
    ),
    (
        "/v1/completions",
        {"content": b'{"model": "m", "prompt": "x"}',
         "headers": {"Content-Type": "application/x/y+json"}},
    ),
    ("/v1/completions", {"json": {"model": MODEL, "prompt": "x", "n": 1000}}),
    ("/api/chat", {"json": {"messages": "hi"}}),
    ("/api/generate", {"json": {"model": "no-such-model", "prompt": "x"}}),
    ("/chat/completions", {"json": {"model": MODEL}}),
    ("/chat/sse", {"json": {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}}),
]  # fmt: skip


async def test_the_fast_lane_answers_as_fastapi_does(
    lanes: tuple[httpx.AsyncClient, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, plain = lanes
    taken: list[str] = []
    respond = direct_routes._DirectRoute.respond

    async def counted(self: direct_routes._DirectRoute, request: Any) -> Any:
        taken.append(self.route.path)
        return await respond(self, request)

    monkeypatch.setattr(direct_routes._DirectRoute, "respond", counted)
    for path, request in CASES:
        assert await _answer(fast, path, **request) == await _answer(plain, path, **request), (
            path,
            request,
        )
    # the lane took every JSON body: not the empty one, nor one of a type that is not JSON's;
    # a script's untyped or text/plain body is read as JSON (middleware.ScriptBodiesMiddleware)
    assert len(taken) == len(CASES) - 2


async def test_a_crash_in_the_fast_lane_is_answered_as_fastapi_answers_it(
    lanes: tuple[httpx.AsyncClient, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(routes_openai, "submit_all", crash)
    fast, plain = lanes
    request = {"json": {"model": MODEL, "prompt": "Hello", **GOOD}}
    answer = await _answer(fast, "/v1/completions", **request)
    assert answer[0] == 500
    assert answer[3], "a crash's 500 carries X-Correlation-Id too (OC-CTRL-2052)"
    assert answer == await _answer(plain, "/v1/completions", **request)


async def test_a_client_gone_halfway_through_its_body_is_no_crash(
    lanes: tuple[httpx.AsyncClient, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    fast, _ = lanes
    host, port = fast.base_url.host, fast.base_url.port
    assert port is not None
    _reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"model": "'
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    reply = await fast.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", **GOOD})
    assert reply.status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
