"""Issue 34 §4: what the clients a newcomer already has (oterm, llm, the Agents SDK, the
`ollama` package) found against a live host, each fixed and proved here with the client
itself where it installs (openai, openai-agents, ollama) and httpx for the bare wire."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import ollama
import openai
import pytest
from pydantic import BaseModel, Field

from infertui.core.protocol.ollama_api import OLLAMA_API_VERSION

from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

ASK = [{"role": "user", "content": "Count from one to a hundred."}]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}


def _sdk(host: Host, **headers: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{host.url}/v1", api_key="unused", max_retries=0, default_headers=headers
    )


# ---- a. no max_tokens: until the context is full -------------------------------------------


def _endless(host: Host) -> dict[str, Any]:
    """What keeps a chat reply going: no end-of-text, and its turn markers, which end a chat
    reply even with ignore_eos, never sampled."""
    engine = host.service._registry.resolve(MODEL).engine
    assert engine is not None
    banned = {str(token): -100 for token in engine.chat_stop_tokens}
    return {"ignore_eos": True, "logit_bias": banned}


async def test_a_request_without_a_limit_runs_until_the_context_is_full(
    start_host: HostFactory,
) -> None:
    """oterm, llm and the Agents SDK send no max_tokens: the reply is not cut at spec 004's
    128 (16 for completions) but runs, as OpenAI's, Ollama's and llama-server's, until the
    context of the slot is full, and then ends with "length". (The Responses API never had
    a default.)"""
    host = await start_host(ctx=160, parallel=1)
    ctx = (await host.client.get(f"/v1/models/{MODEL}")).json()["max_model_len"]  # 256: padded
    sdk = _sdk(host)
    try:
        chat = await sdk.chat.completions.create(
            model=MODEL, messages=ASK, temperature=0, extra_body=_endless(host)
        )  # type: ignore[call-overload]
        assert chat.choices[0].finish_reason == "length" and chat.usage is not None
        assert chat.usage.completion_tokens > 128
        assert ctx - 2 <= chat.usage.total_tokens <= ctx
        text = await sdk.completions.create(
            model=MODEL, prompt="One, two,", temperature=0, extra_body={"ignore_eos": True}
        )
        assert text.choices[0].finish_reason == "length" and text.usage is not None
        assert ctx - 2 <= text.usage.total_tokens <= ctx
    finally:
        await sdk.close()


async def test_a_limit_past_the_context_runs_until_the_context_is_full(
    start_host: HostFactory,
) -> None:
    """Clients send max_tokens 4,096 or more whatever the model (the helper's audit: every
    such chat was a 400 on the default 4,096 context). As llama-server and Ollama take it,
    the reply runs until the context is full and ends with "length"; only a prompt that
    leaves no room is refused."""
    host = await start_host(ctx=160, parallel=1)
    ctx = (await host.client.get(f"/v1/models/{MODEL}")).json()["max_model_len"]
    sdk = _sdk(host)
    try:
        chat = await sdk.chat.completions.create(
            model=MODEL, messages=ASK, temperature=0, max_tokens=100_000,
            extra_body=_endless(host),
        )  # type: ignore[call-overload]  # fmt: skip
        assert chat.choices[0].finish_reason == "length" and chat.usage is not None
        assert ctx - 2 <= chat.usage.total_tokens <= ctx
        with pytest.raises(openai.BadRequestError) as too_long:
            await sdk.completions.create(model=MODEL, prompt="word " * 400, max_tokens=8)
        assert too_long.value.code == "context_length_exceeded"
    finally:
        await sdk.close()
    ollama_client = ollama.AsyncClient(host=host.url)
    try:
        reply = await ollama_client.generate(
            model=MODEL, prompt="Count from one to a hundred:", options={"num_predict": 100_000}
        )
    finally:
        await ollama_client._client.aclose()
    assert reply.done and reply.done_reason in ("stop", "length")
    assert reply.prompt_eval_count is not None and reply.eval_count is not None
    assert reply.prompt_eval_count + reply.eval_count <= ctx


async def test_the_host_s_default_max_tokens_caps_requests_that_set_none(
    start_host: HostFactory,
) -> None:
    """http.default_max_tokens (spec 004's 128, if wanted) applies where a request sets no
    limit, and a request's own limit still wins."""
    host = await start_host(default_max_tokens=5)
    body = {"model": MODEL, "messages": ASK, "temperature": 0, **_endless(host)}
    capped = (await host.client.post("/v1/chat/completions", json=body)).json()
    assert capped["usage"]["completion_tokens"] == 5
    assert capped["choices"][0]["finish_reason"] == "length"
    own = (await host.client.post("/v1/chat/completions", json={**body, "max_tokens": 7})).json()
    assert own["usage"]["completion_tokens"] == 7
    text = {"model": MODEL, "prompt": "One,", "ignore_eos": True}
    completion = (await host.client.post("/v1/completions", json=text)).json()
    assert completion["usage"]["completion_tokens"] == 5
    made = {"model": MODEL, "input": "Count.", "temperature": 0, "ignore_eos": True}
    reply = (await host.client.post("/v1/responses", json=made)).json()
    # a turn marker may end it sooner (the Responses API takes no logit_bias to ban them)
    assert reply["usage"]["output_tokens"] <= 5
    assert (reply["status"] == "incomplete") == (reply["usage"]["output_tokens"] == 5)


# ---- b. a forced call and response_format together ----------------------------------------


async def test_a_forced_call_and_response_format_together_call_then_answer_in_the_format(
    sdk: openai.AsyncOpenAI,
) -> None:
    """As OpenAI's: tool_choice "required" with response_format is no 400; the reply is the
    call (its grammar wins), and the answer after its result comes back follows the format."""
    ask: dict[str, Any] = dict(model=MODEL, messages=ASK, tools=TOOLS, temperature=0,
                               response_format=FORMAT, max_tokens=60,
                               parallel_tool_calls=False)  # fmt: skip
    first = await sdk.chat.completions.create(**ask, tool_choice="required")
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls or []
    turns = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
    ]
    answer = await sdk.chat.completions.create(**{**ask, "messages": turns}, tool_choice="auto")
    assert answer.choices[0].finish_reason == "stop"
    assert set(_json(answer.choices[0].message.content)) == {"city"}


