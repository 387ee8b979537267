"""Issue 14 §2 with the official openai SDK against the real server (bundled model): a forced
call (`required`, a named tool) is a well-formed call of an offered tool even from a weak base
model, whole and streamed; a tool round trip; `none`; parameters a grammar cannot enforce."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from .conftest import MODEL, HostFactory

pytestmark = pytest.mark.model

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}},
        "required": ["zone"], "additionalProperties": False}  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather now.",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a zone.",
                                      "parameters": TIME}},
]  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.mark.parametrize("choice", ["required", "get_time"])
async def test_a_forced_call_is_a_valid_call_of_an_offered_tool(
    sdk: openai.AsyncOpenAI, choice: str
) -> None:
    tool_choice = (
        choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    )
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice=tool_choice,  # type: ignore[arg-type]
        max_tokens=120, temperature=0.7, seed=5, parallel_tool_calls=False,
    )  # fmt: skip
    choice0 = reply.choices[0]
    assert choice0.finish_reason == "tool_calls" and choice0.message.content is None
    calls = choice0.message.tool_calls or []
    assert calls and all(c.id.startswith("call_") and c.type == "function" for c in calls)
    for call in calls:
        assert call.function.name in SCHEMAS
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    if choice != "required":
        assert [c.function.name for c in calls] == [choice]


async def test_a_streamed_forced_call_arrives_as_deltas(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
        max_tokens=120, temperature=0, stream=True, parallel_tool_calls=False,
    )  # fmt: skip
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    pieces = 0
    finish = None
    async for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                if delta.function and delta.function.name:
                    assert delta.id and delta.type == "function"
                    names[delta.index] = delta.function.name
                elif delta.function and delta.function.arguments:
                    assert delta.index in names  # the name comes first
                    arguments[delta.index] = (
                        arguments.get(delta.index, "") + delta.function.arguments
                    )
                    pieces += 1
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and list(names) == [0]  # parallel_tool_calls false: one
    jsonschema.validate(json.loads(arguments[0]), SCHEMAS[names[0]])
    assert pieces > 2  # the arguments streamed as the model wrote them


@pytest.mark.deterministic
async def test_calls_cut_by_max_tokens_are_the_same_whole_and_streamed(
    sdk: openai.AsyncOpenAI,
) -> None:
    """A weak model under `required` writes calls until max_tokens cuts the last one. Whole,
    the reply was its raw text as content; streamed, the calls. Both give the calls now, the
    last as far as it got, and finish "length" (the reply was cut). The host is deterministic:
    the streamed request reads its prompt afresh as the whole one did (not from its kept
    cells), so the two are one generation, told apart only by how it goes out."""
    ask = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=16,
               temperature=0, seed=1)  # fmt: skip
    whole = (await sdk.chat.completions.create(**ask)).choices[0]  # type: ignore[call-overload]
    assert whole.finish_reason == "length" and whole.message.content is None
    calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    assert calls and all(name in SCHEMAS for name, _ in calls)
    stream = await sdk.chat.completions.create(**ask, stream=True)  # type: ignore[call-overload]
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish = None
    async for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                if delta.function and delta.function.name:
                    names[delta.index] = delta.function.name
                elif delta.function and delta.function.arguments:
                    arguments[delta.index] = (
                        arguments.get(delta.index, "") + delta.function.arguments
                    )
            finish = choice.finish_reason or finish
    assert finish == "length"
    assert [(names[k], arguments.get(k, "")) for k in sorted(names)] == calls


# A tab the grammar makes the model write raw inside a string ("pattern" is a literal tab),
# then a string longer than any max_tokens below: the call is always cut after the tab
PROBE_FUNCTION = {"name": "probe", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["sep", "note"],
    "properties": {"sep": {"type": "string", "pattern": "^\t$"},
                   "note": {"type": "string", "minLength": 200}}}}  # fmt: skip
PROBE = {"type": "function", "function": PROBE_FUNCTION}


async def test_a_call_cut_after_a_raw_control_character_is_a_reply(
    sdk: openai.AsyncOpenAI,
) -> None:
    """Issue 34 §5: llama.cpp's grammar lets a forced call's strings hold raw control
    characters, which json.loads refuses; max_tokens cut such a call, and its reader raised:
    HTTP 500. Whole and streamed, chat and responses, the reply is the call as far as it got,
    cut ("length", "incomplete"), whatever the model wrote around the tab."""
    ask = dict(model=MODEL, messages=ASK, tools=[PROBE], tool_choice="required", max_tokens=48,
               temperature=0)  # fmt: skip
    whole = (await sdk.chat.completions.create(**ask)).choices[0]  # type: ignore[call-overload]
    assert whole.finish_reason == "length" and whole.message.content is None
    [call] = whole.message.tool_calls or []
    assert call.function.name == "probe" and "\t" in call.function.arguments
    stream = await sdk.chat.completions.create(**ask, stream=True)  # type: ignore[call-overload]
    names, finish = [], None
    async for chunk in stream:
        for choice in chunk.choices:
            names += [d.function.name for d in choice.delta.tool_calls or [] if d.function]
            finish = choice.finish_reason or finish
    assert finish == "length" and [n for n in names if n] == ["probe"]
    function = {"type": "function", **PROBE_FUNCTION}  # the responses API's flat shape
    reply = await sdk.responses.create(
        model=MODEL, input=ASK, tools=[function], tool_choice="required",  # type: ignore[list-item]
        max_output_tokens=48, temperature=0,
    )  # fmt: skip
    assert reply.status == "incomplete"
    assert [item.type for item in reply.output] == ["function_call"]


async def test_a_tool_round_trip(sdk: openai.AsyncOpenAI) -> None:
    """The call goes back with its result; the model answers from it (the request is accepted
    and the host hears both turns)."""
    first = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    call = (first.choices[0].message.tool_calls or [])[0]
    follow = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    answer = await sdk.chat.completions.create(
        model=MODEL,
        messages=follow,
        tools=TOOLS,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content or answer.choices[0].message.tool_calls
    assert answer.usage is not None and first.usage is not None
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens  # the call and its result went in


async def test_tool_choice_none_is_plain_text_and_bad_parameters_are_named(
    sdk: openai.AsyncOpenAI,
) -> None:
    plain = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=6, temperature=0
    )  # type: ignore[arg-type]
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}]  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="'minimum'"):
        await sdk.chat.completions.create(model=MODEL, messages=ASK, tools=bad, max_tokens=4)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        await sdk.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, max_tokens=4,  # type: ignore[arg-type]
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )  # fmt: skip


async def test_a_template_that_renders_tools_decides_the_call_format(
    start_host: HostFactory,
) -> None:
    """--chat-template with a Hermes-style template: the tools, an earlier call and its result
    go through the template; a forced call comes in its <tool_call> tags (the grammar wraps
    the JSON in them) and is read back as tool_calls; the engine status names the format."""
    from pathlib import Path

    template = Path(__file__).parent.parent / "data" / "hermes_tools.jinja"
    host = await start_host(chat_template=str(template))
    status = host.service.engine_status(MODEL)
    assert status.chat_format == "--chat-template (jinja); tools: hermes <tool_call>"
    engine = host.service._registry.resolve(MODEL).engine  # what the template makes of a turn
    assert engine is not None
    from infertui.core.protocol.tools import RichMessage

    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}  # fmt: skip
    turns = [
        RichMessage(role="user", content="Weather in Paris?"),
        RichMessage(role="assistant", content="", tool_calls=[call]).for_template(),
        RichMessage(role="tool", content="18 C", tool_call_id="call_1"),
    ]
    prompt = engine.model.detokenize(engine.tokenizer.chat_prompt(turns, TOOLS))
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in prompt
    assert "<tool_response>\n18 C\n</tool_response>" in prompt
    client = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key="unused", max_retries=0)
    try:
        reply = await client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
            max_tokens=120, temperature=0,
        )  # fmt: skip
    finally:
        await client.close()
    (made,) = reply.choices[0].message.tool_calls or []
    jsonschema.validate(json.loads(made.function.arguments), SCHEMAS[made.function.name])


@pytest.mark.deterministic
async def test_a_reply_held_back_as_a_possible_call_keeps_its_logprobs(
    sdk: openai.AsyncOpenAI,
) -> None:
    """With tools offered, a stream holds the first tokens back until it knows the reply is
    not a call; their logprobs go out with them: the streamed tokens are the whole reply's,
    token for token. The host is deterministic, so the two requests take one path (a fresh
    sequence, the prompt prefilled alone in the same chunks, sampled on the host for the
    logprobs): with the prompt cache the stream read only its last prompt token on the
    whole reply's cells, and a near tie fell the other way ("You can call this tool." and
    "these tools." on an AMD EPYC)."""
    kwargs = dict(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=8, temperature=0)
    whole = await sdk.chat.completions.create(**kwargs, logprobs=True)  # type: ignore[call-overload]
    stream = await sdk.chat.completions.create(**kwargs, logprobs=True, stream=True)  # type: ignore[call-overload]
    text, tokens = "", []
    async for chunk in stream:
        for choice in chunk.choices:
            assert not choice.delta.tool_calls  # the bundled model answers in words
            text += choice.delta.content or ""
            tokens += [
                t.token for t in (choice.logprobs.content if choice.logprobs else None) or []
            ]
    assert text == whole.choices[0].message.content
    assert tokens == [t.token for t in whole.choices[0].logprobs.content]  # type: ignore[union-attr]
