"""Spec 002, control plane: pool health, drain (and resume, additive), reload, capabilities."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request

from ...protocol.orchestrator import (
    API_VERSION,
    Capabilities,
    DrainRequest,
    DrainResponse,
    OrchestratorError,
    PoolHealth,
    ReloadRequest,
    ReloadResponse,
    ResumeResponse,
)
from .access import ADMIN_ONLY, admin_refusals
from .deps import service_of
from .routing import StrictJSONRoute

router = APIRouter(tags=["Pools and capabilities (spec 002)"], route_class=StrictJSONRoute)
log = logging.getLogger(__name__)

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": OrchestratorError, "description": "unknown pool"}
}
_ADMIN_REFUSALS = admin_refusals(OrchestratorError)


@router.get(
    "/v1/pools/{pool_id:path}/health",
    response_model=PoolHealth,
    responses=_NOT_FOUND,
    summary="Liveness, readiness, draining and a metrics snapshot (OC-CTRL-2001)",
)
async def pool_health(pool_id: str, request: Request) -> PoolHealth:
    return service_of(request).pool_health(pool_id)


@router.post(
    "/v1/pools/{pool_id:path}/drain",
    status_code=202,
    response_model=DrainResponse,
    responses={**_ADMIN_REFUSALS, **_NOT_FOUND},
    dependencies=ADMIN_ONLY,
    openapi_extra={"x-examples": {"drain": {"request": {"deadline_ms": 5000}}}},
    summary="Stop admitting, let jobs finish until the deadline, cancel the rest",
)
async def drain(pool_id: str, body: DrainRequest, request: Request) -> DrainResponse:
    service = service_of(request)
    service.engine_status(pool_id)  # an unknown pool is a 404 now, not in the background
    task = asyncio.create_task(service.drain_engine(pool_id, body.deadline_ms))
    request.app.state.background.add(task)
    task.add_done_callback(request.app.state.background.discard)
    await asyncio.sleep(0)  # the drain has begun once we answer (OC-CTRL-2002)
    return DrainResponse(pool_id=pool_id, draining=True)


@router.post(
    "/v1/pools/{pool_id:path}/resume",
    response_model=ResumeResponse,
    dependencies=ADMIN_ONLY,
    responses={
        **_ADMIN_REFUSALS,
        **_NOT_FOUND,
        503: {"model": OrchestratorError, "description": "still draining, or not loaded"},
    },
    openapi_extra={"x-examples": {"resume": {"response": {"pool_id": "m", "ready": True}}}},
    summary="Admit jobs again after a drain (beyond spec 002: undoes a drain without a reload)",
)
async def resume(pool_id: str, request: Request) -> ResumeResponse:
    service_of(request).resume_engine(pool_id)
    return ResumeResponse(pool_id=pool_id, ready=True)


@router.post(
    "/v1/pools/{pool_id:path}/reload",
    response_model=ReloadResponse,
    dependencies=ADMIN_ONLY,
    responses={
        **_ADMIN_REFUSALS,
        **_NOT_FOUND,
        400: {
            "model": OrchestratorError,
            "description": "the new model is not valid; old one kept",
        },
        403: {
            "model": OrchestratorError,
            "description": "model_path is outside the model folders, or not the admin key",
        },
        503: {
            "model": OrchestratorError,
            "description": "the new model did not load; old one kept",
        },
    },
    openapi_extra={"x-examples": {"reload": {"request": {"model_path": "/models/new.gguf"}}}},
    summary="Load the model beside the old one and switch atomically, or roll back",
)
async def reload(pool_id: str, body: ReloadRequest, request: Request) -> ReloadResponse:
    status = await service_of(request).reload_engine(pool_id, body.model_path)
    return ReloadResponse(pool_id=pool_id, reloaded=True, model_path=status.model_path)


@router.get(
    "/v1/capabilities",
    response_model=Capabilities,
    openapi_extra={"x-examples": {"capabilities": {"api_version": API_VERSION}}},
    summary="Per pool: engine, version, context, slots, workloads, limits and features",
)
async def capabilities(request: Request) -> Capabilities:
    return service_of(request).capabilities()
