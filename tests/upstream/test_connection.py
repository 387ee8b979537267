"""The upstream hop's HTTP/1.1 client against small servers on 127.0.0.1 that answer in the
ways real ones do: chunked SSE cut at any byte, a Content-Length body, an idle connection
closed by the server, a reply broken off, a server that goes silent."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from infertui.core.engine.upstream.connection import UpstreamClient, UpstreamError
from infertui.core.protocol.sse_reader import sse_batches

from ..conftest import wait_until

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SSE = b'data: {"n": 1}\n\ndata: {"n": 2}\n\ndata: [DONE]\n\n'


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:]) if k}
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return lines[0], headers, body


def chunked(payload: bytes, size: int) -> bytes:
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def serve(handler: Handler) -> tuple[asyncio.Server, str]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/"


def client(url: str, silent_s: float = 5.0) -> UpstreamClient:
    return UpstreamClient(
        url, {"Authorization": "Bearer k"}, connect_s=2, silent_s=silent_s, keep=4
    )


@contextlib.asynccontextmanager
async def hop_to(handler: Handler, silent_s: float = 5.0) -> AsyncIterator[UpstreamClient]:
    """A client of a server running `handler`; both closed on the way out."""
    server, url = await serve(handler)
    hop = client(url, silent_s)
    try:
        yield hop
    finally:
        await hop.aclose()
        server.close()


async def objects(hop: UpstreamClient) -> list[dict[str, int]]:
    async with hop.stream("completions", {"prompt": "hi"}) as response:
        assert response.status_code == 200
        return [o async for batch in sse_batches(response) for o in batch]


async def test_chunked_sse_cut_at_every_byte_reads_whole_and_reuses_the_connection() -> None:
    connections: list[int] = []
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while not reader.at_eof():
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                break
            reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE, 7)
            for i in range(len(reply)):  # one byte per write: every boundary is met
                writer.write(reply[i : i + 1])
                await writer.drain()
        writer.close()

    async with hop_to(handler) as hop:
        await hop.connect(1)  # opened ahead, as bench/loadgen.py does
        assert await objects(hop) == [{"n": 1}, {"n": 2}]
        assert await objects(hop) == [{"n": 1}, {"n": 2}]
        assert len(connections) == 1, "both jobs went on the connection opened ahead"
        line, headers, body = seen[0]
        assert line == "POST /v1/completions HTTP/1.1"
        assert headers["authorization"] == "Bearer k" and json.loads(body) == {"prompt": "hi"}


async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        body = b'{"error": {"message": "busy"}}'
        writer.write(b"HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))  # fmt: skip
        await writer.drain()
        writer.close()  # keep-alive ends here, as a server's idle timeout would end it

    async with hop_to(handler) as hop:
        for _ in range(3):
            async with hop.stream("completions", {}) as response:
                await response.aread()
                assert response.status_code == 429 and response.headers["retry-after"] == "2"
                assert response.json()["error"]["message"] == "busy"
            await asyncio.sleep(0.05)
        assert connections == 3


async def test_a_reply_broken_off_or_a_silent_server_is_a_hop_error() -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:")
        await writer.drain()
        writer.close()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read(1)  # until the client gives up

    for handler, message in ((broken, "mid-reply"), (silent, "sent nothing")):
        async with hop_to(handler, silent_s=0.3) as hop:
            with pytest.raises(UpstreamError, match=message):
                await objects(hop)


async def test_nothing_listening_is_a_hop_error() -> None:
    server, url = await serve(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError, match="cannot connect"):
        await objects(client(url))


@pytest.mark.parametrize(
    "sent",
    [
        # mid-reply: a stream that goes on (no last chunk)
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(b'data: {"n": 1}\n\n', 64)[:-5],
        # before the reply begins: a server that answers only once its prompt is read (or a
        # proxy in front of one), with the client waiting for the status line
        b"",
    ],
    ids=["mid-reply", "before-the-reply"],
)
async def test_a_cancelled_job_closes_its_connection(sent: bytes) -> None:
    """The server must see the disconnect, and the socket must not outlive the job."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(sent)
        await writer.drain()
        if not await reader.read(1):  # the client went away
            closed.set()

    async with hop_to(handler) as hop:
        task = asyncio.create_task(objects(hop))
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.wait_for(closed.wait(), 5)


