"""Streaming through HTTP vs in-process, 1 and 8 concurrent (issue 3). Prints figures.

    .venv/bin/python bench/bench_http.py [--tokens 64] [--threads 2] [--reps 3]

in-process: the Pool/Job path, consumed in the same process.
http:       `infertui host --headless --http` in its own process, streamed by an httpx client
            (POST /v1/chat/completions, stream: true) from this one, over 127.0.0.1.
Both sides send the same chat, greedy, `ignore_eos` so every job makes exactly N tokens.
TTFT is measured from submit (in-process) or from sending the request (HTTP) to the first
token's text; tokens/s per stream is (tokens - 1) / (last token - first token).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.events import TokenText
from infertui.core.scheduler import Pool

MESSAGES = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]
TTFT_RUNS = 15


async def inproc(concurrency: int, tokens: int, threads: int) -> dict[str, object]:
    spec = EngineSpec(str(bundled_model_path()), "bench", n_ctx=512, n_parallel=concurrency,
                      n_threads=threads)  # fmt: skip
    pool = await Pool.start(spec)
    messages = [ChatMessage.model_validate(m) for m in MESSAGES]

    async def one(max_tokens: int) -> tuple[float, float, int]:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        start = time.perf_counter()
        job = pool.submit(messages=messages, params=params)
        first = last = 0.0
        n = 0
        async for event in job.events():
            if isinstance(event, TokenText):
                last = time.perf_counter()
                first = first or last
                n = event.n_tokens
        return (first - start) * 1000, (n - 1) / (last - first) if n > 1 else 0.0, n

    await one(4)
    ttft = [(await one(2))[0] for _ in range(TTFT_RUNS)] if concurrency == 1 else []
    return await _throughput(one, concurrency, tokens, ttft, pool.close)


def start_host(concurrency: int, threads: int) -> tuple[subprocess.Popen[str], str]:
    """`infertui host --headless --http` on a free port; returns it once it logs ready."""
    host = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--no-p2p",
         "--http", "127.0.0.1:0", "--ctx", "512", "--parallel", str(concurrency),
         "--threads", str(threads)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert host.stderr is not None
    url = ""
    for line in host.stderr:
        url = m.group(1) if (m := re.search(r"listening on (http://\S+)", line)) else url
        if "ready" in line:
            break
    return host, url


async def http(concurrency: int, tokens: int, threads: int) -> dict[str, object]:
    host, url = await asyncio.to_thread(start_host, concurrency, threads)
    client = httpx.AsyncClient(base_url=url, timeout=120)

    async def one(max_tokens: int) -> tuple[float, float, int]:
        body = {"model": "smollm2-135m", "messages": MESSAGES, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        start = time.perf_counter()
        first = last = 0.0
        n = 0
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    n = chunk["usage"]["completion_tokens"]
                elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    last = time.perf_counter()
                    first = first or last
        return (first - start) * 1000, (n - 1) / (last - first) if n > 1 else 0.0, n

    async def close() -> None:
        await client.aclose()
        host.terminate()
        await asyncio.to_thread(host.wait, 30)

    await one(4)
    ttft = [(await one(2))[0] for _ in range(TTFT_RUNS)] if concurrency == 1 else []
    return await _throughput(one, concurrency, tokens, ttft, close)


async def _throughput(one, concurrency, tokens, ttft, close) -> dict[str, object]:
    start = time.perf_counter()
    runs = await asyncio.gather(*(one(tokens) for _ in range(concurrency)))
    wall = time.perf_counter() - start
    await close()
    produced = sum(n for _, _, n in runs)
    return {"ttft": ttft, "per_stream": statistics.median(t for _, t, _ in runs),
            "aggregate": produced / wall, "tokens": produced}  # fmt: skip


def measure(
    script: str, face: str, concurrency: int, args: argparse.Namespace, *extra: str
) -> dict[str, Any]:
    """One figure from `script --one face` in a fresh interpreter (its last stdout line)."""
    out = subprocess.run(
        [sys.executable, script, "--one", face, "--concurrency", str(concurrency),
         "--tokens", str(args.tokens), "--threads", str(args.threads), *extra],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", choices=["inproc", "http"], help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        run = inproc if args.one == "inproc" else http
        print(json.dumps(asyncio.run(run(args.concurrency, args.tokens, args.threads))))
        return

    print(f"bundled model, {args.threads} threads, {args.tokens}-token outputs, "
          f"median of {args.reps} fresh processes per figure")  # fmt: skip
    compare("http", "HTTP", lambda face, n: measure(__file__, face, n, args), args.reps)


def compare(
    face: str,
    label: str,
    measure_one: Callable[[str, int], dict[str, Any]],
    reps: int,
    first_line: Callable[[list[dict[str, Any]]], str] | None = None,
) -> None:
    """Measure `face` beside in-process at 1 and 8 concurrent streams and print the ratios."""
    for concurrency in (1, 8):
        results = {name: [measure_one(name, concurrency) for _ in range(reps)]
                   for name in ("inproc", face)}  # fmt: skip
        print(f"{concurrency} concurrent:")
        if concurrency == 1:
            if first_line is not None:
                print(first_line(results[face]))
            ttft = {name: statistics.median(t for r in runs for t in r["ttft"])
                    for name, runs in results.items()}  # fmt: skip
            added = ttft[face] - ttft["inproc"]
            print(f"  TTFT p50       in-process {ttft['inproc']:6.1f} ms   {label} "
                  f"{ttft[face]:6.1f} ms   added {added:+.1f} ms")  # fmt: skip
        for key, name in (("per_stream", "per stream"), ("aggregate", "aggregate")):
            base = statistics.median(r[key] for r in results["inproc"])
            over = statistics.median(r[key] for r in results[face])
            print(f"  {name:<14} in-process {base:6.1f} tok/s  {label} {over:6.1f} tok/s"
                  f"  ({over / base:.1%})")  # fmt: skip


if __name__ == "__main__":
    main()
