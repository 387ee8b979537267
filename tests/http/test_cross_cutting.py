"""Across all endpoints: correlation IDs, API key, CORS, Prometheus, OpenAPI, disconnects,
keep-alives, and the backpressure scenario of issue 3."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import uuid

import httpx
import pytest

from infertui.core.logging import CorrelationFilter
from infertui.core.transport.http import streams

from ..conftest import wait_until
from .conftest import MODEL, Host, HostFactory
from .test_orchestrator_api import TASK, parse_sse

pytestmark = pytest.mark.model

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


async def test_oc_ctrl_2052_correlation_id_is_echoed_or_generated_everywhere(host: Host) -> None:
    given = {"X-Correlation-Id": "abc-123"}
    calls = [
        host.client.get("/v1/health", headers=given),
        host.client.post("/v1/chat/completions", json=CHAT, headers=given),
        host.client.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=given),
        host.client.post("/chat/completions", json={**CHAT, "stream": True}, headers=given),
        host.client.post("/v1/chat/completions", json={"model": "x"}, headers=given),  # 400
        host.client.get("/nowhere", headers=given),  # 404
        host.client.get("/metrics", headers=given),
    ]
    for response in await asyncio.gather(*calls):
        assert response.headers["x-correlation-id"] == "abc-123", response.request.url
    generated = (await host.client.get("/v1/models")).headers["x-correlation-id"]
    assert uuid.UUID(generated).version == 4


async def test_correlation_id_appears_in_the_requests_log_lines(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # a job that need not wait is accepted at DEBUG
    caplog.handler.addFilter(CorrelationFilter())  # as configure_console installs it
    await host.client.post(
        "/v1/chat/completions", json=CHAT, headers={"X-Correlation-Id": "trace-77"}
    )
    lines = [r for r in caplog.records if r.name.startswith("infertui.core.scheduler")]
    tagged = [r.getMessage() for r in lines if r.correlation == "[trace-77] "]
    assert any("accepted" in m for m in tagged) and any("finished" in m for m in tagged)


async def test_api_key_guards_every_endpoint_but_health(
    start_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    host = await start_host(api_key="s3cret-key")
    for path, family_key in (("/v1/chat/completions", "error"), ("/chat/completions", "error")):
        refused = await host.client.post(path, json=CHAT)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()[family_key]["code"] == "unauthorized"
    task_refused = await host.client.post("/v1/tasks", json=TASK)
    assert task_refused.status_code == 401 and task_refused.json()["code"] == "INVALID_PARAMS"
    wrong = await host.client.get("/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    for open_path in ("/v1/health", "/health", "/status", f"/v1/pools/{MODEL}/health"):
        assert (await host.client.get(open_path)).status_code == 200
    ok = await host.client.post(
        "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer s3cret-key"}
    )
    assert ok.status_code == 200
    assert "s3cret-key" not in caplog.text


async def test_oc_ctrl_2070_cors_is_off_by_default_and_allows_one_origin(
    host: Host, start_host: HostFactory
) -> None:
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
    off = await host.client.options("/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in off.headers
    on_host = await start_host(cors_origins=("http://localhost:3000",))
    on = await on_host.client.options("/v1/chat/completions", headers=preflight)
    assert on.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "x-correlation-id" in on.headers["access-control-allow-headers"].lower()
    other = await on_host.client.options(
        "/v1/chat/completions", headers={**preflight, "Origin": "http://evil.example"}
    )
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.fresh_host
async def test_prometheus_metrics(host: Host) -> None:
    await host.client.post("/v1/chat/completions", json=CHAT)
    await host.client.post("/v1/chat/completions", json={**CHAT, "model": "missing"})
    text = (await host.client.get("/metrics")).text
    for name in (
        "infertui_queue_depth", "infertui_requests_total", "infertui_ttft_seconds_bucket",
        "infertui_request_latency_seconds_count", "infertui_tokens_per_second",
        "infertui_slots_busy", "infertui_tokens_total",
    ):  # fmt: skip
        assert name in text, name
    assert re.search(rf'infertui_requests_total{{outcome="completed",pool="{MODEL}"}} 1\.0', text)


async def test_metrics_people_graph_follow_vllms_names(host: Host) -> None:
    """Issue 14 §6: KV cache use, requests running and waiting, token totals, queue, prefill
    and per-token histograms, and the process's own CPU, memory and descriptors."""
    long = {**CHAT, "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True}
    async with host.client.stream("POST", "/v1/chat/completions", json=long) as streaming:
        lines = streaming.aiter_lines()
        line = ""
        while '"content":"' not in line or '"content":""' in line:  # past the role's chunk:
            line = await anext(lines)  # a token came, so a slot holds KV cells now
        during = (await host.client.get("/metrics")).text
    ratio = float(re.search(rf'infertui_kv_cache_usage_ratio{{pool="{MODEL}"}} (\S+)', during)[1])
    assert 0 < ratio < 1
    assert f'infertui_num_requests_running{{pool="{MODEL}"}} 1.0' in during
    assert f'infertui_num_requests_waiting{{pool="{MODEL}"}} 0.0' in during
    await host.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 8})
    text = (await host.client.get("/metrics")).text
    for name in (
        "infertui_prompt_tokens_total", "infertui_generation_tokens_total",
        "infertui_request_queue_time_seconds_bucket", "infertui_request_prefill_time_seconds_sum",
        "infertui_time_per_output_token_seconds_count", "process_cpu_seconds_total",
        "process_resident_memory_bytes", "process_open_fds",
    ):  # fmt: skip
        assert name in text, name
    tpot = re.search(rf'infertui_time_per_output_token_seconds_count{{pool="{MODEL}"}} (\S+)', text)
    assert tpot and float(tpot[1]) >= 1


