"""Issue 34 §5: whatever the model writes, no reader of its output raises (a raise there was an
HTTP 500). Each tool-call reader is fed arbitrary text, and real calls cut at any point with
control characters and other noise put in, and must return well-formed results: calls of
offered tools, with arguments that are JSON objects where the call is whole, and text that
UTF-8 can carry out. The upstream's SSE objects are held to the last of these."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infertui.core.protocol.events import TokenText
from infertui.core.protocol.openai_replies import AssistantMessage, ToolCallOut
from infertui.core.protocol.sse_reader import sse_batches
from infertui.core.protocol.tool_stream import CallDelta, CallStream, partial_calls
from infertui.core.protocol.tool_use import HeldReply, ToolUse
from infertui.core.protocol.tools import parse_calls, plain_turns, read_json
from infertui.core.transport.http.routes_ollama_api import _piece

NAMES = {"get_weather", "get_time"}

# calls in every format the readers know, valid, with the shapes a model may echo
CALLS = [
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris", "n": [1, 2.5]}}'
    '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n'
    "</tool_call>",
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
    '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
    '{"name": "get_time", "arguments": {}}]',
    '{"function": {"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}}',
    '{"name": "get_time", "parameters": {"zone": "CET"}}; {"name": "get_weather", '
    '"parameters": {"city": "Z\\u00fcrich", "deep": {"a": [{"b": null}, true, false]}}}',
]
# what breaks a JSON reader: control characters, quotes, escapes, brackets, the formats'
# markers, lone surrogate escapes, and non-numbers
NOISE = st.one_of(
    st.sampled_from(
        [chr(c) for c in range(32)]
        + ['"', "\\", "\\u", "\\ud800", "\\udc00", "\\x", "{", "}", "[", "]", ",", ":", ";"]
        + ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", '"name"']
        + ['"arguments"', '"parameters"', "NaN", "Infinity", "1e999", "9" * 5000, "\x7f"]
    ),
    st.characters(exclude_categories=["Cs"]),  # any character an engine's text may hold
)
# what an engine's text may hold: any character but a lone surrogate (the local engine
# decodes with "replace"; the upstream's objects have them replaced, tested below)
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=400)


@st.composite
def cut_calls(draw: st.DrawFn) -> str:
    """A real call, with noise put in at random places, cut at a random point."""
    text = draw(st.sampled_from(CALLS))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(NOISE) + text[at:]
    return text[: draw(st.integers(0, len(text)))]


MODEL_TEXT = st.one_of(TEXT, cut_calls())


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: a client's parser refuses them


def is_json_object(text: str) -> bool:
    """Whether `text` is an object's JSON text as a client reads it (RFC 8259)."""
    try:
        return isinstance(json.loads(text, parse_constant=no_constant), dict)
    except ValueError:
        return False


def sendable(value: Any) -> None:
    """It goes out as JSON text in UTF-8, as a JSON response renders it (Starlette's
    JSONResponse: no NaN, no ensure_ascii): a lone surrogate or an inf would fail here."""
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode()


def check_whole(calls: list[ToolCallOut]) -> None:
    for call in calls:
        assert call.id and call.id.startswith("call_")
        assert call.function.name in NAMES
        assert is_json_object(call.function.arguments), call.function.arguments
    sendable(AssistantMessage(content=None, tool_calls=calls).model_dump())


def check_deltas(deltas: list[CallDelta]) -> dict[int, tuple[str, str]]:
    """Each call's head comes first, names an offered tool, and the indexes count from 0; the
    calls as the client puts them together."""
    calls: dict[int, tuple[str, str]] = {}
    for delta in deltas:
        if delta.name is not None:
            assert delta.name in NAMES and delta.id and delta.index == len(calls)
            calls[delta.index] = (delta.name, "")
        else:
            name, arguments = calls[delta.index]  # a KeyError: arguments before the name
            calls[delta.index] = (name, arguments + delta.arguments)
        sendable(delta.arguments)
    return calls


@given(MODEL_TEXT)
@example('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\x01ris"}, ')
@example("[" * 100_000)  # deeper than any recursive parser goes
@example('{"tool_calls": [{"function": "get_time", "name": "get_time", "arguments": {}}]}')
@example('{"name": "get_time", "arguments": "{\\"zone\\": \\"\\ud800\\"}"}')
@example('{"name": "get_time", "arguments": {"zone": 1e999}}')
@example('{"name": "get_time", "arguments": {"zone": NaN}}')
@example('{"name": "get_time", "arguments": "not json"}')
def test_parse_calls_never_raises_and_gives_only_whole_calls(text: str) -> None:
    """Issue 34 §5: parse_calls (whole replies, and the Ollama face) returns on any text; each
    call it finds names an offered tool, and its arguments are an object's JSON text that a
    client's parser reads (no raw control character, NaN, inf or lone surrogate)."""
    for call in parse_calls(text, NAMES):
        assert call.name in NAMES and is_json_object(call.arguments), call
        sendable(call.arguments)


