"""Engine throughput beside raw llama.cpp, in one run (issue 2 §7). Prints figures; not a test.

    .venv/bin/python bench/bench_engine.py [--tokens 64] [--threads 2] [--reps 3]

raw llama.cpp:  a minimal low-level decode loop (one sequence, greedy, no Python around it
                but the loop itself): the ceiling for a single stream.
infertui:       the real Pool/Job path, in-process: single-stream decode tokens/s, and the
                aggregate tokens/s of 1/2/4/8 concurrent jobs (slots = concurrency).

Every measurement runs in a fresh process: llama.cpp's OpenMP thread teams belong to the
thread that created them, and a leftover team from an earlier measurement slows the next.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import subprocess
import sys
import time

from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel
from infertui.core.engine.llama.sampler import SamplerChain
from infertui.core.protocol.common import SamplingParams
from infertui.core.scheduler import Pool

PROMPT = "Write a long story about a dragon who learns to paint."


def raw_decode_tps(tokens: int, threads: int) -> float:
    """Tokens/s of a bare llama.cpp decode loop after the prompt (the single-stream ceiling)."""
    model = LlamaModel(str(bundled_model_path()), 0, 0)
    ctx = LlamaContext(model, 512, 1, 512, threads)
    batch = Batch(512)
    prompt = model.tokenize(PROMPT, add_bos=True, parse_special=False)
    for pos, token in enumerate(prompt):
        batch.add(token, pos, 0, pos == len(prompt) - 1)
    ctx.decode(batch)
    sampler = SamplerChain(SamplingParams(temperature=0), model.n_vocab)
    token, pos = sampler.sample(ctx.ptr, batch.n - 1), len(prompt)
    start = time.perf_counter()
    for _ in range(tokens):
        batch.clear()
        batch.add(token, pos, 0, True)
        ctx.decode(batch)
        token, pos = sampler.sample(ctx.ptr, 0), pos + 1
    elapsed = time.perf_counter() - start
    sampler.free(), batch.free(), ctx.free(), model.free()
    return tokens / elapsed


async def engine_run(concurrency: int, tokens: int, threads: int) -> tuple[float, float, int]:
    """(aggregate tokens/s over the wall clock, median per-stream decode tokens/s, tokens)."""
    spec = EngineSpec(str(bundled_model_path()), "bench", n_ctx=512, n_parallel=concurrency,
                      n_threads=threads)  # fmt: skip
    pool = await Pool.start(spec)
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    await pool.submit(prompt="warm up", params=params.model_copy(update={"max_tokens": 4})).text()
    start = time.perf_counter()
    jobs = [pool.submit(prompt=f"{PROMPT} ({i})", params=params) for i in range(concurrency)]
    results = await asyncio.gather(*(job.text() for job in jobs))
    wall = time.perf_counter() - start
    await pool.close()
    produced = sum(end.timings.tokens_out for _, end in results)
    assert all(end.finish_reason == "length" for _, end in results), "every job must complete"
    per_stream = statistics.median(end.timings.decode_tps for _, end in results)
    return produced / wall, per_stream, produced


def llama_bench(tokens: int, threads: int) -> str | None:
    exe = shutil.which("llama-bench")
    if not exe:
        return None
    out = subprocess.run(
        [exe, "-m", str(bundled_model_path()), "-p", "0", "-n", str(tokens), "-t", str(threads)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip()


def measure(what: str, concurrency: int, tokens: int, threads: int) -> dict[str, float]:
    """One measurement in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, __file__, "--one", what, "--concurrency", str(concurrency),
         "--tokens", str(tokens), "--threads", str(threads)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_one(args: argparse.Namespace) -> None:
    if args.one == "raw":
        result = {"tps": raw_decode_tps(args.tokens, args.threads)}
    else:
        agg, per, produced = asyncio.run(engine_run(args.concurrency, args.tokens, args.threads))
        result = {"aggregate": agg, "per_stream": per, "tokens": produced}
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", choices=["raw", "engine"], help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        run_one(args)
        return

    n, t, reps = args.tokens, args.threads, args.reps
    print(f"bundled model, {t} threads, {n}-token outputs, median of {reps} fresh processes")
    bench = llama_bench(n, t)
    if bench:
        print(bench)
    raw = statistics.median(measure("raw", 1, n, t)["tps"] for _ in range(reps))
    print(f"raw llama.cpp decode loop        {raw:7.1f} tok/s")
    print("infertui (Pool/Job path): aggregate tok/s over the wall clock, all jobs complete;")
    print("per-stream is the median job's decode rate after its first token")
    for concurrency in (1, 2, 4, 8):
        runs = [measure("engine", concurrency, n, t) for _ in range(reps)]
        agg = statistics.median(r["aggregate"] for r in runs)
        per = statistics.median(r["per_stream"] for r in runs)
        done = min(int(r["tokens"]) for r in runs)
        note = f"  per stream {per / raw:6.1%} of raw" if concurrency == 1 else ""
        print(
            f"  {concurrency} concurrent: {agg:7.1f} tok/s aggregate  {per:6.1f} per stream"
            f"  ({done} of {concurrency * n} tokens){note}"
        )


if __name__ == "__main__":
    main()
