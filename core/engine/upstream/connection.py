"""The upstream engine's lean HTTP/1.1 client: one streamed POST per job, over kept-alive
connections.

httpx's pool looks at every idle connection (a poll syscall each) on every request, and its
stream reading goes through several layers: in a burst, that held the jobs apart on their way
to the upstream (bench/README.md, "Figures behind the code"). Here a request is one write on an
idle connection, the reply is read with asyncio's own buffers (all that one read from the
network brings, at once), and a connection goes back to the pool only when its
reply was read whole; a cancelled job's connection is closed, which the server sees.

A client made with `warm_s` keeps its connections open while it is in use: as many as it has
needed at once, for `warm_s` after its last request, each replaced before the server's
keep-alive would close it: opening them all when a burst comes after a pause delays the
upstream's first step.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

READ_SIZE = 1 << 16
# A connection idle longer than this is not used again: a NAT or a load balancer may have
# forgotten it without a word, and a request sent on it would vanish (httpx's rule too).
IDLE_S = 5.0
# A warm client replaces an idle connection this old, before a server's keep-alive (uvicorn's
# and vLLM's: 5 s) closes it.
REFRESH_S = 4.0


class UpstreamError(Exception):
    """The server could not be reached, went silent, or broke off the exchange. The message
    is what the server did, in words that follow its name ("closed the connection mid-reply"),
    for the sentence the caller makes about it."""


def os_reason(exc: BaseException) -> str:
    """Why a connection failed in the system's words ("connection refused"), found down the
    exception's causes: asyncio and httpx wrap the OS error in their own, and asyncio's own
    words name no reason ("Connect call failed")."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return f"unknown host: {cause.strerror}"
        if isinstance(cause, ssl.SSLError):  # its errno is TLS's, not the system's
            return f"TLS: {cause.reason or cause}"
        if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "no reason given"


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @property
    def closed(self) -> bool:
        """The server closed it, or we began to."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class HopResponse:
    """A reply whose body is read as it arrives (`aiter_text`) or whole (`aread`)."""

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        connection: _Connection,
        silent_s: float,
        http11: bool = True,
    ) -> None:
        self.status_code = status
        self.http11 = http11  # an HTTP/1.0 server closes after each reply
        self.headers = headers  # names in lower case
        self.complete = False  # the body was read to its end: the connection can serve again
        self.content = b""
        self._connection = connection
        self._silent_s = silent_s

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and self.http11
            and "close" not in self.headers.get("connection", "").lower()
        )

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    async def aread(self) -> bytes:
        self.content = b"".join([part async for part in self.aiter_bytes()])
        return self.content

    async def aiter_text(self) -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for part in self.aiter_bytes():
            if text := decoder.decode(part):
                yield text
        if tail := decoder.decode(b"", final=True):
            yield tail

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        headers = self.headers
        if "chunked" in headers.get("transfer-encoding", "").lower():
            async for part in self._chunked():
                yield part
            return
        length = headers.get("content-length")
        left = int(length) if length is not None else -1  # -1: until the server closes
        while left != 0:
            data = await self._read()
            if not data:
                if left > 0:
                    raise UpstreamError("closed the connection mid-reply")
                break
            left = max(0, left - len(data)) if left > 0 else left
            yield data
        self.complete = left == 0

    async def _chunked(self) -> AsyncIterator[bytes]:
        """The chunked body's data: each network read yields the chunks it completed."""
        buffer = b""
        while True:
            parts, at = [], 0
            while (eol := buffer.find(b"\r\n", at)) >= 0:
                size = _chunk_size(buffer[at:eol])
                if size == 0:  # the last chunk, then trailers (if any) and an empty line
                    if buffer.find(b"\r\n", eol + 2) == eol + 2 or (
                        buffer.find(b"\r\n\r\n", eol) >= 0
                    ):
                        self.complete = True
                    break
                end = eol + 2 + size
                if len(buffer) < end + 2:
                    break
                if buffer[end : end + 2] != b"\r\n":
                    raise UpstreamError("sent a malformed chunk")
                parts.append(buffer[eol + 2 : end])
                at = end + 2
            buffer = buffer[at:]
            if parts:
                yield b"".join(parts)
            if self.complete:
                return
            data = await self._read()
            if not data:
                raise UpstreamError("closed the connection mid-reply")
            buffer += data

    async def _read(self) -> bytes:
        try:
            async with asyncio.timeout(self._silent_s):
                return await self._connection.reader.read(READ_SIZE)
        except TimeoutError:
            raise UpstreamError(f"sent nothing for {self._silent_s:.0f} s") from None
        except OSError as exc:
            raise UpstreamError(f"broke off the exchange ({os_reason(exc)})") from None


