"""Spec 001: the Ollama-style chat API (`/chat/completions` JSON or NDJSON, `/chat/sse`).

Success chunks carry `message` as an object; error lines carry `error` with `message` as a
string, exactly as the spec shows (it notes the asymmetry itself).
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import Messages
from .errors import InferError
from .sampling import MaxTokens, SamplingParams, Seed, Stops, Temperature, TopK, TopP

SSE_END = "[END]"


class OllamaChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: Messages
    stream: bool = False
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    seed: Seed = None
    max_tokens: MaxTokens | None = None
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
