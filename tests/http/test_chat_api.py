"""Spec 001 over real HTTP: plain JSON, NDJSON streaming and SSE, with their error shapes."""

from __future__ import annotations

import asyncio
import json

import pytest

from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.events import Finished
from infertui.core.protocol.snapshots import TimingStats

from .conftest import MODEL, Host

pytestmark = pytest.mark.model

BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Hello, how are you?"}],
    "max_tokens": 12,
}


async def test_spec_001_regular_response(host: Host) -> None:
    response = await host.client.post("/chat/completions", json=BODY)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"id", "model", "created", "message", "done"}
    assert body["done"] is True and body["model"] == MODEL
    assert body["message"]["role"] == "assistant" and body["message"]["content"]


@pytest.mark.deterministic
async def test_spec_001_json_streaming_lines_index_and_done(host: Host) -> None:
    """NDJSON lines, indexed, the last one done; streamed, the whole reply's words (the host is
    deterministic, so the second request reads its prompt afresh, not on the first's cells)."""
    async with host.client.stream(
        "POST", "/chat/completions", json={**BODY, "stream": True}
    ) as response:
        assert response.headers["content-type"] == "application/json"
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["connection"] == "keep-alive"
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [json.loads(line) async for line in response.aiter_lines() if line]
    assert [line["index"] for line in lines] == list(range(len(lines)))
    assert all(line["done"] is False for line in lines[:-1])
    assert lines[-1]["done"] is True
    whole = (await host.client.post("/chat/completions", json={**BODY, "temperature": 0})).json()
    streamed = [json.loads(x) for x in (await host.client.post(
        "/chat/completions", json={**BODY, "temperature": 0, "stream": True})).text.splitlines()]  # fmt: skip
    assert "".join(line["message"]["content"] for line in streamed) == whole["message"]["content"]


async def test_spec_001_sse_streaming_ends_with_end(host: Host) -> None:
    async with host.client.stream("POST", "/chat/sse", json=BODY) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        raw = "".join([part async for part in response.aiter_text()])
    events = [e for e in raw.split("\n\n") if e.strip()]
    assert events[-1] == "data: [END]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks and all(c["done"] is False for c in chunks)
    assert [c["index"] for c in chunks] == list(range(len(chunks)))


async def test_spec_001_pre_stream_errors_are_http_statuses_in_the_spec_shape(host: Host) -> None:
    for path in ("/chat/completions", "/chat/sse"):
        response = await host.client.post(path, json={**BODY, "model": "missing"})
        assert response.status_code == 404
        assert set(response.json()["error"]) == {"message", "type", "code"}
        invalid = await host.client.post(path, json={"model": MODEL})
        assert invalid.status_code == 400
        assert invalid.json()["error"]["type"] == "invalid_request_error"


async def _fail_running_job(host: Host) -> None:
    """Simulates the batch loop failing a job mid-stream (as a llama_decode error does)."""
    pool = host.service._registry.get(MODEL)  # white box: inject a failure into a live job
    while not pool.jobs() or pool.jobs()[0].tokens_published < 2:
        await asyncio.sleep(0.005)
    error = InferError(ErrorKind.GENERATION_FAILED, "llama_decode failed (code -3)")
    pool.jobs()[0]._deliver(Finished("error", TimingStats(), error))


@pytest.mark.fresh_host  # the job ends by hand while its slot decodes on: the host is spent
async def test_spec_001_json_streaming_error_is_one_line_with_done(host: Host) -> None:
    body = {**BODY, "max_tokens": 200, "stream": True}
    failing = asyncio.create_task(_fail_running_job(host))
    response = await host.client.post("/chat/completions", json=body)
    await failing
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert response.status_code == 200
    assert lines[-1] == {
        "error": {
            "message": "llama_decode failed (code -3)",
            "type": "server_error",
            "code": "inference_error",
        },
        "done": True,
    }
    assert all("message" in line and line["done"] is False for line in lines[:-1])


@pytest.mark.fresh_host  # as above
async def test_spec_001_sse_error_event_then_end(host: Host) -> None:
    failing = asyncio.create_task(_fail_running_job(host))
    response = await host.client.post("/chat/sse", json={**BODY, "max_tokens": 200})
    await failing
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [END]"
    error_event = events[-2].split("\n")
    assert error_event[0] == "event: error"
    assert json.loads(error_event[1][6:])["code"] == "inference_error"
