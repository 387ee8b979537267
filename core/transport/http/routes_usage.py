"""Who used the host, and spec 002's artifacts (issue 37 §5).

GET /v1/host/usage: per identity and UTC day from the ledger, and who is on the host now; an
admin sees everyone, any other key its own. POST /v1/artifacts keeps a structured artifact
under a content-addressed id (OC-CTRL-2065); GET /v1/artifacts/{id} reads it back, or a job's
record, which every job leaves even when it fails (OC-CTRL-2066, 2067).
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from ...protocol.errors import ErrorKind, InferError
from ...protocol.orchestrator import ArtifactRecord, ArtifactRequest, OrchestratorError
from ...protocol.shares import UsageReport
from .access import access_of
from .deps import service_of
from .routing import StrictJSONRoute

router = APIRouter(tags=["Usage and artifacts"], route_class=StrictJSONRoute)

_DAY = r"^\d{4}-\d{2}-\d{2}$"


@router.get(
    "/v1/host/usage",
    response_model=UsageReport,
    summary="Jobs and tokens per identity and UTC day, and who is on the host now",
)
async def host_usage(
    request: Request,
    since: str | None = Query(None, pattern=_DAY, description="first day, YYYY-MM-DD (UTC)"),
    until: str | None = Query(None, pattern=_DAY, description="last day, YYYY-MM-DD (UTC)"),
    identity: str | None = Query(None, max_length=256, description="one identity only"),
) -> UsageReport:
    access = access_of(request)
    if not access.is_admin(request):
        identity = access.who(request)  # a teammate sees their own
    return await service_of(request).usage.report(identity=identity, since=since, until=until)


@router.post(
    "/v1/artifacts",
    status_code=201,
    response_model=ArtifactRecord,
    responses={404: {"model": OrchestratorError, "description": "this host keeps no ledger"}},
    summary="Keep an artifact under a content-addressed id (OC-CTRL-2065)",
    openapi_extra={
        "x-examples": {
            "plan": {
                "request": {
                    "kind": "plan",
                    "content": {"steps": ["read", "write"]},
                    "tags": ["refactor"],
                },
                "response": {"id": "sha256:9f2c…", "kind": "plan", "tags": ["refactor"]},
            }
        }
    },
)
async def put_artifact(body: ArtifactRequest, request: Request) -> ArtifactRecord:
    artifact = await service_of(request).usage.put_artifact(
        body.content, kind=body.kind, tags=body.tags, lineage=body.lineage, meta=body.meta
    )
    return artifact


@router.get(
    "/v1/artifacts/{artifact_id}",
    response_model=ArtifactRecord,
    responses={404: {"model": OrchestratorError, "description": "no such artifact or job"}},
    summary="An artifact, or a job's record, by id (OC-CTRL-2066, 2067)",
)
async def get_artifact(artifact_id: str, request: Request) -> ArtifactRecord:
    artifact = await service_of(request).usage.artifact(artifact_id)
    if artifact is None:
        raise InferError(ErrorKind.NOT_FOUND, f"no artifact or job record '{artifact_id}'")
    return artifact
