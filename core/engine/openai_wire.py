"""What an OpenAI-compatible server takes and sends, for the upstream engine: a job as a
streamed request body, the SSE stream's objects and logprobs back, and its refusals as the
errors infertui gives for the same conditions. Servers differ in details (llama-server, vLLM,
llama-cpp-python, infertui): each reader accepts every shape met among them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from ..protocol.common import SamplingParams
from ..protocol.errors import ErrorKind, InferError, kind_for_status
from ..protocol.events import TokenLogprob
from .types import GenerationRequest

DRAIN_S = 1.0  # how long the end of a stream past [DONE] is waited for
_SURROGATE = re.compile("[\ud800-\udfff]")
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
    if field == "json_wrap":  # the text around it is the engine's to write (upstream.py)
        return {}
    if field == "repeat_penalty":  # vLLM names it its own way
        return {"repeat_penalty": value, "repetition_penalty": value}
    return {field: value}  # OpenAI's name, or llama-server's (top_k, grammar, mirostat...)


class Reply(Protocol):
    """What is read of a server's reply: httpx's, or the hop client's (hop.py)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...
    def aiter_text(self) -> AsyncIterator[str]: ...


async def sse_batches(response: Reply) -> AsyncIterator[list[dict[str, Any]]]:
    """The JSON objects of an SSE stream up to `[DONE]`, in batches: those that came in one
    read from the network, so that a reader behind by a few events handles them at once. An
    `error` event comes as an object with an `error` key (llama-server sends its errors so).
    The stream is read to its end, past `[DONE]`: a connection left half-read is closed, and
    the next job would pay for a new one."""
    event, pending = "", ""
    reads = response.aiter_text()
    async for text in reads:
        lines = (pending + text).split("\n")
        pending = lines.pop()  # the last line may not be whole yet
        batch: list[dict[str, Any]] = []
        for raw in lines:
            line = raw.rstrip("\r")
            if not line:
                event = ""
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith(("data:", "error:")):
                data = line.split(":", 1)[1].strip()
                if data == "[DONE]":
                    if batch:
                        yield batch
                    with contextlib.suppress(TimeoutError):  # a server that keeps it open
                        await asyncio.wait_for(_read_out(reads), DRAIN_S)
                    return
                if data:
                    batch.append(_event_object(data, line.startswith("error:") or event == "error"))
        if batch:
            yield batch


async def _read_out(reads: AsyncIterator[str]) -> None:
    async for _ in reads:
        pass


def _event_object(data: str, error: bool) -> dict[str, Any]:
    document = json.loads(data)
    if "\\ud" in data or "\\uD" in data:  # it may hold a lone surrogate: see _characters
        document = _characters(document)
    if not isinstance(document, dict):
        raise ValueError(f"an SSE event that is not an object: {data[:80]}")
    return {"error": document.get("error", document)} if error else document


def _characters(value: Any) -> Any:
    """A JSON value with each lone UTF-16 surrogate in its strings as U+FFFD. json.loads
    decodes a lone `\\ud83d` escape to one, which UTF-8 cannot carry: a reply holding it
    would fail as it is sent out (issue 34 §5). A server may send one where it cut text inside
    a UTF-16 pair; json.loads joins only the pairs it is given whole."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_characters(item) for item in value]
    if isinstance(value, dict):
        return {_characters(key): _characters(item) for key, item in value.items()}
    return value


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
