"""The Client API over the host's HTTP API: OpenAI-style streaming chat, JSON snapshots.

Abort closes the stream: the host cancels the job as soon as it sees the disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from httpx import USE_CLIENT_DEFAULT

from ..protocol.common import ChatMessage
from ..protocol.errors import ErrorKind, InferError, kind_for_openai_code, kind_for_status
from ..protocol.finish import heard_finish
from ..protocol.host_api import AddEngineRequest
from ..protocol.shares import UsageReport
from ..protocol.snapshots import (
    EngineStatus,
    FinishReason,
    LibraryEntry,
    MetricsSnapshot,
    QueueSnapshot,
)
from ..protocol.sse_reader import sse_batches
from .base import ChatReply, ChatStats, Client, HostInfo

HEALTH_POLL_S = 2.0
_DONE = object()


def error_from_response(status: int, body: bytes, headers: httpx.Headers) -> InferError:
    """An HTTP error answer as an InferError: spec 004's code where the body has one."""
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    inner = data.get("error") if isinstance(data, dict) else None
    if isinstance(inner, dict):  # spec 004 (and spec 001's `code`)
        kind = kind_for_openai_code(inner.get("code"))
        message = str(inner.get("message") or f"HTTP {status}")
    elif isinstance(inner, str) and inner:  # Ollama's /api: the status says the kind
        kind, message = ErrorKind.INTERNAL, inner
    else:  # spec 002 or a proxy's page
        kind = ErrorKind.INTERNAL
        said = data.get("message") if isinstance(data, dict) else None
        message = str(said) if said else f"HTTP {status}"
    if kind is ErrorKind.INTERNAL:  # no code this client knows: the status says what it can
        kind = kind_for_status(status)
    backoff = headers.get("x-backoff-ms")
    return InferError(kind, message, retry_after_ms=int(backoff) if backoff else None)


def _connect_error(err: InferError, url: str, *, sent_key: bool) -> InferError:
    """A failed first call, said for people: a missing key from a wrong one, and a server
    that answers but is not an infertui host."""
    if err.kind is ErrorKind.UNAUTHORIZED:
        why = "it refused the API key given" if sent_key else "no API key was given"
        return InferError(ErrorKind.UNAUTHORIZED, why)
    if err.kind in (ErrorKind.NOT_FOUND, ErrorKind.METHOD_NOT_ALLOWED, ErrorKind.BAD_MESSAGE):
        return InferError(  # (another protocol than ours: no retry will change that)
            ErrorKind.UNSUPPORTED_VERSION,
            f"{url} answers, but not as an infertui host ({err.message} for /v1/host)",
        )
    return err


def error_from_exception(err: httpx.HTTPError, *, streaming: bool = False) -> InferError:
    if isinstance(err, httpx.TimeoutException):
        return InferError(ErrorKind.TIMEOUT_NO_RESPONSE, "the host did not answer in time")
    if isinstance(err, httpx.ConnectError):
        return _not_connected(err)
    if streaming:
        return InferError(ErrorKind.HOST_DISCONNECTED, "the host went away mid-reply")
    return InferError(ErrorKind.CONNECT_FAILED, str(err) or type(err).__name__)


def _check_url(url: str) -> None:
    """A URL no connection could use is said so before trying (a port past 65535 was a
    traceback from deep in the socket layer)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as err:
        raise InferError(ErrorKind.CONNECT_FAILED, f"{url} is not a usable URL ({err})") from None
    if not parsed.host:
        raise InferError(ErrorKind.CONNECT_FAILED, f"{url} names no host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise InferError(ErrorKind.CONNECT_FAILED, f"port {parsed.port} is not 1 to 65535")


def _not_connected(err: httpx.ConnectError) -> InferError:
    """Why a connection was not made, told apart: no such name, a TLS handshake with a
    server that speaks plain HTTP, or nobody listening."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, socket.gaierror | ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, socket.gaierror):
        return InferError(ErrorKind.CONNECT_FAILED, f"no host has that name ({cause.strerror})")
    if isinstance(cause, ssl.SSLError):
        plain = "WRONG_VERSION_NUMBER" in str(cause)
        why = "it answers in plain HTTP: use http://" if plain else str(cause)
        return InferError(ErrorKind.CONNECT_FAILED, f"no HTTPS connection ({why})")
    return InferError(ErrorKind.HOST_OFFLINE, f"nothing is listening there: {err}")


def _closed() -> InferError:
    """What a call on a connection already closed (the host went away) gets."""
    return InferError(ErrorKind.HOST_DISCONNECTED, "the connection to the host was closed")


