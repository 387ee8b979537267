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
    PoolCapabilities,
    PoolHealth,
    ReloadRequest,
    ReloadResponse,
    ResumeResponse,
)
from ...protocol.snapshots import PoolState
from ...scheduler import Pool
from .routes_openai import service_of

router = APIRouter(tags=["Pools and capabilities (spec 002)"])
log = logging.getLogger(__name__)

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": OrchestratorError, "description": "unknown pool"}
}


def pool_of(request: Request, pool_id: str) -> Pool:
    return service_of(request).registry.get(pool_id)


@router.get(
    "/v1/pools/{pool_id}/health",
    response_model=PoolHealth,
    responses=_NOT_FOUND,
    summary="Liveness, readiness, draining and a metrics snapshot (OC-CTRL-2001)",
)
async def pool_health(pool_id: str, request: Request) -> PoolHealth:
    pool = pool_of(request, pool_id)
    return PoolHealth(
        pool_id=pool.id,
        live=pool.state is not PoolState.FAILED,
        ready=pool.state is PoolState.READY,
        draining=pool.state is PoolState.DRAINING,
        state=pool.state,
        engine=pool.engine.version if pool.engine else "llama.cpp",
        model_path=pool.spec.model_path,
        metrics=pool.metrics_snapshot(),
        last_error=pool.error,
    )


@router.post(
    "/v1/pools/{pool_id}/drain",
    status_code=202,
    response_model=DrainResponse,
    responses=_NOT_FOUND,
    openapi_extra={"x-examples": {"drain": {"request": {"deadline_ms": 5000}}}},
    summary="Stop admitting, let jobs finish until the deadline, cancel the rest",
)
async def drain(pool_id: str, body: DrainRequest, request: Request) -> DrainResponse:
    pool = pool_of(request, pool_id)
    task = asyncio.create_task(pool.drain(body.deadline_ms))
    request.app.state.background.add(task)
    task.add_done_callback(request.app.state.background.discard)
    await asyncio.sleep(0)  # the drain has begun once we answer (OC-CTRL-2002)
    return DrainResponse(pool_id=pool.id, draining=True)


@router.post(
    "/v1/pools/{pool_id}/resume",
    response_model=ResumeResponse,
    responses={
        **_NOT_FOUND,
        503: {"model": OrchestratorError, "description": "still draining, or not loaded"},
    },
    openapi_extra={"x-examples": {"resume": {"response": {"pool_id": "m", "ready": True}}}},
    summary="Admit jobs again after a drain (beyond spec 002: undoes a drain without a reload)",
)
async def resume(pool_id: str, request: Request) -> ResumeResponse:
    pool = pool_of(request, pool_id)
    pool.resume()
    return ResumeResponse(pool_id=pool.id, ready=True)


@router.post(
    "/v1/pools/{pool_id}/reload",
    response_model=ReloadResponse,
    responses={
        **_NOT_FOUND,
        400: {
            "model": OrchestratorError,
            "description": "the new model is not valid; old one kept",
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
    pool = pool_of(request, pool_id)
    await pool.reload(body.model_path)
    return ReloadResponse(pool_id=pool.id, reloaded=True, model_path=pool.spec.model_path)


@router.get(
    "/v1/capabilities",
    response_model=Capabilities,
    openapi_extra={"x-examples": {"capabilities": {"api_version": API_VERSION}}},
    summary="Per pool: engine, version, context, slots, workloads, limits and features",
)
async def capabilities(request: Request) -> Capabilities:
    service = service_of(request)
    pools = []
    for pool in service.registry.pools():
        engine = pool.engine
        ctx = engine.n_ctx if engine else pool.spec.n_ctx
        pools.append(
            PoolCapabilities(
                pool_id=pool.id,
                engine="llama.cpp",
                engine_version=engine.version if engine else service.version,
                model=pool.spec.model_path,
                ctx_max=ctx,
                max_tokens_out=ctx - 1,
                slots=engine.n_parallel if engine else pool.spec.slots_requested,
                supported_workloads=["chat", "completion"],
                rate_limits={"queue_capacity": pool.queue_capacity},
                features={
                    "streaming": True,
                    "cancel": True,
                    "pin_pool": True,
                    "output_mode_hint": True,
                    "gpu_offload": bool(engine and engine.n_gpu_layers != 0),
                    "artifacts": False,
                    "budgets": False,
                },
            )
        )
    return Capabilities(pools=pools)
