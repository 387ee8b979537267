"""Spec 000: the NDJSON protocol between host and client over Hyperswarm.

Every line is one envelope `{type, payload, request_id?}`. `decode_line` validates the
envelope and, for known types, the payload; anything malformed is an InferError(BAD_MESSAGE).
Message types beyond the spec (engines, metrics, queue, admin) are additive: a peer that
does not know them answers with an error and carries on.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .common import Messages
from .errors import ErrorKind, InferError
from .json_text import parse_json
from .sampling import (
    FrequencyPenalty,
    MaxTokens,
    MinP,
    PresencePenalty,
    RepeatPenalty,
    Seed,
    Stops,
    Temperature,
    TopK,
    TopP,
)
from .shares import Priority

PROTOCOL_VERSION = 1
MAX_PROMPT_BYTES = 8 * 1024  # spec 000: a prompt over 8 KB is BAD_MESSAGE
MAX_LINE_BYTES = 1024 * 1024  # framing cap: a longer line is BAD_MESSAGE and the peer is dropped


class Envelope(BaseModel):
    """The frame every message travels in."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1)
    payload: dict[str, Any] = Field(default_factory=dict)
    request_id: str | None = None


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow")


class ServerInfo(_Payload):
    host_name: str
    model: str
    status: str = "ready"
    protocol_version: int = PROTOCOL_VERSION
    server_id: str | None = None
    models: list[str] = Field(default_factory=list)
    capabilities: dict[str, Any] = Field(default_factory=dict)


class ChatStart(_Payload):
    prompt: str = ""
    messages: Messages | None = None
    model: str | None = None
    system: str | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed = None
    presence_penalty: PresencePenalty | None = None
    frequency_penalty: FrequencyPenalty | None = None
    repeat_penalty: RepeatPenalty | None = None
    stop: Stops | None = None
    max_tokens: MaxTokens | None = None
    protocol_version: int | None = None
    priority: Priority | None = None  # additive: batch work yields free slots; unset: usual


class ChatChunk(_Payload):
    text: str
    index: int | None = None


class ChatEnd(_Payload):
    finish_reason: Literal["stop", "length", "abort", "error"]
    tokens_in: int | None = None
    tokens_out: int | None = None
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    model: str | None = None  # additive: the engine that answered


class Abort(_Payload):
    pass


class ErrorPayload(_Payload):
    code: str
    message: str
    retry_after_ms: int | None = None


# Known request types and the payload model each carries; the rest are additive extensions.
PAYLOAD_MODELS: dict[str, type[_Payload]] = {
    "server_info": ServerInfo,
    "chat_start": ChatStart,
    "chat_chunk": ChatChunk,
    "chat_end": ChatEnd,
    "abort": Abort,
    "error": ErrorPayload,
}
REQUIRES_REQUEST_ID = frozenset({"chat_start", "chat_chunk", "chat_end", "abort"})


def encode(type_: str, payload: BaseModel | dict[str, Any], request_id: str | None = None) -> bytes:
    """One message as a single JSON line ending in `\\n` (spec 000: Single message encoding)."""
    body = payload.model_dump(exclude_none=True) if isinstance(payload, BaseModel) else payload
    message: dict[str, Any] = {"type": type_, "payload": body}
    if request_id is not None:
        message["request_id"] = request_id
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _bad(message: str, request_id: str | None = None) -> InferError:
    return InferError(ErrorKind.BAD_MESSAGE, message, details={"request_id": request_id})


def decode_line(line: bytes | str) -> tuple[Envelope, _Payload | None]:
    """Parse and validate one line; the payload model is None for an unknown (additive) type."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE_BYTES:
            raise _bad(f"line of {len(line)} bytes exceeds the {MAX_LINE_BYTES}-byte limit")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad(f"line is not valid UTF-8: {exc.reason}") from None
    raw = parse_json(line)
    if not isinstance(raw, dict):
        raise _bad("a message must be a JSON object")
    request_id = raw.get("request_id") if isinstance(raw.get("request_id"), str) else None
    if "type" not in raw:
        raise _bad("message is missing the 'type' field", request_id)
    if not isinstance(raw["type"], str) or not raw["type"]:
        raise _bad("'type' must be a non-empty string", request_id)
    if "payload" in raw and not isinstance(raw["payload"], dict):
        raise _bad("'payload' must be a JSON object", request_id)
    try:
        envelope = Envelope.model_validate(raw)
    except ValidationError as exc:
        raise _bad(_first_error(exc), request_id) from None
    if envelope.type in REQUIRES_REQUEST_ID and not envelope.request_id:
        raise _bad(f"'{envelope.type}' needs a request_id", request_id)
    model = PAYLOAD_MODELS.get(envelope.type)
    if model is None:
        return envelope, None
    try:
        payload = model.model_validate(envelope.payload)
    except ValidationError as exc:
        raise _bad(f"{envelope.type}: {_first_error(exc)}", request_id) from None
    if isinstance(payload, ChatStart):
        # Spec 000's 8 KB bound is the prompt: what is asked now. With `messages` (infertui's
        # multi-turn extension) that is the newest message. The turns before it are the
        # conversation so far, bounded by the line cap and the model's context: counted in,
        # a chat ended after three or four exchanges.
        newest = payload.messages[-1].content if payload.messages else ""
        size = len(payload.prompt.encode()) + len(newest.encode())
        if size > MAX_PROMPT_BYTES:
            raise _bad(
                f"prompt of {size} bytes exceeds the {MAX_PROMPT_BYTES}-byte limit", request_id
            )
        if not payload.prompt and not payload.messages:
            raise _bad("chat_start needs a 'prompt' (or 'messages')", request_id)
    return envelope, payload


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "message"
    return f"{where}: {err['msg']}"


def error_payload(err: InferError) -> ErrorPayload:
    """An InferError as spec 000's `error` payload (MODEL_BUSY carries retry_after_ms). The
    additive `kind` keeps what spec 000's coarser code merges (a missing file and an unknown
    model are both OLLAMA_MODEL_NOT_AVAILABLE), for infertui clients."""
    return ErrorPayload(
        code=err.mapping.p2p_code,
        message=err.message,
        retry_after_ms=err.retry_after_ms,
        kind=err.kind.value,
    )
