"""Issue 37's scenario: one teammate's batch against another's question, on one engine. Prints
B's time to first token and A's throughput, each alone and both together, side by side.

    .venv/bin/python bench/bench_fair.py [--jobs 120] [--tokens 256] [--parallel 2] [--rounds 3]

Teammate A (API key "key-a") sends `--jobs` completions of `--tokens` tokens at once; one
second later teammate B (key "key-b") asks one streamed question of 16 tokens. The host is
`infertui host --headless` on a tiny random-weight Llama (bench/make_model.py: 2 layers, 256
wide, 32k vocabulary), one thread, `--parallel 2`: a job takes about as long as one does on a
GPU box under load, so the queue decides B's wait. Issue 37's goals: B's TTFT under A's batch
<= B's idle TTFT + 1.5 x one of A's jobs; A's throughput together >= 0.9 x alone. Then A's
batch again as `service_tier: flex` (batch work) under B's question, and eight identities
(keys key-0..7) sending 32 jobs each at once: each one's share of the tokens served (goal:
within 10 % of an equal share).
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
ADMIN_KEY = "key-admin"  # reads everyone's usage


def completion(client: httpx.Client, key: str, tokens: int, tier: str | None = None) -> float:
    """One of A's jobs (batch work with tier "flex"): seconds it took."""
    start = time.perf_counter()
    body = {"model": "default", "prompt": "Once upon a time", "max_tokens": tokens,
            "ignore_eos": True, "temperature": 0.8}  # fmt: skip
    if tier is not None:
        body["service_tier"] = tier
    reply = client.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"})
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


def batch(url: str, jobs: int, tokens: int, tier: str | None = None) -> float:
    """A's batch, all at once: its wall time."""
    with httpx.Client(base_url=url, timeout=None) as client, ThreadPoolExecutor(jobs) as pool:
        start = time.perf_counter()
        list(pool.map(lambda _: completion(client, KEYS["a"], tokens, tier), range(jobs)))
        return time.perf_counter() - start


def with_b(url: str, jobs: int, tokens: int, tier: str | None = None) -> tuple[float, float]:
    """A's batch with B's question one second in: the batch's wall time, B's TTFT."""
    ttft: list[float] = []

    def ask_b() -> None:
        time.sleep(1.0)
        with httpx.Client(base_url=url, timeout=None) as client:
            ttft.append(first_token_s(client, KEYS["b"]))

    asker = threading.Thread(target=ask_b)
    asker.start()
    wall = batch(url, jobs, tokens, tier)
    asker.join()
    return wall, ttft[0]


def shares(url: str, jobs: int, tokens: int) -> dict[str, int]:
    """Eight identities each send `jobs` jobs at once; the tokens each had served (the host's
    own count, GET /v1/host/usage) once three quarters of all the jobs had ended, while every
    identity still had work waiting."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    names = {f"key{n + len(KEYS)}" for n in range(len(SHARE_KEYS))}  # unnamed keys: key<N>
    senders = [
        threading.Thread(target=lambda key=key: batch_of(url, key, jobs, tokens))
        for key in SHARE_KEYS
    ]
    for sender in senders:
        sender.start()
    served: dict[str, int] = {}
    with httpx.Client(base_url=url, timeout=30, headers=admin) as client:
        while not served:
            users = client.get("/v1/host/usage").json()["users"]
            mine = [user for user in users if user["identity"] in names]
            if sum(user["jobs_total"] for user in mine) >= 0.75 * jobs * len(SHARE_KEYS):
                served = {user["identity"]: user["tokens_total"] for user in mine}
                break
            time.sleep(0.05)
    for sender in senders:
        sender.join()
    return served


def batch_of(url: str, key: str, jobs: int, tokens: int) -> None:
    with httpx.Client(base_url=url, timeout=None) as client, ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda _: completion(client, key, tokens), range(jobs)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="of A alone and A with B")
    parser.add_argument("--share-jobs", type=int, default=32, help="per identity, 8 of them")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-fair-"))
    model = make_model(work / "tiny-32k.gguf", "tiny", 32000)
    env = {**os.environ, "INFERTUI_DATA_DIR": str(work / "data"),
           "INFERTUI_API_KEYS": json.dumps([*KEYS.values(), *SHARE_KEYS]),
           "INFERTUI_ADMIN_KEY": ADMIN_KEY,
           "INFERTUI_HOST__QUEUE": str(max(args.jobs, 8 * args.share_jobs) + 8)}  # fmt: skip
    proc, url = start_host(1, args.parallel, "--model", str(model), env=env)
    try:
        with httpx.Client(base_url=url, timeout=None) as client:
            first_token_s(client, KEYS["b"])  # warm up
            idle = statistics.median(first_token_s(client, KEYS["b"]) for _ in range(5))
        # alone and with B by turns, so that the box's drifts fall on both alike
        alone, together, ttfts = [], [], []
        for _ in range(args.rounds):
            alone.append(batch(url, args.jobs, args.tokens))
            wall, ttft = with_b(url, args.jobs, args.tokens)
            together.append(wall)
            ttfts.append(ttft)
        alone_s, together_s = statistics.median(alone), statistics.median(together)
        b_ttft = statistics.median(ttfts)
        _, b_ttft_flex = with_b(url, args.jobs, args.tokens, "flex")
        served = shares(url, args.share_jobs, 64)
    finally:
        proc.terminate()
        proc.wait(30)

    def rates(walls: list[float]) -> str:
        return ", ".join(f"{args.jobs * args.tokens / wall:.0f}" for wall in walls)

    one_job = alone_s * args.parallel / args.jobs  # one job's time on its slot, from the batch
    a_alone = args.jobs * args.tokens / alone_s
    a_together = args.jobs * args.tokens / together_s
    goal = idle + 1.5 * one_job
    print(
        f"tiny 32k model, 1 thread, --parallel {args.parallel}; A: {args.jobs} x {args.tokens} "
        f"tokens, B: one 16-token question 1 s in; medians of {args.rounds} rounds\n"
        f"  B's TTFT, idle host         {idle * 1000:9.0f} ms\n"
        f"  B's TTFT, under A's batch   {b_ttft * 1000:9.0f} ms   "
        f"(goal <= {goal * 1000:.0f} ms: idle + 1.5 x one of A's jobs, {one_job * 1000:.0f} ms)\n"
        f"  B's TTFT, A's batch as flex {b_ttft_flex * 1000:9.0f} ms   (service_tier flex: "
        "batch work)\n"
        f"  A's throughput alone        {a_alone:9.0f} tok/s   (rounds: {rates(alone)})\n"
        f"  A's throughput with B       {a_together:9.0f} tok/s   (rounds: {rates(together)})\n"
        f"  with B / alone              {a_together / a_alone:9.2f}         (goal >= 0.9)"
    )
    equal = statistics.mean(served.values())
    worst = max(abs(count / equal - 1) for count in served.values())
    print(
        f"eight identities, {args.share_jobs} x 64 tokens each, all at once: tokens served "
        f"when three quarters of the jobs had ended\n"
        f"  {', '.join(f'{who} {count}' for who, count in sorted(served.items()))}\n"
        f"  furthest from an equal share: {worst * 100:.1f} %   (goal <= 10 %)"
    )


if __name__ == "__main__":
    sys.exit(main())
