"""The one reader of Server-Sent Events streams of JSON objects (OpenAI's, llama-server's,
vLLM's, infertui's own): the upstream engine reads its server with it, and the HTTP client
reads a host with it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

DRAIN_S = 1.0  # how long the end of a stream past [DONE] is waited for
_SURROGATE = re.compile("[\ud800-\udfff]")


class Reply(Protocol):
    """What is read of a server's reply: httpx's, or that of the upstream engine's own
    connection (engine/upstream/connection.py)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...
    def aiter_text(self) -> AsyncIterator[str]: ...


async def sse_batches(response: Reply) -> AsyncIterator[list[dict[str, Any]]]:
    """The JSON objects of an SSE stream up to `[DONE]`, in batches: those that came in one
    read from the network, so that a reader behind by a few events handles them at once. An
    `error` event comes as an object with an `error` key (llama-server sends its errors so).
    The stream is read to its end, past `[DONE]`: a connection left half-read is closed, and
    the next job would pay for a new one."""
    event, pending = "", ""
    reads = response.aiter_text()
    async for text in reads:
        lines = (pending + text).split("\n")
        pending = lines.pop()  # the last line may not be whole yet
        batch: list[dict[str, Any]] = []
        for raw in lines:
            line = raw.rstrip("\r")
            if not line:
                event = ""
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith(("data:", "error:")):
                data = line.split(":", 1)[1].strip()
                if data == "[DONE]":
                    if batch:
                        yield batch
                    with contextlib.suppress(TimeoutError):  # a server that keeps it open
                        await asyncio.wait_for(_read_out(reads), DRAIN_S)
                    return
                if data:
                    batch.append(_event_object(data, line.startswith("error:") or event == "error"))
        if batch:
            yield batch


async def _read_out(reads: AsyncIterator[str]) -> None:
    async for _ in reads:
        pass


def _event_object(data: str, error: bool) -> dict[str, Any]:
    document = json.loads(data)
    if "\\ud" in data or "\\uD" in data:  # it may hold a lone surrogate: see _characters
        document = _characters(document)
    if not isinstance(document, dict):
        raise ValueError(f"an SSE event that is not an object: {data[:80]}")
    return {"error": document.get("error", document)} if error else document


def _characters(value: Any) -> Any:
    """A JSON value with each lone UTF-16 surrogate in its strings as U+FFFD. json.loads
    decodes a lone `\\ud83d` escape to one, which UTF-8 cannot carry: a reply holding it
    would fail as it is sent out (issue 34 §5). A server may send one where it cut text inside
    a UTF-16 pair; json.loads joins only the pairs it is given whole."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_characters(item) for item in value]
    if isinstance(value, dict):
        return {_characters(key): _characters(item) for key, item in value.items()}
    return value
