"""Raw llama.cpp batched decode speed, as llama-batched-bench measures it, from Python.

    .venv/bin/python bench/raw_decode.py MODEL.gguf --streams 64 --tokens 64 [--threads 1]

Prefills `streams` sequences of 16 tokens, then times `tokens` decodes of one token per
sequence (logits on, nothing sampled). Prints the decode tokens/s last on its line. bench_gpu
uses it when no llama-batched-bench binary is given.
"""

from __future__ import annotations

import argparse
import time

from infertui.core.engine import default_threads
from infertui.core.engine.llama.devices import gpus
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel

PROMPT = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--ctx", type=int, default=0, help="tokens per sequence")
    parser.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    args = parser.parse_args()
    n = args.streams
    model = LlamaModel(args.model, -1 if gpus() else 0, 0)
    flash = {"auto": -1, "off": 0, "on": 1}[args.flash_attn]
    ctx = LlamaContext(
        model, args.ctx or PROMPT + args.tokens + 8, n, n * PROMPT, args.threads, flash
    )
    batch = Batch(n * PROMPT)
    batch.fill(
        [100 + i % 50 for i in range(n * PROMPT)],
        [i % PROMPT for i in range(n * PROMPT)],
        [i // PROMPT for i in range(n * PROMPT)],
        [int(i % PROMPT == PROMPT - 1) for i in range(n * PROMPT)],
    )
    assert ctx.decode(batch) == 0
    start = time.perf_counter()
    for step in range(args.tokens):
        batch.fill([200] * n, [PROMPT + step] * n, list(range(n)), [1] * n)
        assert ctx.decode(batch) == 0
    import llama_cpp

    llama_cpp.llama_synchronize(ctx.ptr)
    elapsed = time.perf_counter() - start
    print(f"{n} streams x {args.tokens} tokens: {n * args.tokens / elapsed:.1f}")


if __name__ == "__main__":
    main()