@given(MODEL_TEXT, st.integers(1, 8))
@example('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\x01ris"}, ', 1)
@example("<tool_call>" + "{" * 100_000, 5000)
@example('{"name": "get_time\x00", "arguments": {}}', 1)
@example('{"name": "get_time", "argu\nments": "\\ud800", "arguments": "\x01"}', 1)
def test_a_call_stream_never_raises_and_its_deltas_are_well_formed(text: str, piece: int) -> None:
    """Issue 34 §5: CallStream.feed (CallScanner.scan), given a reply as it grows `piece`
    characters at a time, returns on any text; its deltas name offered tools, each head before
    its arguments, and what it sends is text UTF-8 carries."""
    stream = CallStream(NAMES)
    deltas = [d for end in range(piece, len(text) + piece, piece) for d in stream.feed(text[:end])]
    check_deltas(deltas)
    for call in partial_calls(text):
        assert call.name is None or isinstance(call.name, str)
        assert isinstance(call.arguments, str)


@given(cut_calls(), st.integers(1, 8))
def test_calls_cut_anywhere_stream_as_the_whole_cut_reply_reads(text: str, piece: int) -> None:
    """Issue 34 §5: a real call cut at any point (noise in it or not) reads the same as it
    grows and whole: what a stream sent is what the non-streamed reply, cut by max_tokens,
    gives (ToolUse.streamed)."""
    stream = CallStream(NAMES)
    deltas = [d for end in range(piece, len(text) + piece, piece) for d in stream.feed(text[:end])]
    sent = check_deltas(deltas)
    whole = ToolUse(NAMES, forced=True).streamed(text)
    assert [(c.function.name, c.function.arguments) for c in whole] == [
        sent[k] for k in sorted(sent)
    ]


@given(MODEL_TEXT, st.booleans(), st.booleans())
@example('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\x01ris"}, ', True, True)
def test_final_calls_never_raise(text: str, cut: bool, forced: bool) -> None:
    """Issue 34 §5, the reported 500: ToolUse.final_calls, the non-streamed reply's calls,
    returns on any text. Whole, each call is well-formed; cut by max_tokens, the calls go as
    far as they got (the last one's arguments may be unfinished), of offered tools only."""
    calls = ToolUse(NAMES, forced).final_calls(text, cut)
    if not cut:
        check_whole(calls)
    for call in calls:
        assert call.function.name in NAMES and isinstance(call.function.arguments, str)
    sendable(AssistantMessage(content=None, tool_calls=calls).model_dump())


def streamed(
    use: ToolUse, text: str, piece: int
) -> tuple[list[CallDelta], list[str], list[str], bool]:
    """`text` through HeldReply, `piece` characters at a time, as host/reply.py streams a
    reply: (call deltas, text sent as it came, text let go at the end, whether it was calls)."""
    reply = HeldReply(use)
    deltas: list[CallDelta] = []
    sent_text: list[str] = []
    for start in range(0, len(text), piece):
        new, pieces = reply.add(TokenText(text[start : start + piece], start, start))
        deltas += new
        sent_text += [sent.text for sent in pieces]
    held, called = reply.finish()
    return deltas, sent_text, [sent.text for sent in held], called


@given(MODEL_TEXT, st.integers(1, 8), st.booleans())
def test_a_held_reply_never_raises(text: str, piece: int, forced: bool) -> None:
    """Issue 34 §5: HeldReply (both OpenAI dialects' streams) takes any reply piece by piece
    and finishes it: what it sends is call deltas of offered tools or the text itself."""
    deltas, sent_text, held, called = streamed(ToolUse(NAMES, forced), text, piece)
    calls = check_deltas(deltas)
    assert not called or calls
    assert not sent_text + held or "".join(sent_text + held) == text


@given(MODEL_TEXT)
@example('{"name": "get_time", "arguments": "not json"}')
@example('{"name": "get_time", "arguments": "{\\"zone\\": 1e999}"}')
@example('{"name": "get_time", "arguments": "{\\"zone\\": ' + "9" * 5000 + '}"}')
def test_the_ollama_reply_never_raises(text: str) -> None:
    """Issue 34 §5: the Ollama face reads its calls back into objects (json.loads of each
    call's arguments): that holds for any reply, and the message goes out as JSON."""
    piece = _piece("message", text, NAMES)
    sendable(piece)
    assert piece.get("tool_calls") or piece["content"] == text


