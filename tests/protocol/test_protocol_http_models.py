"""Specs 001, 002 and 004: request validation, defaults and error shapes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infertui.core.protocol import chat_api, host_api, openai, openai_replies, orchestrator, p2p
from infertui.core.protocol.errors import ErrorKind, InferError


def test_spec_004_chat_defaults_follow_the_parameter_reference_but_max_tokens() -> None:
    """max_tokens unset is None, "the host's default": until the context is full unless
    http.default_max_tokens says otherwise (issue 34: clients that send no limit)."""
    req = openai.ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert (req.temperature, req.top_p, req.max_tokens, req.stream) == (1.0, 1.0, None, False)
    assert req.token_budget is None
    assert openai.CompletionRequest.model_validate({"model": "m", "prompt": "x"}).max_tokens is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("temperature", -0.1),
        ("top_p", 1.5),
        ("presence_penalty", -2.1),
        ("frequency_penalty", 2.1),
        ("max_tokens", 0),
    ],
)
def test_spec_004_parameter_ranges_are_validated(field: str, value: float) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(ValidationError) as caught:
        openai.ChatCompletionRequest.model_validate(body)
    assert caught.value.errors()[0]["loc"] == (field,)


def test_spec_004_missing_model_or_messages_is_invalid() -> None:
    with pytest.raises(ValidationError):
        openai.ChatCompletionRequest.model_validate(
            {"messages": [{"role": "user", "content": "x"}]}
        )
    with pytest.raises(ValidationError):
        openai.ChatCompletionRequest.model_validate({"model": "m", "messages": []})


def test_spec_004_sampling_maps_stop_and_extras() -> None:
    req = openai.CompletionRequest.model_validate(
        {"model": "m", "prompt": ["a", "b"], "stop": "\n", "top_k": 5, "seed": 3, "logprobs": None}
    )
    params = req.sampling(16)
    assert params.stop == ("\n",)
    assert (params.top_k, params.seed, params.max_tokens) == (5, 3, 16)
    assert req.prompts == ["a", "b"]


def test_spec_004_error_envelope_shape() -> None:
    err = InferError(ErrorKind.MODEL_NOT_FOUND, "Model 'x' not found", param="model")
    body = openai_replies.error_envelope(err).model_dump()
    assert body == {
        "error": {
            "message": "Model 'x' not found",
            "type": "not_found_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


def test_spec_004_add_engine_defaults_and_bounds() -> None:
    req = host_api.AddEngineRequest.model_validate({"engine_id": "e", "model_path": "/m.gguf"})
    assert (req.n_ctx, req.n_gpu_layers, req.main_gpu_id) == (
        4096,
        100,
        None,
    )  # None: spread over all GPUs
    with pytest.raises(ValidationError):
        host_api.AddEngineRequest.model_validate(
            {"engine_id": "e", "model_path": "/m", "n_ctx": 64}
        )
    with pytest.raises(ValidationError):
        host_api.AddEngineRequest.model_validate({"engine_id": "a/b", "model_path": "/m"})


def test_spec_001_requests_and_chunks() -> None:
    req = chat_api.OllamaChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    )
    assert req.sampling().temperature == 0.7
    assert req.stream is False
    chunk = chat_api.OllamaStreamChunk(
        message=chat_api.AssistantTurn(content="I'm "), done=False, index=0
    )
    assert (
        chunk.model_dump_json()
        == '{"message":{"role":"assistant","content":"I\'m "},"done":false,"index":0}'
    )


def test_spec_001_error_line_has_a_string_message() -> None:
    err = InferError(ErrorKind.QUEUE_FULL, "busy", retry_after_ms=50)
    line = chat_api.OllamaStreamError(error=chat_api.error_body(err)).model_dump()
    assert line == {
        "error": {"message": "busy", "type": "server_error", "code": "queue_full"},
        "done": True,
    }


def test_spec_002_output_mode_unknown_values_are_ignored() -> None:
    assert (
        orchestrator.TaskRequest.model_validate({"prompt": "x", "output_mode": "json"}).output_mode
        == "json"
    )
    assert (
        orchestrator.TaskRequest.model_validate(
            {"prompt": "x", "output_mode": "diagrams"}
        ).output_mode
        is None
    )


def test_spec_002_error_bodies_carry_code_and_advisory_fields() -> None:
    err = InferError(ErrorKind.QUEUE_FULL, "queue full", retry_after_ms=300, engine_id="gemma")
    body = orchestrator.error_body(err)
    assert (body.code, body.retriable, body.retry_after_ms, body.pool_id) == (
        "ADMISSION_REJECT",
        True,
        300,
        "gemma",
    )
    sse = orchestrator.sse_error(InferError(ErrorKind.GENERATION_FAILED, "decode failed"))
    assert sse.model_dump(exclude_none=True) == {
        "code": "INTERNAL",
        "message": "decode failed",
        "retriable": True,
    }


def test_spec_000_error_payload_for_backpressure() -> None:
    payload = p2p.error_payload(
        InferError(ErrorKind.CLIENT_BUSY, "one at a time", retry_after_ms=900)
    )
    assert payload.model_dump() == {
        "code": "MODEL_BUSY",
        "message": "one at a time",
        "retry_after_ms": 900,
        "kind": "CLIENT_BUSY",  # additive: the precise condition, for infertui clients
    }
