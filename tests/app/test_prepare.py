"""Issue 35 §2: one prepare step. What a face asks becomes the job its engine runs in one place
(core/host/prepare.py): the turns and the offered tools written as that engine reads them, a
forced call's grammar in its call format, and the prompt tokenized where the engine tokenizes.
The pool takes nothing else, so no caller can lose a request's tools on the way."""

from __future__ import annotations

import pytest

from infertui.core.host import Ask
from infertui.core.host.prepare import prepare
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.tools import RichMessage, Tool

from ..conftest import PoolFactory

pytestmark = pytest.mark.model

WEATHER = Tool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
)
ASKED = [RichMessage(role="user", content="What is the weather in Paris?")]


async def test_offered_tools_reach_the_prompt_and_a_forced_call_its_grammar(
    make_pool: PoolFactory,
) -> None:
    pool = await make_pool(parallel=1)
    engine = pool.ready_engine()
    assert engine.tokenizer is not None
    plain = prepare(engine, Ask(messages=ASKED, params=SamplingParams()))
    offered = prepare(engine, Ask(messages=ASKED, params=SamplingParams(), tools=[WEATHER]))
    assert "get_weather" not in engine.tokenizer.detokenize(plain.tokens)
    assert "get_weather" in engine.tokenizer.detokenize(offered.tokens)  # whatever the format
    assert offered.params.json_schema is None  # offered, not forced: the model may answer
    forced = prepare(
        engine, Ask(messages=ASKED, params=SamplingParams(), tools=[WEATHER], forced="one")
    )
    assert forced.params.json_schema is not None and "get_weather" in forced.params.json_schema
    text, end = await pool.submit(forced).text()
    assert end.finish_reason in ("stop", "length") and "get_weather" in text


async def test_a_plain_prompt_and_a_conversation_are_tokenized_for_the_engine(
    make_pool: PoolFactory,
) -> None:
    pool = await make_pool(parallel=1)
    engine = pool.ready_engine()
    assert engine.tokenizer is not None
    chat = prepare(
        engine, Ask(messages=[ChatMessage(role="user", content="Hi")], params=SamplingParams())
    )
    text = prepare(engine, Ask(prompt="Hi", params=SamplingParams()))
    assert chat.tokens == engine.tokenizer.chat_prompt([ChatMessage(role="user", content="Hi")])
    assert text.tokens == engine.tokenizer.text_prompt("Hi")
    assert chat.prompt is None and text.messages is None and text.prompt == "Hi"


def test_leaving_out_the_oldest_turn_keeps_the_system_turn_and_the_question() -> None:
    turns = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="One?"),
        ChatMessage(role="assistant", content="1"),
        ChatMessage(role="user", content="Two?"),
    ]
    ask = Ask(messages=turns, params=SamplingParams(), drop_oldest=True)
    shorter = ask.without_oldest_turn()
    assert shorter is not None and list(shorter.messages or ()) == [turns[0], turns[3]]
    assert shorter.without_oldest_turn() is None  # the question asked now always stays
