"""Issue 37 end to end on the real engine and real clients: named API keys are who asks; a
teammate's question starts ahead of another's backlog; batch work yields the next slot to
interactive work; an identity's limits are 429s with Retry-After and OpenAI's x-ratelimit-*
headers, and never stop the host serving the others."""

from __future__ import annotations

import asyncio
import logging

import httpx
import openai
import pytest

from infertui.core.protocol.errors import InferError
from infertui.core.transport.http.access import Access, read_keys_file

from ..conftest import wait_until
from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

KEYS = {"alice": "sk-alice", "bob": "sk-bob", "carol": "sk-carol"}
JOB = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True}


def as_(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


async def named_host(start_host: HostFactory, **shares: object) -> Host:
    return await start_host(parallel=2, queue=64, more={"keys": KEYS, "shares": shares})


def waiting(host: Host) -> list[tuple[str | None, str]]:
    """(identity, class) of each waiting job, in queue order."""
    return [(e.identity, e.priority) for e in host.service.queues()[0].waiting]


async def backlog(
    host: Host, who: str, n: int, **body: object
) -> list[asyncio.Task[httpx.Response]]:
    """`n` completions of `who`, sent at once; waits until all are queued or running."""
    send = [
        asyncio.create_task(
            host.client.post(
                "/v1/completions", json={"model": MODEL, **JOB, **body}, headers=as_(who)
            )
        )
        for _ in range(n)
    ]
    await wait_until(lambda: len(waiting(host)) >= n - 2)
    return send


async def test_a_teammates_question_starts_ahead_of_anothers_backlog(
    start_host: HostFactory,
) -> None:
    host = await named_host(start_host)
    alices = await backlog(host, "alice", 12)
    assert {who for who, _ in waiting(host)} == {"alice"}
    accepted = await host.client.post("/v1/tasks", json=JOB, headers=as_("bob"))
    assert accepted.status_code == 202 and accepted.json()["queue_position"] == 0
    assert waiting(host)[0] == ("bob", "interactive")
    stream = await host.client.get(
        f"/v1/tasks/{accepted.json()['task_id']}/stream", headers=as_("bob")
    )
    assert stream.status_code == 200 and "event: end" in stream.text
    # bob's job took the next slot that freed: most of alice's backlog still waited for him
    assert sum(who == "alice" for who, _ in waiting(host)) >= 5
    replies = await asyncio.gather(*alices)
    assert all(reply.status_code == 200 for reply in replies)
    users = {u.identity: u for u in host.service.shares.users()}
    assert users["alice"].tokens_today > 12 * 24 and users["bob"].tokens_today > 24
    assert users["alice"].running == users["alice"].queued == 0


async def test_batch_work_yields_the_next_slot_to_interactive_work(start_host: HostFactory) -> None:
    host = await named_host(start_host)
    batch = await backlog(host, "alice", 8, service_tier="flex")
    assert {cls for _, cls in waiting(host)} == {"batch"}
    chat = asyncio.create_task(
        host.client.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
            headers=as_("alice"),  # her own interactive question passes her own batch work
        )
    )
    await wait_until(lambda: chat.done() or waiting(host)[0] == ("alice", "interactive"))
    reply = await chat
    assert reply.status_code == 200
    assert sum(cls == "batch" for _, cls in waiting(host)) >= 4
    assert all(r.status_code == 200 for r in await asyncio.gather(*batch))


async def test_a_spent_token_budget_is_a_429_with_retry_after_and_rate_headers(
    start_host: HostFactory,
) -> None:
    host = await named_host(start_host, users={"carol": {"tokens_per_minute": 40}})
    client = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key=KEYS["carol"], max_retries=0)
    first = await client.completions.with_raw_response.create(
        model=MODEL, prompt="Once upon a time", max_tokens=48, extra_body={"ignore_eos": True}
    )
    assert first.headers["x-ratelimit-limit-tokens"] == "40"
    with pytest.raises(openai.RateLimitError) as refused:
        await client.completions.create(model=MODEL, prompt="Again", max_tokens=4)
    response = refused.value.response
    assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
    assert response.headers["x-ratelimit-remaining-tokens"] == "0"
    assert refused.value.code == "budget_exceeded"
    # spec 002's shape for the same refusal, and bob is served meanwhile
    task = await host.client.post("/v1/tasks", json=JOB, headers=as_("carol"))
    assert task.status_code == 429 and task.json()["policy_label"] == "token-budget"
    assert task.json()["code"] == "ADMISSION_REJECT" and "X-Backoff-Ms" in task.headers
    other = await host.client.post(
        "/v1/completions", json={"model": MODEL, **JOB}, headers=as_("bob")
    )
    assert other.status_code == 200 and "x-ratelimit-limit-tokens" not in other.headers
    await client.close()


