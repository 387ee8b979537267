"""What --deterministic costs: prompts prefilled alone vs batched with running streams.

    .venv/bin/python bench/bench_batching.py [--reps 3] [--model GGUF --threads N]

Three loads on the real engine, in-process (no transport), each run in a fresh process, the two
modes alternating so that a noisy machine hurts both alike; prints medians and their ratio:

short   16 jobs of ~20-token prompts arriving together, 64 tokens each (a burst of chats)
long    8 jobs of ~800-token prompts arriving together, 16 tokens each (documents, RAG)
stall   4 streams decoding, then one ~3,000-token prompt arrives: the longest gap between
        two tokens of a running stream (the prefill must not hold it up for long)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import statistics
import subprocess
import sys
import time

from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.events import TokenText
from infertui.core.scheduler import Pool

TOPIC = "The history of the Roman empire"
TAIL = " and then the story of item {i}"


async def run(load: str, deterministic: bool, model: str, threads: int) -> dict[str, float]:
    spec = EngineSpec(model, "bench", n_ctx=3400, n_parallel=16 if load == "short" else 8,
                      n_threads=threads, deterministic=deterministic)  # fmt: skip
    pool = await Pool.start(spec)
    await pool.submit(prompt="warm up", params=SamplingParams(temperature=0, max_tokens=4)).text()
    start = time.perf_counter()
    if load == "stall":
        result = await stall(pool)
    else:
        n, repeat, tokens = (16, 2, 64) if load == "short" else (8, 100, 16)
        params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        jobs = [pool.submit(prompt=f"{i}. {TOPIC}" + TAIL.format(i=i) * repeat, params=params)
                for i in range(n)]  # fmt: skip
        ends = [end for _, end in await asyncio.gather(*(job.text() for job in jobs))]
        wall = time.perf_counter() - start
        # as a client sees it: when the first text reached the event loop
        ttfts = sorted(((job.first_token_at or start) - start) * 1000 for job in jobs)
        result = {
            "tok/s": sum(end.timings.tokens_out for end in ends) / wall,
            "ttft p50 ms": statistics.median(ttfts),
            "ttft max ms": ttfts[-1],
        }
    await pool.close()
    return result


async def stall(pool: Pool) -> dict[str, float]:
    params = SamplingParams(temperature=0, max_tokens=3000, ignore_eos=True)
    stamps: list[list[float]] = [[] for _ in range(4)]
    runners = [pool.submit(prompt=f"{i}. {TOPIC}", params=params) for i in range(4)]

    async def read(i: int) -> None:
        async for event in runners[i].events():
            if isinstance(event, TokenText):
                stamps[i].append(time.perf_counter())

    readers = [asyncio.create_task(read(i)) for i in range(4)]
    while min(len(s) for s in stamps) < 8:  # noqa: ASYNC110 (polling is the point here)
        await asyncio.sleep(0.01)
    arrived = time.perf_counter()
    long_prompt = f"{TOPIC}" + TAIL.format(i=9) * 380
    await pool.submit(prompt=long_prompt, params=SamplingParams(max_tokens=1)).text()
    done = time.perf_counter()
    for job in runners:
        job.cancel()
    await asyncio.gather(*readers)
    gaps = [b - a for s in stamps for a, b in itertools.pairwise(s) if b > arrived]
    steady = [b - a for s in stamps for a, b in itertools.pairwise(s) if b <= arrived]
    return {
        "max gap ms": max(gaps) * 1000,
        "steady gap ms": statistics.median(steady) * 1000,
        "prefill s": done - arrived,
    }


def measure(load: str, deterministic: bool, model: str, threads: int) -> dict[str, float]:
    argv = [sys.executable, __file__, "--one", load, "--model", model, "--threads", str(threads)]
    if deterministic:
        argv.append("--deterministic")
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loads", default="short,long,stall")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    model = args.model or str(bundled_model_path())
    if args.one:
        print(json.dumps(asyncio.run(run(args.one, args.deterministic, model, args.threads))))
        return
    print(f"{model}, {args.threads} threads, median of {args.reps} fresh processes per mode")
    for load in args.loads.split(","):
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.reps):
            for deterministic in (False, True):
                runs[deterministic].append(measure(load, deterministic, model, args.threads))
        for key in runs[False][0]:
            mixed = statistics.median(r[key] for r in runs[False])
            alone = statistics.median(r[key] for r in runs[True])
            print(f"{load:6} {key:14} batched {mixed:9.1f}   deterministic {alone:9.1f}"
                  f"   ratio {mixed / alone:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