@given(TEXT)
def test_earlier_calls_arguments_of_any_text_go_back_as_turns(arguments: str) -> None:
    """Issue 34 §5: a call's arguments sent back in the history (model output the client
    kept) are read without raising, whatever they hold."""
    turns = plain_turns(
        [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "function": {"name": "get_time", "arguments": arguments}}]}]
    )  # fmt: skip
    sendable(turns)
    assert read_json(arguments) is None or turns[0]["content"]


def sse_objects(raw: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        response = httpx.Response(200, content=raw.encode())
        return [o async for batch in sse_batches(response) for o in batch]

    return asyncio.run(read())


ANY_CHARACTER = st.one_of(st.characters(), st.characters(categories=["Cs"]))


@settings(max_examples=60)  # each example runs an event loop
@given(st.text(alphabet=ANY_CHARACTER, max_size=40), st.booleans())
@example("\ud83d", False)
@example("a\udc00b\ud800\udc00", True)
def test_the_upstream_objects_hold_no_lone_surrogate(text: str, upper: bool) -> None:
    """Issue 34 §5: an upstream server may send a lone surrogate escape (a reply's text cut
    inside a UTF-16 pair): json.loads decodes it to a character UTF-8 cannot carry, and the
    reply failed as it went out. The SSE objects hold U+FFFD in its place, and the rest as
    sent."""
    escaped = json.dumps({"choices": [{"delta": {"content": text}}]})  # \udXXX escapes
    if upper:
        escaped = escaped.replace("\\ud", "\\uD")
    [got] = sse_objects(f"data: {escaped}\n\ndata: [DONE]\n\n")
    content = got["choices"][0]["delta"]["content"]
    sendable(got)
    # json.loads joins a high and a low surrogate in a row into their character
    assert content == text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def test_a_surrogate_pair_sent_whole_is_its_character() -> None:
    """Issue 34 §5: only lone surrogates are replaced; a pair sent whole is the character."""
    [got] = sse_objects('data: {"text": "\\ud83d\\ude00 \\u00e9"}\n\ndata: [DONE]\n\n')
    assert got == {"text": "\U0001f600 \u00e9"}


def test_the_reported_cut_call_is_its_call_so_far() -> None:
    """Issue 34 §5, as reported: `required`, max_tokens 48, the reply cut inside the call
    after a string holding a raw control character. json.loads raised in the scanner (a 500);
    now it is the call as far as it got."""
    cut = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\x01ris", "unit": "ce'
    [call] = ToolUse(NAMES, forced=True).final_calls(cut, cut=True)
    assert call.function.name == "get_weather"
    assert call.function.arguments == '{"city": "Pa\x01ris", "unit": "ce'


def test_a_whole_call_with_raw_control_characters_is_a_call_with_escaped_arguments() -> None:
    """Issue 34 §5: llama.cpp's grammar for a forced call lets strings hold raw control
    characters; such a call, whole, is read (not left as text), and its arguments go out as
    JSON a client's parser reads."""
    text = '{"tool_calls": [{"name": "get_time", "arguments": {"zone": "C\tE\nT"}}]}'
    [call] = parse_calls(text, NAMES)
    assert call.arguments == '{"zone": "C\\tE\\nT"}'
    assert json.loads(call.arguments) == {"zone": "C\tE\nT"}


@given(MODEL_TEXT, st.integers(1, 8), st.booleans())
@example('Sure. <tool_call>{"name": "get_time", "arguments": {}}</tool_call>', 3, False)
def test_a_reply_streamed_is_the_reply_whole(text: str, piece: int, forced: bool) -> None:
    """Issue 35 §3: one reader reads a reply as it streams and as it is whole. A reply that
    came to its end is calls streamed (a stream's last chunk says "tool_calls") exactly when
    it is calls whole, and then no text of it went out: its whole calls are the stream's, but
    for one the stream sent as far as it got and that never became whole."""
    use = ToolUse(NAMES, forced)
    deltas, sent_text, pieces, called = streamed(use, text, piece)
    whole = [call.function.name for call in use.calls(text)]
    assert called == bool(whole)
    if called:
        assert not sent_text + pieces
        names = iter([name for name, _ in check_deltas(deltas).values()])
        assert all(name in names for name in whole)  # in order, each of them
