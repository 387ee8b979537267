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
from dataclasses import dataclass
from typing import Any

from infertui.core.engine.upstream.connection import UpstreamClient
from infertui.core.protocol.sse_reader import sse_batches

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


async def one(hop: UpstreamClient, load: Load, i: int, nonce: int) -> tuple[float, int, float]:
    """(seconds to first text, completion tokens, end as a wall-clock time)."""
    start = time.perf_counter()
    first: float | None = None
    chunks = 0
    usage: int | None = None
    async with hop.stream("completions", body(load, i, nonce)) as reply:
        if reply.status_code != 200:
            await reply.aread()
            raise RuntimeError(f"{load.url}: {reply.status_code} {reply.text[:200]}")
        async for batch in sse_batches(reply):
            for chunk in batch:
                if "error" in chunk:
                    raise RuntimeError(f"{load.url}: {chunk['error']}")
                if chunk.get("usage"):
                    usage = chunk["usage"].get("completion_tokens")
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    first = first or time.perf_counter()
                    chunks += 1
    end = time.perf_counter()
    return (first or end) - start, usage if usage is not None else chunks, time.time()


def worker(args: tuple[Load, list[int], float]) -> list[tuple[float, int, float]]:
    """One client process's streams. They go through infertui's upstream hop client: httpx
    costs ~1.5 ms of CPU per request on a 2-core box, so 32 requests from one process left over
    ~100 ms, a trickle that measured the client. Its connections are opened before the start,
    as a client that keeps its connections alive has them; each request is then one write."""
    load, indices, start_at = args
    nonce = int(start_at * 1000) % 100_000

    async def go() -> list[tuple[float, int, float]]:
        hop = UpstreamClient(
            load.url.rstrip("/") + "/v1/", {}, connect_s=10, silent_s=900, keep=len(indices)
        )
        try:
            await hop.connect(len(indices))
            await asyncio.sleep(max(0.0, start_at - time.time()))
            return await asyncio.gather(*(one(hop, load, i, nonce) for i in indices))
        finally:
            await hop.aclose()

    return asyncio.run(go())


def _ready(pause: float) -> None:
    time.sleep(pause)  # long enough that each worker takes one


def measure(load: Load, streams: int, rounds: int, processes: int) -> dict[str, float]:
    """Median figures over `rounds` rounds of `streams` concurrent requests."""
    n_proc = max(1, min(processes, streams))
    results = []
    with multiprocessing.get_context("spawn").Pool(n_proc) as pool:
        # Spawned workers take a while to start and import this module: the common start
        # must wait for them, or the wall clock counts their start-up.
        pool.map(_ready, [0.2] * n_proc, chunksize=1)
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