async def test_a_malformed_chunk_is_a_hop_error_not_a_hang() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nabcdef\r\n")
        await writer.drain()
        await reader.read(1)

    async with hop_to(handler) as hop:
        with pytest.raises(UpstreamError, match="malformed chunk"):
            await asyncio.wait_for(objects(hop), 5)


async def test_a_warm_client_keeps_open_what_it_needed_and_lets_go_when_unused() -> None:
    """While in use, as many connections stay open as were in flight at once, each replaced
    before the server's keep-alive would close it; so a burst after a pause opens none. Once
    `warm_s` passes without a request, they are closed."""
    accepted = 0
    open_now = 0
    all_in = asyncio.Event()
    in_flight = 0
    served_on: list[int] = []  # the number of the connection each request came on

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted, open_now, in_flight
        accepted += 1
        number = accepted
        open_now += 1
        try:
            while True:
                # keep-alive: an idle connection is closed after 2 s (uvicorn: 5 s); the
                # client replaces them every 0.3 s, well before, even on a loaded box
                try:
                    await asyncio.wait_for(read_request(reader), 2.0)
                except (TimeoutError, asyncio.IncompleteReadError):
                    return
                served_on.append(number)
                in_flight += 1
                if in_flight == 3:
                    all_in.set()
                await asyncio.wait_for(all_in.wait(), 5)  # three at once
                reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE, 64)
                writer.write(reply)
                await writer.drain()
        finally:
            open_now -= 1

    server, url = await serve(handler)
    hop = UpstreamClient(url, {}, connect_s=2, silent_s=5, keep=8, warm_s=1.5, refresh_s=0.3)
    try:
        await asyncio.gather(*(objects(hop) for _ in range(3)))
        assert accepted == 3
        await asyncio.sleep(1.0)  # past refresh_s: all were replaced meanwhile
        assert accepted > 3
        await wait_until(lambda: hop.idle == 3)  # not caught between opening and closing
        connect, opened_by = hop._connect, []  # which task opens each connection from here

        async def spied() -> object:
            opened_by.append(asyncio.current_task())
            return await connect()

        hop._connect = spied  # type: ignore[method-assign]
        assert await objects(hop) == [{"n": 1}, {"n": 2}]
        assert served_on[-1] > 3, "it went on a replacement of the first three"
        assert asyncio.current_task() not in opened_by, "the request opened no connection"
        await asyncio.sleep(1.5)  # warm_s without a request
        await wait_until(lambda: hop.idle == 0 and open_now == 0)  # the server saw them close
    finally:
        await hop.aclose()
        server.close()


async def test_send_now_writes_at_once_and_stream_reads_its_reply() -> None:
    """`send_now` writes before any task runs (a burst's requests leave as they are read);
    `stream` then reads that reply. Given up, the server sees the connection close. With no
    idle connection at hand it sends nothing: `stream` opens one."""
    got: list[bytes] = []
    left = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                _, _, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                left.set()
                return
            got.append(body)
            if body == b'{"prompt": "given up"}':
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE, 9))
            await writer.drain()

    async with hop_to(handler) as hop:
        assert hop.send_now("completions", {"prompt": "early"}) is None  # nothing idle yet
        await hop.connect(2)
        sent = hop.send_now("completions", {"prompt": "early"})
        assert sent is not None
        await wait_until(lambda: got == [b'{"prompt": "early"}'])  # no stream() yet
        async with hop.stream("completions", {"prompt": "early"}, sent) as response:
            batches = [o async for batch in sse_batches(response) for o in batch]
        assert batches == [{"n": 1}, {"n": 2}] and len(got) == 1, "sent once, read once"
        given_up = hop.send_now("completions", {"prompt": "given up"})
        assert given_up is not None
        given_up.close()
        await asyncio.wait_for(left.wait(), 5)
