"""Which spec an HTTP path belongs to, and so which error shape it answers with.

Spec 004 (OpenAI and engine management), spec 001 (Ollama-style chat), spec 002
(orchestrator) and Ollama's own /api each show their own error envelope; every error on a
path uses its own.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ...protocol import chat_api, openai_replies, orchestrator
from ...protocol.errors import ErrorKind, InferError


class Dialect(Enum):
    OPENAI = "openai"  # spec 004
    CHAT_API = "chat-api"  # spec 001, the Ollama-style chat (/chat/*)
    OLLAMA_API = "ollama-api"  # Ollama's own /api/*: {"error": "..."}
    ORCHESTRATOR = "orchestrator"  # spec 002


HEALTH_PATHS = frozenset({"/", "/v1/health", "/health", "/status"})  # open without a key


def dialect_of(path: str) -> Dialect:
    if path.startswith("/api/"):
        return Dialect.OLLAMA_API
    if path.startswith("/chat/"):
        return Dialect.CHAT_API
    if path.startswith(
        ("/v1/tasks", "/v1/pools", "/v1/capabilities", "/v1/replicasets", "/v1/artifacts")
    ):
        return Dialect.ORCHESTRATOR
    return Dialect.OPENAI


def is_health(path: str) -> bool:
    return path in HEALTH_PATHS or (path.startswith("/v1/pools/") and path.endswith("/health"))


def documented_errors(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The refusals every generation endpoint may answer, for its OpenAPI `responses`."""
    reasons = {
        400: "invalid parameters (range, missing field, prompt too long for the context)",
        404: "unknown model",
        429: "queue full: Retry-After and X-Backoff-Ms say when to retry",
        503: "the engine is not ready: loading, draining, or its upstream cannot be reached",
    }
    return {code: {"model": model, "description": text} for code, text in reasons.items()}


# which policy refused a job, for the 429's `policy_label` (OC-CTRL-2011)
_POLICY_LABELS = {
    ErrorKind.QUEUE_FULL: "reject-new",
    ErrorKind.CLIENT_BUSY: "per-client-limit",
    ErrorKind.RATE_LIMITED: "rate-limit",
    ErrorKind.BUDGET_SPENT: "token-budget",
}


def error_response(err: InferError, family: Dialect) -> JSONResponse:
    """A pre-stream error: the HTTP status of its kind, the body of its family, and backoff
    headers for every retriable refusal (OC-CTRL-2011)."""
    body: dict[str, Any]
    if family is Dialect.CHAT_API:
        body = chat_api.OllamaErrorEnvelope(error=chat_api.error_body(err)).model_dump()
    elif family is Dialect.OLLAMA_API:
        body = {"error": err.message}
    elif family is Dialect.ORCHESTRATOR:
        base = orchestrator.error_body(err)
        label = _POLICY_LABELS.get(err.kind)
        if label is not None:
            base = orchestrator.Backpressure(**base.model_dump(), policy_label=label)
        body = base.model_dump(exclude_none=True)
    else:
        body = openai_replies.error_envelope(err).model_dump()
    headers = {}
    if err.retry_after_ms is not None and err.retriable:
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after_ms / 1000)))
        headers["X-Backoff-Ms"] = str(err.retry_after_ms)
    if err.kind is ErrorKind.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=err.mapping.http_status, headers=headers)
