"""OpenAI's Responses API (`POST /v1/responses`) with the official openai SDK against the real
server (bundled model): whole and streamed replies and their events, the chat turns a
request means, function tools (a forced call, a round trip with its output), structured
output, kept responses (`previous_response_id`, GET, DELETE, their owners) and the refusals
of what the host cannot do."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "name": "get_weather", "description": "The weather now.",
        "parameters": WEATHER}  # fmt: skip
ASK = "What is the weather in Paris?"


@pytest.mark.deterministic
async def test_a_response_is_the_chat_completion_it_means(sdk: openai.AsyncOpenAI) -> None:
    """instructions + input are the system and user turns: at temperature 0 the text is the
    chat endpoint's for the same turns, and the usage counts the same tokens. (The host is
    deterministic: the chat request reads the prompt afresh, not on the response's cells.)"""
    reply = await sdk.responses.create(
        model=MODEL, instructions="Answer in one word.", input="Name a colour.",
        max_output_tokens=12, temperature=0,
    )  # fmt: skip
    chat = await sdk.chat.completions.create(
        model=MODEL, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Name a colour."}],
    )  # fmt: skip
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert reply.model == MODEL
    assert reply.output_text == chat.choices[0].message.content
    assert reply.status == (
        "incomplete" if chat.choices[0].finish_reason == "length" else "completed"
    )
    [message] = reply.output
    assert message.type == "message" and message.role == "assistant"
    assert reply.usage is not None and chat.usage is not None
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.usage.output_tokens == chat.usage.completion_tokens
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens


async def test_max_output_tokens_ends_it_incomplete(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.responses.create(
        model=MODEL, input="Count from one to one hundred.", max_output_tokens=4, temperature=0
    )
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage is not None and reply.usage.output_tokens == 4


@pytest.mark.deterministic
async def test_a_stream_is_the_sdk_s_events_and_ends_as_the_whole_reply(
    sdk: openai.AsyncOpenAI,
) -> None:
    """The host is deterministic: the stream reads its prompt afresh as the whole reply did."""
    ask: dict[str, Any] = dict(model=MODEL, input="Name three colours.", max_output_tokens=24,
                               temperature=0)  # fmt: skip
    whole = await sdk.responses.create(**ask)
    events = [event async for event in await sdk.responses.create(**ask, stream=True)]
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
    ]  # fmt: skip
    assert kinds[-4:] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        f"response.{whole.status}",
    ]  # fmt: skip
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    done = events[-1].response
    assert done.output_text == whole.output_text
    assert done.usage is not None and whole.usage is not None
    assert done.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.deterministic
async def test_the_sdk_s_stream_helper_builds_the_reply_from_the_events(
    sdk: openai.AsyncOpenAI,
) -> None:
    """`client.responses.stream` keeps a snapshot from the events (items by output_index,
    parts by content_index) and raises on one out of place: its final response is the
    whole reply, text or call. (It wants `response.completed`: the replies here end on their
    own, a schema's or a call's JSON closed.) The host is deterministic, so that each stream
    reads its prompt afresh as the whole reply did, not on the cells that reply left."""
    form = {"format": {"type": "json_schema", "name": "city", "schema": WEATHER}}
    ask: dict[str, Any] = dict(model=MODEL, input=ASK, max_output_tokens=60, temperature=0)
    whole = await sdk.responses.create(**ask, text=form)
    assert whole.status == "completed"
    async with sdk.responses.stream(**ask, text=form) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == whole.output_text
    forced: dict[str, Any] = dict(ask, tools=[TOOL], tool_choice="required",
                                  parallel_tool_calls=False)  # fmt: skip
    whole = await sdk.responses.create(**forced)
    async with sdk.responses.stream(**forced) as stream:
        final = await stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and whole.output[0].type == "function_call"
    # the same call: a whole reply's arguments are written again as JSON, a stream's go out
    # as the model wrote them (spacing may differ)
    assert json.loads(call.arguments) == json.loads(whole.output[0].arguments)


