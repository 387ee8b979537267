"""A small OpenAI-compatible server on 127.0.0.1 for upstream tests that need no model: it
lists one model and answers each job as a real server does, until told to break off, hang or
go away."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any


class FakeUpstream:
    """Lists `entry` as its one model; a job's reply is one piece of text then, as `reply`
    says: "whole" (the end and [DONE]), "break" (the connection closed mid-reply), or
    "hang" (nothing more until the client leaves)."""

    def __init__(self, entry: dict[str, Any], reply: str = "whole") -> None:
        self.entry, self.reply = entry, reply
        self.server: asyncio.Server | None = None
        self.url = ""
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self._open:  # a process that dies closes its connections too
                writer.close()
            await self.server.wait_closed()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = re.search(r"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            if head.startswith("GET ") and "/models" in head.split("\r\n")[0]:
                body = json.dumps({"object": "list", "data": [self.entry]}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                return
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            writer.write(_chunk({"choices": [{"index": 0, "text": "Hel"}]}))
            await writer.drain()
            if self.reply == "hang":
                await reader.read()  # until the client closes its stream
            elif self.reply == "whole":
                writer.write(
                    _chunk({"choices": [{"index": 0, "text": "lo", "finish_reason": "stop"}]})
                )
                writer.write(_chunk(b"[DONE]") + b"0\r\n\r\n")
                await writer.drain()
            # "break": the connection closes here, before the reply's end
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()


def _chunk(event: object) -> bytes:
    data = event if isinstance(event, bytes) else json.dumps(event).encode()
    line = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(line), line)
