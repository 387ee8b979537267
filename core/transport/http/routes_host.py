"""infertui's own snapshots over HTTP: what the P2P additive messages give, for dashboards.

GET /v1/host (server info), /v1/host/queue and /v1/host/metrics carry the same payloads as
spec 000's `server_info` and the additive `queue` and `metrics` messages. `GET /` is the
liveness line Ollama answers there, which its clients read before anything else.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from ...protocol.p2p import ServerInfo
from ...protocol.snapshots import LibraryEntry, SnapshotKind
from .access import access_of
from .deps import service_of
from .routing import StrictJSONRoute

router = APIRouter(tags=["Host snapshots (infertui)"], route_class=StrictJSONRoute)


@router.get(
    "/", response_class=PlainTextResponse, summary="Liveness, as Ollama answers it (HEAD too)"
)
async def root() -> str:
    return "Ollama is running"


@router.get("/v1/host", response_model=ServerInfo, summary="Host name, models and addresses")
async def host_info(request: Request) -> ServerInfo:
    service = service_of(request)
    admin = access_of(request).is_admin(request)  # the engine manager opens read-only if not
    return service.server_info({"transports": service.addresses(), "admin": admin})


@router.get("/v1/host/queue", summary="Per engine: waiting jobs with predicted starts, slots")
async def host_queue(request: Request) -> dict[str, Any]:
    return service_of(request).snapshot(SnapshotKind.QUEUE)


@router.get("/v1/host/library", summary="The library's models, loaded or not (infertui list)")
async def host_library(request: Request) -> dict[str, list[LibraryEntry]]:
    return {"models": await service_of(request).library_entries()}


@router.get("/v1/host/metrics", summary="Per engine: counters, rates and latency percentiles")
async def host_metrics(request: Request) -> dict[str, Any]:
    return service_of(request).snapshot(SnapshotKind.METRICS)