class HttpReply(ChatReply):
    """Reads the SSE stream in its own task, so that abort() can end it even while the
    host has not sent a byte yet (the job still queued)."""

    def __init__(self, http: httpx.AsyncClient, body: dict[str, Any]) -> None:
        self._items: asyncio.Queue[Any] = asyncio.Queue()
        self._aborted = False
        self._finish: FinishReason = "stop"
        self._host_stopped: str | None = None
        self._usage: dict[str, Any] = {}
        self._model = ""
        self._reader = asyncio.create_task(self._read(http, body))

    async def _read(self, http: httpx.AsyncClient, body: dict[str, Any]) -> None:
        try:
            # no read timeout: a reply may wait in the host's queue for a long time
            timeout = httpx.Timeout(http.timeout.connect, read=None)
            stream = http.stream("POST", "/v1/chat/completions", json=body, timeout=timeout)
            async with stream as response:
                headers = response.headers
                self.request_id = headers.get("x-correlation-id") or headers.get("x-request-id", "")
                if response.status_code != 200:
                    raise error_from_response(
                        response.status_code, await response.aread(), response.headers
                    )
                async for batch in sse_batches(response):
                    for event in batch:
                        self._on_event(event)
            self._items.put_nowait(_DONE)
        except InferError as err:
            self._items.put_nowait(err)
        except httpx.HTTPError as err:
            self._items.put_nowait(error_from_exception(err, streaming=True))
        except RuntimeError:
            if not http.is_closed:
                raise
            self._items.put_nowait(_closed())

    def _on_event(self, event: dict[str, Any]) -> None:
        if "error" in event:
            error = event["error"]
            kind = kind_for_openai_code(error.get("code"))
            if kind is ErrorKind.ABORTED:  # the host cut the reply short: it ends as over P2P
                self._finish = "abort"
                self._host_stopped = str(error.get("message") or "")
                return
            raise InferError(kind, str(error.get("message") or "generation failed"))
        if event.get("usage"):
            self._usage = event["usage"]
        self._model = event.get("model") or self._model
        for choice in event.get("choices", ()):
            text = choice.get("delta", {}).get("content")
            if text:
                self._items.put_nowait(text)
            if choice.get("finish_reason"):
                self._finish = heard_finish(choice["finish_reason"])

    async def __aiter__(self) -> AsyncIterator[str]:
        sent = time.perf_counter()
        first = last = 0.0
        pieces = 0
        try:
            while True:
                item = await self._items.get()
                if isinstance(item, str):
                    last = time.perf_counter()
                    first = first or last
                    pieces += 1
                    yield item
                    continue
                if isinstance(item, InferError):
                    raise item
                break
        finally:
            self._stop_reading()
        tokens = int(self._usage.get("completion_tokens", pieces))
        self.stats = ChatStats(
            finish_reason="abort" if self._aborted else self._finish,
            tokens_in=self._usage.get("prompt_tokens"),
            tokens_out=tokens,
            ttft_ms=(first - sent) * 1000 if first else None,
            tokens_per_s=(tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0,
            model=self._model,
            host_stopped=None if self._aborted else self._host_stopped,
        )

    def abort(self) -> None:
        if not self._reader.done():
            self._aborted = True
            self._stop_reading()
            self._items.put_nowait(_DONE)

    def _stop_reading(self) -> None:
        """Cancel the reader once: its cancellation closes the connection, which is what the
        host acts on. A second cancel would interrupt that close and leave the socket open,
        and the host generating for nobody."""
        if not self._reader.done() and not self._reader.cancelling():
            self._reader.cancel()


class HttpHostClient(Client):
    """A host reached by URL, with an optional API key."""

    def __init__(self, http: httpx.AsyncClient, info: HostInfo) -> None:
        self._http = http
        self.info = info

    @classmethod
    async def connect(
        cls, url: str, *, api_key: str | None = None, connect_timeout: float = 10.0
    ) -> HttpHostClient:
        _check_url(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(connect_timeout),
        )
        try:
            data = await _get(http, "/v1/host")
        except InferError as err:
            await http.aclose()
            raise _connect_error(err, url, sent_key=bool(api_key)) from None
        except BaseException:
            await http.aclose()
            raise
        caps = data.get("capabilities", {})
        info = HostInfo(
            host_name=data.get("host_name", ""),
            model=data.get("model", ""),
            models=tuple(data.get("models", ())),
            status=data.get("status", ""),
            address=url,
            transport="http",
            admin=bool(caps.get("admin")),
            extra=caps,
        )
        return cls(http, info)

    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply:
        body = {
            # "default" (spec 004 wants a model): the host's default engine answers, whatever
            # its engines are by now
            "model": model or "default",
            "messages": [m.model_dump() for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            **{k: v for k, v in params.items() if v is not None},
        }
        return HttpReply(self._http, body)

    async def engines(self) -> list[EngineStatus]:
        listed = await _get(self._http, "/engines")
        return [
            EngineStatus.model_validate(await _get(self._http, f"/engines/{e['engine_id']}/status"))
            for e in listed.get("engines", ())
        ]

    async def library(self) -> list[LibraryEntry]:
        data = await _get(self._http, "/v1/host/library")
        return [LibraryEntry.model_validate(m) for m in data.get("models", ())]

    async def queue(self) -> list[QueueSnapshot]:
        data = await _get(self._http, "/v1/host/queue")
        return [QueueSnapshot.model_validate(q) for q in data.get("pools", ())]

    async def metrics(self) -> list[MetricsSnapshot]:
        data = await _get(self._http, "/v1/host/metrics")
        return [MetricsSnapshot.model_validate(m) for m in data.get("pools", ())]

    async def usage(self) -> UsageReport:
        return UsageReport.model_validate(await _get(self._http, "/v1/host/usage"))

    async def add_engine(self, request: AddEngineRequest) -> None:
        body = request.model_dump(exclude_unset=True)
        await _call(self._http, "POST", "/engines", body, slow=True)

    async def remove_engine(self, engine_id: str) -> None:
        await _call(self._http, "DELETE", f"/engines/{engine_id}")

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None:
        body = {"model_path": model_path} if model_path else {}
        await _call(self._http, "POST", f"/v1/pools/{engine_id}/reload", body, slow=True)

    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None:
        body = {"deadline_ms": deadline_ms}
        await _call(self._http, "POST", f"/v1/pools/{engine_id}/drain", body)

    async def resume_engine(self, engine_id: str) -> None:
        await _call(self._http, "POST", f"/v1/pools/{engine_id}/resume")

    async def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        try:
            async with self._http.stream(
                "POST", "/api/pull", json={"model": name}, timeout=httpx.Timeout(10, read=None)
            ) as response:
                if response.status_code >= 400:
                    body = await response.aread()
                    raise error_from_response(response.status_code, body, response.headers)
                async for line in response.aiter_lines():
                    event = json.loads(line) if line.strip() else {}
                    if "error" in event:  # after the 200, as Ollama says a failure
                        kind = str(event.get("kind"))
                        known = kind in ErrorKind._value2member_map_
                        said = ErrorKind(kind) if known else ErrorKind.CONNECT_FAILED
                        raise InferError(said, str(event["error"]))
                    if event:
                        yield event
        except httpx.HTTPError as err:
            raise error_from_exception(err) from None

    async def delete_model(self, name: str) -> None:
        await _ollama_call(self._http, "DELETE", "/api/delete", {"model": name})

    async def copy_model(self, source: str, destination: str) -> None:
        body = {"source": source, "destination": destination}
        await _ollama_call(self._http, "POST", "/api/copy", body)

    async def load_model(self, name: str) -> None:
        await _ollama_call(self._http, "POST", "/api/generate", {"model": name}, slow=True)

    async def unload_model(self, name: str) -> None:
        await _ollama_call(self._http, "POST", "/api/generate", {"model": name, "keep_alive": 0})

    async def wait_closed(self) -> None:
        """HTTP has no session: the host counts as gone when its health check fails."""
        while True:
            await asyncio.sleep(HEALTH_POLL_S)
            try:
                await _get(self._http, "/v1/health")
            except InferError as err:
                if err.kind in (ErrorKind.UNAUTHORIZED, ErrorKind.FORBIDDEN):
                    continue
                return

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._http.aclose()


async def _ollama_call(
    http: httpx.AsyncClient, method: str, path: str, body: dict[str, Any], *, slow: bool = False
) -> dict[str, Any]:
    """A call to Ollama's /api, whose errors say no kind: a 404 there is a model not found."""
    try:
        return await _call(http, method, path, body, slow=slow)
    except InferError as err:
        if err.kind is ErrorKind.NOT_FOUND:
            raise InferError(ErrorKind.MODEL_NOT_FOUND, err.message) from None
        raise


async def _get(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    return await _call(http, "GET", path)


async def _call(
    http: httpx.AsyncClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    slow: bool = False,
) -> dict[str, Any]:
    """One request; `slow` lifts the read timeout for calls as long as loading a model."""
    try:
        timeout = httpx.Timeout(http.timeout.connect, read=None) if slow else USE_CLIENT_DEFAULT
        response = await http.request(method, path, json=body, timeout=timeout)
    except httpx.HTTPError as err:
        raise error_from_exception(err) from None
    except RuntimeError:  # the connection was closed (the host went away) under a caller
        if not http.is_closed:
            raise
        raise _closed() from None
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.content, response.headers)
    try:
        data = response.json()
    except ValueError:
        raise InferError(ErrorKind.BAD_MESSAGE, f"not JSON (HTTP {response.status_code})") from None
    return data if isinstance(data, dict) else {}
