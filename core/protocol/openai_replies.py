"""Spec 004: the bodies an OpenAI-compatible reply is made of: completions and their chunks,
chat completions and their deltas, logprobs, embeddings, the model list and the error
envelope. The requests are in openai.py."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from .errors import InferError
from .events import TokenLogprob
from .finish import OpenAIFinish


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # floats, or base64 of little-endian float32s


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # copied from another sequence's KV cells, not decoded again


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = PromptTokensDetails()


class FunctionCall(BaseModel):
    name: str | None = None
    arguments: str


class ToolCallOut(BaseModel):
    index: int | None = None  # in streamed deltas
    id: str | None = None
    type: Literal["function"] | None = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]

    @classmethod
    def of(cls, entries: Sequence[TokenLogprob]) -> ChatLogprobs:
        return cls(
            content=[
                ChatTokenLogprob(
                    **_token(e.token, e.logprob),
                    top_logprobs=[TopLogprob(**_token(t, lp)) for t, lp in e.top],
                )
                for e in entries
            ]
        )


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]

    @classmethod
    def of(cls, entries: Sequence[TokenLogprob], offset: int = 0) -> CompletionLogprobs:
        tokens = [e.token.decode("utf-8", "replace") for e in entries]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return cls(
            tokens=tokens,
            token_logprobs=[e.logprob for e in entries],
            top_logprobs=[{t.decode("utf-8", "replace"): lp for t, lp in e.top} for e in entries],
            text_offset=offsets,
        )


def _token(raw: bytes, logprob: float) -> dict[str, Any]:
    return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: OpenAIFinish | None
    logprobs: ChatLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: OpenAIFinish | None = None
    logprobs: ChatLogprobs | None = None

    @model_serializer(mode="wrap")
    def _with_finish_reason(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Every chunk names its finish_reason, null until the last (spec 004's stream, as
        OpenAI's): a client that reads `choice["finish_reason"]` must find the key."""
        data: dict[str, Any] = handler(self)
        data.setdefault("finish_reason", None)
        return data


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: OpenAIFinish | Literal[""] | None
    logprobs: CompletionLogprobs | None = None


class TextCompletion(BaseModel):
    """A whole completion, and (with `usage` None) each chunk of a streamed one."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "infertui"
    # vLLM's field: an infertui in front of this one learns the real context from it
    max_model_len: int | None = Field(
        None, description="tokens one request may use (prompt and reply); absent: not known"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---- errors --------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


def error_envelope(err: InferError) -> ErrorEnvelope:
    m = err.mapping
    return ErrorEnvelope(
        error=ErrorBody(
            message=err.message,
            type=m.openai_type,
            param=err.param,
            code=err.details.get("openai_code", m.openai_code),  # a route's own, where it has one
        )
    )
