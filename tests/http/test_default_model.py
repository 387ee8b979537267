"""Issue 34 §2, "done when": the default model answers plain questions through the clients a
newcomer has (the official `openai` and `ollama` packages), ending by itself well within 256
tokens and repeating no line; JSON mode gives a parseable object within 60 tokens, and a
forced tool call one well-formed call within 80.

The questions go with no sampling fields but a seed, so the model's own sampling applies
(temperature 0.2, top-p 0.9, repeat penalty 1.1). A seed fixes the path on one machine, not
the text on every CPU, so what is asserted is how a reply ends and its shape, not its words;
bench/bench_answers.py measures the same over 40 replies.
"""

from __future__ import annotations

import json

import ollama
import openai
import pytest

from .conftest import MODEL, Host

pytestmark = pytest.mark.model

QUESTIONS = ["What is the capital of France?", "Why is the sky blue?", "Say hi."]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def repeated_lines(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [line for line in set(lines) if lines.count(line) > 1]


@pytest.mark.parametrize("question", QUESTIONS)
async def test_a_plain_question_through_the_openai_sdk_ends_by_itself(
    sdk: openai.AsyncOpenAI, question: str
) -> None:
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], seed=7
    )
    text = reply.choices[0].message.content or ""
    assert reply.choices[0].finish_reason == "stop", text
    assert reply.usage is not None and reply.usage.completion_tokens < 256
    assert text.strip() and not repeated_lines(text), text


async def test_the_default_model_knows_a_capital(sdk: openai.AsyncOpenAI) -> None:
    """An answer, not noise: the question the issue's newcomer asked first."""
    reply = await sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        seed=7,
    )
    assert "Paris" in (reply.choices[0].message.content or "")


@pytest.mark.parametrize("question", QUESTIONS)
async def test_a_plain_question_through_ollamas_api_chat_ends_by_itself(
    host: Host, question: str
) -> None:
    client = ollama.AsyncClient(host=host.url)
    try:
        reply = await client.chat(
            model=MODEL, messages=[{"role": "user", "content": question}], options={"seed": 7}
        )
    finally:
        await client._client.aclose()
    text = reply.message.content or ""
    assert reply.done_reason == "stop", text
    assert reply.eval_count is not None and reply.eval_count < 256
    assert text.strip() and not repeated_lines(text), text


async def test_json_mode_gives_a_parseable_object_within_60_tokens(
    sdk: openai.AsyncOpenAI,
) -> None:
    reply = await sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give the name and age of a person as JSON."}],
        response_format={"type": "json_object"},
        max_tokens=60,
        seed=7,
    )
    assert reply.choices[0].finish_reason == "stop", reply.choices[0].message.content
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


@pytest.mark.parametrize("parallel", [False, None], ids=["one call", "calls allowed"])
async def test_a_forced_tool_call_is_a_well_formed_call_within_80_tokens(
    sdk: openai.AsyncOpenAI, parallel: bool | None
) -> None:
    """One call where the request asks for one (`parallel_tool_calls: false`, as the Agents
    SDK sends it); where parallel calls are allowed (the default) the model may add more, and
    each is still well formed and the reply still ends as a call."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    reply = await sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_tokens=80,
        seed=7,
        **extra,  # type: ignore[arg-type]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    calls = choice.message.tool_calls or []
    assert calls and all(call.function.name == "get_weather" for call in calls)
    assert all(isinstance(json.loads(c.function.arguments)["city"], str) for c in calls)
    if parallel is False:
        assert len(calls) == 1
