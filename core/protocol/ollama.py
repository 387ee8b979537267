"""Spec 001: the Ollama-style chat API (`/chat/completions` JSON or NDJSON, `/chat/sse`).

Success chunks carry `message` as an object; error lines carry `error` with `message` as a
string, exactly as the spec shows (it notes the asymmetry itself).
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import Messages, SamplingParams, Seed, Stops
from .errors import InferError

SSE_END = "[END]"


class OllamaChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: Messages
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    seed: Seed = None
    max_tokens: int | None = Field(None, ge=1)
    stop: Stops | None = None

    def sampling(self) -> SamplingParams:
        return SamplingParams.of(self)


class AssistantTurn(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class OllamaChatResponse(BaseModel):
    id: str
    model: str
    created: int = Field(default_factory=lambda: int(time.time()))
    message: AssistantTurn
    done: Literal[True] = True


class OllamaStreamChunk(BaseModel):
    message: AssistantTurn
    done: bool
    index: int


class OllamaError(BaseModel):
    message: str
    type: str
    code: str


class OllamaErrorEnvelope(BaseModel):
    error: OllamaError


class OllamaStreamError(BaseModel):
    """The one NDJSON line that ends a stream on error."""

    error: OllamaError
    done: Literal[True] = True


def error_body(err: InferError) -> OllamaError:
    m = err.mapping
    return OllamaError(message=err.message, type=m.openai_type, code=m.openai_code)
