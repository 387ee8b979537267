"""Spec 002 over real HTTP: task admission, SSE framing, race-free cancel, pools, capabilities."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import pytest

from ..conftest import wait_until
from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

TASK = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}


def parse_sse(raw: str) -> list[tuple[str, dict]]:
    """(event, payload) pairs; keep-alive comments are skipped."""
    out = []
    for block in raw.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":")
        )
        if "data" in fields:
            out.append((fields.get("event", "message"), json.loads(fields["data"])))
    return out


async def stream_task(client: httpx.AsyncClient, task_id: str) -> list[tuple[str, dict]]:
    response = await client.get(f"/v1/tasks/{task_id}/stream")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


async def test_oc_ctrl_2010_admission_accepts_with_position_and_prediction(host: Host) -> None:
    response = await host.client.post("/v1/tasks", json=TASK)
    assert response.status_code == 202
    accepted = response.json()
    assert accepted["queue_position"] == 0
    assert accepted["predicted_start_ms"] == 0
    assert accepted["pool_id"] == MODEL
    assert accepted["stream_url"] == f"/v1/tasks/{accepted['task_id']}/stream"
    await stream_task(host.client, accepted["task_id"])


async def test_oc_ctrl_2010_context_and_budget_are_checked_before_enqueue(host: Host) -> None:
    response = await host.client.post("/v1/tasks", json={"prompt": "word " * 2000, "max_tokens": 8})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "INVALID_PARAMS"
    assert body["retriable"] is False
    assert "1024" in body["message"]
    assert host.service.queues()[0].depth == 0


async def test_oc_ctrl_2020_2021_2022_2027_stream_started_tokens_metrics_end(host: Host) -> None:
    task = (await host.client.post("/v1/tasks", json={**TASK, "max_tokens": 40})).json()
    events = await stream_task(host.client, task["task_id"])
    names = [name for name, _ in events]
    assert names[0] == "started"
    assert names[-1] == "end"
    assert "metrics" in names
    assert set(names) <= {"started", "token", "metrics", "end"}
    assert set(events[0][1]) == {"queue_position", "predicted_start_ms"}
    tokens = [payload for name, payload in events if name == "token"]
    assert [t["i"] for t in tokens] == list(range(len(tokens)))
    end = events[-1][1]
    assert end["tokens_out"] == 40 or end["finish_reason"] == "stop"
    assert end["decode_ms"] == end["decode_time_ms"] >= 0
    metrics = next(payload for name, payload in events if name == "metrics")
    assert {"queue_depth", "kv_warmth", "tokens_out", "decode_tps"} <= set(metrics)  # OC-CTRL-2023


async def test_oc_ctrl_2011_queue_full_is_429_with_all_three_hints(start_host: HostFactory) -> None:
    host = await start_host(parallel=1, queue=2)
    long = {"prompt": "A long story:", "max_tokens": 24, "temperature": 0}
    responses = await asyncio.gather(*(host.client.post("/v1/tasks", json=long) for _ in range(8)))
    accepted = [r.json() for r in responses if r.status_code == 202]
    rejected = [r for r in responses if r.status_code == 429]
    assert len(accepted) == 3 and len(rejected) == 5  # one running, two waiting
    for response in rejected:
        assert int(response.headers["Retry-After"]) >= 1
        assert int(response.headers["X-Backoff-Ms"]) > 0
        body = response.json()
        assert body["policy_label"] == "reject-new"
        assert body["retriable"] is True
        assert body["retry_after_ms"] == int(response.headers["X-Backoff-Ms"])
        assert body["code"] == "ADMISSION_REJECT"
    streams = await asyncio.gather(*(stream_task(host.client, t["task_id"]) for t in accepted))
    for events in streams:
        assert events[-1] == ("end", events[-1][1])
        assert events[-1][1]["tokens_out"] == 24 or events[-1][1]["finish_reason"] == "stop"
    again = await host.client.post("/v1/tasks", json=TASK)  # the host keeps serving
    assert again.status_code == 202
    await stream_task(host.client, again.json()["task_id"])


async def test_oc_ctrl_2012_cancel_is_race_free(host: Host) -> None:
    task = (
        await host.client.post("/v1/tasks", json={"prompt": "Count:", "max_tokens": 300})
    ).json()
    received: list[tuple[str, dict]] = []
    cancel_answer: dict = {}

    async def read() -> None:
        async with host.client.stream("GET", f"/v1/tasks/{task['task_id']}/stream") as response:
            buffer = ""
            async for text in response.aiter_text():
                buffer += text
                *blocks, buffer = buffer.split("\n\n")
                received.extend(parse_sse("\n\n".join(blocks) + "\n\n"))
                tokens = sum(1 for name, _ in received if name == "token")
                if tokens >= 5 and not cancel_answer:
                    cancel_answer.update(
                        (await host.client.post(f"/v1/tasks/{task['task_id']}/cancel")).json()
                    )

    await asyncio.wait_for(read(), 30)
    tokens = [p for name, p in received if name == "token"]
    assert cancel_answer["cancelled"] is True
    assert len(tokens) == cancel_answer["tokens_emitted"], "no token after the cancel"
    assert received[-1][0] == "end"
    assert received[-1][1]["finish_reason"] == "abort"
    again = await host.client.post(f"/v1/tasks/{task['task_id']}/cancel")
    assert again.json()["cancelled"] is False


@pytest.mark.fresh_host
async def test_oc_ctrl_2013_2014_pinning(host: Host) -> None:
    pinned = await host.client.post("/v1/tasks", json={**TASK, "pool_id": MODEL})
    assert pinned.status_code == 202 and pinned.json()["pool_id"] == MODEL
    await stream_task(host.client, pinned.json()["task_id"])
    unknown = await host.client.post("/v1/tasks", json={**TASK, "pool_id": "elsewhere"})
    assert unknown.status_code == 400
    assert unknown.json()["code"] == "INVALID_PARAMS"
    drain = await host.client.post(f"/v1/pools/{MODEL}/drain", json={"deadline_ms": 0})
    assert drain.status_code == 202
    unready = await host.client.post("/v1/tasks", json={**TASK, "pool_id": MODEL})
    assert unready.status_code == 503
    assert unready.json()["code"] == "POOL_UNREADY"


async def test_oc_ctrl_2063_output_mode_is_recorded_and_unknown_values_ignored(host: Host) -> None:
    json_mode = (await host.client.post("/v1/tasks", json={**TASK, "output_mode": "json"})).json()
    assert json_mode["output_mode"] == "json"
    odd = (await host.client.post("/v1/tasks", json={**TASK, "output_mode": "hologram"})).json()
    assert odd.get("output_mode") is None
    for task in (json_mode, odd):
        await stream_task(host.client, task["task_id"])


async def test_oc_ctrl_2001_pool_health(host: Host) -> None:
    health = (await host.client.get(f"/v1/pools/{MODEL}/health")).json()
    assert health["live"] is True and health["ready"] is True and health["draining"] is False
    assert health["metrics"]["slots_total"] == 2
    assert (await host.client.get("/v1/pools/none/health")).status_code == 404


@pytest.mark.fresh_host
async def test_oc_ctrl_2002_drain_with_a_deadline(host: Host) -> None:
    task = (await host.client.post("/v1/tasks", json={"prompt": "Long:", "max_tokens": 400})).json()
    response = await host.client.post(f"/v1/pools/{MODEL}/drain", json={"deadline_ms": 300})
    assert response.status_code == 202 and response.json()["draining"] is True
    health = (await host.client.get(f"/v1/pools/{MODEL}/health")).json()
    assert health["draining"] is True and health["ready"] is False
    events = await stream_task(host.client, task["task_id"])
    assert events[-1][1]["finish_reason"] == "abort"
    # The abort is sent at once; the pool is drained when the engine's next step frees the slot.
    await wait_until(lambda: host.service.pool_health(MODEL).state == "drained")
    assert (await host.client.get(f"/v1/pools/{MODEL}/health")).json()["state"] == "drained"
    bad = await host.client.post(f"/v1/pools/{MODEL}/drain", json={"deadline_ms": -1})
    assert bad.status_code == 400


async def test_resume_after_a_drain_admits_again_but_not_while_draining(host: Host) -> None:
    """Beyond spec 002: POST /v1/pools/{id}/resume undoes a drain without a reload."""
    task = (await host.client.post("/v1/tasks", json={"prompt": "Long:", "max_tokens": 400})).json()
    await host.client.post(f"/v1/pools/{MODEL}/drain", json={"deadline_ms": 300})
    early = await host.client.post(f"/v1/pools/{MODEL}/resume")
    assert early.status_code == 503 and early.json()["code"] == "POOL_UNREADY"
    await stream_task(host.client, task["task_id"])
    await wait_until(lambda: host.service.pool_health(MODEL).state == "drained")
    resumed = await host.client.post(f"/v1/pools/{MODEL}/resume")
    assert resumed.status_code == 200 and resumed.json() == {"pool_id": MODEL, "ready": True}
    health = (await host.client.get(f"/v1/pools/{MODEL}/health")).json()
    assert health["ready"] is True and health["state"] == "ready"
    assert (await host.client.post("/v1/pools/none/resume")).status_code == 404


@pytest.mark.fresh_host
async def test_oc_ctrl_2003_reload_switches_or_rolls_back(host: Host, model_path, tmp_path) -> None:
    copy = tmp_path / "next.gguf"
    shutil.copy(model_path, copy)
    ok = await host.client.post(f"/v1/pools/{MODEL}/reload", json={"model_path": str(copy)})
    assert ok.status_code == 200 and ok.json() == {
        "pool_id": MODEL,
        "reloaded": True,
        "model_path": str(copy),
    }
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(32))
    failed = await host.client.post(f"/v1/pools/{MODEL}/reload", json={"model_path": str(broken)})
    assert failed.status_code == 400
    assert failed.json()["code"] == "INVALID_PARAMS"
    health = (await host.client.get(f"/v1/pools/{MODEL}/health")).json()
    assert health["ready"] is True and health["model_path"] == copy.name  # open: no paths
    assert "kept the previous model" in health["last_error"]
    task = (await host.client.post("/v1/tasks", json=TASK)).json()
    assert (await stream_task(host.client, task["task_id"]))[-1][0] == "end"


async def test_oc_ctrl_2004_2062_replicasets_is_not_served(host: Host) -> None:
    response = await host.client.get("/v1/replicasets")
    assert response.status_code == 404
    assert response.json()["code"] == "INVALID_PARAMS"


async def test_oc_ctrl_2060_2061_capabilities(host: Host) -> None:
    caps = (await host.client.get("/v1/capabilities")).json()
    openapi = (await host.client.get("/openapi.json")).json()
    assert caps["api_version"] == openapi["info"]["version"]
    pool = caps["pools"][0]
    assert pool["pool_id"] == MODEL and pool["engine"] == "llama.cpp"
    assert "llama-cpp-python" in pool["engine_version"]
    assert pool["ctx_max"] >= 1024 and pool["slots"] == 2 and pool["max_tokens_out"] > 0
    assert pool["supported_workloads"] == ["chat", "completion"]
    assert pool["rate_limits"]["queue_capacity"] == 16
    assert pool["features"]["cancel"] is True
    assert "/v1/capabilities" in openapi["paths"]


async def test_unknown_task_is_404(host: Host) -> None:
    assert (await host.client.get("/v1/tasks/nope/stream")).status_code == 404
    assert (await host.client.post("/v1/tasks/nope/cancel")).json()["code"] == "INVALID_PARAMS"


async def test_a_task_id_that_cannot_go_in_a_url_is_refused(host: Host) -> None:
    """`team/job1` was accepted, and then neither its stream nor its cancel could be reached
    (404 unknown endpoint): it held a slot to its last token (OC-CTRL-2012)."""
    for bad in ("team/job1", "has space", "what?", "a#b", "100%", ".", ".."):
        refused = await host.client.post("/v1/tasks", json={**TASK, "task_id": bad})
        assert refused.status_code == 400, bad
        assert refused.json()["code"] == "INVALID_PARAMS" and "task_id" in refused.json()["message"]
    assert host.service.queues()[0].depth == 0
    named = (await host.client.post("/v1/tasks", json={**TASK, "task_id": "team:job-1"})).json()
    assert named["stream_url"] == "/v1/tasks/team%3Ajob-1/stream"
    assert (await stream_task(host.client, "team%3Ajob-1"))[-1][0] == "end"


async def test_a_reload_with_a_misspelt_field_is_refused(host: Host) -> None:
    """Read past, `{"new_model_reff": ...}` reloaded the current model and answered 200."""
    for body in ({"new_model_reff": "/x.gguf"}, {"model_path": ""}):
        refused = await host.client.post(f"/v1/pools/{MODEL}/reload", json=body)
        assert refused.status_code == 400, body
    missing = await host.client.post(
        f"/v1/pools/{MODEL}/reload", json={"new_model_ref": "/nowhere/x.gguf"}
    )
    assert missing.status_code in (403, 404)  # llama-orch's name is read: the file is looked at