async def test_a_queued_cap_refuses_the_extra_job_and_loses_none(start_host: HostFactory) -> None:
    host = await named_host(start_host, users={"alice": {"queued": 2}})
    sent = [
        asyncio.create_task(
            host.client.post(
                "/v1/completions",
                json={"model": MODEL, **JOB, "max_tokens": 64},
                headers=as_("alice"),
            )
        )
        for _ in range(6)
    ]
    replies = await asyncio.gather(*sent)
    statuses = sorted(r.status_code for r in replies)
    assert statuses == [200] * 4 + [429] * 2  # two running, two waiting, two refused
    refused = next(r for r in replies if r.status_code == 429)
    assert refused.json()["error"]["code"] == "client_busy" and "Retry-After" in refused.headers


async def test_who_asks_is_in_the_logs_and_in_bounded_metrics(
    start_host: HostFactory, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text("# the team\ndora = sk-dora\n")
    host = await start_host(more={"keys": KEYS, "keys_file": str(keys_file)})
    caplog.set_level(logging.INFO, logger="infertui.core.scheduler.pool")
    for who in ("alice", "dora"):
        headers = {"Authorization": "Bearer sk-dora"} if who == "dora" else as_(who)
        reply = await host.client.post(
            "/v1/completions", json={"model": MODEL, **JOB}, headers=headers
        )
        assert reply.status_code == 200
    assert any(" from dora finished " in record.getMessage() for record in caplog.records)
    metrics = (await host.client.get("/metrics", headers=as_("bob"))).text
    assert 'infertui_identity_tokens_total{identity="dora"}' in metrics
    assert 'infertui_identity_jobs_total{identity="alice"} 1.0' in metrics


def test_a_keys_file_names_each_key_and_a_bad_line_is_named(tmp_path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice = sk-1  # first\n\nbob=sk-2\n")
    assert read_keys_file(path) == {"alice": "sk-1", "bob": "sk-2"}
    path.write_text("alice = sk-1\njust-a-key\n")
    with pytest.raises(InferError) as caught:
        read_keys_file(path)
    assert f"{path}:2" in caught.value.message


def test_two_people_with_one_key_stop_the_host_at_start() -> None:
    """An audit gave bob alice's key: every request of his was alice's (usage, limits, the
    ledger), without a word. Each needs a key of their own; the admin key is nobody's."""
    for named, admin in (({"alice": "sk-1", "bob": "sk-1"}, None), ({"alice": "sk-1"}, "sk-1")):
        with pytest.raises(InferError) as caught:
            Access(admin_key=admin, named=named)
        assert "the same key" in caught.value.message and "alice" in caught.value.message
    assert Access(admin_key="sk-0", named={"alice": "sk-1", "bob": "sk-2"}).keys_required


def test_keys_without_an_admin_key_on_loopback_warn_that_every_key_is_admin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A team reaching the box through an SSH tunnel runs just this: documented, and now said
    at start (an audit found dave's key deleting library models)."""
    with caplog.at_level(logging.WARNING, logger="infertui.core.transport.http.access"):
        Access(named={"dave": "sk-d"})
        warned = [r.getMessage() for r in caplog.records]
        Access(admin_key="sk-0", named={"dave": "sk-d"})
        Access(named={"dave": "sk-d"}, loopback=False)  # (beyond loopback: nobody is admin)
    assert len(warned) == 1 and "every key may manage" in warned[0]
    assert len(caplog.records) == 1
