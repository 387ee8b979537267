"""Issue 37's scenario: one teammate's batch against another's question, on one engine. Prints
B's time to first token and A's throughput, each alone and both together, side by side.

    .venv/bin/python bench/bench_fair.py [--jobs 120] [--tokens 256] [--parallel 2]

Teammate A (API key "key-a") sends `--jobs` completions of `--tokens` tokens at once; one
second later teammate B (key "key-b") asks one streamed question of 16 tokens. The host is
`infertui host --headless` on a tiny random-weight Llama (bench/make_model.py: 2 layers, 256
wide, 32k vocabulary), one thread, `--parallel 2`: a job takes about as long as one does on a
GPU box under load, so the queue decides B's wait. Issue 37's goals: B's TTFT under A's batch
<= B's idle TTFT + 1.5 x one of A's jobs; A's throughput together >= 0.9 x alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from bench_api import start_host  # bench/ is this script's folder: on sys.path
from make_model import make_model

KEYS = {"a": "key-a", "b": "key-b"}
SHARE_KEYS = [f"key-{n}" for n in range(8)]  # the eight identities of the share scenario


def completion(client: httpx.Client, key: str, tokens: int) -> float:
    """One of A's jobs: seconds it took."""
    start = time.perf_counter()
    reply = client.post(
        "/v1/completions",
        json={"model": "default", "prompt": "Once upon a time", "max_tokens": tokens,
              "ignore_eos": True, "temperature": 0.8},
        headers={"Authorization": f"Bearer {key}"},
    )  # fmt: skip
    reply.raise_for_status()
    return time.perf_counter() - start


def first_token_s(client: httpx.Client, key: str) -> float:
    """B's question: seconds from sending it to its first streamed text."""
    body = {"model": "default", "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 16, "stream": True}  # fmt: skip
    start = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body,
                       headers={"Authorization": f"Bearer {key}"}) as reply:  # fmt: skip
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):  # text, not the opening frame
                return time.perf_counter() - start
    raise RuntimeError("no text in B's reply")


def batch(url: str, jobs: int, tokens: int) -> tuple[float, list[float]]:
    """A's batch, all at once: its wall time, and each job's time from its sending."""
    with httpx.Client(base_url=url, timeout=None) as client, ThreadPoolExecutor(jobs) as pool:
        start = time.perf_counter()
        times = list(pool.map(lambda _: completion(client, KEYS["a"], tokens), range(jobs)))
        return time.perf_counter() - start, times


def shares(url: str, jobs: int, tokens: int) -> list[int]:
    """Eight identities each send `jobs` jobs at once; the tokens each had served when the
    first of them ran out of work (the host's own count, GET /v1/host/usage)."""
    done = threading.Event()
    counts: list[int] = []

    def identity(key: str) -> None:
        with httpx.Client(base_url=url, timeout=None) as client, ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda _: completion(client, key, tokens), range(jobs)))
        if not done.is_set():
            done.set()
            users = httpx.get(f"{url}/v1/host/usage", timeout=30).json()["users"]
            served = {user["identity"]: user["tokens_total"] for user in users}
            counts.extend(served.get(f"key{SHARE_KEYS.index(k) + 2}", 0) for k in SHARE_KEYS)

    threads = [threading.Thread(target=identity, args=(key,)) for key in SHARE_KEYS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--share-jobs", type=int, default=24, help="per identity, 8 of them")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-fair-"))
    model = make_model(work / "tiny-32k.gguf", "tiny", 32000)
    env = {**os.environ, "INFERTUI_DATA_DIR": str(work / "data"),
           "INFERTUI_API_KEYS": json.dumps([*KEYS.values(), *SHARE_KEYS]),
           "INFERTUI_HOST__QUEUE": str(max(args.jobs, 8 * args.share_jobs) + 8)}  # fmt: skip
    proc, url = start_host(1, args.parallel, "--model", str(model), env=env)
    try:
        with httpx.Client(base_url=url, timeout=None) as client:
            first_token_s(client, KEYS["b"])  # warm up
            idle = statistics.median(first_token_s(client, KEYS["b"]) for _ in range(5))
        alone_s, _ = batch(url, args.jobs, args.tokens)
        together: dict[str, float] = {}

        def ask_b() -> None:
            time.sleep(1.0)
            with httpx.Client(base_url=url, timeout=None) as client:
                together["b_ttft"] = first_token_s(client, KEYS["b"])

        asker = threading.Thread(target=ask_b)
        asker.start()
        together_s, _ = batch(url, args.jobs, args.tokens)
        asker.join()
        served = shares(url, args.share_jobs, 64)
    finally:
        proc.terminate()
        proc.wait(30)
    one_job = alone_s * args.parallel / args.jobs  # one job's time on its slot, from the batch
    a_alone = args.jobs * args.tokens / alone_s
    a_together = args.jobs * args.tokens / together_s
    goal = idle + 1.5 * one_job
    print(
        f"tiny 32k model, 1 thread, --parallel {args.parallel}; A: {args.jobs} x {args.tokens} "
        f"tokens, B: one 16-token question 1 s in\n"
        f"  B's TTFT, idle host         {idle * 1000:9.0f} ms\n"
        f"  B's TTFT, under A's batch   {together['b_ttft'] * 1000:9.0f} ms   "
        f"(goal <= {goal * 1000:.0f} ms: idle + 1.5 x one of A's jobs, {one_job * 1000:.0f} ms)\n"
        f"  A's throughput alone        {a_alone:9.0f} tok/s\n"
        f"  A's throughput with B       {a_together:9.0f} tok/s   ({a_together / a_alone:.2f} of "
        "alone; goal >= 0.9)"
    )
    equal = statistics.mean(served)
    worst = max(abs(count / equal - 1) for count in served)
    print(
        f"eight identities, {args.share_jobs} x 64 tokens each, all at once: tokens served when "
        f"the first ran out of work\n"
        f"  {', '.join(str(count) for count in served)}\n"
        f"  furthest from an equal share: {worst * 100:.1f} %   (goal <= 10 %)"
    )


if __name__ == "__main__":
    sys.exit(main())
