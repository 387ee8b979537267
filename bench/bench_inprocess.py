"""The engine alone: streams decoded in-process (Pool and Job, no HTTP), beside bench_gpu's
figures over HTTP, to tell the engine's own cost from the transport's. Prints figures.

    .venv/bin/python bench/bench_inprocess.py MODEL.gguf [--streams 1,64] [--temps 0,0.8]
        [--tokens 128] [--rounds 2] [--backend-sampling auto|on|off] [--threads N]
        [--no-speculative] [--no-lone-runs]

For each number of streams and each temperature: that many jobs of `--tokens` tokens
(`ignore_eos`, ~16-token prompts) submitted at once and read to the end; aggregate tokens/s
over the wall clock (the median of `--rounds`), and the loop's decode share (see bench_gpu).
One process, one engine with as many slots as the most streams.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time

from infertui.core.engine import EngineSpec
from infertui.core.engine.llama import step
from infertui.core.protocol.common import SamplingParams
from infertui.core.scheduler import Pool
from infertui.core.scheduler.job import PreparedJob

PROMPT = "{i}. Once upon a time in a small village there lived a"


async def one_round(pool: Pool, streams: int, params: SamplingParams, nonce: int) -> float:
    prompts = [PROMPT.format(i=nonce * 1000 + i) for i in range(streams)]
    jobs = [
        pool.submit(PreparedJob(params=params, tokens=pool.tokenize(prompt, add_special=True)))
        for prompt in prompts
    ]
    start = time.perf_counter()
    ends = await asyncio.gather(*(job.text() for job in jobs))
    wall = time.perf_counter() - start
    return sum(end.timings.tokens_out for _, end in ends) / wall


async def run(args: argparse.Namespace) -> None:
    streams = [int(s) for s in args.streams.split(",")]
    step.LONE_RUNS = not args.no_lone_runs
    backend = {"auto": None, "on": True, "off": False}[args.backend_sampling]
    spec = EngineSpec(args.model, "bench", n_ctx=args.ctx, n_parallel=max(streams),
                      n_threads=args.threads, backend_sampling=backend,
                      speculative=not args.no_speculative)  # fmt: skip
    pool = await Pool.start(spec)
    nonce = 0
    print(f"{args.model}: in-process, {max(streams)} slots, sampling {args.backend_sampling}")
    print("| sampling | streams | tokens/s | rounds | decode share |")
    print("|---|---|---|---|---|")
    for temp in (float(t) for t in args.temps.split(",")):
        extra = {"top_p": 0.95, "top_k": 40} if temp > 0 else {}
        params = SamplingParams(temperature=temp, max_tokens=args.tokens, ignore_eos=True,
                                seed=1, **extra)  # fmt: skip
        for n in streams:
            await one_round(pool, n, params.model_copy(update={"max_tokens": 4}), nonce)
            nonce += 1
            before = pool.engine.usage().loop_time if pool.engine else (0.0, 0.0)
            rates = []
            for _ in range(args.rounds):
                rates.append(await one_round(pool, n, params, nonce))
                nonce += 1
            after = pool.engine.usage().loop_time if pool.engine else (0.0, 0.0)
            busy = after[1] - before[1]
            share = f"{(after[0] - before[0]) / busy:.2f}" if busy > 0 else "–"
            sampling = "greedy" if temp == 0 else f"temp {temp}"
            rounds = ", ".join(f"{r:,.0f}" for r in rates)
            print(f"| {sampling} | {n} | {statistics.median(rates):,.0f} | {rounds} | {share} |")
    await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--streams", default="1,64")
    parser.add_argument("--temps", default="0,0.8")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-speculative", action="store_true", help="no guesses")
    parser.add_argument(
        "--no-lone-runs", action="store_true", help="one stream goes step by step, not in C"
    )
    parser.add_argument("--ctx", type=int, default=1024, help="tokens per slot")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--backend-sampling", choices=["auto", "on", "off"], default="auto")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
