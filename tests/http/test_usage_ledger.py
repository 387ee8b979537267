"""Issue 37 §4-5 over real HTTP: spec 002 §10's session budgets (OC-CTRL-2068) in headers and
SSE metrics frames; the usage ledger: a record per job, even a failed one, readable as an
artifact (OC-CTRL-2065 to 2067); GET /v1/host/usage per identity and day; a restart keeps the
records and what each identity used today."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from .conftest import MODEL, Host, HostFactory
from .test_orchestrator_api import parse_sse

pytestmark = pytest.mark.model

KEYS = {"alice": "sk-alice", "bob": "sk-bob"}
ALICE = {"Authorization": "Bearer sk-alice"}
BOB = {"Authorization": "Bearer sk-bob"}
ADMIN = {"Authorization": "Bearer admin-key"}
JOB = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}


async def ledger_host(start_host: HostFactory, **more: object) -> Host:
    return await start_host(admin_key="admin-key", more={"keys": KEYS, **more})


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


async def test_oc_ctrl_2068_a_sessions_budget_cuts_its_last_job_and_then_refuses(
    start_host: HostFactory,
) -> None:
    host = await ledger_host(start_host)
    budget = {"session_id": "s1", "budget": {"tokens": 40}}
    first = await host.client.post("/v1/tasks", json={**JOB, **budget}, headers=ALICE)
    assert first.status_code == 202
    events = parse_sse((await host.client.get(first.json()["stream_url"], headers=ALICE)).text)
    frames = [payload for kind, payload in events if kind == "metrics"]
    assert frames and frames[-1]["budget"]["session_id"] == "s1"
    assert frames[-1]["budget"]["tokens_left"] <= 40
    end = next(payload for kind, payload in events if kind == "end")
    assert end["tokens_out"] == 16
    # the prompt (a few tokens) and 16 out are spent; the next job gets what is left, no more
    second = await host.client.post(
        "/v1/tasks", json={**JOB, "max_tokens": 64, "session_id": "s1"}, headers=ALICE
    )
    assert second.status_code == 202
    left = int(second.headers["x-budget-tokens-remaining"])
    events = parse_sse((await host.client.get(second.json()["stream_url"], headers=ALICE)).text)
    end = next(payload for kind, payload in events if kind == "end")
    assert 0 < end["tokens_out"] < 40 - 16 and end["finish_reason"] == "length"
    assert left >= 0
    third = await host.client.post("/v1/tasks", json={**JOB, "session_id": "s1"}, headers=ALICE)
    assert third.status_code == 429 and third.json()["policy_label"] == "token-budget"
    # the same session id of another identity is another session
    other = await host.client.post("/v1/tasks", json={**JOB, "session_id": "s1"}, headers=BOB)
    assert other.status_code == 202
    await host.client.get(other.json()["stream_url"], headers=BOB)


async def test_a_budget_without_a_session_is_a_clear_400(start_host: HostFactory) -> None:
    host = await ledger_host(start_host)
    refused = await host.client.post(
        "/v1/tasks", json={**JOB, "budget": {"tokens": 5}}, headers=ALICE
    )
    assert refused.status_code == 400 and "session_id" in refused.json()["message"]


async def test_oc_ctrl_2067_every_job_leaves_a_record_even_a_cancelled_or_failed_one(
    start_host: HostFactory,
) -> None:
    host = await ledger_host(start_host)
    done = await host.client.post("/v1/tasks", json=JOB, headers=ALICE)
    await host.client.get(done.json()["stream_url"], headers=ALICE)
    cancelled = await host.client.post("/v1/tasks", json={**JOB, "max_tokens": 512}, headers=ALICE)
    await host.client.post(f"/v1/tasks/{cancelled.json()['task_id']}/cancel", headers=ALICE)
    record = (
        await host.client.get(f"/v1/artifacts/{done.json()['task_id']}", headers=ALICE)
    ).json()
    assert record["kind"] == "job" and record["content"]["identity"] == "alice"
    content = record["content"]
    assert content["tokens_out"] == 16 and content["outcome"] == "length"
    assert content["engine"] == MODEL and content["params"]["max_tokens"] == 16
    assert content["transcript"]["end"]["tokens_out"] == 16
    assert "Once upon" not in json.dumps(record)  # prompts and replies are not kept
    aborted = (
        await host.client.get(f"/v1/artifacts/{cancelled.json()['task_id']}", headers=ALICE)
    ).json()
    assert aborted["content"]["outcome"] == "abort"
    missing = await host.client.get("/v1/artifacts/job-nope", headers=ALICE)
    assert missing.status_code == 404 and "job-nope" in missing.json()["message"]


async def test_oc_ctrl_2065_2066_artifacts_are_content_addressed_and_read_back(
    start_host: HostFactory,
) -> None:
    host = await ledger_host(start_host)
    plan = {"kind": "plan", "content": {"steps": ["read", "write"]}, "tags": ["refactor"]}
    first = await host.client.post("/v1/artifacts", json=plan, headers=ALICE)
    assert first.status_code == 201 and first.json()["id"].startswith("sha256:")
    again = await host.client.post("/v1/artifacts", json={**plan, "tags": ["other"]}, headers=BOB)
    assert again.json()["id"] == first.json()["id"] and again.json()["tags"] == ["refactor"]
    child = await host.client.post(
        "/v1/artifacts",
        json={"kind": "diff", "content": "--- a\n+++ b\n", "lineage": [first.json()["id"]]},
        headers=ALICE,
    )
    read = (await host.client.get(f"/v1/artifacts/{child.json()['id']}", headers=ALICE)).json()
    assert read["lineage"] == [first.json()["id"]] and read["content"] == "--- a\n+++ b\n"
    assert read["created_at"] > 0


async def test_usage_per_identity_and_day_is_everyones_for_an_admin_and_own_for_a_key(
    start_host: HostFactory,
) -> None:
    host = await ledger_host(start_host)
    for headers in (ALICE, ALICE, BOB):
        reply = await host.client.post(
            "/v1/completions", json={"model": MODEL, **JOB}, headers=headers
        )
        assert reply.status_code == 200
    everyone = (await host.client.get("/v1/host/usage", headers=ADMIN)).json()
    days = {(d["day"], d["identity"]): d for d in everyone["days"]}
    assert days[today(), "alice"]["jobs"] == 2 and days[today(), "alice"]["tokens_out"] == 32
    assert days[today(), "bob"]["jobs"] == 1
    assert {u["identity"] for u in everyone["users"]} >= {"alice", "bob"}
    own = (await host.client.get("/v1/host/usage", headers=BOB)).json()
    assert {d["identity"] for d in own["days"]} == {"bob"}
    assert {u["identity"] for u in own["users"]} == {"bob"}


async def test_a_restarted_host_keeps_its_records_and_todays_token_budgets(
    start_host: HostFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path_factory.mktemp("kept-data")
    shares = {"users": {"alice": {"tokens_per_day": 30}}}
    host = await start_host(more={"keys": KEYS, "shares": shares}, data_dir=data)
    reply = await host.client.post(
        "/v1/completions", json={"model": MODEL, **JOB, "max_tokens": 32}, headers=ALICE
    )
    assert reply.status_code == 200
    await host.service.stop()
    again = await start_host(more={"keys": KEYS, "shares": shares}, data_dir=data)
    refused = await again.client.post(
        "/v1/completions", json={"model": MODEL, **JOB}, headers=ALICE
    )
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    usage = (await again.client.get("/v1/host/usage", headers=ALICE)).json()
    assert [d["jobs"] for d in usage["days"] if d["identity"] == "alice"] == [1]


async def test_prompts_and_replies_are_kept_only_when_asked(start_host: HostFactory) -> None:
    host = await start_host(more={"keys": KEYS, "ledger": {"keep_text": True}})
    done = await host.client.post("/v1/tasks", json=JOB, headers=ALICE)
    events = parse_sse((await host.client.get(done.json()["stream_url"], headers=ALICE)).text)
    text = "".join(payload["t"] for kind, payload in events if kind == "token")
    record = (
        await host.client.get(f"/v1/artifacts/{done.json()['task_id']}", headers=ALICE)
    ).json()
    transcript = record["content"]["transcript"]
    assert transcript["prompt"] == "Once upon a time" and transcript["text"] == text
