"""Spec 004 over real HTTP: the official openai SDK, engine management, health, errors."""

from __future__ import annotations

import asyncio
import json
import shutil

import openai
import pytest

from ..conftest import wait_until
from .conftest import MODEL, Host

pytestmark = pytest.mark.model

CHAT = [{"role": "user", "content": "Name three colors."}]


async def test_spec_004_chat_completion_with_the_openai_sdk(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=16, temperature=0
    )
    assert reply.object == "chat.completion"
    assert reply.model == MODEL
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.deterministic
async def test_spec_004_streamed_chat_matches_the_whole_reply(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    """The stream is the whole reply in pieces. The host is deterministic: the streamed
    request reads its prompt afresh as the whole one did, not from the cells it left."""
    client = sdk
    whole = await client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=24, temperature=0
    )
    stream = await client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.deterministic
async def test_spec_004_completions_string_and_array_prompts(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    """An array prompt's first choice is that prompt's completion alone. The host is
    deterministic (each prompt prefilled alone, at the same chunks): batched with the other
    prompt, the prompt's logits would otherwise depend on how the two shared a decode."""
    client = sdk
    one = await client.completions.create(
        model=MODEL, prompt="The sky is", max_tokens=8, temperature=0
    )
    assert one.object == "text_completion"
    assert len(one.choices) == 1 and one.choices[0].text
    many = await client.completions.create(
        model=MODEL, prompt=["The sky is", "Water is"], max_tokens=8, temperature=0
    )
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[0].text == one.choices[0].text
    assert 0 < many.usage.completion_tokens <= 16
    assert (
        many.usage.prompt_tokens == 2 * one.usage.prompt_tokens - 1
    )  # 'Water is' is a token shorter


async def test_a_completion_prompt_reads_control_tokens_as_llama_server_does(host: Host) -> None:
    """A prompt in the model's own turn format (ChatML's `<|im_start|>`) is what its template
    would have made: each control token written out is one token. They were read as plain
    text, several tokens each. (A written BOS is not doubled: test_generation, on a model
    that reads one.)"""

    async def prompt_tokens(prompt: str) -> int:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        reply = await host.client.post("/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        return int(reply.json()["usage"]["prompt_tokens"])

    assert await prompt_tokens("<|im_start|>") == 1  # SmolLM2 reads no BOS
    assert await prompt_tokens("<|im_start|>Hi") == await prompt_tokens("Hi") + 1
    turn = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    tokenized = await host.client.post("/tokenize", json={"content": turn, "add_special": True})
    assert await prompt_tokens(turn) == len(tokenized.json()["tokens"])


async def test_spec_004_streamed_completions_for_an_array_prompt(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    stream = await sdk.completions.create(
        model=MODEL, prompt=["One,", "Alpha,"], max_tokens=6, temperature=0, stream=True
    )
    texts = {0: "", 1: ""}
    finished = set()
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1}
    assert texts[0] and texts[1]


async def test_spec_004_models_list_for_the_sdk(host: Host, sdk: openai.AsyncOpenAI) -> None:
    models = await sdk.models.list()
    assert [m.id for m in models.data] == [MODEL]


async def test_spec_004_sse_framing_headers_and_done(host: Host) -> None:
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 4, "stream": True}
    async with host.client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        raw = "".join([part async for part in response.aiter_text()])
    events = [e for e in raw.split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # every chunk names its finish_reason, null until the last (as spec 004's example)
    choices = [json.loads(e[6:])["choices"][0] for e in events[:-1]]
    assert [c["finish_reason"] for c in choices[:-1]] == [None] * (len(choices) - 1)
    assert choices[-1]["finish_reason"] in ("stop", "length")


@pytest.mark.deterministic
async def test_a_seed_of_minus_one_draws_one_and_a_wide_seed_is_folded_in(host: Host) -> None:
    """llama.cpp's clients send `seed: -1` for a random seed, and OpenAI takes any integer:
    both were 400s. -1 now draws a seed; one past 32 bits is folded into llama.cpp's range,
    as reproducible as any. (Deterministic host: the second request reads its prompt as the
    first did, not from the first's kept cells, so only the seed decides the draw.)"""
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 8, "temperature": 1.0}
    drawn = await host.client.post("/v1/chat/completions", json={**body, "seed": -1})
    assert drawn.status_code == 200, drawn.text
    texts = []
    for _ in range(2):
        wide = await host.client.post("/v1/chat/completions", json={**body, "seed": 2**40 + 7})
        assert wide.status_code == 200, wide.text
        texts.append(wide.json()["choices"][0]["message"]["content"])
    assert texts[0] and texts[0] == texts[1]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("top_p", -0.5),
        ("presence_penalty", 3),
        ("frequency_penalty", -3),
        ("max_tokens", 0),
    ],
)
async def test_spec_004_out_of_range_parameters_are_400(
    host: Host, field: str, value: float
) -> None:
    response = await host.client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": CHAT, field: value}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == field
    assert field in error["message"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
async def test_a_number_that_is_not_finite_is_refused_as_such(host: Host, value: str) -> None:
    """JSON's NaN and Infinity, which Python's json module writes: a 400 saying so (NaN was
    refused as "should be less than or equal to 2")."""
    body = json.dumps({"model": MODEL, "messages": CHAT, "temperature": 0.5})
    response = await host.client.post(
        "/v1/chat/completions",
        content=body.replace("0.5", value),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "temperature"
    assert "finite number" in error["message"], error


@pytest.mark.parametrize(
    ("path", "field", "value", "said"),
    [
        ("/v1/completions", "suffix", "}", "'suffix') is not supported"),
        ("/v1/completions", "echo", True, "echo is not supported"),
        ("/api/generate", "images", ["AAAA"], "images are not supported"),
    ],
)
async def test_what_the_host_cannot_do_is_refused_by_name_not_read_past(
    host: Host, path: str, field: str, value: object, said: str
) -> None:
    """A reply that ignored a suffix, echo or an image would look like a good one: each is a
    400 naming it (they were read past). Empty or false values pass."""
    body: dict[str, object] = {"model": MODEL, "max_tokens": 2}
    body.update({"messages": CHAT} if "chat" in path else {"prompt": "Hello"})
    refused = await host.client.post(path, json={**body, field: value, "stream": False})
    assert refused.status_code == 400, refused.text
    assert said in refused.text
    if path.startswith("/v1/"):
        assert refused.json()["error"]["param"] == field
    empty = {"suffix": "", "echo": False, "images": []}[field]
    served = await host.client.post(path, json={**body, field: empty, "stream": False})
    assert served.status_code == 200, served.text


async def test_logit_bias_from_the_official_client_steers_the_tokens(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    """OpenAI's `logit_bias` (token id → bias in -100..100) is applied, as llama-server does;
    a token outside the vocabulary, or a key that is not a token id, is a 400 naming it."""
    tokens = (await host.client.post("/tokenize", json={"content": " banana"})).json()["tokens"]
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=3, temperature=0, logit_bias={tokens[0]: 100}
    )
    assert reply.choices[0].message.content == " banana" * 3
    streamed = await sdk.completions.create(
        model=MODEL, prompt="Hello", max_tokens=2, temperature=0,
        logit_bias={str(tokens[0]): 100}, stream=True,
    )  # fmt: skip
    assert "".join([c.choices[0].text async for c in streamed]) == " banana" * 2
    for bias in ({"99999999": 1}, {"banana": 1}, {str(tokens[0]): 101}):
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 2, "logit_bias": bias}
        refused = await host.client.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "logit_bias"


async def test_spec_004_missing_model_invalid_json_and_context_overflow_are_400(host: Host) -> None:
    missing = await host.client.post("/v1/chat/completions", json={"messages": CHAT})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    broken = await host.client.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert broken.status_code == 400
    overflow = await host.client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "word " * 2000, "max_tokens": 8}
    )
    assert overflow.status_code == 400
    assert overflow.json()["error"]["code"] == "context_length_exceeded"


