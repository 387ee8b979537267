"""A lean HTTP/1.1 client for the upstream hop: one streamed POST per job, over kept-alive
connections.

httpx's pool looks at every idle connection (a poll syscall each) on every request, and its
stream reading goes through several layers: a burst of 32 jobs spent a third of the front's
event loop there, and so reached the upstream tens of milliseconds apart. Here a request is
one write on an idle connection, the reply is read with asyncio's own buffers (all that one
read from the network brings, at once), and a connection goes back to the pool only when its
reply was read whole; a cancelled job's connection is closed, which the server sees.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

READ_SIZE = 1 << 16


class HopError(Exception):
    """The server could not be reached, went silent, or broke off the exchange."""


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class HopResponse:
    """A reply whose body is read as it arrives (`aiter_text`) or whole (`aread`)."""

    def __init__(
        self, status: int, headers: dict[str, str], connection: _Connection, silent_s: float
    ) -> None:
        self.status_code = status
        self.headers = headers  # names in lower case
        self.complete = False  # the body was read to its end: the connection can serve again
        self.content = b""
        self._connection = connection
        self._silent_s = silent_s

    @property
    def reusable(self) -> bool:
        return self.complete and self.headers.get("connection", "").lower() != "close"

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
                    raise HopError("the server closed the connection mid-reply")
                break
            left = max(0, left - len(data)) if left > 0 else left
            yield data
        self.complete = left == 0

    async def _chunked(self) -> AsyncIterator[bytes]:
        """The chunked body's data: each network read yields the chunks it completed."""
        buffer = b""
        while True:
            parts = []
            while (eol := buffer.find(b"\r\n")) >= 0:
                size = int(buffer[:eol].split(b";")[0], 16)
                if size == 0:  # the last chunk, then trailers (if any) and an empty line
                    if buffer[eol + 2 : eol + 4] == b"\r\n" or buffer.find(b"\r\n\r\n", eol) >= 0:
                        self.complete = True
                    break
                end = eol + 2 + size
                if len(buffer) < end + 2:
                    break
                parts.append(buffer[eol + 2 : end])
                buffer = buffer[end + 2 :]
            if parts:
                yield b"".join(parts)
            if self.complete:
                return
            data = await self._read()
            if not data:
                raise HopError("the server closed the connection mid-reply")
            buffer += data

    async def _read(self) -> bytes:
        try:
            async with asyncio.timeout(self._silent_s):
                return await self._connection.reader.read(READ_SIZE)
        except TimeoutError:
            raise HopError(f"the server sent nothing for {self._silent_s:.0f} s") from None
        except OSError as exc:
            raise HopError(f"the connection broke: {exc}") from None


class HopClient:
    """Streamed POSTs to one server (`base_url`), with up to `keep` idle connections kept."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        silent_s: float,
        keep: int,
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
        self._idle: list[_Connection] = []
        self._closed = False

    @contextlib.asynccontextmanager
    async def stream(self, path: str, body: Any) -> AsyncIterator[HopResponse]:
        """POST `body` as JSON to `path` (under the base URL); the reply's status and headers
        are read, its body is read by the caller."""
        payload = json.dumps(body).encode()
        request = (
            f"POST {self._base}{path} HTTP/1.1\r\n{self._head}"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
        response = await self._exchange(request)
        try:
            yield response
        finally:
            connection = response._connection
            if response.reusable and not self._closed and len(self._idle) < self._keep:
                self._idle.append(connection)
            else:
                connection.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _exchange(self, request: bytes) -> HopResponse:
        """Send on an idle connection, else a new one. One the server closed while idle fails
        before any reply: the request goes again, once, on a new connection."""
        while self._idle:
            connection = self._idle.pop()
            if connection.reader.at_eof() or connection.writer.is_closing():
                connection.close()
                continue
            try:
                return await self._send(connection, request)
            except _Stale:
                connection.close()
        try:
            return await self._send(await self._connect(), request)
        except _Stale:
            raise HopError("the server closed the connection without a reply") from None

    async def _connect(self) -> _Connection:
        context = ssl.create_default_context() if self._tls else None
        try:
            async with asyncio.timeout(self._connect_s):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=context, limit=READ_SIZE
                )
        except TimeoutError:
            raise HopError(f"no connection within {self._connect_s:.0f} s") from None
        except OSError as exc:
            raise HopError(f"cannot connect: {exc.strerror or exc}") from None
        return _Connection(reader, writer)

    async def _send(self, connection: _Connection, request: bytes) -> HopResponse:
        try:
            connection.writer.write(request)
            async with asyncio.timeout(self._silent_s):
                head = await connection.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            connection.close()
            if not exc.partial:
                raise _Stale from None
            raise HopError("the server broke off its reply's headers") from None
        except TimeoutError:
            connection.close()
            raise HopError(f"the server sent nothing for {self._silent_s:.0f} s") from None
        except (OSError, asyncio.LimitOverrunError) as exc:
            connection.close()
            if isinstance(exc, ConnectionResetError | BrokenPipeError):
                raise _Stale from None
            raise HopError(f"the connection broke: {exc}") from None
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            connection.close()
            raise HopError(f"not an HTTP reply: {lines[0][:80]!r}") from None
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        return HopResponse(status, headers, connection, self._silent_s)


class _Stale(Exception):
    """The connection was closed by the server before it answered: safe to send again."""
