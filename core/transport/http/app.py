"""The HTTP app factory: one FastAPI app per HostService, no module globals."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ...host import HostService
from ...protocol.orchestrator import API_VERSION
from . import metrics, routes_engines, routes_ollama, routes_openai, routes_pools, routes_tasks
from .errors import install_error_handlers
from .middleware import ApiKeyMiddleware, CorrelationMiddleware
from .routes_engines import ProcessUsage
from .routes_tasks import TaskStore

DESCRIPTION = """\
infertui's host over HTTP: OpenAI-compatible completions and engine management (spec 004),
Ollama-style chat (spec 001), and the orchestrator's task queue and pools (spec 002).
Every response carries `X-Correlation-Id`. With an API key set, every endpoint but the
health ones needs `Authorization: Bearer <key>`.
"""


def create_app(
    service: HostService, *, api_key: str | None = None, cors_origins: Sequence[str] = ()
) -> FastAPI:
    app = FastAPI(
        title="infertui",
        version=API_VERSION,
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.service = service
    app.state.tasks = TaskStore()
    app.state.usage = ProcessUsage()
    app.state.metrics_registry = metrics.registry_for(service)
    app.state.background = set[asyncio.Task[object]]()
    for module in (
        routes_openai,
        routes_engines,
        routes_ollama,
        routes_tasks,
        routes_pools,
        metrics,
    ):
        app.include_router(module.router)
    install_error_handlers(app)
    # Added last runs first: correlation IDs wrap everything, then CORS, then the key check.
    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-Correlation-Id"],
            expose_headers=["X-Correlation-Id", "Retry-After", "X-Backoff-Ms"],
        )
    app.add_middleware(CorrelationMiddleware)
    return app
