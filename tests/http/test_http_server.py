"""The HTTP face's own server (core/transport/http/server.py), on a bare app: what every
connection it accepts is set up with, whatever the routes."""

from __future__ import annotations

import asyncio
import socket

from fastapi import FastAPI

from infertui.core.transport.http import HttpServer


async def test_accepted_connections_send_small_writes_at_once() -> None:
    """TCP_NODELAY on every accepted socket. Without it, Nagle's algorithm held each reply's
    second write (a body after its head, an SSE chunk after the last) until the client
    acknowledged the first: a keep-alive client waited its delayed ACK, 40 ms, per reply."""
    server = HttpServer(FastAPI(), "127.0.0.1:0")
    server.reserve()  # the port is bound before the engines load, then served
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert server._server is not None
        accepted = [
            c.transport.get_extra_info("socket") for c in server._server.server_state.connections
        ]
        assert len(accepted) == 1
        assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        writer.close()
        await writer.wait_closed()
        await server.stop()
