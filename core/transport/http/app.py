"""The HTTP app factory: one FastAPI app per HostService, no module globals."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from ...host import HostService
from ...protocol.orchestrator import API_VERSION
from . import (
    metrics,
    routes_chat_api,
    routes_conversations,
    routes_engines,
    routes_host,
    routes_ollama_api,
    routes_openai,
    routes_pools,
    routes_responses,
    routes_tasks,
    routes_tokens,
    routes_usage,
)
from .access import Access
from .dialects import Dialect, dialect_of, is_health
from .direct_routes import DirectRoutes, direct_routes
from .errors import install_error_handlers
from .middleware import (
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    CorrelationMiddleware,
    Cors,
    HeadMiddleware,
    LoopbackHostsMiddleware,
    ScriptBodiesMiddleware,
    cors_options,
)
from .response_store import ConversationStore, ResponseStore
from .routes_engines import ProcessUsage
from .task_store import TaskStore

DEFAULT_MAX_BODY_BYTES = 4 * 2**20  # see HttpSettings.max_body_mb

# The endpoints that start generations, in every dialect: served direct (direct_routes.py).
GENERATION_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/chat/completions",
    "/chat/sse",
    "/api/chat",
    "/api/generate",
)

DESCRIPTION = """\
infertui's host over HTTP: OpenAI-compatible completions and engine management (spec 004),
Ollama-style chat (spec 001), and the orchestrator's task queue and pools (spec 002).
Every response carries `X-Correlation-Id`. With an API key set, every endpoint but the
health ones needs `Authorization: Bearer <key>`. Engine management (adding, removing,
draining, resuming and reloading engines) needs the admin key; a host without one allows it
on a loopback bind only.
"""


# FastAPI from 0.165 asks OpenTelemetry's global providers on every request whether to trace
# it (~4% of a request's CPU). infertui reports through its own metrics; off where it exists.
_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(
    service: HostService,
    *,
    access: Access | None = None,
    cors_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = 30.0,
    default_max_tokens: int | None = None,
) -> FastAPI:
    app = FastAPI(
        title="infertui",
        version=API_VERSION,
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
        **_NO_TELEMETRY,
    )
    access = access or Access()
    app.state.service = service
    app.state.access = access
    app.state.max_body_bytes = max_body_bytes
    app.state.default_max_tokens = default_max_tokens  # see HttpSettings.default_max_tokens
    app.state.tasks = TaskStore()
    app.state.responses = ResponseStore()
    app.state.conversations = ConversationStore()
    app.state.usage = ProcessUsage()
    app.state.metrics_registry = metrics.collector_registry(service)
    app.state.background = set[asyncio.Task[object]]()
    routers = [
        module.router
        for module in (
            routes_openai,
            routes_responses,
            routes_conversations,
            routes_engines,
            routes_chat_api,
            routes_ollama_api,
            routes_tasks,
            routes_pools,
            routes_host,
            routes_tokens,
            routes_usage,
            metrics,
        )
    ]
    for router in routers:
        app.include_router(router)
    install_error_handlers(app)
    document_errors(app, api_key=access.keys_required)
    # Added last runs first: correlation IDs wrap everything, then HEAD as GET, then the
    # loopback Host check, then CORS, then the key check, then the body limit, then a
    # script's untyped body typed as JSON, then the direct routes.
    direct = direct_routes(
        [route for router in routers for route in router.routes], GENERATION_PATHS
    )
    app.add_middleware(DirectRoutes, fastapi=app, direct=direct)
    app.add_middleware(ScriptBodiesMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes, timeout_s=body_timeout_s)
    if access.keys_required:
        app.add_middleware(ApiKeyMiddleware, access=access)
    if cors_origins:  # OC-CTRL-2070: off unless origins are given
        app.add_middleware(Cors, **cors_options(cors_origins))
    if access.loopback and not access.keys_required:  # who reaches it is trusted: see there
        app.add_middleware(LoopbackHostsMiddleware, allowed=frozenset(allowed_hosts))
    app.add_middleware(HeadMiddleware)
    app.add_middleware(CorrelationMiddleware)
    return app


_ERROR_SCHEMAS = {
    Dialect.OPENAI: "ErrorEnvelope",
    Dialect.CHAT_API: "OllamaErrorEnvelope",
    Dialect.ORCHESTRATOR: "OrchestratorError",
    Dialect.OLLAMA_API: "ApiError",
}


def document_errors(app: FastAPI, *, api_key: bool) -> None:
    """Say in the OpenAPI document what the handlers really answer: a 400 in the path's own
    error shape where FastAPI would list its 422, and a 401 on guarded paths."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        for path, operations in schema["paths"].items():
            ref = {"$ref": f"#/components/schemas/{_ERROR_SCHEMAS[dialect_of(path)]}"}
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                if responses.pop("422", None) is not None:
                    responses.setdefault("400", _error(ref, "invalid request"))
                if "requestBody" in operation:
                    responses.setdefault("408", _error(ref, "the body came too slowly"))
                    responses.setdefault("413", _error(ref, "the body is over the size limit"))
                if api_key and not is_health(path):
                    responses.setdefault("401", _error(ref, "missing or invalid API key"))
        schema["components"]["schemas"].pop("HTTPValidationError", None)
        schema["components"]["schemas"].pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _error(ref: dict[str, str], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref}}}
