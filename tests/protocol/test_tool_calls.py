"""Issue 14 §2: reading tool calls out of replies, in the formats models are trained on, from
recorded outputs; and the history of calls and results as plain turns."""

from __future__ import annotations

import json

import pytest

from infertui.core.protocol.tool_stream import CallDelta, CallStream
from infertui.core.protocol.tools import may_be_a_call, parse_calls, plain_turns

NAMES = {"get_weather", "get_time"}
WEATHER = {"city": "Paris", "unit": "celsius"}

RECORDED = {
    "generic": '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", '
    '"unit": "celsius"}}]}',
    # Qwen 2.5 / Hermes 2 Pro, two calls
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
    '"unit": "celsius"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": '
    '{"zone": "CET"}}\n</tool_call>',
    # Llama 3.1 / 3.2 JSON tool calling
    "llama3": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", '
    '"unit": "celsius"}}',
    # Mistral v3 / Nemo
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", '
    '"unit": "celsius"}}]',
}


@pytest.mark.parametrize("form", sorted(RECORDED))
def test_calls_are_read_in_every_format(form: str) -> None:
    calls = parse_calls(RECORDED[form], NAMES)
    assert calls and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == WEATHER
    if form == "hermes":
        assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert all(c.with_id().id.startswith("call_") for c in calls)


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is mild.",
        '{"tool_calls": [{"name": "launch_rockets", "arguments": {}}]}',  # not offered
        '{"city": "Paris"}',  # JSON, but no call
        "<tool_call>\n{broken json\n</tool_call>",
    ],
)
def test_text_that_is_not_a_call_of_an_offered_tool_stays_text(text: str) -> None:
    assert parse_calls(text, NAMES) == []


def streamed(text: str, piece: int = 3) -> list[CallDelta]:
    """The deltas a stream sends for a reply that arrives `piece` characters at a time."""
    stream = CallStream(NAMES)
    return [d for end in range(piece, len(text) + piece, piece) for d in stream.feed(text[:end])]


@pytest.mark.parametrize("form", sorted(RECORDED))
def test_calls_stream_while_they_are_written_in_every_format(form: str) -> None:
    """Issue 14 §2: the name as soon as it is whole, then the arguments as they grow; put
    together they are the calls read from the whole reply."""
    deltas = streamed(RECORDED[form])
    heads = [d for d in deltas if d.name]
    assert [d.name for d in heads] == [c.name for c in parse_calls(RECORDED[form], NAMES)]
    assert all(d.id and d.id.startswith("call_") for d in heads)
    for k, call in enumerate(parse_calls(RECORDED[form], NAMES)):
        pieces = [d.arguments for d in deltas if d.index == k and not d.name]
        assert len(pieces) > 3, pieces  # sent as written, not at the end
        assert json.loads("".join(pieces)) == json.loads(call.arguments)
        assert deltas.index(heads[k]) < deltas.index(
            next(d for d in deltas if d.index == k and d.arguments)
        )


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is mild.",
        '{"tool_calls": [{"name": "launch_rockets", "arguments": {"when": "now"}}]}',
        '{"city": "Paris", "nested": {"name": {"x": 1}}}',
    ],
)
def test_nothing_streams_as_a_call_that_is_not_one_of_an_offered_tool(text: str) -> None:
    assert streamed(text, 1) == []


def test_arguments_are_sent_as_written_even_when_they_quote_a_marker() -> None:
    text = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "<tool_call> [TOOL_CALLS]"}}'
    pieces = [d.arguments for d in streamed(text, 2) if not d.name]
    assert "".join(pieces) == '{"zone": "<tool_call> [TOOL_CALLS]"}'


def test_arguments_given_as_a_json_string_come_whole() -> None:
    text = '{"function": {"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}}'
    deltas = streamed(text, 1)
    assert [(d.name, d.arguments) for d in deltas] == [("get_time", ""), (None, '{"zone": "CET"}')]


def test_a_stream_holds_back_only_what_may_be_a_call() -> None:
    assert may_be_a_call("") and may_be_a_call("  {") and may_be_a_call("<tool")
    assert may_be_a_call("[TOOL_CALLS] [") and may_be_a_call("<|python_tag|>{")
    assert not may_be_a_call("The") and not may_be_a_call("<b>")


def test_calls_and_results_go_back_to_the_model_as_plain_turns() -> None:
    history = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris, and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(WEATHER)}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
    ]  # fmt: skip
    turns = plain_turns(history)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    said = json.loads(turns[2]["content"])
    assert said["tool_calls"][0] == {"name": "get_weather", "arguments": WEATHER}
    assert turns[3]["content"] == "Result of get_weather: 18 C, sunny\nResult of get_time: 14:05"


def test_calls_cut_by_max_tokens_read_as_a_stream_reads_them() -> None:
    """Whole, a Hermes reply cut in its second call lost that call (only whole blocks parse);
    streamed, it went out as far as it got. Both read it as the stream does now."""
    from infertui.core.protocol.tool_use import ToolUse

    use = ToolUse({"get_weather", "get_time"}, forced=True)
    cut = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zo'
    )
    assert [(c.function.name, c.function.arguments) for c in use.streamed(cut)] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", '{"zo'),
    ]
    assert len(use.calls(cut)) == 1  # what the whole reply gave before


def test_a_whole_reply_is_read_as_its_stream_reads_it() -> None:
    """Issue 35 §3: one reader. Whole, a reply was read by regexes over all of it, and a `;` in
    a Llama call's arguments split it; text before a Hermes block was read past whole but let
    the stream go as text; text after a call made it text whole, but not streamed. Now the
    reply whole is what its stream reads: its head decides, text after the calls is passed
    over, and each call stands on its own."""
    semicolon = '{"name": "get_time", "parameters": {"zone": "CET; or UTC"}}'
    assert [json.loads(c.arguments) for c in parse_calls(semicolon, NAMES)] == [
        {"zone": "CET; or UTC"}
    ]
    from infertui.core.protocol.tool_use import ToolUse

    use = ToolUse(NAMES, forced=False)  # what a stream sends, its held text let go or not
    prose = 'Let me look. <tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    assert parse_calls(prose, NAMES) == [] and use.streamed(prose) == []
    after = '{"name": "get_time", "arguments": {"zone": "CET"}}\nHope this helps.'
    assert [c.name for c in parse_calls(after, NAMES)] == ["get_time"]
    assert [c.function.name for c in use.streamed(after)] == ["get_time"]
