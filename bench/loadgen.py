"""Concurrent streaming clients for any OpenAI-compatible `/v1/completions` endpoint.

    .venv/bin/python bench/loadgen.py http://127.0.0.1:8080 --model ID --streams 64 --tokens 64

Each stream is one request with `ignore_eos`, counted from the server's own `usage` (so that
servers that send several tokens per chunk are counted right), timed from its start to its first
text (TTFT) and to its end. The streams are spread over worker processes so that the client is
not what limits a fast server. Prints one JSON line: the median over rounds of aggregate tokens/s
(all tokens / wall time from the common start to the last end), TTFT p50 and max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

TOPICS = [
    "The history of the Roman empire", "A recipe for bread starts with",
    "The main reasons for the industrial revolution were", "In a distant galaxy",
    "The rules of chess are", "Photosynthesis is the process",
    "The best way to learn a language", "Once upon a time in a small village",
]  # fmt: skip
LONG_TAIL = " and then the story of item {i}"  # ~6 tokens, repeated for long prompts


@dataclass(frozen=True)
class Load:
    url: str
    model: str
    tokens: int
    temperature: float
    prompt_repeat: int  # how many times LONG_TAIL is appended (0: a short prompt)
    extra: dict[str, Any]


def body(load: Load, i: int, nonce: int) -> dict[str, Any]:
    # The nonce makes every round's prompts new, so that a server's prompt cache (llama-server
    # keeps each slot's last prompt) measures nothing it saw in an earlier round.
    prompt = f"{nonce}. " + TOPICS[i % len(TOPICS)] + LONG_TAIL.format(i=i) * load.prompt_repeat
    request: dict[str, Any] = {
        "model": load.model, "prompt": prompt, "max_tokens": load.tokens, "stream": True,
        "temperature": load.temperature, "seed": i, "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    if load.temperature > 0:
        request.update(top_p=0.95, top_k=40)
    request.update(load.extra)
    return request


class Stream:
    """One streaming request over a connection opened beforehand, spoken in plain HTTP/1.1.

    httpx costs ~1.5 ms of CPU per request on a 2-core box: 32 requests from one process left
    over ~100 ms, a trickle that measured the client. Here a request is one prebuilt write and
    the stream is read with asyncio's own buffers, so a round's requests leave together.
    """

    def __init__(self, load: Load) -> None:
        url = urlsplit(load.url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.path = url.path.rstrip("/") + "/v1/completions"
        self.load = load

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def run(self, i: int, nonce: int) -> tuple[float, int, float]:
        """(seconds to first text, completion tokens, end as a wall-clock time)."""
        payload = json.dumps(body(self.load, i, nonce)).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        )
        start = time.perf_counter()
        self.writer.write(head.encode() + payload)
        first: float | None = None
        chunks = 0
        usage: int | None = None
        async for line in self._lines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                first = first or time.perf_counter()
                chunks += 1
        end = time.perf_counter()
        self.writer.close()
        return (first or end) - start, usage if usage is not None else chunks, time.time()

    async def _lines(self) -> AsyncIterator[bytes]:
        """The body's lines: chunked transfer decoded, or read to the end of the connection."""
        status = await self.reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"{self.load.url}: {status.decode(errors='replace').strip()}")
        chunked = False
        while (header := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if not chunked:
            while line := await self.reader.readline():
                yield line
            return
        pending = b""
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            pending += await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line
        if pending:
            yield pending


def worker(args: tuple[Load, list[int], float]) -> list[tuple[float, int, float]]:
    load, indices, start_at = args
    nonce = int(start_at * 1000) % 100_000

    async def go() -> list[tuple[float, int, float]]:
        streams = [Stream(load) for _ in indices]
        await asyncio.gather(*(stream.open() for stream in streams))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        return await asyncio.gather(
            *(stream.run(i, nonce) for stream, i in zip(streams, indices, strict=True))
        )

    return asyncio.run(go())


def measure(load: Load, streams: int, rounds: int, processes: int) -> dict[str, float]:
    """Median figures over `rounds` rounds of `streams` concurrent requests."""
    n_proc = max(1, min(processes, streams))
    results = []
    with multiprocessing.get_context("spawn").Pool(n_proc) as pool:
        for _ in range(rounds):
            start_at = time.time() + 0.5
            parts = [(load, list(range(k, streams, n_proc)), start_at) for k in range(n_proc)]
            runs = [r for part in pool.map(worker, parts) for r in part]
            wall = max(end for _, _, end in runs) - start_at
            ttfts = sorted(ttft for ttft, _, _ in runs)
            tokens = sum(n for _, n, _ in runs)
            results.append(
                {"tps": tokens / wall, "ttft_p50": statistics.median(ttfts),
                 "ttft_max": ttfts[-1], "tokens": tokens, "wall": wall}
            )  # fmt: skip
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--model", default="default")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompt-repeat", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--extra", default="{}", help="JSON merged into each request body")
    args = parser.parse_args()
    load = Load(args.url.rstrip("/"), args.model, args.tokens, args.temperature,
                args.prompt_repeat, json.loads(args.extra))  # fmt: skip
    print(json.dumps(measure(load, args.streams, args.rounds, args.processes)))


if __name__ == "__main__":
    main()
