"""Issue 36 §3: the host serves its library. A request naming a library model that is not
loaded loads it, `keep_alive` unloads it again, and a memory budget unloads the least recently
used idle model to make room, driven by the official `ollama` and `openai` packages against a
real host. The model is the cut bundled one (tests/models.py), pulled from a loopback Hub."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import ollama
import openai
import pytest

from infertui.core.client import connect
from infertui.core.config import HostSettings
from infertui.core.host import residency
from infertui.core.host.residency import MIB, estimate_bytes
from infertui.core.host.specs import engine_spec
from infertui.core.library import LibraryModel
from infertui.core.logging import correlation_id
from infertui.core.scheduler import Pool

from ..conftest import CLIENT_SEED, CUT_NAME, CUT_REPO, Host, wait_until
from ..library.fake_sources import Sources
from .conftest import HostFactory

NAME = CUT_NAME
SHORT = {"num_predict": 4, "temperature": 0}


@pytest.fixture
async def ollama_client() -> AsyncIterator[Any]:
    clients: list[ollama.AsyncClient] = []

    def make(host: Host) -> ollama.AsyncClient:
        clients.append(ollama.AsyncClient(host=host.url))
        return clients[-1]

    yield make
    for client in clients:
        await client._client.aclose()


async def host_with_model(
    start_host: HostFactory, ollama_client: Any, **options: Any
) -> tuple[Host, ollama.AsyncClient]:
    """A host of the test's own (start_host's options) with the cut model pulled into its
    library, and an `ollama` client of it."""
    host = await start_host(**options)
    client = ollama_client(host)
    await client.pull(NAME)
    return host, client


async def running(client: ollama.AsyncClient) -> dict[str, Any]:
    return {model.model: model for model in (await client.ps()).models}


async def test_a_request_naming_a_library_model_loads_it_and_keep_alive_0_unloads_it(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    host, client = await host_with_model(start_host, ollama_client)
    engine = host.service.engine_ids()[0]
    pinned = f"{engine}:latest"  # as Ollama lists a model: always with a tag

    listed = {model.model: model for model in (await client.list()).models}
    assert set(listed) == {NAME, pinned}  # the library's model, loaded or not, and the engine
    assert listed[NAME].details.family == "llama" and listed[NAME].size == hub_size(cut_hub)
    shown = await client.show(NAME)  # from the GGUF's header, before any load
    assert shown.details.family == "llama" and shown.template
    assert set(await running(client)) == {pinned}

    before = time.time()
    reply = await client.chat(NAME, messages=[{"role": "user", "content": "Hi"}], options=SHORT)
    assert reply.model == NAME and reply.eval_count and reply.eval_count > 0
    # Ollama's load_duration is the load's, and the whole includes it (an audit found 0)
    assert reply.load_duration and reply.load_duration > 1_000_000  # ns: a load
    assert reply.total_duration and reply.total_duration > reply.load_duration
    again = await client.chat(NAME, messages=[{"role": "user", "content": "Hi"}], options=SHORT)
    assert again.load_duration is not None and again.load_duration < reply.load_duration / 10
    loaded = (await running(client))[NAME]
    stays = loaded.expires_at.timestamp() - before  # the default keep_alive: 5 minutes
    assert 290 < stays < 310, stays
    assert (await running(client))[pinned].expires_at.year > 2300  # started with it: it stays

    # `ollama stop`: a request with nothing to do and keep_alive 0
    stopped = await client.generate(NAME, keep_alive=0)
    assert stopped.done_reason == "unload"
    assert set(await running(client)) == {pinned}
    # `ollama stop` while it answers: the reply ends whole, and then the model goes
    await client.generate(NAME)  # loaded again
    stream = await client.chat(NAME, messages=[{"role": "user", "content": "Hi"}],
                               options={**SHORT, "num_predict": 400}, stream=True)  # fmt: skip
    first = await anext(stream)
    assert (await client.generate(NAME, keep_alive=0)).done_reason == "unload"
    assert NAME in host.service.engine_ids()  # busy: not yet
    *_, last = [first, *[part async for part in stream]]
    assert last.done and last.done_reason == "length" and last.eval_count == 400
    await wait_until(lambda: NAME not in host.service.engine_ids())  # the sweep after its job
    assert set(await running(client)) == {pinned}
    with pytest.raises(ollama.ResponseError) as refused:  # it stays, and says so
        await client.generate(pinned, keep_alive=0)
    assert refused.value.status_code == 409 and "DELETE /v1/engines/" in refused.value.error
    assert set(await running(client)) == {pinned}

    # a name as Ollama takes it, case aside and `:latest` or none, on every API (an audit
    # found `name:latest` a 404 on /v1 where /api took it, and case mattered)
    sdk = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key="unused", max_retries=0)
    try:
        for asked in (NAME.upper(), pinned, engine.upper()):
            chat = await sdk.chat.completions.create(
                model=asked, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
            assert chat.model in (NAME, engine), (asked, chat.model)
    finally:
        await sdk.close()
    assert set(await running(client)) == {pinned, NAME}  # the cased name loaded the model

    # a library model named as an engine is listed once: both are `smollm2-135m:latest`
    await client.copy(NAME, engine)
    names = [model.model for model in (await client.list()).models]
    assert names.count(pinned) == 1, names


def hub_size(hub: Sources) -> int:
    return len(hub.repos[CUT_REPO]["Cut-Q4_K_M.gguf"].data)


async def test_keep_alive_runs_out_once_idle_and_a_negative_one_never(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    _, client = await host_with_model(start_host, ollama_client, more={"keep_alive": "1s"})
    said: list[str | None] = []  # the correlation ID each unload line was logged under

    class Unloads(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("unloaded"):
                said.append(correlation_id.get())

    unloads, logger = Unloads(), logging.getLogger(residency.__name__)
    logger.addHandler(unloads)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        await client.generate(NAME, prompt="Count:", options=SHORT)  # the host's default, 1 s
        assert NAME in await running(client)
        stayed = await unloaded_after(client, NAME)  # idle past its keep_alive, and a sweep
        assert 0.9 < stayed < 10, stayed
        await wait_until(lambda: said)  # (its line comes once the engine has stopped)
    finally:
        logger.removeHandler(unloads)
        logger.setLevel(level)
    assert said == [None]  # no request's (an audit saw the loading request's ID on it)

    await client.generate(NAME, prompt="Count:", options=SHORT, keep_alive=-1)  # forever
    await asyncio.sleep(1.8)  # past the host's default
    assert (await running(client))[NAME].expires_at.year > 2300
    await client.generate(NAME, prompt="Count:", options=SHORT, keep_alive="1s")
    assert 0.9 < await unloaded_after(client, NAME) < 10


async def unloaded_after(client: ollama.AsyncClient, name: str) -> float:
    """Seconds until `name` leaves /api/ps (asked every 0.1 s, for up to 10 s)."""
    start = time.monotonic()
    while name in await running(client) and time.monotonic() - start < 10:
        await asyncio.sleep(0.1)
    return time.monotonic() - start


async def test_a_host_with_no_engine_left_still_shows_and_loads_its_library(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    """Its last engine removed (or unloaded), a host still serves its library: a review found
    /api/show and a chat naming a library model both answered 503 "no engine loaded"."""
    host, client = await host_with_model(start_host, ollama_client)
    await host.service.remove_engine(host.service.engine_ids()[0])
    assert host.service.engine_ids() == []
    assert (await client.show(NAME)).details.family == "llama"
    with pytest.raises(ollama.ResponseError) as caught:
        await client.show("nope")
    assert caught.value.status_code == 404 and caught.value.error == "model 'nope' not found"
    reply = await client.chat(NAME, messages=[{"role": "user", "content": "Hi"}], options=SHORT)
    assert reply.model == NAME and reply.eval_count


async def test_openai_clients_see_the_library_and_load_by_naming_a_model(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    host = await start_host()
    await ollama_client(host).pull(NAME)
    client = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key="none")
    try:
        cards = {card.id: card.owned_by for card in (await client.models.list()).data}
        assert cards[NAME] == "library"
        reply = await client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert reply.model == NAME and reply.usage and reply.usage.completion_tokens > 0
        cards = {card.id: card.owned_by for card in (await client.models.list()).data}
        assert cards[NAME] == "infertui"  # loaded now: an engine of its own
        status = (await host.client.get(f"/engines/{NAME}/status")).json()  # "/" and all
        assert status["on_demand"] and status["expires_at"] > time.time() + 250
        missing = await host.client.post(
            "/v1/chat/completions", json={"model": "no-such:model", "messages": [
                {"role": "user", "content": "Hi"}]},
        )  # fmt: skip
        # where to look, for a client on another machine (`infertui list` is the local one's)
        assert missing.status_code == 404 and "/v1/models lists them" in missing.text
    finally:
        await client.close()


def need_mib(path: Path, engine: dict[str, Any]) -> float:
    """What a host with these engine settings estimates a load of this file needs, in MiB."""
    settings = HostSettings.model_validate({"engine": engine})
    model = LibraryModel("x", path, path.stat().st_size, 0.0)
    return estimate_bytes(model, engine_spec("x", str(path), settings)) / MIB


async def test_a_small_budget_unloads_the_least_recently_used_idle_model(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any, cut_model_path: Path
) -> None:
    engine = {"ctx": 1024, "parallel": 2}  # as start_host loads engines
    need = need_mib(cut_model_path, engine)
    _, client = await host_with_model(
        start_host, ollama_client, **engine, more={"memory_budget_mb": int(need * 2.5)}
    )  # two fit
    for name in ("a:1", "b:1", "c:1"):
        await client.copy(NAME, name)

    for name in ("a:1", "b:1", "a:1"):  # b is now the least recently used
        await client.generate(name, prompt="Hi", options=SHORT)
    assert {"a:1", "b:1"} <= set(await running(client))
    await client.generate("c:1", prompt="Hi", options=SHORT)
    loaded = set(await running(client))
    assert {"a:1", "c:1"} <= loaded and "b:1" not in loaded

    small = await start_host(**engine, more={"memory_budget_mb": int(need / 2)})  # can never fit
    small_client = ollama_client(small)
    await small_client.pull(NAME)
    with pytest.raises(ollama.ResponseError) as refused:
        await small_client.generate(NAME, prompt="Hi", options=SHORT)
    assert refused.value.status_code == 503 and "MiB" in refused.value.error
    pinned = small.service.engine_ids()[0]  # and the host serves on
    assert (await small_client.generate(pinned, prompt="Hi", options=SHORT)).eval_count


async def test_requests_that_arrive_while_a_model_loads_wait_for_one_load(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    host, client = await host_with_model(start_host, ollama_client)
    gate, loads = asyncio.Event(), []
    real_load = Pool.load

    async def held_load(pool: Pool) -> None:  # the real load, once the test has looked
        loads.append(pool.id)
        await gate.wait()
        await real_load(pool)

    with mock.patch.object(Pool, "load", held_load):
        asks = [
            asyncio.create_task(client.generate(NAME, prompt=f"{n}+{n}=", options=SHORT))
            for n in range(3)
        ]
        while not loads:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # every request has reached the host and waits
        queue = (await host.client.get("/v1/host/queue")).json()["pools"]
        loading = next(q for q in queue if q["pool_id"] == NAME)
        assert loading["loading_for"] == 3 and loading["loaded_in_ms"] is not None
        gate.set()
        replies = await asyncio.gather(*asks)
    assert loads == [NAME] and all(reply.eval_count for reply in replies)


async def infertui(*args: str, data: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infertui.app.cli", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "INFERTUI_DATA_DIR": str(data)},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.p2p
async def test_both_clients_list_the_library_and_infertui_ps_says_until_when(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any, tmp_path: Path
) -> None:
    host = await start_host(p2p=True)
    pinned = host.service.engine_ids()[0]
    await ollama_client(host).pull(NAME)
    for transport in ("http", "p2p"):
        async with await connect(
            host.target(transport), bootstrap=host.bootstrap, seed=CLIENT_SEED
        ) as client:
            listed = {entry.name: entry for entry in await client.library()}
            assert listed[NAME].size == hub_size(cut_hub) and not listed[NAME].loaded
            assert listed[NAME].architecture == "llama" and listed[NAME].source == "hf"

    code, out, err = await infertui("ps", host.url, data=tmp_path)
    assert code == 0, err
    assert pinned in out and NAME not in out
    await ollama_client(host).generate(NAME, prompt="Hi", options=SHORT)
    code, out, err = await infertui(
        "ps", host.server_id, "--bootstrap", host.bootstrap[0], data=tmp_path
    )
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "minutes from now" in rows[NAME] and "CPU" in rows[NAME]
    assert "stays" in rows[pinned]


async def test_two_models_asked_at_once_under_a_limit_of_one_wait_their_turn(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    """Under host.max_loaded, the load that waits its turn never unloads the one just loaded
    for its own request: it waits until that request is answered, then takes its place, as
    Ollama's scheduler does (an audit found it told to come back, with a 503, and a limit
    filled by the host's own engine refused every library model for good)."""
    host, client = await host_with_model(
        start_host, ollama_client, more={"max_loaded": 2}
    )  # the host's own engine, and one more
    pinned = f"{host.service.engine_ids()[0]}:latest"
    await client.copy(NAME, "a:1")
    await client.copy(NAME, "b:1")
    asks = [client.generate(name, prompt="Hi", options=SHORT) for name in ("a:1", "b:1")]
    first, second = await asyncio.gather(*asks)
    assert first.eval_count and second.eval_count  # both answered, one after the other
    assert set(await running(client)) in ({pinned, "a:1"}, {pinned, "b:1"})

    alone = await start_host(more={"max_loaded": 1})  # its own engine fills the limit
    alone_client = ollama_client(alone)
    await alone_client.pull(NAME)
    began = time.monotonic()
    with pytest.raises(ollama.ResponseError) as refused:
        await alone_client.generate(NAME, prompt="Hi", options=SHORT)
    assert time.monotonic() - began < 5  # at once: no wait could make room
    assert refused.value.status_code == 503 and "host.max_loaded is 1" in refused.value.error
    assert alone.service.engine_ids()[0] in refused.value.error  # the one that stays