async def test_a_reply_the_host_cuts_short_fails_with_what_went_out(host: Host) -> None:
    """A drain's deadline ends a streamed response under way: its last event is
    `response.failed`, with the text sent so far as an incomplete message and the reason."""
    body = {"model": MODEL, "input": "Count to a thousand.", "max_output_tokens": 900,
            "ignore_eos": True, "stream": True}  # fmt: skip
    async with host.client.stream("POST", "/v1/responses", json=body) as response:
        lines = aiter(response.aiter_lines())
        async for line in lines:
            if line.startswith("data: ") and "output_text.delta" in line:
                break
        await host.service.drain_engine(MODEL, deadline_ms=0)
        events = [json.loads(line[6:]) async for line in lines if line.startswith("data: ")]
    last = events[-1]
    assert last["type"] == "response.failed", [e["type"] for e in events]
    failed = last["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert "before it was complete" in failed["error"]["message"]
    [message] = failed["output"]
    assert message["status"] == "incomplete" and message["content"][0]["text"]
    host.service.resume_engine(MODEL)
    again = await host.client.post("/v1/responses", json={**body, "stream": False,
                                                          "max_output_tokens": 4})  # fmt: skip
    assert again.status_code == 200 and again.json()["status"] == "incomplete"


@pytest.mark.deterministic
async def test_message_items_with_parts_are_the_conversation(sdk: openai.AsyncOpenAI) -> None:
    """A list of items: a developer message (a system turn), earlier turns, and content as
    parts, as the SDK's typed inputs send them: the reply is the chat endpoint's for those
    turns (deterministic host: the second prompt is read afresh, not on the first's cells)."""
    items: Any = [
        {"role": "developer", "content": "Answer in one word."},
        {"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": "Another one."},
    ]  # fmt: skip
    reply = await sdk.responses.create(model=MODEL, input=items, max_output_tokens=8,
                                       temperature=0)  # fmt: skip
    chat = await sdk.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Name a colour."},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "Another one."}],
    )  # fmt: skip
    assert reply.output_text == chat.choices[0].message.content


async def test_a_forced_call_then_its_output_round_trip(sdk: openai.AsyncOpenAI) -> None:
    """tool_choice "required" (one call: without parallel_tool_calls false, the grammar lets
    this weak model call again and again): a function_call item of the offered tool, its
    arguments valid JSON; sent back with its output, the model answers in text."""
    call_reply = await sdk.responses.create(
        model=MODEL, input=ASK, tools=[TOOL], tool_choice="required",  # type: ignore[list-item]
        max_output_tokens=60, temperature=0, parallel_tool_calls=False,
    )  # fmt: skip
    assert call_reply.status == "completed"
    [call] = call_reply.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"}
    assert call.call_id and call.status == "completed"
    followup: Any = [
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C."},
    ]  # fmt: skip
    answer = await sdk.responses.create(
        model=MODEL, input=followup, tools=[TOOL], tool_choice="none",  # type: ignore[list-item]
        max_output_tokens=16, temperature=0,
    )  # fmt: skip
    assert answer.output[0].type == "message" and answer.output_text


