"""What every route needs from a request: the host, the client's identity, and a submit that
carries both; and the whole reply of a job, for the non-streaming answers."""

from __future__ import annotations

import asyncio
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


async def submit(request: Request, **kwargs: Any) -> Job:
    return await service_of(request).submit(
        client_id=client_of(request),
        correlation_id=request.state.correlation_id,
        **kwargs,
    )


async def collect(request: Request, *jobs: Job) -> list[tuple[str, Finished]]:
    """The jobs' whole replies, or the first error raised (a pre-stream error: an HTTP
    status). A client that leaves before the replies are done cancels them: nobody would read
    them, and they would hold their slots to the end."""
    watcher = asyncio.create_task(_cancel_on_disconnect(request, jobs))
    try:
        results = await asyncio.gather(*(job.text() for job in jobs))
    finally:
        watcher.cancel()
    for _, final in results:
        if final.error is not None:
            raise final.error
    return results


async def _cancel_on_disconnect(request: Request, jobs: tuple[Job, ...]) -> None:
    # The body has been read, so the server's next message is the client leaving.
    while (await request.receive())["type"] != "http.disconnect":
        pass
    for job in jobs:
        job.cancel()
