"""Two models loaded in one host on the CPU: what one engine decodes alone, beside an idle
second engine, and both decoding at once. Prints figures.

    .venv/bin/python bench/bench_two_engines.py [--threads 2] [--tokens 64] [--rounds 5]
        [--baseline PATH]

Two engines on the bundled model in this process (as a host with two models loaded), greedy
completions of `--tokens` tokens, tokens/s as medians of `--rounds`. `--baseline PATH` runs the
same in a child process on the infertui whose package is in PATH (see bench_gpu.py), side by
side. Before OpenMP's waiting was set (core/engine/openmp.py) and engines took turns to decode
(native.py), an engine beside an idle one decoded at half its speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from bench_gpu import baseline_env  # bench/ is this script's folder: on sys.path

from infertui.core.engine import EngineSpec
from infertui.core.engine.bundled import bundled_model_path
from infertui.core.protocol.common import SamplingParams
from infertui.core.scheduler import Pool
from infertui.core.scheduler.job import PreparedJob


async def tokens(pool: Pool, n: int) -> int:
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    prompt = pool.tokenize("Once upon a time", add_special=True)
    _, end = await pool.submit(PreparedJob(params=params, tokens=prompt)).text()
    return end.timings.tokens_out


async def rate(*runs: tuple[Pool, int]) -> float:
    start = time.perf_counter()
    done = await asyncio.gather(*(tokens(pool, n) for pool, n in runs))
    return sum(done) / (time.perf_counter() - start)


async def measure(threads: int, n: int, rounds: int) -> dict[str, float]:
    def spec(engine_id: str) -> EngineSpec:
        return EngineSpec(str(bundled_model_path()), engine_id, n_ctx=1024, n_parallel=4,
                          n_threads=threads, speculative=False)  # fmt: skip

    first = await Pool.start(spec("first"))
    await rate((first, 8))
    alone = statistics.median([await rate((first, n)) for _ in range(rounds)])
    second = await Pool.start(spec("second"))
    await rate((second, 8))
    beside = statistics.median([await rate((first, n)) for _ in range(rounds)])
    both = statistics.median([await rate((first, n), (second, n)) for _ in range(rounds)])
    await first.close()
    await second.close()
    return {"alone": alone, "beside an idle one": beside, "both at once (in all)": both}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="PYTHONPATH of another infertui to compare with")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # (the child)
    args = parser.parse_args()
    here = asyncio.run(measure(args.threads, args.tokens, args.rounds))
    if args.json:
        print(json.dumps(here))
        return
    results = {"infertui": here}
    if args.baseline:
        child = [*baseline_env(args.baseline), sys.executable, __file__, "--json",
                 "--threads", str(args.threads), "--tokens", str(args.tokens),
                 "--rounds", str(args.rounds)]  # fmt: skip
        # libgomp's defaults for the baseline, as it ran (this process set openmp.py's)
        env = {
            k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
        }
        out = subprocess.run(child, capture_output=True, text=True, check=True, env=env).stdout
        results["baseline"] = json.loads(out.strip().splitlines()[-1])
    print(f"bundled model, two engines in one process, {args.threads} threads each, greedy, "
          f"{args.tokens} tokens; tokens/s, medians of {args.rounds}")  # fmt: skip
    names = list(results)
    print("| engine | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for case in here:
        print(f"| {case} | " + " | ".join(f"{results[k][case]:.0f}" for k in names) + " |")


if __name__ == "__main__":
    main()