async def test_a_streamed_call_arrives_as_argument_deltas(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.responses.create(
        model=MODEL, input=ASK, tools=[TOOL], tool_choice="required",  # type: ignore[list-item]
        max_output_tokens=60, temperature=0, stream=True, parallel_tool_calls=False,
    )  # fmt: skip
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert "response.output_text.delta" not in kinds
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    arguments = "".join(
        e.delta for e in events if e.type == "response.function_call_arguments.delta"
    )
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert arguments == done.arguments and set(json.loads(arguments)) == {"city"}
    assert kinds[-1] == "response.completed"
    [call] = events[-1].response.output
    assert call.type == "function_call" and call.arguments == arguments


async def test_text_format_json_schema_shapes_the_reply(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.responses.create(
        model=MODEL, input="Which city is the capital of France?", max_output_tokens=40,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": WEATHER}},
    )  # fmt: skip
    assert set(json.loads(reply.output_text)) == {"city"}


async def test_what_the_host_cannot_do_is_a_400_naming_it(host: Host) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input", "read text only"),
        ({"tools": [{"type": "web_search"}]}, "tools", "functions only"),
        ({"input": [{"type": "computer_call_output"}]}, "input", "computer_call_output"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [TOOL]}, "tool_choice",
         "nope"),
        ({"max_output_tokens": 0}, "max_output_tokens", ""),
        ({"instructions": "Be brief.", "input": [{"role": "bogus", "content": "hi"}]}, "input",
         "'input.0.role'"),  # the item's place, not the chat turn's (1, after the system's)
        ({"temperature": 3}, "temperature", ""),
    ]  # fmt: skip
    for change, param, words in cases:
        body = {"model": MODEL, "input": "hi", **change}
        response = await host.client.post("/v1/responses", json=body)
        assert response.status_code == 400, change
        error = response.json()["error"]
        assert error["param"] == param, (change, error)
        assert words in error["message"], (change, error)
    unknown = await host.client.post("/v1/responses", json={"model": "nope", "input": "hi"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found_error"
    assert unknown.json()["error"]["param"] == "model"
    body = {"model": MODEL, "input": "hi", "previous_response_id": "resp_never"}
    forgotten = await host.client.post("/v1/responses", json=body)
    assert forgotten.status_code == 400  # OpenAI's code: clients send the whole conversation
    error = forgotten.json()["error"]
    assert error["param"] == "previous_response_id"
    assert error["code"] == "previous_response_not_found"
    assert "no response 'resp_never'" in error["message"]
    assert (await host.client.get("/v1/responses/resp_never")).status_code == 404


async def test_previous_response_id_continues_the_kept_conversation(
    sdk: openai.AsyncOpenAI,
) -> None:
    """A response is kept with its conversation: the next one, naming it, reads the turns
    before it (not its instructions, as OpenAI's), then its own input: the very prompt that
    the whole conversation sent again makes."""
    first = await sdk.responses.create(
        model=MODEL, instructions="Be brief.", input="My name is Ana. Say hello to me.",
        max_output_tokens=8, temperature=0,
    )  # fmt: skip
    assert first.store is True and first.previous_response_id is None
    second = await sdk.responses.create(
        model=MODEL, previous_response_id=first.id, input="What is my name?",
        max_output_tokens=4, temperature=0,
    )  # fmt: skip
    assert second.previous_response_id == first.id and second.instructions is None
    whole: Any = [
        {"role": "user", "content": "My name is Ana. Say hello to me."},
        {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": "What is my name?"},
    ]
    again = await sdk.responses.create(
        model=MODEL, input=whole, max_output_tokens=4, temperature=0, store=False
    )
    assert second.usage is not None and again.usage is not None
    assert second.usage.input_tokens == again.usage.input_tokens
    assert again.store is False
    third = await sdk.responses.create(  # a chain: the first two turns come along
        model=MODEL, previous_response_id=second.id, input="Thanks.", max_output_tokens=2,
    )  # fmt: skip
    assert third.usage is not None and third.usage.input_tokens > second.usage.input_tokens
    with pytest.raises(openai.BadRequestError):  # not kept: store false
        await sdk.responses.create(model=MODEL, previous_response_id=again.id, input="Hi.")


async def test_a_kept_response_is_read_and_deleted(sdk: openai.AsyncOpenAI) -> None:
    """GET gives a kept response as it ended, streamed ones too; DELETE forgets it."""
    whole = await sdk.responses.create(model=MODEL, input="Hi.", max_output_tokens=4)
    read = await sdk.responses.retrieve(whole.id)
    assert read.model_dump() == whole.model_dump()
    stream = await sdk.responses.create(model=MODEL, input="Hi.", max_output_tokens=4, stream=True)
    events = [event async for event in stream]
    ended = events[-1].response
    assert (await sdk.responses.retrieve(ended.id)).model_dump() == ended.model_dump()
    await sdk.responses.delete(whole.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(whole.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.delete(whole.id)


async def test_a_kept_response_is_its_owner_s(start_host: HostFactory) -> None:
    """With API keys in play, as a task: another key can neither read nor continue it."""
    host = await start_host(api_keys=["alice", "bob"], admin_key="root-key", public=True)
    alice, bob, root = ({"Authorization": f"Bearer {key}"} for key in ("alice", "bob", "root-key"))
    body = {"model": MODEL, "input": "Hi.", "max_output_tokens": 2}
    made = await host.client.post("/v1/responses", json=body, headers=alice)
    response_id = made.json()["id"]
    assert (await host.client.get(f"/v1/responses/{response_id}", headers=bob)).status_code == 403
    follow = {**body, "previous_response_id": response_id}
    assert (await host.client.post("/v1/responses", json=follow, headers=bob)).status_code == 403
    assert (await host.client.post("/v1/responses", json=follow, headers=alice)).status_code == 200
    gone = await host.client.delete(f"/v1/responses/{response_id}", headers=root)
    assert gone.status_code == 200 and gone.json()["deleted"] is True


@pytest.mark.deterministic
async def test_several_streamed_calls_each_close_before_the_next_opens(
    sdk: openai.AsyncOpenAI,
) -> None:
    """Parallel calls (this model, forced, calls until max_output_tokens cuts it, or on some
    CPUs stops after a few): as OpenAI orders them, call k's `.done` events come before call
    k+1's `output_item.added`, and one cut short is incomplete; the whole reply has the same calls (the host is
    deterministic: it reads its prompt afresh, not on the stream's kept cells)."""
    stream = await sdk.responses.create(
        model=MODEL, input=ASK, tools=[TOOL], tool_choice="required",  # type: ignore[list-item]
        max_output_tokens=60, temperature=0, stream=True,
    )  # fmt: skip
    events = [event async for event in stream]
    order = [(e.type, e.output_index) for e in events
             if e.type in ("response.output_item.added", "response.output_item.done")]  # fmt: skip
    n = len(order) // 2
    assert n >= 2, order
    assert order == [
        (kind, k) for k in range(n)
        for kind in ("response.output_item.added", "response.output_item.done")
    ]  # fmt: skip
    last = events[-1]  # cut short on this CPU; where the model stops after n calls, whole
    cut = last.type == "response.incomplete"
    assert cut or last.type == "response.completed", last.type
    calls = last.response.output
    assert len(calls) == n
    assert [c.status for c in calls] == ["completed"] * (n - 1) + [  # type: ignore[union-attr]
        "incomplete" if cut else "completed"
    ]
    assert all(call.type == "function_call" for call in calls)
    assert set(json.loads(calls[0].arguments)) == {"city"}
    whole = await sdk.responses.create(
        model=MODEL, input=ASK, tools=[TOOL], tool_choice="required",  # type: ignore[list-item]
        max_output_tokens=60, temperature=0,
    )  # fmt: skip
    assert [(c.arguments, c.status) for c in whole.output] == [  # type: ignore[union-attr]
        (c.arguments, c.status) for c in calls
    ]


async def test_truncation_auto_leaves_out_the_oldest_turns_as_openai_does(
    sdk: openai.AsyncOpenAI,
) -> None:
    """`truncation: "auto"` is OpenAI's policy for a conversation past the context: its
    oldest turns are left out (the host's prepare step, as for Ollama's /api/chat). Without
    it, the request is refused, as OpenAI refuses it."""
    filler = "The sea is wide and the sky is grey. " * 80  # ~800 tokens; the context is 1,024
    items: list[Any] = []
    for i in range(3):
        items.append({"role": "user", "content": f"Part {i}. {filler}"})
        items.append({"role": "assistant", "content": f"Noted part {i}."})
    items.append({"role": "user", "content": "Name a colour."})
    with pytest.raises(openai.BadRequestError):
        await sdk.responses.create(model=MODEL, input=items, max_output_tokens=4)
    reply = await sdk.responses.create(
        model=MODEL, input=items, max_output_tokens=4, truncation="auto"
    )
    assert reply.truncation == "auto" and reply.usage is not None
    assert 800 < reply.usage.input_tokens < 1024  # one exchange of the three kept, and the rest
