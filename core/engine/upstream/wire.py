"""What an OpenAI-compatible server takes and sends, for the upstream engine: a job as a
streamed request body, the SSE stream's objects and logprobs back, and its refusals as the
errors infertui gives for the same conditions. Servers differ in details (llama-server, vLLM,
llama-cpp-python, infertui): each reader accepts every shape met among them."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ...protocol.common import SamplingParams
from ...protocol.errors import ErrorKind, InferError, kind_for_status
from ...protocol.events import TokenLogprob
from ...protocol.sse_reader import Reply
from ..types import GenerationRequest

_DEFAULTS = SamplingParams()
# OpenAI's own defaults are not llama.cpp's: these fields always go out. The rest go out only
# where a job sets them, for a strictly OpenAI server may refuse the fields it does not know
# (llama.cpp's and vLLM's extensions: top_k, min_p, mirostat...).
_ALWAYS = ("temperature", "top_p")


def request_body(request: GenerationRequest, model: str) -> tuple[str, dict[str, Any]]:
    """(path under the API root, JSON body) of a job as one streamed request."""
    chat = request.messages is not None
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.messages is not None:
        body["messages"] = [message.model_dump() for message in request.messages]
    else:
        body["prompt"] = request.prompt_text or ""
    params = request.params
    for field in SamplingParams.model_fields:
        value = getattr(params, field)
        if field in _ALWAYS or value != getattr(_DEFAULTS, field):
            body.update(_sent(field, value, chat))
    return ("chat/completions" if chat else "completions"), body


def _sent(field: str, value: Any, chat: bool) -> dict[str, Any]:
    """One sampling field as an OpenAI-compatible server takes it (OpenAI's name and shape,
    else llama-server's), from SamplingParams' own."""
    if field == "stop":
        return {"stop": list(value)}
    if field == "logit_bias":  # the ids are the upstream model's tokens
        return {"logit_bias": {str(token): bias for token, bias in value}}
    if field == "logprobs":
        return {"logprobs": True, "top_logprobs": value} if chat else {"logprobs": value}
    if field == "json_schema":
        schema = {"name": "output", "schema": json.loads(value), "strict": True}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    if field == "json_wrap":  # the text around it is the engine's to write (engine.py)
        return {}
    if field == "repeat_penalty":  # vLLM names it its own way
        return {"repeat_penalty": value, "repetition_penalty": value}
    return {field: value}  # OpenAI's name, or llama-server's (top_k, grammar, mirostat...)


def chunk_logprobs(raw: Any) -> tuple[TokenLogprob, ...]:
    """A chunk's logprobs in either OpenAI shape, told apart by its keys: chat's `content`
    list, or completions' parallel `tokens` / `token_logprobs` / `top_logprobs` lists."""
    if not isinstance(raw, dict):
        return ()
    if "content" in raw:
        return tuple(
            TokenLogprob(
                _bytes(item),
                float(item["logprob"]),
                tuple(
                    (_bytes(top), float(top["logprob"])) for top in item.get("top_logprobs") or ()
                ),
            )
            for item in raw.get("content") or ()
        )
    tokens, values = raw.get("tokens") or [], raw.get("token_logprobs") or []
    tops = raw.get("top_logprobs") or [None] * len(tokens)
    return tuple(
        TokenLogprob(
            str(token).encode(),
            float(value or 0.0),
            tuple((str(t).encode(), float(v)) for t, v in (top or {}).items()),
        )
        for token, value, top in zip(tokens, values, tops, strict=False)
    )


def refusal(response: Reply, engine_id: str) -> InferError:
    """A server's refusal of a job, as the error infertui gives for the same condition."""
    status = response.status_code
    try:
        message = error_message(response.json())
    except ValueError:
        message = response.text[:300]
    retry = retry_after_ms(response.headers.get("retry-after"))
    kind = kind_for_status(status)
    if kind in (ErrorKind.QUEUE_FULL, ErrorKind.POOL_UNREADY):  # the same job may pass later
        state = "is full" if kind is ErrorKind.QUEUE_FULL else "is not ready"
        return InferError(
            kind, f"the upstream {state}: {message}", retry_after_ms=retry or 1000,
            engine_id=engine_id,
        )  # fmt: skip
    if kind in (ErrorKind.BAD_MESSAGE, ErrorKind.PAYLOAD_TOO_LARGE, ErrorKind.INVALID_PARAMS):
        # the job itself was refused: what the client asked, or its size
        context = "context" in message.lower()
        kind = ErrorKind.CONTEXT_OVERFLOW if context else ErrorKind.INVALID_PARAMS
        return InferError(kind, f"the upstream refused the job: {message}", engine_id=engine_id)
    # Anything else is the host's failure, not the client's: a key refused is infertui's own.
    if kind in (ErrorKind.UNAUTHORIZED, ErrorKind.FORBIDDEN):
        message = f"the upstream refused infertui's API key ({status}): {message}"
    else:
        message = f"the upstream answered {status}: {message}"
    return InferError(ErrorKind.GENERATION_FAILED, message, engine_id=engine_id)


def error_message(document: Any) -> str:
    """The sentence in an OpenAI-style error body (or Ollama's, or FastAPI's)."""
    if isinstance(document, dict):
        error = document.get("error", document.get("detail", document))
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return str(document)[:300]


def retry_after_ms(value: str | None) -> int | None:
    """A Retry-After header's seconds, in milliseconds (None: absent or a date)."""
    with contextlib.suppress(TypeError, ValueError):
        return max(0, int(float(value) * 1000))  # type: ignore[arg-type]
    return None


def _bytes(item: dict[str, Any]) -> bytes:
    raw = item.get("bytes")
    return bytes(raw) if raw else str(item.get("token", "")).encode()