async def test_a_forced_call_and_text_format_together_on_the_responses_api(
    sdk: openai.AsyncOpenAI,
) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": CITY}
    form = {"format": {"type": "json_schema", "name": "city", "schema": CITY}}
    ask: dict[str, Any] = dict(model=MODEL, tools=[tool], text=form, temperature=0,
                               max_output_tokens=60, parallel_tool_calls=False)  # fmt: skip
    first = await sdk.responses.create(**ask, input="Weather in Paris?", tool_choice="required")
    [call] = first.output
    assert call.type == "function_call" and first.status == "completed"
    back = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    answer = await sdk.responses.create(
        **ask, input=[back], previous_response_id=first.id, tool_choice="auto"
    )
    assert answer.status == "completed" and set(_json(answer.output_text)) == {"city"}


async def test_the_agents_sdk_runs_an_agent_with_an_output_type_and_a_required_tool(
    host: Host,
) -> None:
    """The Agents SDK's `output_type` with `tool_choice="required"`: the tool is called, its
    result goes back, and the final output is the output type."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: Annotated[str, Field(max_length=24)]) -> str:
        """The weather in a city now."""
        called.append(city)
        return "18 C and sunny"

    class Weather(BaseModel):
        city: str = Field(max_length=24)

    client = _sdk(host)
    try:
        agent = agents.Agent(
            name="weather",
            instructions="Answer with the city.",
            tools=[get_weather],
            output_type=Weather,
            model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=agents.ModelSettings(
                tool_choice="required", parallel_tool_calls=False, temperature=0
            ),
        )
        result = await agents.Runner.run(agent, "Weather in Paris?", max_turns=4)
    finally:
        await client.close()
    assert len(called) == 1
    assert isinstance(result.final_output, Weather)


# ---- c. GET / and HEAD ---------------------------------------------------------------------


async def test_root_answers_as_ollama_s_and_head_works_on_every_get_route(host: Host) -> None:
    root = await host.client.get("/")
    assert root.status_code == 200 and root.text == "Ollama is running"
    assert root.headers["content-type"].startswith("text/plain")
    head = await host.client.head("/")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == root.headers["content-length"]
    for path in ("/v1/models", "/api/tags", "/api/version", "/v1/health", "/metrics"):
        whole = await host.client.get(path)
        bare = await host.client.head(path)
        assert (bare.status_code, bare.content) == (whole.status_code, b""), path
        assert bare.headers["content-type"] == whole.headers["content-type"], path
        assert "x-correlation-id" in bare.headers
    assert (await host.client.head("/nowhere")).status_code == 404
    assert (await host.client.head("/v1/chat/completions")).status_code == 405  # POST only
    # a stream's head comes back at once: its body is not waited for
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 200, "ignore_eos": True}
    task = (await host.client.post("/v1/tasks", json=body)).json()
    streamed = await host.client.head(f"/v1/tasks/{task['task_id']}/stream", timeout=10)
    assert streamed.status_code == 200 and streamed.content == b""
    assert streamed.headers["content-type"].startswith("text/event-stream")


async def test_root_is_open_without_the_api_key(start_host: HostFactory) -> None:
    host = await start_host(api_key="k")
    assert (await host.client.get("/")).status_code == 200
    assert (await host.client.head("/v1/models")).status_code == 401


# ---- d. CORS -------------------------------------------------------------------------------


async def test_oc_ctrl_2070_preflights_from_allowed_origins_get_204_and_the_headers(
    host: Host, start_host: HostFactory
) -> None:
    """Off by default (OC-CTRL-2070: a preflight is still a 405 and a page's request gets no
    Access-Control-Allow-Origin); with origins, as OLLAMA_ORIGINS, patterns included: a
    preflight from one is a 204 with the Access-Control-Allow-* headers, the real request
    carries Access-Control-Allow-Origin, another origin gets neither."""
    page = "http://localhost:5173"
    preflight = {
        "Origin": page,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,authorization,x-stainless-os",
    }
    off = await host.client.options("/api/chat", headers=preflight)
    assert off.status_code == 405 and "access-control-allow-origin" not in off.headers
    on = await start_host(cors_origins=("http://localhost:*", "https://app.example"))
    answer = await on.client.options("/api/chat", headers=preflight)
    assert answer.status_code == 204 and answer.content == b""
    assert answer.headers["access-control-allow-origin"] == page
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert {"content-type", "authorization", "x-correlation-id"} <= set(allowed.split(", "))
    body = {"model": MODEL, "messages": ASK, "stream": False, "options": {"num_predict": 2}}
    real = await on.client.post("/api/chat", json=body, headers={"Origin": page})
    assert real.status_code == 200 and real.headers["access-control-allow-origin"] == page
    assert "x-correlation-id" in real.headers["access-control-expose-headers"].lower()
    exact = await on.client.options(
        "/v1/models", headers={**preflight, "Origin": "https://app.example"}
    )
    assert exact.status_code == 204
    other = await on.client.options("/api/chat", headers={**preflight, "Origin": "http://evil.example"})  # fmt: skip
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    stranger = await on.client.get("/api/tags", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in stranger.headers
    # the DNS-rebinding guard stays on with CORS: a Host that is no loopback name is refused
    rebound = await on.client.get("/api/tags", headers={"Host": "evil.example", "Origin": page})
    assert rebound.status_code == 403


# ---- e. /api/version -----------------------------------------------------------------------


async def test_api_version_is_the_ollama_api_level_clients_gate_features_on(host: Host) -> None:
    client = ollama.AsyncClient(host=host.url)
    try:
        version = (await client._request_raw("GET", "/api/version")).json()["version"]
    finally:
        await client._client.aclose()
    assert version == OLLAMA_API_VERSION
    level = tuple(int(part) for part in version.split("."))
    assert level >= (0, 5, 0)  # tools (0.3) and `format` schemas (0.5) are served


# ---- f. think ------------------------------------------------------------------------------

THINKING_TEMPLATE = """\
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>
{% endif %}"""


async def test_think_for_a_model_that_cannot_is_a_400_as_ollama_s(host: Host) -> None:
    client = ollama.AsyncClient(host=host.url)
    try:
        with pytest.raises(ollama.ResponseError) as chat:
            await client.chat(model=MODEL, messages=ASK, think=True, stream=False)
        with pytest.raises(ollama.ResponseError) as generate:
            await client.generate(model=MODEL, prompt="Hi", think=True, stream=False)
        quiet = await client.chat(
            model=MODEL, messages=ASK, think=False, stream=False, options={"num_predict": 2}
        )
    finally:
        await client._client.aclose()
    for refused in (chat.value, generate.value):
        assert refused.status_code == 400
        assert refused.error == f'"{MODEL}" does not support thinking'
    assert quiet.done
    bare = await host.client.post("/api/chat", json={"model": MODEL, "messages": ASK,
                                                     "think": "high"})  # fmt: skip
    assert bare.status_code == 400 and bare.json() == {
        "error": f'"{MODEL}" does not support thinking'
    }


async def test_think_for_a_model_whose_template_thinks_is_taken(
    start_host: HostFactory, tmp_path: Path
) -> None:
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    host = await start_host(chat_template=str(template))
    client = ollama.AsyncClient(host=host.url)
    try:
        reply = await client.chat(
            model=MODEL, messages=ASK, think=True, stream=False, options={"num_predict": 2}
        )
        shown = await client.show(MODEL)
    finally:
        await client._client.aclose()
    assert reply.done
    assert shown.capabilities is not None and "thinking" in shown.capabilities


# ---- g. input items and conversations ------------------------------------------------------


async def test_a_kept_response_s_input_items_page_as_openai_s(sdk: openai.AsyncOpenAI) -> None:
    said = ["First.", "Second.", "Third."]
    made = await sdk.responses.create(
        model=MODEL, max_output_tokens=2,
        input=[{"role": "user", "content": text} for text in said],  # type: ignore[misc]
    )  # fmt: skip
    newest_first = await sdk.responses.input_items.list(made.id)
    assert [item.content[0].text for item in newest_first.data] == said[::-1]  # type: ignore[union-attr]
    assert all(item.id and item.type == "message" for item in newest_first.data)
    page = await sdk.responses.input_items.list(made.id, order="asc", limit=2)
    assert page.has_more and page.first_id == page.data[0].id and page.last_id == page.data[1].id
    every = [item async for item in sdk.responses.input_items.list(made.id, order="asc", limit=2)]
    assert [item.content[0].text for item in every] == said  # type: ignore[union-attr]
    follow = await sdk.responses.create(
        model=MODEL, input="Fourth.", previous_response_id=made.id, max_output_tokens=2
    )
    own = await sdk.responses.input_items.list(follow.id)
    assert [item.content[0].text for item in own.data] == ["Fourth."]  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.input_items.list("resp_nope")


async def test_conversations_keep_items_and_responses_read_and_add_to_them(
    sdk: openai.AsyncOpenAI,
) -> None:
    conversation = await sdk.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}],
        metadata={"topic": "names"},
    )
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "names"}
    first = await sdk.responses.create(
        model=MODEL, input="Hello.", conversation=conversation.id, max_output_tokens=3
    )
    assert first.conversation is not None and first.conversation.id == conversation.id
    stream = await sdk.responses.create(
        model=MODEL, input="What is my name?", conversation={"id": conversation.id},
        max_output_tokens=3, stream=True,
    )  # fmt: skip
    second = [event async for event in stream][-1].response  # type: ignore[union-attr]
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn was read
    items = [item async for item in sdk.conversations.items.list(conversation.id, order="asc")]
    roles = [(item.type, getattr(item, "role", None)) for item in items]
    assert roles == [("message", "user"), ("message", "user"), ("message", "assistant"),
                     ("message", "user"), ("message", "assistant")]  # fmt: skip
    assert items[0].content[0].type == "input_text"  # type: ignore[union-attr]
    assert items[2].id == first.output[0].id  # the response's own output item
    newest = await sdk.conversations.items.list(conversation.id, limit=1)
    assert newest.has_more and newest.data[0].id == items[-1].id
    added = await sdk.conversations.items.create(
        conversation.id,
        items=[{"type": "message", "role": "user", "content": "One more."}],
    )
    assert added.data[0].id and added.first_id == added.last_id == added.data[0].id
    one = await sdk.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    assert one.id == added.data[0].id
    back = await sdk.conversations.items.delete(added.data[0].id, conversation_id=conversation.id)
    assert back.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        await sdk.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    updated = await sdk.conversations.update(conversation.id, metadata={"topic": "ada"})
    assert (await sdk.conversations.retrieve(conversation.id)).metadata == updated.metadata
    with pytest.raises(openai.BadRequestError, match="cannot be used together"):
        await sdk.responses.create(
            model=MODEL, input="Hi.", conversation=conversation.id,
            previous_response_id=first.id, max_output_tokens=2,
        )  # fmt: skip
    gone = await sdk.conversations.delete(conversation.id)
    assert gone.deleted and gone.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        await sdk.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.create(
            model=MODEL, input="Hi.", conversation=conversation.id, max_output_tokens=2
        )


async def test_conversation_items_are_checked_and_a_conversation_is_its_owner_s(
    start_host: HostFactory,
) -> None:
    host = await start_host(api_keys=["alice", "bob"], admin_key="root-key", public=True)
    alice, bob = ({"Authorization": f"Bearer {key}"} for key in ("alice", "bob"))
    bad = await host.client.post(
        "/v1/conversations", json={"items": [{"type": "web_search_call"}]}, headers=alice
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "items"
    made = (await host.client.post("/v1/conversations", json={}, headers=alice)).json()
    path = f"/v1/conversations/{made['id']}"
    assert (await host.client.get(path, headers=bob)).status_code == 403
    assert (await host.client.get(f"{path}/items", headers=bob)).status_code == 403
    assert (await host.client.get(path, headers=alice)).json()["object"] == "conversation"
    body = {"model": MODEL, "input": "Hi.", "conversation": made["id"], "max_output_tokens": 2}
    assert (await host.client.post("/v1/responses", json=body, headers=bob)).status_code == 403
    listed = (await host.client.get(f"{path}/items", headers=alice)).json()
    assert listed == {"object": "list", "data": [], "first_id": None, "last_id": None,
                      "has_more": False}  # fmt: skip


async def test_the_agents_sdk_keeps_a_session_in_a_conversation(host: Host) -> None:
    """`OpenAIConversationsSession`: the Agents SDK's server-side memory, on /v1/conversations."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    class Name(BaseModel):  # a reply that ends: the Agents SDK fails one cut short
        name: str = Field(max_length=16)

    client = _sdk(host)
    try:
        session = agents.OpenAIConversationsSession(openai_client=client)
        agent = agents.Agent(
            name="brief",
            instructions="Answer with a name.",
            output_type=Name,
            model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=agents.ModelSettings(temperature=0),
        )
        first = await agents.Runner.run(agent, "My name is Ada.", session=session)
        second = await agents.Runner.run(agent, "What is my name?", session=session)
        items = await session.get_items()
        last = await session.get_items(limit=1)
        popped = await session.pop_item()
        after_pop = await session.get_items()
        conversation_id = session.session_id
        await session.clear_session()
        with pytest.raises(openai.NotFoundError):
            await client.conversations.retrieve(conversation_id)
    finally:
        await client.close()
    roles = [item.get("role") for item in items]
    assert roles == ["user", "assistant", "user", "assistant"]
    [one] = last
    assert popped is not None and popped["id"] == one["id"] == items[-1]["id"]
    assert [item["id"] for item in after_pop] == [item["id"] for item in items[:-1]]
    used = [r.raw_responses[0].usage.input_tokens for r in (first, second)]
    assert used[1] > used[0]  # the session's items went in before the new input


def _json(text: str | None) -> dict[str, Any]:
    import json

    value = json.loads(text or "")
    assert isinstance(value, dict)
    return value
