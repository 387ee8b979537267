"""An OpenAI-compatible server that answers at once: for measuring what a hop in front of a
server costs by itself, without the server's own steps (bench_upstream.py --instant).

    .venv/bin/python bench/instant_upstream.py --port 8000

`/health`, `/v1/models`, and streamed `/v1/completions` and `/v1/chat/completions`: each reply is
`max_tokens` chunks of one word, then the usage, written `--delay-ms` after the request is read
(as a real server's first step would take, so that a hop in front reads a burst's requests
before their replies come). Plain asyncio streams, so that the server's own time is a small
fraction of a millisecond.
"""

from __future__ import annotations

import argparse
import asyncio
import json

MODELS = json.dumps({"object": "list", "data": [{"id": "instant", "object": "model"}]})


def sse(obj: object) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def reply(path: str, body: dict[str, object]) -> bytes:
    if path.endswith("/models") or path == "/health":
        payload = MODELS.encode()
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (
                len(payload),
                payload,
            )
        )
    chat = path.endswith("/chat/completions")
    n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)  # type: ignore[call-overload]
    parts = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    ]
    for i in range(n):
        choice = (
            {"index": 0, "delta": {"content": " word"}} if chat else {"index": 0, "text": " word"}
        )
        choice["finish_reason"] = "length" if i == n - 1 else None
        parts.append(sse({"id": "x", "object": "chunk", "choices": [choice]}))
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    parts.append(sse({"id": "x", "object": "chunk", "choices": [], "usage": usage}))
    parts.append(sse(b"[DONE]") + b"0\r\n\r\n")
    return b"".join(parts)


DELAY_S = 0.0


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length)) if length else {}
            if DELAY_S and "completions" in path:
                await asyncio.sleep(DELAY_S)
            writer.write(reply(path, body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    DELAY_S = args.delay_ms / 1000
    asyncio.run(main(args.port))