async def test_a_keep_alive_that_is_no_duration_is_refused_and_a_huge_one_is_forever(
    start_host: HostFactory, cut_hub: Sources, ollama_client: Any
) -> None:
    host, client = await host_with_model(start_host, ollama_client)
    for bad in ("nan", "soon", True):
        reply = await host.client.post(
            "/api/generate", json={"model": NAME, "prompt": "Hi", "keep_alive": bad}
        )
        assert reply.status_code == 400 and "keep_alive" in reply.text
    await client.generate(NAME, prompt="Hi", options=SHORT, keep_alive=1e15)
    assert (await running(client))[NAME].expires_at.year > 2300  # /api/ps answers, as never


async def test_a_library_file_that_does_not_load_is_the_host_s_fault_and_keeps_its_path(
    start_host: HostFactory, cut_model_path: Path, tmp_path: Path
) -> None:
    """An audit's model folder held a text file and a cut-short GGUF: asked for, each was a
    400 (the client's fault), one of them naming where the host keeps its files. Each is a
    500 `model_load_failed`, as Ollama's, naming the model; and the host serves on."""
    broken_files(tmp_path, cut_model_path)
    host = await start_host(more={"model_dirs": [str(tmp_path)]})
    # not offered as models either (an audit saw the text file in /api/tags as "0 MB ? ? ?")
    tags = {m["name"] for m in (await host.client.get("/api/tags")).json()["models"]}
    listed = {m["id"] for m in (await host.client.get("/v1/models")).json()["data"]}
    assert "notgguf" not in listed and "broken" in listed  # its header reads
    assert "notgguf:latest" not in tags and "broken:latest" in tags  # tagged, as Ollama lists
    for name in ("notgguf", "broken"):
        body = {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        reply = await host.client.post("/v1/chat/completions", json=body)
        error = reply.json()["error"]
        assert reply.status_code == 500 and error["code"] == "model_load_failed", error
        assert name in error["message"] and str(tmp_path) not in error["message"], error
    pinned = host.service.engine_ids()[0]
    body = {"model": pinned, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert (await host.client.post("/v1/chat/completions", json=body)).status_code == 200


def broken_files(folder: Path, model: Path) -> None:
    """A text file and a GGUF cut short, in a model folder."""
    (folder / "notgguf.gguf").write_text("hello\n")
    whole = model.read_bytes()
    (folder / "broken.gguf").write_bytes(whole[: len(whole) // 2])
