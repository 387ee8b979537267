"""Issue 15 §1: an OpenAI-compatible server as an engine (`--upstream`), behind every face.

The upstreams are real servers on 127.0.0.1: a second infertui host, and llama-cpp-python's
own server (`llama_cpp.server`, from the same wheel). The front host reaches them over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from infertui.core.client import connect
from infertui.core.engine import UpstreamSpec, bundled_model_path
from infertui.core.host import Ask
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.events import Finished
from infertui.core.protocol.host_api import AddEngineRequest
from infertui.core.protocol.snapshots import PoolState
from infertui.core.scheduler import Pool

from ..conftest import CLIENT_SEED, THREADS, ServedHost, ServedHostFactory, wait_until
from ..jobs import submit

pytestmark = pytest.mark.model

ASK = [{"role": "user", "content": "Name three colours."}]
GREEDY = {"temperature": 0, "max_tokens": 12}


@pytest.fixture
async def upstream(start_served_host: ServedHostFactory) -> ServedHost:
    return await start_served_host(parallel=4, p2p=False)


async def front_for(
    start: ServedHostFactory,
    url: str,
    *,
    concurrency: int = 4,
    health_s: float = 2.0,
    p2p: bool = False,
) -> ServedHost:
    """A host whose one engine, "up", is the server at `url`; on Hyperswarm too with p2p."""
    settings = {"urls": [f"up={url}"], "concurrency": concurrency, "health_interval_s": health_s}
    return await start(upstream=settings, p2p=p2p)


async def answers(front: ServedHost, model: str = "up") -> None:
    """A short job on the pool ends as a reply."""
    job = await front.service.submit(
        Ask(
            model=model,
            prompt="Hi",
            params=SamplingParams(temperature=0, max_tokens=3, ignore_eos=True),
        )
    )
    text, done = await job.text()
    assert done.finish_reason in ("stop", "length") and text


@pytest.mark.deterministic
async def test_an_upstream_infertui_serves_every_face_with_the_same_text(
    upstream: ServedHost, start_served_host: ServedHostFactory
) -> None:
    """Each face's reply is the upstream's own. The upstream is deterministic: every request
    reaches it one at a time and reads its prompt afresh, as the direct one did (by default
    each would read only its last prompt token on the cells the one before left, and a greedy
    near tie could fall the other way)."""
    front = await front_for(start_served_host, f"{upstream.url}/v1", p2p=True)
    assert front.service.engine_ids() == ["up"]  # only the upstream: no local model loaded
    direct = openai.AsyncOpenAI(base_url=f"{upstream.url}/v1", api_key="-")
    via = openai.AsyncOpenAI(base_url=f"{front.url}/v1", api_key="-")
    expected = await direct.chat.completions.create(model="default", messages=ASK, **GREEDY)
    expected_text = expected.choices[0].message.content
    assert expected_text

    # OpenAI: whole and streamed, with the upstream's token counts in the usage
    whole = await via.chat.completions.create(model="up", messages=ASK, **GREEDY)
    assert whole.choices[0].message.content == expected_text
    assert whole.usage is not None and whole.usage.prompt_tokens == expected.usage.prompt_tokens
    assert whole.usage.completion_tokens == expected.usage.completion_tokens
    stream = await via.chat.completions.create(
        model="up", messages=ASK, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert len(pieces) > 3 and "".join(pieces) == expected_text
    completion = await via.completions.create(model="up", prompt="Once upon a time", **GREEDY)
    direct_completion = await direct.completions.create(
        model="default", prompt="Once upon a time", **GREEDY
    )
    assert completion.choices[0].text == direct_completion.choices[0].text

    async with httpx.AsyncClient(base_url=front.url, timeout=60) as http:
        # spec 001's chat, whole and as NDJSON lines
        body = {"model": "up", "messages": ASK, **GREEDY}
        reply = (await http.post("/chat/completions", json=body)).json()
        assert reply["message"]["content"] == expected_text
        lines = (await http.post("/chat/completions", json={**body, "stream": True})).text
        chunks = [json.loads(line) for line in lines.splitlines() if line]
        assert "".join(c["message"]["content"] for c in chunks) == expected_text
        # Ollama's own /api/chat
        options = {"temperature": 0, "num_predict": 12}
        ollama = {"model": "up", "messages": ASK, "options": options, "stream": False}
        assert (await http.post("/api/chat", json=ollama)).json()["message"]["content"] == (
            expected_text
        )
        # spec 002's task queue
        task = (await http.post("/v1/tasks", json={"prompt": "Once upon a time", **GREEDY})).json()
        assert task["pool_id"] == "up"
        events = (await http.get(f"/v1/tasks/{task['task_id']}/stream")).text
        assert completion.usage is not None  # the same greedy completion, counted alike
        told = f'"tokens_out":{completion.usage.completion_tokens}'
        assert "event: end" in events and told in events.replace(" ", "")
        # /tokenize: the upstream tokenizes on its own server, and a 400 says so
        refused = await http.post("/tokenize", json={"content": "hi"})
        assert refused.status_code == 400 and "upstream server" in refused.text

    # Hyperswarm (spec 000), through the client library
    client = await connect(front.server_id, bootstrap=front.bootstrap, seed=CLIENT_SEED)
    try:
        assert client.info.models == ("up",)
        reply_p2p = client.chat([ChatMessage(role="user", content=ASK[0]["content"])], **GREEDY)
        assert "".join([piece async for piece in reply_p2p]) == expected_text
        engines = await client.engines()
        assert engines[0].engine_id == "up" and engines[0].pool_state is PoolState.READY
        assert engines[0].model_path == f"{upstream.url}/v1"
    finally:
        await client.close()

    # the upstream's model is also a name for the pool, listed under its own id
    assert (await via.chat.completions.create(model="smollm2-135m", messages=ASK, **GREEDY)).choices
    listed = {card.id: card.owned_by async for card in via.models.list()}
    assert listed == {"up": "infertui", "smollm2-135m": "up"}
    assert (await via.models.retrieve("smollm2-135m")).owned_by == "up"
    with pytest.raises(openai.NotFoundError):
        await via.models.retrieve("no-such-model")
    (metrics,) = front.service.metrics()  # the decoding is the upstream's: no loop time here
    assert metrics.decode_seconds_total is None and metrics.busy_seconds_total is None
    await direct.close()
    await via.close()


async def test_a_cancel_closes_the_upstream_stream(
    upstream: ServedHost, start_served_host: ServedHostFactory
) -> None:
    front = await front_for(start_served_host, f"{upstream.url}/v1")
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    job = await front.service.submit(Ask(model="up", prompt="Count slowly:", params=long))
    await wait_until(lambda: job.tokens_published > 0)  # the upstream is decoding it
    await wait_until(lambda: upstream.busy_slots() == 1)
    assert job.cancel()
    await wait_until(lambda: upstream.busy_slots() == 0, seconds=5)
    await job.wait_released()
    await wait_until(lambda: upstream.service.metrics()[0].cancelled == 1, seconds=5)
    assert upstream.service.metrics()[0].completed == 0  # it saw the disconnect, not an end
    assert job.tokens_out < 400


async def test_a_job_cancelled_as_it_is_admitted_reaches_the_upstream_as_a_disconnect(
    upstream: ServedHost, start_served_host: ServedHostFactory
) -> None:
    """The front writes a job's request as it admits it, before the job's task runs (a burst
    then leaves in order); a job cancelled in between closes that connection, so the upstream
    sees the disconnect and serves nothing, and the next job gets a clean connection."""
    front = await front_for(start_served_host, f"{upstream.url}/v1")
    await answers(front)  # leaves a kept-alive connection: the next request goes out at once
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    job = await front.service.submit(Ask(model="up", prompt="Count slowly:", params=long))
    assert job.cancel()  # no await since the submit: its task has not run yet
    await asyncio.wait_for(job.wait_released(), 10)
    assert job.tokens_out == 0
    await wait_until(lambda: upstream.service.metrics()[0].cancelled == 1, seconds=10)
    # The upstream counts the cancel at once and frees the slot at its engine's next step.
    await wait_until(lambda: upstream.busy_slots() == 0, seconds=10)
    assert upstream.service.metrics()[0].completed == 1
    await answers(front)


async def test_jobs_beyond_the_concurrency_limit_wait_in_the_front_queue(
    upstream: ServedHost, start_served_host: ServedHostFactory
) -> None:
    front = await front_for(start_served_host, f"{upstream.url}/v1", concurrency=2)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    jobs = [
        await front.service.submit(Ask(model="up", prompt=f"Story {i}:", params=params))
        for i in range(8)
    ]
    assert [job.queue_position for job in jobs] == [0, 0, 0, 1, 2, 3, 4, 5]
    queue = front.service.queues()[0]
    assert queue.depth == 6 and [e.position for e in queue.waiting] == list(range(6))
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, upstream.busy_slots())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    results = await asyncio.gather(*(job.text() for job in jobs))
    watcher.cancel()
    assert all(final.finish_reason == "length" for _, final in results)
    assert all(final.timings.tokens_out == 24 for _, final in results)
    assert peak == 2  # the upstream (4 slots) never had more than the limit at once


async def test_an_upstream_refusal_keeps_its_error_code(
    start_served_host: ServedHostFactory,
) -> None:
    """The upstream's QUEUE_FULL (HTTP 429) reaches the front's client as QUEUE_FULL."""
    upstream = await start_served_host(parallel=1, queue=1, p2p=False)
    front = await front_for(start_served_host, f"{upstream.url}/v1", concurrency=4)
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    jobs = [
        await front.service.submit(Ask(model="up", prompt="Hi", params=params)) for _ in range(4)
    ]
    finals = [final for _, final in await asyncio.gather(*(job.text() for job in jobs))]
    refused = [f for f in finals if f.error is not None]
    assert refused and all(f.error.kind is ErrorKind.QUEUE_FULL for f in refused)
    assert all(f.error.retry_after_ms is not None for f in refused)
    assert sum(f.finish_reason == "length" for f in finals) >= 2  # the others were served


# ---- an upstream that dies and comes back ------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_process(args: list[str], ready: str, timeout: float = 90) -> subprocess.Popen[bytes]:
    """A server writing its log to a file (a pipe nobody reads would stall it), once the
    log says `ready`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = Path(tempfile.mkstemp(prefix="upstream-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stderr=out, stdout=out, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready in log.read_text(errors="replace"):
            return proc
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise AssertionError(f"no {ready!r} in:\n{log.read_text(errors='replace')}")


def infertui_host(port: int) -> subprocess.Popen[bytes]:
    return start_process(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--no-p2p",
         "--http", f"127.0.0.1:{port}", "--parallel", "2", "--ctx", "1024", "--threads", str(THREADS)],
        "ready",
    )  # fmt: skip


@pytest.fixture
async def killable() -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


async def test_a_killed_upstream_ends_its_jobs_and_is_served_again_after_a_restart(
    start_served_host: ServedHostFactory, killable: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    killable.append(await asyncio.to_thread(infertui_host, port))
    front = await front_for(
        start_served_host, f"http://127.0.0.1:{port}/v1", concurrency=2, health_s=0.3
    )
    long = SamplingParams(temperature=0, max_tokens=900, ignore_eos=True)
    running = await front.service.submit(Ask(model="up", prompt="Count:", params=long))
    queued = [
        await front.service.submit(Ask(model="up", prompt="Hi", params=long)) for _ in range(2)
    ]
    await wait_until(lambda: running.tokens_published > 0)
    killable[0].send_signal(signal.SIGKILL)
    killable[0].wait()

    async def final(job: object) -> Finished:
        return (await asyncio.wait_for(job.text(), 10))[1]  # type: ignore[attr-defined]

    finals = await asyncio.gather(final(running), *(final(job) for job in queued))
    assert all(f.finish_reason == "error" and f.error is not None for f in finals)
    assert {f.error.kind for f in finals if f.error} <= {ErrorKind.POOL_UNREADY}
    await wait_until(lambda: not front.service.pool_health("up").ready, seconds=5)
    with pytest.raises(InferError) as refused:
        await front.service.submit(
            Ask(model="up", prompt="Hi", params=SamplingParams(max_tokens=4))
        )
    assert refused.value.kind is ErrorKind.POOL_UNREADY and refused.value.retry_after_ms
    async with httpx.AsyncClient(base_url=front.url) as http:
        health = (await http.get("/v1/pools/up/health")).json()
        assert health["ready"] is False and "upstream" in (health["last_error"] or "")

    killable.append(await asyncio.to_thread(infertui_host, port))  # the same address again
    await wait_until(lambda: front.service.pool_health("up").ready, seconds=10)
    await answers(front)


# llama-cpp-python's own server, changed in two ways its flags cannot say:
# - the CPU weights in plain buffers, as infertui's engine loads them (native.LlamaModel):
#   the repacked AMX buffers it would use crash llama.cpp 0.3.36 on CPUs that advertise AMX
#   in sandboxes that do not grant it (a segfault in ggml_backend_amx_mul_mat at its first
#   chat completion);
# - every prompt read whole: it reads only what follows the last prompt's cached tokens,
#   and on CPUs where the chunks a prompt is read in move the logits (AVX-512 machines), the
#   same request at temperature 0 then answers differently from call to call.
THIRD_PARTY_SERVER = """
import runpy, sys
import llama_cpp.llama as high
import llama_cpp.llama_cpp as low
default_params, generate = low.llama_model_default_params, high.Llama.generate
def plain_buffers():
    params = default_params()
    params.use_extra_bufts = False
    return params
def read_whole(self, *args, **kwargs):
    self.reset()
    return generate(self, *args, **kwargs)
low.llama_model_default_params, high.Llama.generate = plain_buffers, read_whole
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


async def test_llama_cpp_python_server_as_an_upstream(
    start_served_host: ServedHostFactory, killable: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    model: Path = bundled_model_path()
    killable.append(
        await asyncio.to_thread(
            start_process,
            [sys.executable, "-c", THIRD_PARTY_SERVER, "--model", str(model),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", str(THREADS),
             "--model_alias", "smol-direct", "--chat_format", "chatml",
             # else any request, the front's model-list probe included, ends the running stream
             "--interrupt_requests", "False"],
            "Uvicorn running",
        )
    )  # fmt: skip
    front = await front_for(start_served_host, f"http://127.0.0.1:{port}/v1", concurrency=1)
    assert front.service.engines()[0].model_description.startswith("smol-direct at ")
    via = openai.AsyncOpenAI(base_url=f"{front.url}/v1", api_key="-")
    assert [card.id async for card in via.models.list()] == ["up", "smol-direct"]
    whole = await via.chat.completions.create(model="up", messages=ASK, **GREEDY)
    assert whole.choices[0].message.content
    assert whole.usage and 0 < whole.usage.completion_tokens <= 12  # it streams no usage: counted
    assert (whole.choices[0].finish_reason == "length") == (whole.usage.completion_tokens == 12)
    stream = await via.chat.completions.create(model="up", messages=ASK, stream=True, **GREEDY)
    pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(pieces) == whole.choices[0].message.content
    # a cancel mid-stream frees the front's slot, and the upstream serves the next job
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    job = await front.service.submit(Ask(model="up", prompt="Count:", params=long))
    await wait_until(lambda: job.tokens_published > 0)
    job.cancel()
    await asyncio.wait_for(job.wait_released(), 10)
    after = await via.completions.create(model="up", prompt="Hello", max_tokens=4)
    assert after.choices[0].text is not None
    await via.close()


async def test_an_upstream_is_added_at_run_time_over_http_and_hyperswarm(
    upstream: ServedHost, start_served_host: ServedHostFactory
) -> None:
    """POST /engines (HTTP, loopback admin) and P2P admin take a server URL as model_path."""
    front = await start_served_host(p2p=True)  # the bundled model, and upstreams added to it
    async with httpx.AsyncClient(base_url=front.url, timeout=60) as http:
        added = await http.post(
            "/engines",
            json={"engine_id": "far", "model_path": f"{upstream.url}/v1", "concurrency": 2},
        )
        assert added.status_code in (200, 201), added.text
        assert added.json()["parameters"]["n_parallel"] == 2
        chat = {"model": "far", "messages": ASK, **GREEDY}
        reply = (await http.post("/v1/chat/completions", json=chat)).json()
        assert reply["model"] == "far" and reply["choices"][0]["message"]["content"]
    client = await connect(front.server_id, bootstrap=front.bootstrap, seed=CLIENT_SEED)
    try:
        await client.add_engine(AddEngineRequest(engine_id="far2", model_path=f"{upstream.url}/v1"))
        statuses = {e.engine_id: e for e in await client.engines()}
        assert statuses["far2"].model_description == f"smollm2-135m at {upstream.url}/v1"
        reply_p2p = client.chat(
            [ChatMessage(role="user", content="Hi")], model="far2", temperature=0, max_tokens=4
        )
        assert "".join([piece async for piece in reply_p2p])
        await client.remove_engine("far2")
        assert "far2" not in front.service.engine_ids()
    finally:
        await client.close()


async def test_reloading_an_upstream_reconnects_and_refuses_a_model_file(
    upstream: ServedHost, start_served_host: ServedHostFactory, tmp_path: Path
) -> None:
    front = await front_for(start_served_host, f"{upstream.url}/v1")
    status = await front.service.reload_engine("up")
    assert status.pool_state is PoolState.READY
    with pytest.raises(InferError) as refused:
        await front.service.reload_engine("up", str(tmp_path / "other.gguf"))
    assert refused.value.kind is ErrorKind.INVALID_PARAMS and refused.value.param == "model_path"
    await answers(front)


async def test_a_host_started_before_its_upstream_serves_once_the_upstream_is_up(
    start_served_host: ServedHostFactory, killable: list[subprocess.Popen[bytes]]
) -> None:
    """vLLM takes minutes to load: the host comes up first, unready, and waits for it."""
    port = free_port()
    front = await front_for(
        start_served_host, f"http://127.0.0.1:{port}/v1", concurrency=2, health_s=0.3
    )
    health = front.service.pool_health("up")
    assert not health.ready and "cannot be reached" in (health.last_error or "")
    killable.append(await asyncio.to_thread(infertui_host, port))
    await wait_until(lambda: front.service.pool_health("up").ready, seconds=10)
    assert (
        front.service.engines()[0].model_description
        == f"smollm2-135m at http://127.0.0.1:{port}/v1"
    )
    await answers(front, model="smollm2-135m")  # the upstream's own name for its model


async def test_an_upstream_that_hangs_ends_its_jobs_and_serves_again_when_it_wakes(
    start_served_host: ServedHostFactory, killable: list[subprocess.Popen[bytes]]
) -> None:
    """A stopped server keeps its sockets open: only the health check can tell. Its jobs end
    with POOL_UNREADY within a few probe intervals, and it serves again once it continues."""
    port = free_port()
    killable.append(await asyncio.to_thread(infertui_host, port))
    front = await front_for(
        start_served_host, f"http://127.0.0.1:{port}/v1", concurrency=1, health_s=0.3
    )
    long = SamplingParams(temperature=0, max_tokens=900, ignore_eos=True)
    running = await front.service.submit(Ask(model="up", prompt="Count:", params=long))
    waiting = await front.service.submit(Ask(model="up", prompt="Hi", params=long))
    await wait_until(lambda: running.tokens_published > 0)
    killable[0].send_signal(signal.SIGSTOP)
    try:
        finals = await asyncio.wait_for(asyncio.gather(running.text(), waiting.text()), 15)
        for _, final in finals:
            assert final.finish_reason == "error" and final.error is not None
            assert final.error.kind is ErrorKind.POOL_UNREADY
        assert not front.service.pool_health("up").ready
    finally:
        killable[0].send_signal(signal.SIGCONT)
    await wait_until(lambda: front.service.pool_health("up").ready, seconds=10)
    await answers(front)


async def test_an_upstream_is_reached_directly_whatever_proxy_the_environment_names(
    upstream: ServedHost,
    start_served_host: ServedHostFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The streams go straight to the server (engine/upstream/connection.py speaks HTTP/1.1 on its own sockets), so
    the health check must too: through a proxy it would judge a route the jobs never take.
    A proxy that would apply is named in the log, since infertui does not use it."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")  # nobody listens
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    front = await front_for(start_served_host, f"{upstream.url}/v1", health_s=0.3)
    assert front.service.pool_health("up").ready
    await asyncio.sleep(1.0)  # a few health checks
    assert front.service.pool_health("up").ready
    await answers(front)
    assert any("directly" in r.getMessage() and "proxy" in r.getMessage() for r in caplog.records)


async def test_an_unreachable_upstream_drains_and_resumes_unready() -> None:
    """Drain and resume keep what the health check knows: a pool resumed while its upstream
    is down is unready, not ready."""
    spec = UpstreamSpec(url=f"http://127.0.0.1:{free_port()}/v1", engine_id="up")
    pool = await Pool.start(spec)
    try:
        assert pool.state is PoolState.FAILED and "cannot be reached" in (pool.error or "")
        await pool.drain(0)
        assert pool.state is PoolState.DRAINED
        pool.resume()
        assert pool.state is PoolState.FAILED
        with pytest.raises(InferError) as refused:
            submit(pool, params=SamplingParams(max_tokens=2), prompt="Hi")
        assert refused.value.kind is ErrorKind.POOL_UNREADY
    finally:
        await pool.close()
