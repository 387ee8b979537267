"""Careless and hostile HTTP clients (issue 12): bad text, huge paths and bodies, and clients
that leave before a non-streaming reply is done. None may cost the host more than a clear
error, and none may stop it serving others."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

LONE_SURROGATE = "\\ud800x"  # as JSON text: a lone UTF-16 surrogate escape

BODIES = {
    "/v1/chat/completions": '{"model":"%s","messages":[{"role":"user","content":"%s"}]}',
    "/v1/completions": '{"model":"%s","prompt":"%s"}',
    "/chat/completions": '{"model":"%s","messages":[{"role":"user","content":"%s"}]}',
    "/chat/sse": '{"model":"%s","messages":[{"role":"user","content":"%s"}]}',
    "/v1/tasks": '{"model":"%s","prompt":"%s"}',
}


def error_text(response: httpx.Response) -> str:
    return response.text.lower()


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_lone_surrogate_is_a_400_and_the_host_serves_on(host: Host, path: str) -> None:
    for model, text in ((MODEL, LONE_SURROGATE), (LONE_SURROGATE, "hi")):
        body = BODIES[path] % (model, text)
        response = await host.client.post(
            path, content=body.encode(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, response.text
        assert "invalid json" in error_text(response) and "surrogate" in error_text(response)
    pinned = '{"pool_id":"' + LONE_SURROGATE + '","prompt":"hi"}'
    response = await host.client.post(
        "/v1/tasks", content=pinned.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    ok = await host.client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2}
    )
    assert ok.status_code == 200


async def test_a_control_character_names_the_place_not_a_field(host: Host) -> None:
    body = b'{"model":"gemma-3-270m","prompt":"a\x01b"}'
    response = await host.client.post(
        "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert "control character" in error["message"] and "column" in error["message"]
    assert error.get("param") is None


async def test_a_path_too_long_for_the_filesystem_is_a_404_not_a_500(host: Host) -> None:
    response = await host.client.post(
        "/engines", json={"engine_id": "e1", "model_path": "/" + "A" * 300}
    )
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "model_file_not_found"


async def test_a_megabyte_path_is_refused_and_stays_out_of_the_log(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    huge = "/" + "A" * 2**20  # under the body limit (a 5 MB one is a 413)
    response = await host.client.post("/engines", json={"engine_id": "e1", "model_path": huge})
    assert response.status_code == 400
    assert "model_path" in response.json()["error"]["message"]
    assert len(response.content) < 2000
    assert max((len(r.getMessage()) for r in caplog.records), default=0) < 10_000


async def test_a_body_over_the_limit_is_a_413_and_health_stays_quick(host: Host) -> None:
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (5 * 2**20)}]}

    async def health_times() -> list[float]:
        times = []
        for _ in range(20):
            start = asyncio.get_running_loop().time()
            assert (await host.client.get("/v1/health")).status_code == 200
            times.append(asyncio.get_running_loop().time() - start)
        return times

    bodies = [host.client.post("/v1/chat/completions", json=big) for _ in range(4)]
    *responses, times = await asyncio.gather(*bodies, health_times())
    for response in responses:
        assert response.status_code == 413
        error = response.json()["error"]
        assert (
            error["code"] == "payload_too_large" and "limit of 4,194,304 bytes" in error["message"]
        )
    assert max(times) < 0.5, times


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell a story."}]}),
        ("/v1/completions", {"prompt": ["Once upon a time", "In a galaxy"]}),
        ("/chat/completions", {"messages": [{"role": "user", "content": "Tell a story."}]}),
    ],
)
async def test_a_non_streaming_client_that_leaves_cancels_its_jobs(
    start_host: HostFactory, path: str, body: dict[str, object]
) -> None:
    host = await start_host(parallel=2)
    request = {"model": MODEL, "max_tokens": 900, "temperature": 0, "ignore_eos": True, **body}
    async with httpx.AsyncClient(base_url=host.url, timeout=1.0) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post(path, json=request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0  # within a decode step; a loaded CI box is slow
    while host.service.pool_metrics(MODEL).slots_busy and loop.time() < deadline:
        await asyncio.sleep(0.02)
    metrics = host.service.pool_metrics(MODEL)
    assert metrics.slots_busy == 0, "the slots are free soon after the client left"
    assert metrics.cancelled == (2 if path == "/v1/completions" else 1)
    assert metrics.tokens_out_total < 400, "the jobs stopped, they did not run to 900 tokens each"


async def test_a_chunked_body_over_the_limit_is_cut_off_with_a_413(host: Host) -> None:
    async def chunks():  # no Content-Length: the host counts as the bytes come
        yield b'{"model":"gemma-3-270m","prompt":"'
        for _ in range(5):
            yield b"x" * 2**20
        yield b'"}'

    response = await host.client.post(
        "/v1/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_long_prompts_are_tokenized_off_the_event_loop(host: Host) -> None:
    """Four 3 MB prompts take seconds to tokenize; health answers meanwhile (issue 12 §4)."""
    prompt = "The quick brown fox jumps over the lazy dog. " * (3 * 2**20 // 45)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
    posts = [asyncio.create_task(host.client.post("/v1/completions", json=body)) for _ in range(4)]
    await asyncio.sleep(0.3)  # the bodies are in; tokenization has begun
    loop = asyncio.get_running_loop()
    times = []
    while not all(post.done() for post in posts):
        start = loop.time()
        assert (await host.client.get("/v1/health")).status_code == 200
        times.append(loop.time() - start)
        await asyncio.sleep(0.05)
    for post in posts:
        response = post.result()
        assert response.status_code == 400  # far over the 1,024-token context
        assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(times) >= 5, "the prompts took a while: health was asked meanwhile"
    assert max(times) < 0.25, times


async def _task(host: Host, **body: object) -> str:
    response = await host.client.post(
        "/v1/tasks", json={"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, **body}
    )
    assert response.status_code == 202, response.text
    return str(response.json()["task_id"])


async def _read(host: Host, task_id: str, stop_after: int | None = None) -> list[tuple[str, dict]]:
    from .test_orchestrator_api import parse_sse

    events: list[tuple[str, dict]] = []
    async with host.client.stream("GET", f"/v1/tasks/{task_id}/stream") as response:
        assert response.status_code == 200
        buffer = ""
        async for text in response.aiter_text():
            buffer += text
            *blocks, buffer = buffer.split("\n\n")
            events.extend(parse_sse("\n\n".join(blocks) + "\n\n"))
            tokens = sum(1 for name, _ in events if name == "token")
            if stop_after is not None and tokens >= stop_after:
                break  # this reader leaves mid-stream
    return events


def _tokens(events: list[tuple[str, dict]]) -> str:
    return "".join(payload["t"] for name, payload in events if name == "token")


async def test_a_finished_task_streams_again_in_full(host: Host) -> None:
    task_id = await _task(host)
    first = await asyncio.wait_for(_read(host, task_id), 30)
    second = await asyncio.wait_for(_read(host, task_id), 5)  # used to hang for ever
    assert first[-1][0] == second[-1][0] == "end"
    assert _tokens(first) == _tokens(second) != ""


async def test_two_readers_both_get_every_token_and_a_leaving_one_cancels_nothing(
    host: Host,
) -> None:
    task_id = await _task(host, max_tokens=60)
    quitter, stayer = await asyncio.gather(
        _read(host, task_id, stop_after=3), asyncio.wait_for(_read(host, task_id), 30)
    )
    assert stayer[-1][0] == "end" and stayer[-1][1]["finish_reason"] == "length"
    assert _tokens(stayer).startswith(_tokens(quitter))
    late = await asyncio.wait_for(_read(host, task_id), 5)
    assert _tokens(late) == _tokens(stayer)


async def test_task_ids_are_random_and_a_finished_one_is_not_taken_again(host: Host) -> None:
    ids = {await _task(host, max_tokens=1) for _ in range(3)}
    assert len(ids) == 3
    assert all(len(i) >= 16 and i.startswith("job-") for i in ids)
    mine = await _task(host, task_id="my-task", max_tokens=1)
    await asyncio.wait_for(_read(host, mine), 30)
    again = await host.client.post("/v1/tasks", json={"prompt": "Hi", "task_id": "my-task"})
    assert again.status_code == 409
    assert again.json()["code"] == "INVALID_PARAMS" and "exists" in again.json()["message"]


async def test_prompt_arrays_that_can_never_fit_are_400s(start_host: HostFactory) -> None:
    host = await start_host(parallel=1, queue=2)
    empty = await host.client.post("/v1/completions", json={"model": MODEL, "prompt": []})
    assert empty.status_code == 400
    many = {"model": MODEL, "prompt": ["Hi"] * 5, "max_tokens": 2}
    response = await host.client.post("/v1/completions", json=many)
    assert response.status_code == 400, response.text
    assert "more than engine" in response.json()["error"]["message"]
    assert host.service.pool_metrics(MODEL).slots_busy == 0, "the admitted ones were let go"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": [{"role": "user", "content": "a\u0000b"}]}, "NUL"),
        ({"messages": [{"role": "user", "content": "Hi"}], "stop": ["x" * 2000]}, "stop"),
        ({"messages": [{"role": "user", "content": "Hi"}] * 1025}, "messages"),
    ],
)
async def test_every_string_and_list_is_bounded_and_a_nul_is_refused(
    host: Host, body: dict[str, object], words: str
) -> None:
    """A NUL used to cut a turn short in silence; stop strings had no size limit (issue 12)."""
    response = await host.client.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"]