async def test_an_empty_body_an_empty_input_and_a_nameless_show_say_what_is_missing(
    host: Host,
) -> None:
    """A helper's audit: no body gave "Field required" with no field, an empty embedding
    input "context_length_exceeded" for 0 tokens, and /api/show without a model a 404 for
    the engine ''."""
    empty = await host.client.post(
        "/v1/chat/completions", headers={"content-type": "application/json"}
    )
    assert empty.status_code == 400 and "no body" in empty.json()["error"]["message"]
    nothing = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": ""})
    error = nothing.json()["error"]
    assert nothing.status_code == 400 and error["code"] == "invalid_params", error
    assert error["param"] == "input" and "empty" in error["message"]
    nameless = await host.client.post("/api/show", json={})
    assert nameless.status_code == 400 and nameless.json() == {"error": "model is required"}


async def test_a_bad_union_field_is_said_for_the_shape_it_has(host: Host) -> None:
    """`input` is a string or a list of strings: `[]` was "invalid 'input.str': Input should
    be a valid string", naming pydantic's union member and the wrong one."""
    for path in ("/api/embed", "/v1/embeddings"):
        empty = await host.client.post(path, json={"model": MODEL, "input": []})
        message = str(empty.json()["error"])
        assert empty.status_code == 400 and "invalid 'input': List should have at least 1" in (
            message
        ), message
    ids = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": [1]})
    error = ids.json()["error"]
    assert "token ids are not taken" in error["message"] and error["param"] == "input", error
    number = await host.client.post("/api/embed", json={"model": MODEL, "input": [1]})
    assert number.json() == {"error": "invalid 'input.0': Input should be a valid string"}


