"""Issue 14's figures: what the grammar costs per token (JSON Schema against free text),
embeddings per second at batch 1 and 32, `n` choices of one long prompt (read once, its KV
cells copied) against as many requests with prompts of the same length, and the next turn of a
long chat (its history's cells kept) against the same turn after another history. Prints
figures.

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
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

log = logging.getLogger("bench_api")
ASK = [{"role": "user", "content": "Describe a lighthouse as JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "story": {"type": "string"}},
    "required": ["name", "story"],
}
TOKENS = 64


def start_host(
    threads: int, parallel: int = 1, *flags: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`infertui host --headless` on a free port, once it is ready; and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--no-p2p",
         "--http", "127.0.0.1:0", "--parallel", str(parallel), "--threads", str(threads),
         *flags],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    url = ""
    for line in proc.stderr:
        if match := re.search(r"listening on (http://\S+)", line):
            url = match.group(1)
        if "ready" in line:
            break
    # keep reading its log, or a full pipe stalls the host
    threading.Thread(target=proc.stderr.read, daemon=True).start()
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


def choices_s(client: httpx.Client, url: str, n: int, shared: bool, rounds: int) -> list[float]:
    """Seconds for `n` 16-token replies to a ~1,000-token prompt: one request with `n`
    choices (shared), or `n` requests at once whose prompts differ in their first word."""
    tail = " The river runs past the old mill and on to the sea." * 80
    out = []
    for r in range(rounds):
        body = {"model": "default", "max_tokens": 16, "ignore_eos": True, "temperature": 0}
        start = time.perf_counter()
        if shared:
            reply = client.post(
                f"{url}/v1/completions", json={**body, "prompt": f"{r}.{tail}", "n": n}
            )
            assert reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        else:
            with ThreadPoolExecutor(n) as pool:
                bodies = [{**body, "prompt": f"{r}-{i}.{tail}"} for i in range(n)]
                list(pool.map(lambda b: client.post(f"{url}/v1/completions", json=b), bodies))
        out.append(time.perf_counter() - start)
    return out


def next_turn_s(client: httpx.Client, url: str, kept: bool, rounds: int) -> list[float]:
    """Seconds to the end of a 16-token reply to the next turn of a ~1,000-token chat: right
    after its previous turn (kept: that turn's cells serve), or after another chat's."""
    history = " The river runs past the old mill and on to the sea." * 80
    out = []
    for r in range(rounds):
        body = {"model": "default", "max_tokens": 16, "ignore_eos": True, "temperature": 0}
        ask = [{"role": "user", "content": f"{r}.{history}"}]
        before = ask if kept else [{"role": "user", "content": f"{r}-other.{history}"}]
        reply = client.post(f"{url}/v1/chat/completions", json={**body, "messages": before})
        answer = reply.json()["choices"][0]["message"]["content"]
        turn = [*ask, {"role": "assistant", "content": answer},
                {"role": "user", "content": "Go on."}]  # fmt: skip
        start = time.perf_counter()
        client.post(f"{url}/v1/chat/completions", json={**body, "messages": turn})
        out.append(time.perf_counter() - start)
    return out


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
    proc, url = start_host(args.threads, parallel=4)
    try:
        with httpx.Client(timeout=120) as client:
            choices_s(client, url, 4, True, 1)  # warm up
            separate, shared, fresh, kept = [], [], [], []
            for _ in range(3):  # alternated, so that drift weighs on both alike
                separate += choices_s(client, url, 4, False, 2)
                shared += choices_s(client, url, 4, True, 2)
                fresh += next_turn_s(client, url, False, 2)
                kept += next_turn_s(client, url, True, 2)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"bundled model, {args.threads} threads, one request at a time, medians:")
    print(f"  free text      {free:6.1f} ms per token (request time / tokens)")
    print(f"  JSON Schema    {shaped:6.1f} ms per token   ratio {shaped / free:.2f}")
    print(f"  embeddings     {one:6.1f} per s at batch 1, {many:.1f} per s at batch 32")
    a, b = statistics.median(separate), statistics.median(shared)
    print(
        f"  4 x 16 tokens after a ~1,000-token prompt: 4 requests {a:.2f} s, n=4 {b:.2f} s"
        f"   ratio {a / b:.2f}"
    )
    c, d = statistics.median(fresh), statistics.median(kept)
    print(
        f"  next turn of a ~1,000-token chat, 16 tokens: {c:.2f} s, its cells kept {d:.2f} s"
        f"   ratio {c / d:.2f}"
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
