"""Cross-cutting HTTP concerns as plain ASGI middleware (streams included):
correlation IDs (OC-CTRL-2052) and the optional Bearer API key."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...logging import correlation_id
from ...protocol.errors import ErrorKind, InferError
from .access import Access
from .dialects import dialect_of, error_response, is_health
from .errors import crash_response

log = logging.getLogger(__name__)

HEADER = "x-correlation-id"


class CorrelationMiddleware:
    """Echo X-Correlation-Id (or a new UUIDv4) on every response that has a body, and make it
    the correlation ID of every log line the request causes. A crash's 500 is answered here
    too: Starlette's server-error middleware, outside this one, would send it without the
    ID (the error is raised on, for the server to log)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(HEADER.encode())
        cid = given.decode("latin-1")[:128] if given else str(uuid.uuid4())
        scope.setdefault("state", {})["correlation_id"] = cid
        token = correlation_id.set(cid)

        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] != 204:
                    headers = [
                        (k, v) for k, v in message.get("headers", []) if k != HEADER.encode()
                    ]
                    headers.append((HEADER.encode(), cid.encode("latin-1")))
                    limits = scope["state"].get("rate_headers") or {}  # set by deps.queue_job
                    headers += [(k.encode(), v.encode()) for k, v in limits.items()]
                    message["headers"] = headers
            await send(message)

        try:
            log.debug("%s %s", scope["method"], scope["path"])
            await self.app(scope, receive, send_with_id)
        except Exception as err:
            if not started:
                response = crash_response(scope["method"], scope["path"], err)
                await response(scope, receive, send_with_id)
            raise
        finally:
            correlation_id.reset(token)


class ApiKeyMiddleware:
    """With API keys set, every endpoint but the health ones needs `Authorization: Bearer
    <key>` (an API key or the admin key); a refusal is a 401 in the endpoint's own error
    shape. Keys are never logged."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or is_health(path):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if self.access.accepts(given):
            await self.app(scope, receive, send)
            return
        reason = "missing" if not given else "invalid"
        log.info("refused %s %s: %s API key", scope["method"], path, reason)
        err = InferError(
            ErrorKind.UNAUTHORIZED, f"{reason} API key: send Authorization: Bearer <key>"
        )
        await error_response(err, dialect_of(path))(scope, receive, send)


class BodyLimitMiddleware:
    """A request whose Content-Length is over the limit is answered 413 in its endpoint's
    error shape before a byte of it is read; a body without a length is cut off as soon as it
    passes the limit, and a body whose next piece takes longer than `timeout_s` ends in a 408
    (the route's body read raises either, and the error handlers answer)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            err = InferError(
                ErrorKind.PAYLOAD_TOO_LARGE,
                f"the request body ({int(length):,} bytes) is over the host's limit of "
                f"{self.max_bytes:,} bytes",
            )
            await error_response(err, dialect_of(scope.get("path", "")))(scope, receive, send)
            return
        received, body_done = 0, False

        async def limited() -> Message:
            nonlocal received, body_done
            if body_done:  # from here on the next message is the client leaving: no deadline
                return await receive()
            try:  # a timeout scope, not wait_for: no task of its own per read
                async with asyncio.timeout(self.timeout_s):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408) from None  # FastAPI hands these to the handlers
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    raise HTTPException(413)
            return message

        await self.app(scope, limited, send)


_SCRIPT_TYPES = (b"", b"application/x-www-form-urlencoded", b"text/plain")
_BROWSER_HEADERS = (b"origin", b"sec-fetch-site")