async def test_spec_004_unknown_model_is_404_not_found_error(
    host: Host, sdk: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.chat.completions.create(model="no-such-model", messages=CHAT)
    assert caught.value.status_code == 404
    body = (
        await host.client.post("/v1/chat/completions", json={"model": "nope", "messages": CHAT})
    ).json()
    assert body["error"]["type"] == "not_found_error"
    assert body["error"]["param"] == "model"


async def test_spec_004_wrong_method_is_405_and_unknown_path_404(host: Host) -> None:
    wrong = await host.client.get("/v1/chat/completions")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    unknown = await host.client.get("/v1/nothing-here")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found_error"


@pytest.mark.fresh_host
async def test_spec_004_engine_still_loading_is_503(host: Host, model_path, tmp_path) -> None:
    copy = tmp_path / "second.gguf"
    shutil.copy(model_path, copy)
    adding = asyncio.create_task(
        host.client.post("/engines", json={"engine_id": "second", "model_path": str(copy)})
    )
    while "second" not in host.service.engine_ids():
        await asyncio.sleep(0.001)
    busy = await host.client.post(
        "/v1/chat/completions", json={"model": "second", "messages": CHAT, "max_tokens": 2}
    )
    assert busy.status_code == 503
    assert busy.json()["error"]["code"] == "engine_unavailable"
    assert (await adding).status_code == 201
    ready = await host.client.post(
        "/v1/chat/completions", json={"model": "second", "messages": CHAT, "max_tokens": 2}
    )
    assert ready.status_code == 200


async def test_spec_004_engine_management_add_list_status_remove(
    host: Host, model_path, tmp_path
) -> None:
    copy = tmp_path / "extra.gguf"
    shutil.copy(model_path, copy)
    added = await host.client.post(
        "/engines",
        json={"engine_id": "extra", "model_path": str(copy), "n_ctx": 512, "n_gpu_layers": 0},
    )
    assert added.status_code == 201
    assert added.json() == {
        "engine_id": "extra",
        "status": "loaded",
        "model_path": str(copy),
        "parameters": added.json()["parameters"],
    }
    assert added.json()["parameters"]["n_ctx"] == 512
    listed = (await host.client.get("/engines")).json()["engines"]
    assert {e["engine_id"]: e["status"] for e in listed} == {MODEL: "loaded", "extra": "loaded"}
    status = (await host.client.get("/engines/extra/status")).json()
    assert status["memory_usage"]["model_size_mb"] > 60  # SmolLM2 135M, Q4_1
    assert status["memory_usage"]["context_size_mb"] > 0
    assert status["performance"] == {"last_inference_tps": 0.0, "total_requests": 0}
    removed = await host.client.delete("/engines/extra")
    assert removed.json() == {"engine_id": "extra", "status": "removed"}
    assert (await host.client.get("/engines/extra/status")).status_code == 404
    assert (await host.client.delete("/engines/extra")).status_code == 404


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("MISSING", 404, "model_file_not_found"), ("NOT_GGUF", 400, "model_invalid")],
)
async def test_spec_004_adding_a_bad_model_is_a_clear_error(
    host: Host, tmp_path, path, status, code
) -> None:
    if path == "MISSING":
        path = str(tmp_path / "nowhere.gguf")  # in a model folder, but no file there
    if path == "NOT_GGUF":
        bogus = tmp_path / "bogus.gguf"
        bogus.write_text("hello")
        path = str(bogus)
    response = await host.client.post("/engines", json={"engine_id": "bad", "model_path": path})
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert "bad" not in host.service.engine_ids()
    assert (await host.client.get("/v1/health")).json()["status"] == "healthy"


async def test_spec_004_duplicate_engine_id_is_refused(host: Host, model_path) -> None:
    response = await host.client.post(
        "/engines", json={"engine_id": MODEL, "model_path": str(model_path)}
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "engine_exists"


@pytest.mark.parametrize("path", ["/v1/health", "/health", "/status"])
async def test_spec_004_health_endpoints(host: Host, path: str) -> None:
    body = (await host.client.get(path)).json()
    assert body["status"] == "healthy"
    assert body["engines"] == {"loaded": 1, "unloaded": 0, "total": 1}
    assert body["engines_summary"][0]["engine_id"] == MODEL
    assert body["system"]["memory_usage_mb"] > 0
    assert body["version"] == "1.0.0"


@pytest.mark.fresh_host
async def test_health_is_a_503_while_the_host_drains_to_stop(host: Host) -> None:
    """A load balancer's check fails as soon as the host stops taking work (SIGTERM, a
    redeploy), while the replies under way still finish in the grace: health said "healthy"
    with a 200 through the whole drain, and new work kept coming to a host that refuses it."""
    host.service.settings.drain_on_stop_ms = 10_000
    body = {"model": MODEL, "prompt": "Count:", "max_tokens": 48, "stream": True,
            "ignore_eos": True}  # fmt: skip
    async with host.client.stream("POST", "/v1/completions", json=body) as reply:
        lines = reply.aiter_lines()
        assert (await anext(lines)).startswith("data: ")  # the job runs
        stopping = asyncio.create_task(host.service.stop())
        await wait_until(lambda: host.service.stopping)
        health = await host.client.get("/v1/health")
        assert health.status_code == 503
        assert health.json()["status"] == "unhealthy"
        rest = [line async for line in lines]
    assert "data: [DONE]" in rest
    assert any('"finish_reason":"length"' in line for line in rest)  # finished in the grace
    await stopping
