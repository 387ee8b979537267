"""Spec 004, engine management and health: /engines, /engines/{id}[/status], /v1/health."""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from fastapi import APIRouter, Request, Response

from ...protocol.host_api import (
    AddEngineRequest,
    AddEngineResponse,
    EngineCounts,
    EngineList,
    EngineSummary,
    HealthResponse,
    RemoveEngineResponse,
    SystemUsage,
)
from ...protocol.openai_replies import ErrorEnvelope
from ...protocol.snapshots import EngineState, EngineStatus
from .access import ADMIN_ONLY, admin_refusals
from .deps import service_of
from .routing import StrictJSONRoute

router = APIRouter(tags=["Engines and health (spec 004)"], route_class=StrictJSONRoute)

_ADD_ERRORS: dict[int | str, dict[str, Any]] = {
    **admin_refusals(ErrorEnvelope),
    400: {"model": ErrorEnvelope, "description": "not a GGUF file, or invalid parameters"},
    403: {
        "model": ErrorEnvelope,
        "description": "model_path is outside the model folders, or not the admin key",
    },
    404: {"model": ErrorEnvelope, "description": "no file at model_path"},
    409: {"model": ErrorEnvelope, "description": "an engine with this id exists"},
    503: {"model": ErrorEnvelope, "description": "not enough memory for the model or context"},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorEnvelope, "description": "no such engine"}
}


@router.post(
    "/engines",
    status_code=201,
    response_model=AddEngineResponse,
    responses=_ADD_ERRORS,
    dependencies=ADMIN_ONLY,
    summary="Load a GGUF model as a new engine (listed as loading until it is ready)",
)
async def add_engine(body: AddEngineRequest, request: Request) -> AddEngineResponse:
    status = await service_of(request).add_engine(body)
    return AddEngineResponse(
        engine_id=status.engine_id,
        status=status.status,
        model_path=status.model_path,
        parameters=status.parameters,
    )


@router.get("/engines", response_model=EngineList, summary="Every engine and its state")
async def list_engines(request: Request) -> EngineList:
    return EngineList(engines=[summary(s) for s in service_of(request).engines()])


@router.delete(
    "/engines/{engine_id:path}",
    response_model=RemoveEngineResponse,
    responses={**admin_refusals(ErrorEnvelope), **_NOT_FOUND},
    dependencies=ADMIN_ONLY,
    summary="Cancel the engine's jobs and unload it",
)
async def remove_engine(engine_id: str, request: Request) -> RemoveEngineResponse:
    await service_of(request).remove_engine(engine_id)
    return RemoveEngineResponse(engine_id=engine_id)


@router.get(
    "/engines/{engine_id:path}/status",
    response_model=EngineStatus,
    responses=_NOT_FOUND,
    summary="Parameters, memory use and performance of one engine",
)
async def engine_status(engine_id: str, request: Request) -> EngineStatus:
    return service_of(request).engine_status(engine_id)


def summary(status: EngineStatus) -> EngineSummary:
    return EngineSummary(
        engine_id=status.engine_id, status=status.status, model_path=status.model_path
    )


class ProcessUsage:
    """This process's memory and CPU use; CPU as a percentage since the previous reading."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()

    def read(self) -> tuple[float, float]:
        wall, cpu = time.monotonic(), time.process_time()
        span = wall - self._wall
        percent = 100.0 * (cpu - self._cpu) / span if span > 0 else 0.0
        self._wall, self._cpu = wall, cpu
        return _rss_mb(), round(percent, 1)


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


_STOPPING: dict[int | str, dict[str, Any]] = {
    503: {"model": HealthResponse, "description": "the host is stopping: it takes no new work"}
}


@router.get(
    "/v1/health",
    response_model=HealthResponse,
    responses=_STOPPING,
    summary="Host health (no auth needed)",
)
@router.get("/health", response_model=HealthResponse, include_in_schema=False)
@router.get("/status", response_model=HealthResponse, include_in_schema=False)
async def health(request: Request, response: Response) -> HealthResponse:
    service = service_of(request)
    statuses = service.engines()
    loaded = sum(s.status is EngineState.LOADED for s in statuses)
    memory, cpu = request.app.state.usage.read()
    if service.stopping:
        # A load balancer's check must fail while the host drains to stop (SIGTERM, a
        # redeploy), so that it sends new work elsewhere; its engines still look loaded.
        state = "unhealthy"
        response.status_code = 503
    elif statuses and loaded == len(statuses):
        state = "healthy"
    elif loaded:
        state = "degraded"
    else:
        state = "unhealthy"
    return HealthResponse(
        status=state,
        timestamp=int(time.time()),
        version=request.app.version,
        engines=EngineCounts(loaded=loaded, unloaded=len(statuses) - loaded, total=len(statuses)),
        system=SystemUsage(
            uptime_seconds=round(service.uptime_s, 1),
            memory_usage_mb=memory,
            cpu_usage_percent=cpu,
        ),
        # Health is open even with an API key: names, never where models live. The name is
        # /v1/pools/{id}/health's: a file's, or an upstream's model (None while not known).
        engines_summary=[
            EngineSummary(
                engine_id=s.engine_id,
                status=s.status,
                model_path=service.pool_health(s.engine_id).model_path or None,
            )
            for s in statuses
        ],
    )
