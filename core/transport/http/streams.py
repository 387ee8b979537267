"""Streaming responses: SSE (via sse-starlette) and NDJSON, one flush per event.

Token frames are rendered from a template made once per job: only the token's JSON-escaped
text is spliced in per event, so the hot path builds one string and no model (OC-CTRL-2026).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import StreamingResponse

from ...protocol.events import Finished, JobEvent
from ...scheduler import Job

KEEPALIVE_S = 15
STREAM_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive"}
_HOLE = "\u0000hole\u0000"
_HOLE_JSON = json.dumps(_HOLE)


HOLE = _HOLE  # put this in the string field a Template fills
INDEX = 987_654_321  # and this in the integer field it numbers


class Template:
    """A JSON document with one string field (HOLE) and optionally one integer field (INDEX)
    left open: render(text, index) fills them."""

    __slots__ = ("_parts", "_text_first")

    def __init__(self, model: BaseModel) -> None:
        rendered = model.model_dump_json(exclude_none=True)
        at_text, at_index = rendered.index(_HOLE_JSON), rendered.find(str(INDEX))
        self._text_first = at_index < 0 or at_text < at_index
        # a raw NUL never occurs in JSON text (it is escaped as \u0000), so it splits safely
        marked = rendered.replace(_HOLE_JSON, "\x00").replace(str(INDEX), "\x00")
        self._parts = marked.split("\x00")

    def render(self, text: str, index: int = 0) -> str:
        value = json.dumps(text, ensure_ascii=False)
        parts = self._parts
        if len(parts) == 2:
            return parts[0] + value + parts[1]
        first, second = (value, str(index)) if self._text_first else (str(index), value)
        return parts[0] + first + parts[1] + second + parts[2]


def sse_event(data: str, event: str) -> ServerSentEvent:
    """A named SSE event, framed with `\n` like the rest of the stream."""
    return ServerSentEvent(data=data, event=event, sep="\n")


def sse_response(events: AsyncIterator[str | ServerSentEvent]) -> EventSourceResponse:
    """An SSE stream with `\\n\\n` separators and a keep-alive comment every 15 s."""
    return EventSourceResponse(events, ping=KEEPALIVE_S, sep="\n", headers=STREAM_HEADERS)


def ndjson_response(
    lines: AsyncIterator[str], media_type: str = "application/json"
) -> StreamingResponse:
    """NDJSON, one object per line: as spec 001 sends it (Content-Type application/json), or
    as Ollama does (application/x-ndjson)."""

    async def framed() -> AsyncIterator[str]:
        async for line in lines:
            yield line + "\n"

    return StreamingResponse(framed(), media_type=media_type, headers=STREAM_HEADERS)


def json_line(model: BaseModel) -> str:
    return model.model_dump_json(exclude_none=True)


async def merged(jobs: Sequence[Job]) -> AsyncIterator[tuple[int, JobEvent]]:
    """Events of several jobs as they come, tagged with the job's index. Leaving early
    cancels the jobs still running."""
    if len(jobs) == 1:
        async for event in jobs[0].events():
            yield 0, event
        return
    queue: asyncio.Queue[tuple[int, JobEvent]] = asyncio.Queue()

    async def pump(index: int, job: Job) -> None:
        async for event in job.events():
            queue.put_nowait((index, event))

    tasks = [asyncio.create_task(pump(i, job)) for i, job in enumerate(jobs)]
    remaining = len(jobs)
    try:
        while remaining:
            index, event = await queue.get()
            yield index, event
            if isinstance(event, Finished):
                remaining -= 1
    finally:
        for task in tasks:
            task.cancel()
