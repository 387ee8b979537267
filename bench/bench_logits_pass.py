"""What the host's pass over a step's logits costs right after a decode, against the same pass
on logits already in cache; and one decode of every sequence against two of half each.

    .venv/bin/python bench/bench_logits_pass.py MODEL.gguf [--streams 64] [--threads 1]

Why: with a large vocabulary on the CPU, sampling is the host's share of a step (issue 10's
tiny-model target). A greedy step is one argmax over streams x n_vocab floats that llama.cpp
has just written. Printed, in ms (medians over the steps):

  decode          one llama_decode of a token per sequence (logits on, as raw_decode.py)
  argmax cold     numpy's argmax over those logits, read first after the decode
  argmax 2nd      the same pass again at once
  argmax warm     the same pass once it has run ten times in a row
  split decode    tokens/s of the steps decoded whole, and in two halves of sequences

On the 2-core AVX-512 machine (2026-11-27, tiny model, 64 streams, 1 thread): the cold pass
took 2.8 ms and the warm one 1.2, and so does a pass over any array after a decode: the
host's sampling reads its logits from memory, whatever it does. Halves decoded 4-8 % faster
than whole steps at 64 streams but 21 % slower at 32 and 10 % slower at 128 (and slower for
the bundled model at 16 and 64): a kernel's shape at 64 rows, not a rule to build on.
"""

from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp as llama
import numpy as np

from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel

PROMPT = 16


def prefilled(model: LlamaModel, n: int, steps: int, threads: int) -> tuple[LlamaContext, Batch]:
    ctx = LlamaContext(model, PROMPT + steps + 8, n, n * PROMPT, threads)
    batch = Batch(n * PROMPT + n)
    batch.fill(
        [100 + i % 50 for i in range(n * PROMPT)],
        [i % PROMPT for i in range(n * PROMPT)],
        [i // PROMPT for i in range(n * PROMPT)],
        [0] * (n * PROMPT),
    )
    assert ctx.decode(batch) == 0
    return ctx, batch


def decode(ctx: LlamaContext, batch: Batch, seqs: list[int], pos: int) -> None:
    batch.fill([7] * len(seqs), [pos] * len(seqs), seqs, [1] * len(seqs))
    assert ctx.decode(batch) == 0
    ctx.synchronize()


def argmax_ms(logits: np.ndarray) -> float:
    start = time.perf_counter()
    logits.argmax(1)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=48)
    args = parser.parse_args()
    n, steps = args.streams, args.steps
    model = LlamaModel(args.model, 0, 0)
    ctx, batch = prefilled(model, n, steps, args.threads)
    figures: dict[str, list[float]] = {"decode": [], "cold": [], "2nd": [], "warm": []}
    everyone = list(range(n))
    for step in range(steps):
        start = time.perf_counter()
        decode(ctx, batch, everyone, PROMPT + step)
        figures["decode"].append((time.perf_counter() - start) * 1000)
        logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx.ptr, 0), (n, model.n_vocab))
        figures["cold"].append(argmax_ms(logits))
        figures["2nd"].append(argmax_ms(logits))
        for _ in range(10):
            argmax_ms(logits)
        figures["warm"].append(argmax_ms(logits))
    ctx.free()
    shape = f"{n} x {model.n_vocab:,} logits ({n * model.n_vocab * 4 / 2**20:.0f} MiB)"
    print(f"{shape}, {args.threads} thread(s), medians of {steps} steps, ms:")
    for name, values in figures.items():
        label = name if name == "decode" else f"argmax {name}"
        print(f"  {label:<13} {statistics.median(values):7.2f}")
    for halves in (1, 2, 1, 2):
        ctx, batch = prefilled(model, n, steps, args.threads)
        parts = [list(range(n))[k * n // halves : (k + 1) * n // halves] for k in range(halves)]
        start = time.perf_counter()
        for step in range(steps):
            for part in parts:
                decode(ctx, batch, part, PROMPT + step)
        tps = n * steps / (time.perf_counter() - start)
        ctx.free()
        print(f"  split decode  {'whole' if halves == 1 else 'halves':<6} {tps:7,.0f} t/s")
    model.free()


if __name__ == "__main__":
    main()