class UpstreamClient:
    """Streamed POSTs to one server (`base_url`), with up to `keep` idle connections kept."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        silent_s: float,
        keep: int,
        warm_s: float = 0.0,
        refresh_s: float = REFRESH_S,
    ) -> None:
        url = urlsplit(base_url)
        self._tls = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._tls else 80)
        self._base = url.path.rstrip("/") + "/"
        host = self._host if ":" not in self._host else f"[{self._host}]"
        authority = host if url.port is None else f"{host}:{self._port}"
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._head = f"Host: {authority}\r\nAccept: text/event-stream\r\n{extra}"
        self._connect_s, self._silent_s, self._keep = connect_s, silent_s, keep
        self._tls_context = ssl.create_default_context() if self._tls else None
        self._idle: list[tuple[float, _Connection]] = []  # (when it fell idle, connection)
        self._closed = False
        self._warm_s, self._refresh_s = warm_s, refresh_s
        self._in_flight = 0
        self._wanted = 0  # most requests in flight at once while warm
        self._last_request = 0.0
        self._keeper: asyncio.Task[None] | None = None

    @property
    def idle(self) -> int:
        """Open connections waiting for a request."""
        return len(self._idle)

    def send_now(self, path: str, body: Any) -> Sent | None:
        """Write the request at once on an idle connection, before the caller's task runs, so
        that a burst's requests leave one by one as they are read, not all after the last (a
        task waits for every callback queued before it). None where no idle connection is at
        hand: `stream` opens one. Pass what this returns to `stream`, or close it."""
        request = self._request(path, body)
        while self._idle:
            connection = self._fresh_idle()
            if connection is not None:
                try:
                    connection.writer.write(request)
                except BaseException:
                    connection.close()
                    raise
                return Sent(request, connection)
        return None

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, body: Any, sent: Sent | None = None
    ) -> AsyncIterator[HopResponse]:
        """POST `body` as JSON to `path` (under the base URL), or read the reply to what
        `send_now` sent (then `path` and `body` are not used); the reply's status and headers
        are read, its body is read by the caller."""
        if sent is not None:
            sent.taken = True
        request = sent.request if sent is not None else self._request(path, body)
        self._in_flight += 1
        self._wanted = max(self._wanted, self._in_flight)
        self._last_request = time.monotonic()
        if self._warm_s and self._keeper is None and not self._closed:
            self._keeper = asyncio.create_task(self._keep_warm())
        try:
            response = await self._exchange(request, sent)
            try:
                yield response
            finally:
                connection = response._connection
                if response.reusable and not self._closed and len(self._idle) < self._keep:
                    self._idle.append((time.monotonic(), connection))
                else:
                    connection.close()
        finally:
            self._in_flight -= 1

    async def connect(self, n: int) -> None:
        """Open connections ahead of a burst, up to `n` idle ones (at most `keep`), so that
        each of its requests goes out in one write."""
        cap = min(n, self._keep)
        await asyncio.gather(*(self._open_idle(cap) for _ in range(cap - len(self._idle))))

    async def aclose(self) -> None:
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()

    async def _keep_warm(self) -> None:
        """While requests come (one within `warm_s`, or one in flight): keep as many idle
        connections as were in flight at once, each replaced before it grows old (the new one
        is open before the old one closes, so there is no gap), and drop those the server
        closed. Then let them all go."""
        tick = min(1.0, self._refresh_s / 4)
        try:
            while not self._closed:
                await asyncio.sleep(tick)
                now = time.monotonic()
                if now - self._last_request > self._warm_s and not self._in_flight:
                    break
                closed = [c for _, c in self._idle if c.closed]
                old = [c for t, c in self._idle if now - t > self._refresh_s and not c.closed]
                self._drop(closed)
                wanted = min(self._wanted, self._keep) - self._in_flight
                missing = wanted - len(self._idle) + len(old)
                if missing > 0:  # a failure (the server is down) is tried again next tick
                    cap = self._keep + len(old)  # the old ones go once these are open
                    await asyncio.gather(
                        *(self._open_idle(cap) for _ in range(missing)), return_exceptions=True
                    )
                self._drop(old)
        finally:
            self._wanted = 0
            self._drop([c for _, c in self._idle])
            self._keeper = None

    def _drop(self, connections: list[_Connection]) -> None:
        """Close these idle connections (those a request took meanwhile are its own)."""
        gone = set(map(id, connections))
        for _, connection in self._idle:
            if id(connection) in gone:
                connection.close()
        self._idle = [(t, c) for t, c in self._idle if id(c) not in gone]

    async def _open_idle(self, cap: int) -> None:
        """Open one more idle connection, unless `cap` are idle by the time it is open."""
        connection = await self._connect()
        if self._closed or len(self._idle) >= cap:
            connection.close()
        else:
            self._idle.append((time.monotonic(), connection))

    def _request(self, path: str, body: Any) -> bytes:
        payload = json.dumps(body).encode()
        return (
            f"POST {self._base}{path} HTTP/1.1\r\n{self._head}"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload

    def _fresh_idle(self) -> _Connection | None:
        """The latest idle connection, or None (and it closed) where it is too old or the
        server closed it."""
        idle_since, connection = self._idle.pop()
        if time.monotonic() - idle_since > IDLE_S or connection.closed:
            connection.close()
            return None
        return connection

    async def _exchange(self, request: bytes, sent: Sent | None = None) -> HopResponse:
        """Send on an idle connection, else a new one (or read the reply to what `send_now`
        sent). One the server closed while idle fails before any reply byte: the request goes
        again, on the next one or a new one."""
        if sent is not None:
            try:
                return await self._reply(sent.connection)
            except _Stale:
                sent.close()
        while self._idle:
            connection = self._fresh_idle()
            if connection is None:
                continue
            try:
                connection.writer.write(request)
                return await self._reply(connection)
            except _Stale:
                connection.close()
        try:
            connection = await self._connect()
            connection.writer.write(request)
            return await self._reply(connection)
        except _Stale:
            raise UpstreamError("closed the connection without a reply") from None

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self._connect_s):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=self._tls_context, limit=READ_SIZE
                )
        except TimeoutError:
            raise UpstreamError(
                f"cannot be reached (no connection within {self._connect_s:.0f} s)"
            ) from None
        except OSError as exc:
            raise UpstreamError(f"cannot be reached (cannot connect: {os_reason(exc)})") from None
        return _Connection(reader, writer)

    async def _reply(self, connection: _Connection) -> HopResponse:
        """The status line and headers of the reply to the request written on `connection`."""
        try:
            async with asyncio.timeout(self._silent_s):
                head = await connection.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            connection.close()
            if not exc.partial:
                raise _Stale from None
            raise UpstreamError("broke off its reply's headers") from None
        except TimeoutError:
            connection.close()
            raise UpstreamError(f"sent nothing for {self._silent_s:.0f} s") from None
        except (OSError, asyncio.LimitOverrunError) as exc:
            connection.close()
            if isinstance(exc, ConnectionResetError | BrokenPipeError):
                raise _Stale from None
            raise UpstreamError(f"broke off the exchange ({os_reason(exc)})") from None
        except BaseException:  # cancelled while the server prepares its reply: it must see
            connection.close()  # the disconnect, and the socket must not outlive the job
            raise
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            connection.close()
            raise UpstreamError(
                f"sent something that is not an HTTP reply: {lines[0][:80]!r}"
            ) from None
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        http11 = lines[0].startswith("HTTP/1.1")
        return HopResponse(status, headers, connection, self._silent_s, http11)


def _chunk_size(line: bytes) -> int:
    digits = line.split(b";")[0].strip()
    if not digits or not all(c in b"0123456789abcdefABCDEF" for c in digits):
        raise UpstreamError(f"sent a malformed chunk size: {line[:20]!r}")
    return int(digits, 16)


class Sent:
    """A request `send_now` wrote, whose reply `stream` reads."""

    __slots__ = ("connection", "request", "taken")

    def __init__(self, request: bytes, connection: _Connection) -> None:
        self.request, self.connection = request, connection
        self.taken = False  # `stream` owns it from here: it reads the reply or closes it

    def close(self) -> None:
        """Give it up: the server sees the connection close."""
        self.connection.close()


class _Stale(Exception):
    """The connection was closed by the server before it answered: safe to send again."""
