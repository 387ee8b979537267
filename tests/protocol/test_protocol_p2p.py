"""Spec 000 framing and envelope validation, one test per requirement scenario."""

from __future__ import annotations

import json

import pytest

from infertui.core.protocol import p2p
from infertui.core.protocol.errors import ErrorKind, InferError, kind_for_p2p_code


def bad_message(line: bytes | str) -> InferError:
    with pytest.raises(InferError) as caught:
        p2p.decode_line(line)
    assert caught.value.kind is ErrorKind.BAD_MESSAGE
    assert caught.value.mapping.p2p_code == "BAD_MESSAGE"
    return caught.value


def test_ndjson_framing_single_message_encoding() -> None:
    line = p2p.encode("chat_chunk", p2p.ChatChunk(text="héllo\nworld"), request_id="r1")
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1, "a newline inside text must be escaped"
    assert json.loads(line) == {
        "type": "chat_chunk",
        "payload": {"text": "héllo\nworld"},
        "request_id": "r1",
    }


def test_ndjson_framing_multiple_message_decoding() -> None:
    stream = p2p.encode("chat_chunk", {"text": "a"}, "r") + p2p.encode(
        "chat_end", {"finish_reason": "stop"}, "r"
    )
    decoded = [p2p.decode_line(line) for line in stream.splitlines()]
    assert [env.type for env, _ in decoded] == ["chat_chunk", "chat_end"]
    assert isinstance(decoded[1][1], p2p.ChatEnd)


def test_message_envelope_valid_envelope_with_and_without_request_id() -> None:
    env, payload = p2p.decode_line(
        '{"type":"server_info","payload":{"host_name":"h","model":"m","status":"ready"}}'
    )
    assert env.request_id is None
    assert isinstance(payload, p2p.ServerInfo)
    env, payload = p2p.decode_line(
        '{"type":"chat_start","payload":{"prompt":"hi"},"request_id":"abc"}'
    )
    assert env.request_id == "abc"
    assert isinstance(payload, p2p.ChatStart)


def test_message_envelope_missing_type_field_is_bad_message() -> None:
    err = bad_message('{"payload":{"prompt":"hi"},"request_id":"r9"}')
    assert "type" in err.message
    assert err.details["request_id"] == "r9", "the error can still name the request"


@pytest.mark.parametrize(
    "line",
    [
        b"not json at all",
        b"[1, 2, 3]",
        b'{"type": 5, "payload": {}}',
        b'{"type": "chat_start", "payload": "a string"}',
        b'{"type": "chat_start", "payload": {"prompt": "x"}}',  # no request_id
        b'{"type": "chat_start", "payload": {}, "request_id": "r"}',  # no prompt
        b'{"type": "chat_start", "payload": {"prompt": "x", "temperature": 9}, "request_id": "r"}',
        b"\xff\xfe broken utf-8",
    ],
)
def test_malformed_lines_are_bad_message(line: bytes) -> None:
    bad_message(line)


def test_chat_start_prompt_exceeds_max_size_is_bad_message() -> None:
    limit = p2p.MAX_PROMPT_BYTES
    ok = json.dumps({"type": "chat_start", "payload": {"prompt": "a" * limit}, "request_id": "r"})
    p2p.decode_line(ok)
    too_big = json.dumps(
        {"type": "chat_start", "payload": {"prompt": "é" * (limit // 2 + 1)}, "request_id": "r"}
    )
    err = bad_message(too_big)  # 8 KB counts bytes, not characters
    assert "8192" in err.message


def test_the_8_kb_bound_is_the_turn_asked_now_not_the_conversation_before_it() -> None:
    """Prompt exceeds max size, with infertui's `messages`: the newest message is the prompt;
    the earlier turns (a long conversation) are bounded by the line cap and the context."""
    limit = p2p.MAX_PROMPT_BYTES
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "a" * (limit // 2)}
        for i in range(9)  # 36 KB of conversation so far, then a 4 KB question
    ]
    line = {"type": "chat_start", "payload": {"messages": turns}, "request_id": "r"}
    _, payload = p2p.decode_line(json.dumps(line))
    assert isinstance(payload, p2p.ChatStart) and len(payload.messages or ()) == 9
    turns[-1]["content"] = "a" * (limit + 1)
    err = bad_message(json.dumps(line))
    assert "8192" in err.message


def test_a_line_over_the_framing_cap_is_bad_message() -> None:
    bad_message(b'{"type":"x","payload":{"p":"' + b"a" * p2p.MAX_LINE_BYTES + b'"}}')


def test_unknown_message_types_are_additive() -> None:
    env, payload = p2p.decode_line('{"type":"metrics_subscribe","payload":{"interval_ms":500}}')
    assert env.type == "metrics_subscribe"
    assert payload is None


def test_chat_start_accepts_messages_model_and_sampling() -> None:
    _, payload = p2p.decode_line(
        json.dumps(
            {
                "type": "chat_start",
                "request_id": "r",
                "payload": {
                    "prompt": "",
                    "messages": [{"role": "user", "content": "hi"}],
                    "model": "smollm2-135m",
                    "temperature": 0.2,
                    "max_tokens": 12,
                },
            }
        )
    )
    assert isinstance(payload, p2p.ChatStart)
    assert payload.messages is not None and payload.messages[0].content == "hi"


def test_error_codes_unknown_error_code_received_is_generic() -> None:
    assert kind_for_p2p_code("SOMETHING_NEW") is None
    assert kind_for_p2p_code("MODEL_BUSY") is ErrorKind.QUEUE_FULL
    assert kind_for_p2p_code("HOST_DISCONNECTED") is ErrorKind.HOST_DISCONNECTED
    _, payload = p2p.decode_line(
        '{"type":"error","payload":{"code":"SOMETHING_NEW","message":"hm"}}'
    )
    assert isinstance(payload, p2p.ErrorPayload) and payload.message == "hm"