async def test_metrics_say_how_much_of_the_loops_time_went_to_decoding(host: Host) -> None:
    """Issue 10: the device idles while the host works between decodes. The pool counts the
    seconds decoding and the seconds its loop had work; their rates' ratio is the share
    decoding got."""
    before = host.service.pool_metrics(MODEL)
    body = {**CHAT, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    assert (await host.client.post("/v1/chat/completions", json=body)).status_code == 200
    after = host.service.pool_metrics(MODEL)
    assert before.decode_seconds_total is not None and before.busy_seconds_total is not None
    assert after.decode_seconds_total is not None and after.busy_seconds_total is not None
    decoded = after.decode_seconds_total - before.decode_seconds_total
    busy = after.busy_seconds_total - before.busy_seconds_total
    assert 0 < decoded <= busy, (decoded, busy)
    assert decoded > busy / 2, "a 270M model's decodes outweigh the loop's own work"
    text = (await host.client.get("/metrics")).text
    for name in ("infertui_engine_decode_seconds_total", "infertui_engine_busy_seconds_total"):
        value = re.search(rf'{name}{{pool="{MODEL}"}} (\S+)', text)
        assert value and float(value[1]) > 0, name


@pytest.mark.fresh_host
async def test_a_started_host_keeps_its_start_up_heap_out_of_full_collections(host: Host) -> None:
    """What start-up made (modules, the web app, the engines) lives as long as the host. A full
    collection holds the GIL, and so every stream: walking that heap took 34 to 79 ms (94k
    objects, 2-core box). Frozen at start, it is out of the collector's sight, which stays on
    for the rest; a stopped host gives it back (an engine removed since may hold cycles)."""
    assert gc.isenabled()
    assert not any(tracked is host.service for tracked in gc.get_objects())  # frozen
    await host.service.stop()
    assert any(tracked is host.service for tracked in gc.get_objects())  # given back


async def test_openapi_document_has_examples_for_the_data_plane(host: Host) -> None:
    doc = (await host.client.get("/openapi.json")).json()
    paths = doc["paths"]
    for path in ("/v1/tasks", "/v1/tasks/{task_id}/stream", "/v1/tasks/{task_id}/cancel",
                 "/v1/pools/{pool_id}/drain", "/v1/pools/{pool_id}/reload",
                 "/v1/pools/{pool_id}/resume"):  # fmt: skip
        operation = next(iter(paths[path].values()))
        assert "x-examples" in operation, path
    for path in ("/v1/chat/completions", "/v1/completions", "/chat/completions", "/chat/sse",
                 "/engines", "/v1/health", "/metrics", "/v1/capabilities"):  # fmt: skip
        assert path in paths


@pytest.mark.fresh_host
async def test_a_client_disconnect_mid_stream_frees_the_slot(host: Host) -> None:
    service = host.service
    body = {**CHAT, "max_tokens": 400, "ignore_eos": True, "stream": True}  # ends by the cancel
    async with (
        httpx.AsyncClient(base_url=host.url) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        async for _ in response.aiter_lines():
            jobs = service.live_jobs()
            if service.pool_metrics(MODEL).slots_busy == 1 and jobs[0].tokens_out > 3:
                break
    # Within a decode step; a loaded CI box is slow.
    await wait_until(lambda: service.pool_metrics(MODEL).slots_busy == 0, 5)
    snapshot = service.pool_metrics(MODEL)
    assert snapshot.cancelled == 1


async def test_a_client_leaving_while_queued_takes_its_job_out_of_the_queue(
    start_host: HostFactory,
) -> None:
    """No token has been sent yet, so only listening for the disconnect can tell: the job
    leaves the queue at once instead of waiting its turn for nobody."""
    host = await start_host(parallel=1)
    service = host.service

    long = {"model": MODEL, "prompt": "Long:", "max_tokens": 400, "ignore_eos": True}
    busy = asyncio.create_task(host.client.post("/v1/completions", json=long))
    await wait_until(lambda: service.pool_metrics(MODEL).slots_busy == 1)
    body = {**CHAT, "max_tokens": 20, "stream": True}
    async with (
        httpx.AsyncClient(base_url=host.url) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        await wait_until(lambda: service.pool_metrics(MODEL).queue_depth == 1)
    await wait_until(lambda: service.pool_metrics(MODEL).queue_depth == 0)
    snapshot = service.pool_metrics(MODEL)
    assert snapshot.cancelled == 1 and snapshot.completed == 0
    assert snapshot.slots_busy == 1, "the job that runs goes on"
    busy.cancel()


async def test_a_queued_sse_stream_gets_keepalive_comments(
    start_host: HostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "KEEPALIVE_S", 0.2)
    host = await start_host(parallel=1)
    busy = (await host.client.post("/v1/tasks", json={"prompt": "Long:", "max_tokens": 60})).json()
    waiting = (await host.client.post("/v1/tasks", json=TASK)).json()
    assert waiting["queue_position"] == 0 and waiting["predicted_start_ms"] > 0
    raw = (await host.client.get(waiting["stream_url"])).text
    before_first_token = raw.split("event: token")[0]
    assert ": ping" in before_first_token
    assert parse_sse(raw)[-1][0] == "end"
    await host.client.post(f"/v1/tasks/{busy['task_id']}/cancel")


async def test_a_reply_the_host_cuts_short_is_not_passed_off_as_whole(
    start_host: HostFactory,
) -> None:
    """A drain's deadline (likewise an engine removed, the host stopping) ends a reply a client
    still reads. OpenAI's and Ollama's dialects have no finish reason for it: the stream ends
    with an error saying so, and a whole reply is an error. It used to end as "stop"."""
    host = await start_host(parallel=3)  # all three under way when the drain comes
    endless = {**CHAT, "max_tokens": 900, "ignore_eos": True}
    openai_stream = host.client.stream(
        "POST", "/v1/chat/completions", json={**endless, "stream": True}
    )
    ollama_body = {"model": MODEL, "messages": CHAT["messages"], "options": {"num_predict": 900}}
    whole = asyncio.create_task(
        host.client.post("/v1/chat/completions", json={**endless, "stream": False})
    )
    async with openai_stream as response:
        lines = aiter(response.aiter_lines())
        assert (await anext(lines)).startswith("data: ")  # under way
        async with host.client.stream("POST", "/api/chat", json=ollama_body) as ollama:
            ollama_lines = aiter(ollama.aiter_lines())
            await anext(ollama_lines)
            await host.service.drain_engine(MODEL, deadline_ms=0)
            rest = [line async for line in ollama_lines]
        events = [line[6:] async for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and '"finish_reason":"stop"' not in "".join(events)
    error = json.loads(events[-2])["error"]
    assert error["code"] == "aborted" and "before it was complete" in error["message"]
    assert "before it was complete" in json.loads(rest[-1])["error"]
    cut = await whole
    assert cut.status_code == 503 and "before it was complete" in cut.text  # SDKs retry it
    assert cut.headers["Retry-After"] == "2"


async def test_a_page_s_body_not_sent_as_json_is_refused_and_a_script_s_is_read(
    host: Host,
) -> None:
    """`curl -d` sends a form's Content-Type, and Ollama's API documents just that: a script's
    body is read as JSON whatever its type. A browser's is not: read as JSON, a web page could
    drive a host on localhost with a form or text/plain, without a CORS preflight; refused,
    the answer says what to send instead of listing the fields as missing."""
    body = json.dumps(CHAT).encode()
    page = {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}
    for path in ("/v1/chat/completions", "/api/chat"):
        for kind in ("application/x-www-form-urlencoded", "text/plain", None):
            typed = {"content-type": kind} if kind else {}
            for browser in ({"origin": page["origin"]}, {"sec-fetch-site": "cross-site"}):
                refused = await host.client.post(path, content=body, headers=typed | browser)
                assert refused.status_code == 400, refused.text
                assert "Content-Type: application/json" in refused.text
            read = await host.client.post(path, content=body, headers=typed)
            assert read.status_code == 200, (path, kind, read.text)
    # Ollama's documented `curl -X DELETE …/api/delete -d '{"model": …}'` too (an audit found
    # DELETE's body refused for its type): read, so the answer is about the model
    form = {"content-type": "application/x-www-form-urlencoded"}
    gone = await host.client.request(
        "DELETE", "/api/delete", content=b'{"model": "nope:1b"}', headers=form
    )
    assert gone.status_code == 404 and "nope" in gone.text, gone.text
    other = await host.client.post("/api/chat", content=body, headers={"content-type": "text/xml"})
    assert other.status_code == 400  # a type that is not a script's shorthand stays refused
    typed = await host.client.post(
        "/api/chat", content=body, headers={"content-type": "application/json"} | page
    )
    assert typed.status_code == 200


async def test_a_page_that_rebinds_its_name_to_the_host_is_refused(
    start_host: HostFactory,
) -> None:
    """DNS rebinding: a page points a name of its own at 127.0.0.1 and is then same-origin
    with a loopback host that needs no key (Ollama's CVE-2024-28224). Its requests name that
    name in Host: refused, in each endpoint's own error shape. Loopback names and the names
    in allowed_hosts (a proxy's) are answered, and a host with API keys is not affected."""
    host = await start_host()
    rebound = {"host": "attacker.example:8080"}
    models = await host.client.get("/v1/models", headers=rebound)
    assert models.status_code == 403 and models.json()["error"]["code"] == "forbidden"
    assert "allowed_hosts" in models.json()["error"]["message"]
    ollama = await host.client.post("/api/chat", json=CHAT, headers=rebound)
    assert ollama.status_code == 403 and set(ollama.json()) == {"error"}
    port = host.server.port
    for name in ("localhost", "127.0.0.1", "127.0.0.2", "[::1]", "LOCALHOST"):
        answered = await host.client.get("/v1/models", headers={"host": f"{name}:{port}"})
        assert answered.status_code == 200, name
    proxied = await start_host(allowed_hosts=("infer.team.lan",))
    through = await proxied.client.get("/v1/models", headers={"host": "infer.team.lan"})
    assert through.status_code == 200
    keyed = await start_host(api_key="k")
    with_key = await keyed.client.get(
        "/v1/models", headers={**rebound, "authorization": "Bearer k"}
    )
    assert with_key.status_code == 200  # the key is the guard there
