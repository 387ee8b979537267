"""Issue 14 §5: Ollama's own API under /api, spoken to by the official `ollama` package (and
httpx for the error shape), against the real server on the bundled model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime

import jsonschema
import ollama
import pytest

from .conftest import MODEL, Host

pytestmark = pytest.mark.model

HELLO = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
async def client(host: Host) -> AsyncIterator[ollama.AsyncClient]:
    client = ollama.AsyncClient(host=host.url)
    yield client
    await client._client.aclose()


@pytest.mark.deterministic
async def test_chat_whole_and_streamed_give_the_same_reply(client: ollama.AsyncClient) -> None:
    """The host is deterministic: the streamed chat reads its prompt afresh as the whole one
    did (not on the cells it left), so the two are one generation."""
    options = {"temperature": 0, "num_predict": 12}
    whole = await client.chat(model=MODEL, messages=HELLO, stream=False, options=options)
    assert whole.message.role == "assistant" and whole.message.content
    assert whole.done and whole.eval_count and 0 < whole.eval_count <= 12
    assert (whole.done_reason == "length") == (whole.eval_count == 12)  # else an end token
    assert whole.prompt_eval_count and whole.total_duration and whole.eval_duration
    parts = [p async for p in await client.chat(
        model=f"{MODEL}:latest", messages=HELLO, stream=True, options=options,
    )]  # fmt: skip
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count
    assert parts[-1].done_reason == whole.done_reason
    stamps = [datetime.fromisoformat(str(p.created_at)) for p in parts]  # each its own time
    assert stamps == sorted(stamps) and len(set(stamps)) > 1


async def test_generate_with_a_system_prompt_and_raw(client: ollama.AsyncClient) -> None:
    options = {"temperature": 0, "num_predict": 8}
    chat = await client.generate(model=MODEL, prompt="Name a colour.", system="Be brief.",
                                 options=options)  # fmt: skip
    assert chat.response and chat.done and chat.eval_count and 0 < chat.eval_count <= 8
    raw = [p async for p in await client.generate(
        model=MODEL, prompt="Once upon a time", raw=True, stream=True, options=options,
    )]  # fmt: skip
    assert "".join(p.response for p in raw) and raw[-1].done
    loaded = await client.generate(model=MODEL)  # how clients load a model
    assert loaded.done and loaded.done_reason == "load"
    by_chat = await client.chat(model=MODEL, messages=[])  # ... or by /api/chat (it was a 400)
    assert by_chat.done and by_chat.done_reason == "load" and by_chat.message.content == ""
    with pytest.raises(ollama.ResponseError):
        await client.chat(model="no-such-model", messages=[])


@pytest.mark.deterministic
async def test_mirostat_and_typical_p_options_are_used(client: ollama.AsyncClient) -> None:
    """Ollama's `mirostat`, `mirostat_tau`, `mirostat_eta` and `typical_p` options reach the
    sampler (they were read past): Mirostat 2 aiming at no surprise at all is greedy. (The
    host is deterministic: both replies come from the same logits, only the samplers differ.)"""
    greedy = await client.chat(model=MODEL, messages=HELLO, stream=False,
                               options={"temperature": 0, "num_predict": 12})  # fmt: skip
    sure = {"temperature": 0.9, "num_predict": 12, "mirostat": 2, "mirostat_tau": 0.0,
            "mirostat_eta": 0.2, "typical_p": 0.9}  # fmt: skip
    mirostat = await client.chat(model=MODEL, messages=HELLO, stream=False, options=sure)
    assert mirostat.message.content == greedy.message.content
    with pytest.raises(ollama.ResponseError) as refused:
        await client.chat(model=MODEL, messages=HELLO, options={"mirostat": 3})
    assert refused.value.status_code == 400 and "mirostat" in refused.value.error


async def test_format_constrains_the_reply(client: ollama.AsyncClient) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}, "count": {"type": "integer"}},
        "required": ["colour", "count"],
    }
    reply = await client.chat(model=MODEL, messages=HELLO, format=schema,
                              options={"temperature": 0, "num_predict": 64})  # fmt: skip
    jsonschema.validate(json.loads(reply.message.content or ""), schema)


async def test_tags_show_ps_and_version(client: ollama.AsyncClient) -> None:
    listed = await client.list()
    (model,) = listed.models
    assert model.model == f"{MODEL}:latest"  # tagged, as Ollama lists models
    assert model.size and model.size > 90_000_000  # 98 MB
    assert model.details is not None and model.details.format == "gguf"
    assert model.details.family == "llama" and model.details.quantization_level
    shown = await client.show(MODEL)
    assert shown.details is not None and shown.details.family == "llama"
    assert shown.modelfile and "smollm2-135m" in shown.modelfile
    assert shown.capabilities == ["completion", "tools", "embedding"]  # what clients offer
    assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] > 0
    # what the GGUF says of itself, as Ollama shows it (a helper's audit found these blank,
    # and the size llama.cpp names from the layer count: "256M")
    assert model.details.parameter_size == shown.details.parameter_size == "135M"
    assert shown.modelinfo["general.parameter_count"] == 134_515_008
    assert shown.modelinfo["llama.context_length"] == 8192  # the model's; num_ctx the host's
    assert shown.license == "apache-2.0" and shown.template and "<|im_start|>" in shown.template
    assert shown.parameters is not None
    assert "num_ctx " in shown.parameters and "temperature 0.2" in shown.parameters
    # by any name a chat takes (it was "no engine named 'smollm2-135m:latest'"), and Ollama's
    # words for none
    assert (await client.show(f"{MODEL}:latest")).modelfile == shown.modelfile
    with pytest.raises(ollama.ResponseError) as caught:
        await client.show("nope")
    assert caught.value.status_code == 404 and caught.value.error == "model 'nope' not found"
    running = await client.ps()
    assert [m.model for m in running.models] == [f"{MODEL}:latest"]
    assert running.models[0].size and running.models[0].size > 0
    assert running.models[0].details and running.models[0].details.parameter_size == "135M"
    assert (await client._request_raw("GET", "/api/version")).json()["version"]


async def test_errors_come_in_ollamas_shape(host: Host, client: ollama.AsyncClient) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        await client.chat(model="nope", messages=HELLO, stream=False)
    assert caught.value.status_code == 404 and "nope" in caught.value.error
    bad = await host.client.post("/api/chat", json={"model": MODEL, "messages": "hi"})
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    image = await host.client.post("/api/chat", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi", "images": ["AAAA"]}],
    })  # fmt: skip
    assert image.status_code == 400 and "images are not supported" in image.json()["error"]
    ok = await client.chat(model=MODEL, messages=HELLO, stream=False, options={"num_predict": 2})
    assert ok.done  # the host serves on


async def test_chat_with_tools_in_ollamas_shape(client: ollama.AsyncClient) -> None:
    """Tools as Ollama's clients send them; a reply that is a call comes back as tool_calls with
    arguments as an object, whole and streamed (the base model is steered to a call with
    `format`); a call and its result go back in the history."""
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
               "required": ["city"], "additionalProperties": False}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get_weather",
                                               "description": "The weather now.",
                                               "parameters": weather}}]  # fmt: skip
    a_call = {"type": "object", "required": ["tool_calls"], "properties": {"tool_calls": {
        "type": "array", "minItems": 1, "maxItems": 1, "items": {
            "type": "object", "required": ["name", "arguments"], "additionalProperties": False,
            "properties": {"name": {"const": "get_weather"}, "arguments": weather}}}}}  # fmt: skip
    options = {"temperature": 0, "num_predict": 60}
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    whole = await client.chat(model=MODEL, messages=asked, tools=tools, format=a_call,
                              options=options, stream=False)  # fmt: skip
    (call,) = whole.message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(dict(call.function.arguments), weather)
    parts = [p async for p in await client.chat(
        model=MODEL, messages=asked, tools=tools, format=a_call, options=options, stream=True,
    )]  # fmt: skip
    assert [c.function.name for c in parts[-1].message.tool_calls or []] == ["get_weather"]
    assert all(not p.message.content for p in parts)  # the call is held back, not shown as text
    follow = [*asked, {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
              {"role": "tool", "content": "18 C and sunny", "tool_name": "get_weather"}]  # fmt: skip
    answer = await client.chat(model=MODEL, messages=follow, tools=tools, stream=False,
                               options={"temperature": 0, "num_predict": 8})  # fmt: skip
    assert answer.done and answer.prompt_eval_count
    assert answer.prompt_eval_count > (whole.prompt_eval_count or 0)


async def test_a_chat_past_the_context_loses_its_oldest_turns_as_ollamas_does(
    host: Host, client: ollama.AsyncClient
) -> None:
    """Open WebUI and other Ollama clients send the whole conversation; past the context
    (1,024 tokens here) Ollama drops the oldest turns, and so does /api/chat (it was a 400).
    The system prompt stays. A single question past the context is still refused."""
    filler = "The sea is wide and the sky is grey. " * 80  # ~800 tokens
    messages = [{"role": "system", "content": "Answer in one word."}]
    for i in range(3):
        messages.append({"role": "user", "content": f"Part {i}. {filler}"})
        messages.append({"role": "assistant", "content": f"Noted part {i}."})
    messages.append({"role": "user", "content": "Name a colour."})
    reply = await client.chat(
        model=MODEL, messages=messages, stream=False, options={"num_predict": 4}
    )
    assert reply.done and reply.prompt_eval_count is not None
    assert 800 < reply.prompt_eval_count < 1024  # one exchange of the three kept, and the rest
    lone = [{"role": "user", "content": filler * 2}]
    too_long = await host.client.post(
        "/api/chat", json={"model": MODEL, "messages": lone, "stream": False}
    )
    assert too_long.status_code == 400 and "context" in too_long.json()["error"]
