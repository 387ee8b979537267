"""HttpServer: uvicorn inside the host's own event loop, without its signals or logging setup."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ...config import HttpSettings
from ...protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)


class _EmbeddedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the host owns SIGINT/SIGTERM and stops us itself

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class _HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, plus a deadline for the first request head: a connection
    that has not sent one in full by then (a slow-header attack, an idle socket) is closed.
    Between requests, uvicorn's keep-alive timeout does the same."""

    head_timeout_s = 10.0  # set per server by a subclass (see HttpServer.start)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_due)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()  # do not keep a closed connection alive until the deadline
        super().connection_lost(exc)

    def _head_due(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            log.info("closing a connection from %s: no request head in time", self.client)
            self.transport.close()


def parse_listen(value: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[V6]:PORT`; the host defaults to 127.0.0.1."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        hint = "" if sep else f" (PORT or HOST:PORT, e.g. {value}:8080)"  # `--http 0.0.0.0`
        raise InferError(ErrorKind.INVALID_PARAMS, f"not a port: '{value}'{hint}") from None
    if not 0 <= number <= 65535:
        raise InferError(ErrorKind.INVALID_PARAMS, f"port out of range: {number}")
    return host, number


def is_loopback(listen: str) -> bool:
    """Whether `--http` binds only this machine's loopback (engine management is open there
    without an admin key). A name is bound as given, so only `localhost` counts."""
    host, _ = parse_listen(listen)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """Serves an app on HOST:PORT until stop()."""

    name = "http"

    def __init__(
        self, app: FastAPI, listen: str = "127.0.0.1:8080", limits: HttpSettings | None = None
    ) -> None:
        self.app = app
        self.host, self.port = parse_listen(listen)
        self.limits = limits or HttpSettings()
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    def reserve(self) -> None:
        """Bind the port now: in use, it is said before a model has loaded for minutes."""
        if self._socket is not None:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets that say
        # so, and without it Nagle held every keep-alive reply's second write for the
        # client's delayed ACK (40 ms a reply)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"cannot listen on {self.host}:{self.port}: {exc.strerror}",
            ) from None
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._socket = sock

    async def start(self) -> None:
        self.reserve()
        sock = self._socket
        assert sock is not None
        sock.listen(1024)  # connections wait from here on, not while the models load
        protocol = type(
            "HeadDeadline", (_HeadDeadline,), {"head_timeout_s": self.limits.header_timeout_s}
        )
        config = uvicorn.Config(
            self.app,
            http=protocol,
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=self.limits.keep_alive_s,
            limit_concurrency=self.limits.max_connections,
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="http-server")
        ready = asyncio.create_task(self._server.ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._task.done():
            self._task.result()  # startup failed: raise its error
        log.info("HTTP API listening on %s", self.url)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def describe(self) -> str:
        return self.url

    def status(self) -> str:
        return "listening" if self._server is not None else "stopped"

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            if self._socket is not None:  # reserved, never served (a model failed to load)
                self._socket.close()
                self._socket = None
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._server = None
        self._socket = None  # closed with the server
