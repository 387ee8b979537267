"""Chats with one system prompt: what copying a shared head's KV cells saves.

    .venv/bin/python bench/bench_shared_prefix.py [--head 400,1500] [--reps 3]
        [--baseline PYTHONPATH]

Two loads on the real engine, in-process (no transport), each run in a fresh process; with
`--baseline` (the `build/typed` of an older checkout, or any tree with an `infertui` package)
the same loads run there too, alternating, so that a noisy machine hurts both alike:

burst   8 chats arrive together, each a head of `--head` tokens and a question of its own,
        32 tokens out each: tokens/s, TTFT p50 and max, and the prompt tokens not decoded
late    4 such chats decode; a fifth arrives: its TTFT

Prints medians, and the ratio to the baseline where there is one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import time

SENTENCE = "Rule {k}: answer briefly, cite the handbook, and never guess a part number. "
QUESTION = " Question {i}: which tool fits bolt {i}?"


async def run(load: str, head_tokens: int, threads: int) -> dict[str, float]:
    from infertui.core.engine import EngineSpec, bundled_model_path
    from infertui.core.protocol.common import SamplingParams
    from infertui.core.scheduler import Pool

    spec = EngineSpec(str(bundled_model_path()), "bench", n_ctx=head_tokens + 256,
                      n_parallel=8, n_threads=threads)  # fmt: skip
    pool = await Pool.start(spec)
    engine = pool.engine
    assert engine is not None
    text = "".join(SENTENCE.format(k=k) for k in range(400))
    head = engine.model.detokenize(engine.tokenizer.text_prompt(text)[1:head_tokens])
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    await pool.submit(prompt="warm up", params=SamplingParams(max_tokens=4)).text()
    if load == "burst":
        start = time.perf_counter()
        jobs = [pool.submit(prompt=head + QUESTION.format(i=i), params=params) for i in range(8)]
        ends = [end for _, end in await asyncio.gather(*(job.text() for job in jobs))]
        wall = time.perf_counter() - start
        ttfts = sorted(((job.first_token_at or start) - start) * 1000 for job in jobs)
        result = {
            "tok/s": sum(end.timings.tokens_out for end in ends) / wall,
            "ttft p50 ms": statistics.median(ttfts),
            "ttft max ms": ttfts[-1],
            "cached tokens": float(sum(end.timings.tokens_cached for end in ends)),
        }
    else:
        long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
        running = [pool.submit(prompt=head + QUESTION.format(i=i), params=long) for i in range(4)]
        while min(job.tokens_out for job in running) < 4:  # noqa: ASYNC110 (polling is the point)
            await asyncio.sleep(0.01)
        start = time.perf_counter()
        late = pool.submit(prompt=head + QUESTION.format(i=9), params=params)
        _, end = await late.text()
        result = {
            "ttft ms": ((late.first_token_at or start) - start) * 1000,
            "cached tokens": float(end.timings.tokens_cached),
        }
        for job in running:
            job.cancel()
    await pool.close()
    return result


def measure(load: str, head: int, threads: int, pythonpath: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--one", load, "--head", str(head), "--threads",
            str(threads)]  # fmt: skip
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
        argv[1] = os.path.abspath(__file__)
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", default="400,1500", help="head lengths in tokens")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loads", default="burst,late")
    parser.add_argument("--baseline", help="PYTHONPATH of an older infertui")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        print(json.dumps(asyncio.run(run(args.one, int(args.head), args.threads))))
        return
    trees = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    print(f"bundled model, {args.threads} threads, median of {args.reps} fresh processes")
    for load in args.loads.split(","):
        for head in map(int, args.head.split(",")):
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.reps):
                for name, path in trees.items():
                    runs[name].append(measure(load, head, args.threads, path))
            for key in runs["this"][0]:
                cells = [f"{load:5} head {head:5}  {key:14}"]
                medians = {n: statistics.median(r[key] for r in runs[n]) for n in trees}
                cells += [f"{n} {v:9.1f}" for n, v in medians.items()]
                if medians.get("baseline"):
                    cells.append(f"ratio {medians['this'] / medians['baseline']:5.2f}")
                print("   ".join(cells))


if __name__ == "__main__":
    main()
