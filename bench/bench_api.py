"""Issue 14's figures: what the grammar costs per token (JSON Schema against free text) and
embeddings per second at batch 1 and 32. Prints figures.

    .venv/bin/python bench/bench_api.py [--threads 2] [--seconds 6]

One `infertui host --headless --http` process on 127.0.0.1 (bundled model), driven over HTTP
by one client at a time, so the figures are per request. Per-token cost is the request's time
over its tokens, for the same prompt and budget both ways: `ignore_eos` holds free text to the
budget, and the schema's free "story" string lets the grammar run to it too.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import subprocess
import sys
import time

import httpx

log = logging.getLogger("bench_api")
ASK = [{"role": "user", "content": "Describe a lighthouse as JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "story": {"type": "string"}},
    "required": ["name", "story"],
}
TOKENS = 64


def start_host(threads: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "infertui.tui.cli", "host", "--headless", "--no-p2p",
         "--http", "127.0.0.1:0", "--parallel", "1", "--threads", str(threads)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    url = ""
    for line in proc.stderr:
        if match := re.search(r"listening on (http://\S+)", line):
            url = match.group(1)
        if "ready" in line:
            break
    return proc, url


def ms_per_token(client: httpx.Client, url: str, schema: bool, seconds: float) -> list[float]:
    """Milliseconds per output token after the first, one request after another."""
    body: dict[str, object] = {"model": "default", "messages": ASK, "max_tokens": TOKENS,
                               "temperature": 0.8, "seed": 1}  # fmt: skip
    if schema:
        shape = {"name": "x", "schema": SCHEMA}
        body["response_format"] = {"type": "json_schema", "json_schema": shape}
    else:
        body["ignore_eos"] = True
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        reply = client.post(f"{url}/v1/chat/completions", json=body).json()
        n = reply["usage"]["completion_tokens"]
        if n > 1:
            out.append((time.perf_counter() - start) * 1000 / n)
    return out


def embeddings_per_s(client: httpx.Client, url: str, batch: int, seconds: float) -> float:
    texts = [f"Sentence {i}: the quick brown fox jumps over the lazy dog." for i in range(batch)]
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        client.post(f"{url}/v1/embeddings", json={"model": "default", "input": texts})
        done += batch
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    proc, url = start_host(args.threads)
    try:
        with httpx.Client(timeout=120) as client:
            ms_per_token(client, url, False, 1)  # warm up
            free = statistics.median(ms_per_token(client, url, False, args.seconds))
            shaped = statistics.median(ms_per_token(client, url, True, args.seconds))
            one = embeddings_per_s(client, url, 1, args.seconds)
            many = embeddings_per_s(client, url, 32, args.seconds)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"bundled model, {args.threads} threads, one request at a time, medians:")
    print(f"  free text      {free:6.1f} ms per token (request time / tokens)")
    print(f"  JSON Schema    {shaped:6.1f} ms per token   ratio {shaped / free:.2f}")
    print(f"  embeddings     {one:6.1f} per s at batch 1, {many:.1f} per s at batch 32")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
