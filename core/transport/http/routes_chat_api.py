"""Spec 001, Ollama-style chat: POST /chat/completions (JSON or NDJSON) and POST /chat/sse."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request

from ...host import Ask
from ...host.reply import End, reply
from ...protocol.chat_api import (
    SSE_END,
    AssistantTurn,
    OllamaChatRequest,
    OllamaChatResponse,
    OllamaErrorEnvelope,
    OllamaStreamChunk,
    OllamaStreamError,
    error_body,
)
from ...protocol.events import Finished, TokenText
from ...scheduler import Job
from .deps import collect, submit
from .dialects import documented_errors
from .routing import StrictJSONRoute
from .streams import (
    HOLE,
    NUMBER_HOLE,
    LiveResponse,
    SseEvent,
    Template,
    json_line,
    ndjson_response,
    sse_response,
)

router = APIRouter(tags=["Ollama-style chat (spec 001)"], route_class=StrictJSONRoute)

_ERRORS = documented_errors(OllamaErrorEnvelope)
_NDJSON_EXAMPLE = (
    '{"message":{"role":"assistant","content":"I\'m "},"done":false,"index":0}\n'
    '{"message":{"role":"assistant","content":""},"done":true,"index":1}\n'
)


def _chunk_template() -> Template:
    return Template(
        OllamaStreamChunk(message=AssistantTurn(content=HOLE), done=False, index=NUMBER_HOLE)
    )


@router.post(
    "/chat/completions",
    response_model=OllamaChatResponse,
    responses={200: {"content": {"application/x-ndjson": {"example": _NDJSON_EXAMPLE}}}, **_ERRORS},
    summary="Chat; with `stream: true` one JSON object per line, the last with done: true",
)
async def chat(body: OllamaChatRequest, request: Request) -> OllamaChatResponse | LiveResponse:
    job = await submit(
        request, Ask(model=body.model, messages=body.messages, params=body.sampling())
    )
    if body.stream:
        return ndjson_response(ndjson_lines(job))
    [(text, _)] = await collect(request, job)
    return OllamaChatResponse(
        id=f"cmpl-{job.id}",
        model=job.pool_id,
        created=int(time.time()),
        message=AssistantTurn(content=text),
    )


async def chunks(job: Job) -> AsyncIterator[str | Finished]:
    """The job's text as numbered spec-001 chunk lines, then its Finished event."""
    template = _chunk_template()
    index = 0
    async for piece in reply(job):
        if isinstance(piece, TokenText):
            yield template.render(piece.text, index)
            index += 1
        elif isinstance(piece, End):
            yield piece.final


async def ndjson_lines(job: Job) -> AsyncIterator[str]:
    index = 0
    async for item in chunks(job):
        if isinstance(item, str):
            yield item
            index += 1
        elif item.failure is not None:
            yield json_line(OllamaStreamError(error=error_body(item.failure)))
        else:
            last = OllamaStreamChunk(message=AssistantTurn(content=""), done=True, index=index)
            yield json_line(last)


@router.post(
    "/chat/sse",
    responses={
        200: {"content": {"text/event-stream": {"example": "data: {...}\n\ndata: [END]\n\n"}}},
        **_ERRORS,
    },
    summary="Chat as Server-Sent Events, ending with data: [END]",
)
async def chat_sse(body: OllamaChatRequest, request: Request) -> LiveResponse:
    job = await submit(
        request, Ask(model=body.model, messages=body.messages, params=body.sampling())
    )
    return sse_response(sse_events(job))


async def sse_events(job: Job) -> AsyncIterator[str | SseEvent]:
    async for item in chunks(job):
        if isinstance(item, str):
            yield item
        elif item.failure is not None:
            yield SseEvent(error_body(item.failure).model_dump_json(), "error")
    yield SSE_END
