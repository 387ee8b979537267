"""Streaming responses: SSE and NDJSON, one flush per event.

Token frames are rendered from a template made once per job: only the token's JSON-escaped
text is spliced in per event, so the hot path builds one string and no model (OC-CTRL-2026).

SSE and NDJSON share one lean response (LiveResponse) rather than sse-starlette's and
Starlette's: sse-starlette runs a task group of four tasks per stream and wraps every event in
an object and a cancel scope, a third of the event loop's time at 64 streams (py-spy). Here an
event is one f-string and one send, beside one wait that notices the client leaving and sends
SSE's keep-alive comment.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

KEEPALIVE_S = 15
STREAM_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive"}
SSE_HEADERS = {**STREAM_HEADERS, "X-Accel-Buffering": "no"}  # nginx: pass each event on
_HOLE = "\u0000hole\u0000"
_HOLE_JSON = json.dumps(_HOLE)


HOLE = _HOLE  # put this in the string field a Template fills
NUMBER_HOLE = 987_654_321  # and this in the integer field it numbers


class Template:
    """A JSON document with one string field (HOLE) and optionally one integer field (NUMBER_HOLE)
    left open: render(text, index) fills them."""

    __slots__ = ("_parts", "_text_first")

    def __init__(self, model: BaseModel) -> None:
        rendered = model.model_dump_json(exclude_none=True)
        at_text, at_index = rendered.index(_HOLE_JSON), rendered.find(str(NUMBER_HOLE))
        self._text_first = at_index < 0 or at_text < at_index
        # a raw NUL never occurs in JSON text (it is escaped as \u0000), so it splits safely
        marked = rendered.replace(_HOLE_JSON, "\x00").replace(str(NUMBER_HOLE), "\x00")
        self._parts = marked.split("\x00")

    def render(self, text: str, index: int = 0) -> str:
        value = json.dumps(text, ensure_ascii=False)
        parts = self._parts
        if len(parts) == 2:
            return parts[0] + value + parts[1]
        first, second = (value, str(index)) if self._text_first else (str(index), value)
        return parts[0] + first + parts[1] + second + parts[2]


class SseEvent(NamedTuple):
    """A named SSE event (a bare string in a stream is an unnamed one)."""

    data: str
    event: str


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_frame(item: str | SseEvent) -> bytes:
    """One event on the wire, `\n`-separated; data with line breaks becomes several `data:`
    lines (JSON has none, so the common case is one f-string)."""
    data, head = (item, "") if isinstance(item, str) else (item.data, f"event: {item.event}\n")
    if "\n" in data or "\r" in data:
        body = "".join(f"data: {line}\n" for line in _LINE_BREAK.split(data))
    else:
        body = f"data: {data}\n"
    return f"{head}{body}\n".encode()


class LiveResponse(StreamingResponse):
    """A stream of items from an async iterator, each framed and written as it comes. When
    the client leaves, the iterator is cancelled at once (its job with it), even while it
    waits for a first token. Where the format has comments (SSE), one goes out every
    KEEPALIVE_S seconds, so that proxies keep a queued stream open."""

    def __init__(
        self,
        items: AsyncIterator[Any],
        frame: Callable[[Any], bytes],
        media_type: str,
        headers: dict[str, str],
        keepalive: bytes | None = None,
    ) -> None:
        super().__init__((), media_type=media_type, headers=headers)
        self._items, self._frame, self._keepalive = items, frame, keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        pump: asyncio.Future[Any] = asyncio.ensure_future(self._pump(send))
        listen: asyncio.Future[Any] = asyncio.ensure_future(receive())
        left = False
        try:
            while not pump.done() and not left:
                done, _ = await asyncio.wait(
                    (pump, listen), timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if listen in done:
                    left = listen.result()["type"] == "http.disconnect"
                    if not left:
                        listen = asyncio.ensure_future(receive())
                elif not done and self._keepalive:
                    await send({"type": "http.response.body", "body": self._keepalive,
                                "more_body": True})  # fmt: skip
        finally:
            listen.cancel()
            if not pump.done():
                pump.cancel()
                await asyncio.wait({pump})
        error = None if pump.cancelled() else pump.exception()
        if left:
            if error is not None:
                log.debug("a stream whose client left ended with %r", error)
            return
        if error is not None:
            raise error  # the iterator's own: the response breaks off, as any server's would
        # Only here, not in the pump: a keep-alive sent above has finished, so nothing can
        # follow the end of the response.
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, send: Send) -> None:
        items, frame = self._items, self._frame
        try:
            async for item in items:
                await send({"type": "http.response.body", "body": frame(item), "more_body": True})
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()


def sse_response(events: AsyncIterator[str | SseEvent]) -> LiveResponse:
    """An SSE stream with `\\n\\n` separators and a keep-alive comment every 15 s."""
    return LiveResponse(events, sse_frame, "text/event-stream", SSE_HEADERS, b": ping\n\n")


def ndjson_response(
    lines: AsyncIterator[str], media_type: str = "application/json"
) -> LiveResponse:
    """NDJSON, one object per line: as spec 001 sends it (Content-Type application/json), or
    as Ollama does (application/x-ndjson)."""
    return LiveResponse(lines, _ndjson_frame, media_type, STREAM_HEADERS)


def _ndjson_frame(line: str) -> bytes:
    return f"{line}\n".encode()


def json_line(model: BaseModel) -> str:
    return model.model_dump_json(exclude_none=True)
