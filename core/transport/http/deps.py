"""What every route needs from a request: the host, the client's identity, and a submit that
carries both; and the whole reply of a job, for the non-streaming answers."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from ...host import HostService
from ...protocol.events import Finished
from ...scheduler import Job


def service_of(request: Request) -> HostService:
    service: HostService = request.app.state.service
    return service


def client_of(request: Request) -> str:
    peer = request.client
    return f"http:{peer.host}" if peer else "http"


def submit(request: Request, **kwargs: Any) -> Job:
    return service_of(request).submit(
        client_id=client_of(request),
        correlation_id=request.state.correlation_id,
        **kwargs,
    )


async def collect(job: Job) -> tuple[str, Finished]:
    """The whole reply, or the job's error raised (a pre-stream error: an HTTP status)."""
    text, final = await job.text()
    if final.error is not None:
        raise final.error
    return text, final
