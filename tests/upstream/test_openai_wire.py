"""What the upstream engine reads from OpenAI-compatible servers, in the shapes they send:
SSE objects and error events, both logprobs shapes, and refusals mapped onto infertui's
errors (issue 15 §1). The engine against real servers is in tests/upstream/test_upstream.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from infertui.core.engine.types import GenerationRequest
from infertui.core.engine.upstream.wire import (
    chunk_logprobs,
    refusal,
    request_body,
    retry_after_ms,
)
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.errors import ErrorKind
from infertui.core.protocol.sse_reader import sse_batches


async def objects(raw: str) -> list[dict[str, object]]:
    response = httpx.Response(200, content=raw.encode())
    return [o async for batch in sse_batches(response) for o in batch]


async def test_sse_objects_stop_at_done_and_keep_error_events_as_errors() -> None:
    raw = (
        'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n'
        ": keep-alive\n\n"
        'event: error\ndata: {"message": "boom"}\n\n'
        'error: {"error": {"message": "late"}}\n\n'
        "data: [DONE]\n\n"
        'data: {"after": "done"}\n\n'
    )
    got = await objects(raw)
    assert got[0] == {"choices": [{"delta": {"content": "Hi"}}]}
    assert got[1] == {"error": {"message": "boom"}}  # llama-server's `event: error`
    assert got[2] == {"error": {"message": "late"}}
    assert len(got) == 3  # nothing after [DONE]


async def test_an_sse_event_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="not an object"):
        await objects("data: [1, 2]\n\n")


def test_logprobs_in_the_chat_and_the_completions_shape() -> None:
    chat = chunk_logprobs(
        {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                      "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}]}
    )  # fmt: skip
    assert chat[0].token == b"Hi" and chat[0].logprob == -0.5 and chat[0].top == ((b"Hi", -0.5),)
    text = chunk_logprobs(
        {"tokens": [" a"], "token_logprobs": [-1.25], "top_logprobs": [{" a": -1.25, " b": -2.0}]}
    )
    assert text[0].token == b" a" and text[0].top == ((b" a", -1.25), (b" b", -2.0))
    assert chunk_logprobs(None) == () and chunk_logprobs("nonsense") == ()


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "retry"),
    [
        (429, {"error": {"message": "busy"}}, {"Retry-After": "2"}, ErrorKind.QUEUE_FULL, 2000),
        (503, {"detail": "loading"}, {}, ErrorKind.POOL_UNREADY, 1000),
        (400, {"error": {"message": "exceeds the context size"}}, {},
         ErrorKind.CONTEXT_OVERFLOW, None),
        (422, {"detail": [{"msg": "bad field"}]}, {}, ErrorKind.INVALID_PARAMS, None),
        (401, {"error": "no key"}, {}, ErrorKind.GENERATION_FAILED, None),
        (500, "oops", {}, ErrorKind.GENERATION_FAILED, None),
    ],
)  # fmt: skip
def test_refusals_map_onto_infertuis_errors(
    status: int, body: object, headers: dict[str, str], kind: ErrorKind, retry: int | None
) -> None:
    response = (
        httpx.Response(status, json=body, headers=headers)
        if not isinstance(body, str)
        else httpx.Response(status, text=body, headers=headers)
    )
    error = refusal(response, "up")
    assert error.kind is kind and error.retry_after_ms == retry and error.engine_id == "up"
    if status == 401:
        assert "API key" in error.message


def test_retry_after_in_seconds_or_absent() -> None:
    assert retry_after_ms("1.5") == 1500
    assert retry_after_ms(None) is None
    assert retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT") is None


def test_a_job_as_a_request_sends_only_what_it_sets() -> None:
    params = SamplingParams(temperature=0.2, max_tokens=9, stop=("x",), repeat_penalty=1.1)
    messages = [ChatMessage(role="user", content="Hi")]
    chat = GenerationRequest("j", [], params, 9, messages=messages)
    path, body = request_body(chat, "m")
    assert path == "chat/completions" and body["messages"] == [{"role": "user", "content": "Hi"}]
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 9 and body["stop"] == ["x"]
    assert body["repeat_penalty"] == body["repetition_penalty"] == 1.1  # llama.cpp's and vLLM's
    assert "top_k" not in body and "seed" not in body and "logprobs" not in body
    text = GenerationRequest("j", [], SamplingParams(logprobs=2), 9, prompt_text="Once")
    path, body = request_body(text, "m")
    assert path == "completions" and body["prompt"] == "Once" and body["logprobs"] == 2
    assert "grammar" not in body
    gbnf = 'root ::= "yes"'
    ruled = GenerationRequest("j", [], SamplingParams(grammar=gbnf), 9, prompt_text="Once")
    assert request_body(ruled, "m")[1]["grammar"] == gbnf  # llama-server's field
    assert not {"typical_p", "mirostat", "logit_bias"} & set(body)
    knobs = SamplingParams(typical_p=0.7, mirostat=2, mirostat_tau=3.0, logit_bias=((5, -1.0),))
    _, body = request_body(GenerationRequest("j", [], knobs, 9, prompt_text="Once"), "m")
    assert body["typical_p"] == 0.7 and body["mirostat"] == 2 and body["mirostat_tau"] == 3.0
    assert body["logit_bias"] == {"5": -1.0} and "mirostat_eta" not in body


async def test_sse_batches_follow_network_reads_and_join_lines_split_between_them() -> None:
    reads = [
        b'data: {"n": 1}\n\ndata: {"n"',
        b': 2}\r\n\r\ndata: {"n": 3}\n\n',
        b"data: [DONE]\n\n",
    ]

    async def network() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    response = httpx.Response(200, content=network())
    batches = [batch async for batch in sse_batches(response)]
    assert batches == [[{"n": 1}], [{"n": 2}, {"n": 3}]]
