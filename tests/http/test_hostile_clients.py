"""Careless and hostile HTTP clients (issue 12): bad text, huge paths and bodies, and clients
that leave before a non-streaming reply is done. None may cost the host more than a clear
error, and none may stop it serving others."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest

from infertui.core.config import HttpSettings
from infertui.core.engine import Engine
from infertui.core.host import Ask
from infertui.core.host import service as service_module
from infertui.core.protocol.errors import InferError
from infertui.core.scheduler import PreparedJob
from infertui.core.transport.http import is_loopback, parse_listen

from ..conftest import wait_until
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
    body = b'{"model":"smollm2-135m","prompt":"a\x01b"}'
    response = await host.client.post(
        "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert "control character" in error["message"] and "column" in error["message"]
    assert error.get("param") is None


async def test_a_path_too_long_for_the_filesystem_is_a_404_not_a_500(host: Host, tmp_path) -> None:
    too_long = str(tmp_path / ("A" * 300))  # in a model folder: the filesystem answers
    response = await host.client.post("/engines", json={"engine_id": "e1", "model_path": too_long})
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
    # Within a decode step; a loaded CI box is slow.
    await wait_until(lambda: host.service.pool_metrics(MODEL).slots_busy == 0, 5)
    metrics = host.service.pool_metrics(MODEL)
    assert metrics.cancelled == (2 if path == "/v1/completions" else 1)
    assert metrics.tokens_out_total < 400, "the jobs stopped, they did not run to 900 tokens each"


async def test_a_chunked_body_over_the_limit_is_cut_off_with_a_413(host: Host) -> None:
    async def chunks():  # no Content-Length: the host counts as the bytes come
        yield b'{"model":"smollm2-135m","prompt":"'
        for _ in range(5):
            yield b"x" * 2**20
        yield b'"}'

    response = await host.client.post(
        "/v1/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_long_prompts_are_tokenized_off_the_event_loop(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four 3 MB prompts take seconds to tokenize; health answers meanwhile (issue 12 §4)."""
    tokenizing = threading.Event()
    prepare = service_module.prepare

    def marked(engine: Engine, ask: Ask) -> PreparedJob:
        tokenizing.set()
        return prepare(engine, ask)

    monkeypatch.setattr(service_module, "prepare", marked)
    prompt = "The quick brown fox jumps over the lazy dog. " * (3 * 2**20 // 45)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
    posts = [asyncio.create_task(host.client.post("/v1/completions", json=body)) for _ in range(4)]
    await wait_until(tokenizing.is_set)  # a body is in, and its tokenization has begun
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


async def test_a_short_prompt_never_waits_behind_long_ones(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long prompts take turns on one thread, so a flood of megabytes costs the host at most
    one core; a short prompt is tokenized at once on the event loop (a thread hop would cost
    it more than its tokens do) and answered while they still wait."""
    threads: dict[int, str] = {}
    prepare = service_module.prepare

    def recorded(engine: Engine, ask: Ask) -> PreparedJob:
        threads[ask.size] = threading.current_thread().name
        return prepare(engine, ask)

    monkeypatch.setattr(service_module, "prepare", recorded)
    long = "The quick brown fox jumps over the lazy dog. " * (2 * 2**20 // 45)
    posts = [
        asyncio.create_task(
            host.client.post("/v1/completions", json={"model": MODEL, "prompt": long + str(i)})
        )
        for i in range(3)
    ]
    await wait_until(lambda: any(size > 2**20 for size in threads))  # one is being tokenized
    short = await host.client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2}
    )
    assert short.status_code == 200
    assert sum(not post.done() for post in posts) >= 2, "long prompts were still in line"
    for response in await asyncio.gather(*posts):
        assert response.json()["error"]["code"] == "context_length_exceeded"
    long_threads = {name for size, name in threads.items() if size > 2**20}
    assert len(long_threads) == 1 and next(iter(long_threads)).startswith("long-prompt")
    assert threads[2] == "MainThread"


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
    assert stayer[-1][0] == "end" and stayer[-1][1]["finish_reason"] in ("stop", "length")
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
    document = (await host.client.get("/openapi.json")).json()
    assert "409" in document["paths"]["/v1/tasks"]["post"]["responses"]  # a client can expect it


async def test_prompt_arrays_that_can_never_fit_are_400s(start_host: HostFactory) -> None:
    host = await start_host(parallel=1, queue=2)
    empty = await host.client.post("/v1/completions", json={"model": MODEL, "prompt": []})
    assert empty.status_code == 400
    many = {"model": MODEL, "prompt": ["Hi"] * 5, "max_tokens": 2}
    response = await host.client.post("/v1/completions", json=many)
    assert response.status_code == 400, response.text
    assert "more than engine" in response.json()["error"]["message"]
    # The admitted ones are cancelled; the engine frees their slots at its next step.
    await wait_until(lambda: host.service.pool_metrics(MODEL).slots_busy == 0, 10)
    assert host.service.pool_metrics(MODEL).queue_depth == 0


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


async def _raw(host: Host) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host.server.host, host.server.port)


async def test_slow_and_idle_connections_are_dropped_and_health_stays_quick(
    start_host: HostFactory,
) -> None:
    """50 slow-header connections and idle sockets used to stay open for ever (issue 12 §7)."""
    limits = HttpSettings(header_timeout_s=1.0, body_timeout_s=1.0)
    host = await start_host(limits=limits)
    slow = [await _raw(host) for _ in range(50)]
    for _, writer in slow[:25]:
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert (await host.client.get("/v1/health")).status_code == 200
    assert loop.time() - start < 0.5
    closed = await asyncio.gather(*(reader.read() for reader, _ in slow))  # EOF once dropped
    assert loop.time() - start < 3.0, "every slow or idle connection is closed in time"
    assert all(data == b"" for data in closed)
    for _, writer in slow:
        writer.close()


async def test_a_body_that_trickles_in_is_a_408(start_host: HostFactory) -> None:
    host = await start_host(limits=HttpSettings(body_timeout_s=1.0))
    reader, writer = await _raw(host)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"model":'
    )
    head = await asyncio.wait_for(reader.readline(), 5)
    assert b" 408 " in head
    writer.close()


async def test_engines_load_only_from_model_folders_and_say_nothing_of_other_files(
    host: Host, tmp_path, model_path
) -> None:
    """POST /engines used to open any path the host could read, and to quote its first
    bytes (issue 12 §8): outside the model folders it is a 403 with no file detail."""
    outside_link = tmp_path / "sneaky.gguf"
    outside_link.symlink_to("/etc/passwd")  # in a model folder, but it leads out of them
    for path in ("/etc/passwd", "/etc/no-such-file", str(outside_link), f"{tmp_path}/../../etc"):
        response = await host.client.post("/engines", json={"engine_id": "x", "model_path": path})
        assert response.status_code == 403, (path, response.text)
        message = response.json()["error"]["message"]
        assert "outside the folders" in message and "root" not in message
    reload = await host.client.post(f"/v1/pools/{MODEL}/reload", json={"model_path": "/etc/passwd"})
    assert reload.status_code == 403
    for route, body in (("/engines", {"engine_id": "x"}), (f"/v1/pools/{MODEL}/reload", {})):
        nul = await host.client.post(route, json={**body, "model_path": f"{tmp_path}/m\u0000"})
        assert nul.status_code == 400, nul.text  # schemathesis found this one a 500
    assert host.service.engine_ids() == [MODEL]


async def test_health_open_without_a_key_names_files_not_paths(start_host: HostFactory) -> None:
    host = await start_host(api_key="k")
    health = (await host.client.get("/v1/health")).json()
    pool = (await host.client.get(f"/v1/pools/{MODEL}/health")).json()
    assert health["engines_summary"][0]["model_path"].endswith(".gguf")
    assert "/" not in health["engines_summary"][0]["model_path"]
    assert pool["model_path"].endswith(".gguf") and "/" not in pool["model_path"]
    listed = await host.client.get("/engines", headers={"Authorization": "Bearer k"})
    assert listed.json()["engines"][0]["model_path"].startswith("/")  # with the key: the path


ADMIN_OPERATIONS = (
    ("POST", "/engines", {"engine_id": "e2", "model_path": "/nowhere/m.gguf"}),
    ("DELETE", "/engines/no-such-engine", None),
    ("POST", f"/v1/pools/{MODEL}/drain", {"deadline_ms": 0}),
    ("POST", f"/v1/pools/{MODEL}/resume", None),
    ("POST", f"/v1/pools/{MODEL}/reload", {"model_path": "/nowhere/m.gguf"}),
)


async def _admin_answers(host: Host, key: str | None) -> list[int]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answers = []
    for method, path, body in ADMIN_OPERATIONS:
        response = await host.client.request(method, path, json=body, headers=headers)
        answers.append(response.status_code)
    return answers


async def test_engine_management_needs_the_admin_key(start_host: HostFactory) -> None:
    """Issue 12 §8: an API key lets a client generate; only the admin key manages engines."""
    host = await start_host(api_keys=["alice"], admin_key="root-key", public=True)
    assert await _admin_answers(host, None) == [401] * 5  # no key at all
    assert await _admin_answers(host, "alice") == [403] * 5
    # The admin key passes the gate: what is left are the operations' own answers.
    assert await _admin_answers(host, "root-key") == [403, 404, 202, 200, 403]
    assert host.service.engine_ids() == [MODEL]
    as_alice = await host.client.get("/v1/host", headers={"Authorization": "Bearer alice"})
    as_admin = await host.client.get("/v1/host", headers={"Authorization": "Bearer root-key"})
    assert as_alice.json()["capabilities"]["admin"] is False
    assert as_admin.json()["capabilities"]["admin"] is True
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    generated = await host.client.post(
        "/v1/chat/completions", json=chat, headers={"Authorization": "Bearer root-key"}
    )
    assert generated.status_code == 200  # the admin key is an API key too


async def test_without_an_admin_key_engines_are_managed_on_loopback_only(
    start_host: HostFactory,
) -> None:
    public = await start_host(public=True)
    assert await _admin_answers(public, None) == [403] * 5
    refused = await public.client.delete("/engines/x")
    assert "--admin-key" in refused.json()["error"]["message"]
    assert (await public.client.get("/v1/host")).json()["capabilities"]["admin"] is False
    local = await start_host()
    assert await _admin_answers(local, None) == [403, 404, 202, 200, 403]
    document = (await public.client.get("/openapi.json")).json()
    for method, path, _ in ADMIN_OPERATIONS:
        template = path.replace(MODEL, "{pool_id}").replace("no-such-engine", "{engine_id}")
        assert {"401", "403"} <= set(document["paths"][template][method.lower()]["responses"])


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [("8080", True), ("127.0.0.1:0", True), ("[::1]:80", True), ("localhost:1", True),
     ("0.0.0.0:8080", False), ("[::]:8080", False), ("192.168.1.2:80", False),
     ("gpu-box:80", False)],
)  # fmt: skip
def test_a_bind_is_loopback_only_on_loopback_addresses(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_an_address_without_a_port_says_what_a_bind_takes() -> None:
    """`--http 0.0.0.0` said only "not a port: '0.0.0.0'" (a helper's walkthrough)."""
    with pytest.raises(InferError) as caught:
        parse_listen("0.0.0.0")
    assert "PORT or HOST:PORT" in caught.value.message and "0.0.0.0:8080" in caught.value.message


async def test_a_task_is_read_and_cancelled_by_its_owner_or_an_admin(
    start_host: HostFactory,
) -> None:
    """Issue 12 §5: with API keys in play, a task belongs to the key that sent it."""
    host = await start_host(api_keys=["alice", "bob"], admin_key="root-key", public=True)
    alice, bob, root = ({"Authorization": f"Bearer {key}"} for key in ("alice", "bob", "root-key"))
    body = {"model": MODEL, "prompt": "Count to ten:", "max_tokens": 200}
    accepted = await host.client.post("/v1/tasks", json=body, headers=alice)
    task_id = accepted.json()["task_id"]
    assert (await host.client.post(f"/v1/tasks/{task_id}/cancel", headers=bob)).status_code == 403
    async with host.client.stream("GET", f"/v1/tasks/{task_id}/stream", headers=bob) as sneak:
        assert sneak.status_code == 403
    async with host.client.stream("GET", f"/v1/tasks/{task_id}/stream", headers=alice) as own:
        assert own.status_code == 200
    cancel = await host.client.post(f"/v1/tasks/{task_id}/cancel", headers=root)
    assert cancel.status_code == 200 and cancel.json()["state"] in ("cancelled", "done")


async def test_retry_after_says_when_the_queue_really_frees(start_host: HostFactory) -> None:
    """Issue 12 §9: Retry-After said 7 s while the queue took 84 s to drain. The hint now
    comes from the work ahead (running and queued jobs' budgets) at the measured rate."""
    host = await start_host(parallel=1, queue=1)
    long_job = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400,
                "ignore_eos": True, "temperature": 0}  # fmt: skip
    running = asyncio.create_task(host.client.post("/v1/completions", json=long_job))

    def measured() -> bool:
        """A rate is measured from a second of steady decoding (scheduler/metrics.py): wait
        until the running job has decoded for more than that, by its own count."""
        jobs = host.service.live_jobs()
        return (
            bool(jobs)
            and jobs[0].tokens_per_s > 0
            and jobs[0].tokens_out > 1.5 * jobs[0].tokens_per_s
        )

    await wait_until(measured)
    queued = asyncio.create_task(host.client.post("/v1/completions", json=long_job))
    await wait_until(lambda: host.service.pool_metrics(MODEL).queue_depth == 1)
    refused = await host.client.post("/v1/completions", json={**long_job, "max_tokens": 2})
    asked_at = asyncio.get_running_loop().time()
    assert refused.status_code == 429, refused.text
    hint_s = int(refused.headers["X-Backoff-Ms"]) / 1000
    await asyncio.gather(running, queued)
    freed_s = asyncio.get_running_loop().time() - asked_at
    assert 0.5 * freed_s <= hint_s <= 2 * freed_s, (hint_s, freed_s)
    assert int(refused.headers["Retry-After"]) >= int(hint_s)