class ScriptBodiesMiddleware:
    """A body a script sent without saying JSON is read as JSON, as Ollama reads it: its API
    documents `curl URL -d '{...}'`, which sends a form's Content-Type. A browser's request
    is not: a web page may post a form or text/plain to a host on localhost without a CORS
    preflight, and must not drive it that way (routing.py refuses those). Browsers say where
    a request comes from (Origin, Sec-Fetch-Site); curl, SDKs and scripts do not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            headers: list[tuple[bytes, bytes]] = scope["headers"]
            kind = next((v for k, v in headers if k == b"content-type"), b"")
            media = kind.split(b";", 1)[0].strip().lower()
            if media in _SCRIPT_TYPES and not any(k in _BROWSER_HEADERS for k, _ in headers):
                typed = [(k, v) for k, v in headers if k != b"content-type"]
                scope = {**scope, "headers": [*typed, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class LoopbackHostsMiddleware:
    """A host on a loopback address with no API key trusts whoever reaches it: users of this
    machine. A web page can reach it too, by DNS rebinding: it points a name of its own at
    127.0.0.1 and is then same-origin with the host (Ollama's CVE-2024-28224). Its requests
    name that name in `Host`, so only loopback names (and `allowed_hosts`) are answered."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = LOOPBACK_NAMES | {name.lower() for name in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"host"), None)
            name = _host_name(given.decode("latin-1")) if given is not None else None
            if name is not None and name not in self.allowed and not name.startswith("127."):
                path = scope.get("path", "")
                log.info("refused %s %s: Host %s is not a loopback name", scope["method"], path,
                         name)  # fmt: skip
                err = InferError(
                    ErrorKind.FORBIDDEN,
                    f"this host answers requests for localhost only, not for {name!r}; a proxy "
                    "or a name of your own goes in [host.http] allowed_hosts",
                )
                await error_response(err, dialect_of(path))(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _host_name(host: str) -> str:
    """`name`, `name:port`, `[v6]:port` or `v6` as a lower-case name without its port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


class HeadMiddleware:
    """HEAD on a GET route answers as GET does, status and headers, without the body, as
    Starlette's own routes and Ollama's do (clients check liveness with `HEAD /`); FastAPI's
    routes would answer 405. A streamed body is not waited for: once the head is out, the
    route is told the client left."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        started = False

        async def head_only(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def until_the_head() -> Message:
            if started:
                return {"type": "http.disconnect"}
            return await receive()

        await self.app({**scope, "method": "GET"}, until_the_head, head_only)


# What a browser client may send: Ollama's list (its own clients and OpenAI's JavaScript SDK,
# whose x-stainless-* headers a page sends too), and the correlation ID (OC-CTRL-2070).
_CORS_HEADERS = [
    "Authorization", "Content-Type", "User-Agent", "Accept", "X-Requested-With",
    "X-Correlation-Id", "OpenAI-Beta", "x-stainless-arch", "x-stainless-async",
    "x-stainless-custom-poll-interval", "x-stainless-helper-method", "x-stainless-lang",
    "x-stainless-os", "x-stainless-package-version", "x-stainless-poll-helper",
    "x-stainless-retry-count", "x-stainless-runtime", "x-stainless-runtime-version",
    "x-stainless-timeout",
]  # fmt: skip


def cors_options(origins: Sequence[str]) -> dict[str, Any]:
    """CORSMiddleware's options for `http.cors_origins`, read as OLLAMA_ORIGINS is: an origin,
    `*` for any, or a pattern with `*` in it (`http://localhost:*`, `chrome-extension://*`)."""
    exact = [origin for origin in origins if "*" not in origin]
    patterns = [origin for origin in origins if "*" in origin and origin != "*"]
    regex = "|".join(re.escape(p).replace(r"\*", ".*") for p in patterns) or None
    return {
        "allow_origins": ["*"] if "*" in origins else exact,
        "allow_origin_regex": regex,
        "allow_methods": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        "allow_headers": _CORS_HEADERS,
        "expose_headers": ["X-Correlation-Id", "Retry-After", "X-Backoff-Ms"],
        "max_age": 600,
    }


class Cors(CORSMiddleware):
    """Starlette's CORS, with a preflight it allows answered 204 and no body, as Ollama's."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 200:
            return response
        kept = {k: v for k, v in response.headers.items() if k not in ("content-length",
                                                                      "content-type")}  # fmt: skip
        return Response(status_code=204, headers=kept)
