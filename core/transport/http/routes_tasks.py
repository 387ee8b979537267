"""Spec 002, data plane: admit a task, stream it as SSE, cancel it race-free.

POST /v1/tasks admits (OC-CTRL-2010) and answers 202 with the queue position; the job runs
whether or not anyone streams it, and GET .../stream replays it from the start to any number
of readers (task_store.py). Task ids are random, so knowing one is what lets a client read
or cancel it. A task is forgotten a while after it ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

from fastapi import APIRouter, Request

from ...host import Ask, HostService
from ...protocol.events import Admitted, TokenText
from ...protocol.orchestrator import (
    Backpressure,
    OrchestratorError,
    SSEEnd,
    SSEMetrics,
    SSEStarted,
    SSEToken,
    TaskAccepted,
    TaskCancelled,
    TaskRequest,
    sse_error,
)
from .access import access_of
from .deps import queue_job, service_of
from .routing import StrictJSONRoute
from .streams import HOLE, NUMBER_HOLE, LiveResponse, SseEvent, Template, sse_response
from .task_store import Task

router = APIRouter(tags=["Task queue (spec 002)"], route_class=StrictJSONRoute)

METRICS_EVERY = 32  # tokens between `metrics` frames


_EXAMPLES = {
    "enqueue": {
        "request": {
            "prompt": "Write a haiku about queues.",
            "max_tokens": 64,
            "output_mode": "text",
        },
        "response": {
            "task_id": "job-Jz4oWqkR1dx8bS2a",
            "queue_position": 0,
            "predicted_start_ms": 0,
            "pool_id": "smollm2-135m",
            "engine": "llama.cpp",
            "output_mode": "text",
            "stream_url": "/v1/tasks/job-Jz4oWqkR1dx8bS2a/stream",
        },
    }
}
_STREAM_EXAMPLE = (
    'event: started\ndata: {"queue_position":0,"predicted_start_ms":0}\n\n'
    'event: token\ndata: {"t":"Queues","i":0}\n\n'
    'event: metrics\ndata: {"queue_depth":0,"kv_warmth":false,"tokens_out":1}\n\n'
    'event: end\ndata: {"tokens_out":17,"decode_ms":412,"decode_time_ms":412}\n\n'
)


@router.post(
    "/v1/tasks",
    status_code=202,
    response_model=TaskAccepted,
    responses={
        400: {
            "model": OrchestratorError,
            "description": "INVALID_PARAMS (e.g. does not fit the context)",
        },
        404: {"model": OrchestratorError, "description": "no engine serves the named model"},
        409: {"model": OrchestratorError, "description": "a task with this task_id exists"},
        429: {"model": Backpressure, "description": "queue full: Retry-After, X-Backoff-Ms"},
        503: {
            "model": OrchestratorError,
            "description": "POOL_UNREADY: the pinned pool is not ready",
        },
    },
    openapi_extra={"x-examples": _EXAMPLES},
    summary="Admit a task (ctx and token budget checked before it is queued)",
)
async def enqueue(body: TaskRequest, request: Request) -> TaskAccepted:
    service = service_of(request)
    request.app.state.tasks.check_new(body.task_id)
    if body.budget is not None and body.session_id is not None:
        service.shares.set_budget(access_of(request).who(request), body.session_id, body.budget)
    ask = Ask(
        model=body.model,
        pool_id=body.pool_id,  # a pin: this pool or a typed error, never another
        params=body.sampling(),
        messages=body.messages,
        prompt=body.prompt if not body.messages else None,
        priority=body.priority,
        session_id=body.session_id,
        job_id=body.task_id,
    )
    job = await queue_job(request, ask)
    request.app.state.tasks.add(job, access_of(request).owner(request))
    return TaskAccepted(
        task_id=job.id,
        queue_position=job.queue_position,
        predicted_start_ms=job.predicted_start_ms,
        pool_id=job.pool_id,
        engine=service.version,
        output_mode=body.output_mode,
        stream_url=f"/v1/tasks/{quote(job.id, safe='')}/stream",
    )


@router.get(
    "/v1/tasks/{task_id}/stream",
    responses={
        200: {"content": {"text/event-stream": {"example": _STREAM_EXAMPLE}}},
        403: {"model": OrchestratorError, "description": "the task is another API key's"},
        404: {"model": OrchestratorError, "description": "unknown task"},
    },
    openapi_extra={"x-examples": {"stream": _STREAM_EXAMPLE}},
    summary="SSE: started, then token* with metrics interleaved, then end (or error)",
)
async def stream(task_id: str, request: Request) -> LiveResponse:
    task = request.app.state.tasks.get(task_id)
    access_of(request).check_owner(request, task.owner, f"task '{task_id}'")
    return sse_response(task_events(task, service_of(request)))


async def task_events(task: Task, service: HostService) -> AsyncIterator[SseEvent]:
    position, predicted = task.position(service)
    started = SSEStarted(queue_position=position, predicted_start_ms=predicted)
    yield SseEvent(started.model_dump_json(), "started")
    token = Template(SSEToken(t=HOLE, i=NUMBER_HOLE))
    async for event in task.follow():
        if isinstance(event, TokenText):
            yield SseEvent(token.render(event.text, event.index), "token")
            if (event.index + 1) % METRICS_EVERY == 0:
                yield metrics_event(task, service)
        elif isinstance(event, Admitted):
            yield metrics_event(task, service)
        else:
            if event.error is not None:
                yield SseEvent(sse_error(event.error).model_dump_json(), "error")
                return
            t = event.timings
            end = SSEEnd(
                tokens_out=t.tokens_out,
                decode_ms=int(t.decode_ms),
                decode_time_ms=int(t.decode_ms),
                finish_reason=event.finish_reason,
            )
            yield SseEvent(end.model_dump_json(), "end")


def metrics_event(task: Task, service: HostService) -> SseEvent:
    snapshot = service.pool_metrics(task.pool_id)
    metrics = SSEMetrics(
        budget=service.shares.budget_left(task.identity, task.session_id),
        queue_depth=snapshot.queue_depth,
        kv_warmth=False,
        tokens_out=task.tokens_out,
        decode_tps=round(snapshot.decode_tps_recent, 1),
        slots_busy=snapshot.slots_busy,
        slots_total=snapshot.slots_total,
    )
    return SseEvent(metrics.model_dump_json(), "metrics")


@router.post(
    "/v1/tasks/{task_id}/cancel",
    response_model=TaskCancelled,
    responses={
        403: {"model": OrchestratorError, "description": "the task is another API key's"},
        404: {"model": OrchestratorError, "description": "unknown task"},
    },
    openapi_extra={
        "x-examples": {"cancel": {"task_id": "job-1", "cancelled": True, "state": "done"}}
    },
    summary="Cancel race-free: once this answers, no further token is emitted (OC-CTRL-2012)",
)
async def cancel(task_id: str, request: Request) -> TaskCancelled:
    task = request.app.state.tasks.get(task_id)
    access_of(request).check_owner(request, task.owner, f"task '{task_id}'")
    cancelled = task.cancel()
    return TaskCancelled(
        task_id=task_id,
        cancelled=cancelled,
        state=task.state,
        tokens_emitted=task.tokens_emitted,
    )
