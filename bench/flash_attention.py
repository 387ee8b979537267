"""Flash attention on or off, side by side in one process: decode and prefill tokens/s as the
context grows, for one model on this machine (the choice `flash_attention` in
core/engine/llama/engine.py makes for CPU engines).

    .venv/bin/python bench/flash_attention.py MODEL.gguf --contexts 32,256,1024 \\
        [--streams 1] [--tokens 32] [--threads 2] [--rounds 3]

For each context length: the prompt is prefilled (timed: prefill tokens/s), then `tokens`
single-token decodes follow for every stream (timed: decode tokens/s), once with llama.cpp's
auto (on, where its device supports it) and once off, alternating round by round.
"""

from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp

from infertui.core.engine import default_threads
from infertui.core.engine.llama.devices import gpus
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel

MODES = {"auto": -1, "off": 0}
UBATCH = 512


def timed(
    ctx: LlamaContext, batch: Batch, streams: int, prompt: int, tokens: int
) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) on an emptied context."""
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx.ptr), True)
    start = time.perf_counter()
    for seq in range(streams):
        for first in range(0, prompt, UBATCH):
            n = min(UBATCH, prompt - first)
            batch.fill([100 + i % 50 for i in range(n)], list(range(first, first + n)),
                       [seq] * n, [0] * (n - 1) + [1])  # fmt: skip
            assert ctx.decode(batch) == 0
    llama_cpp.llama_synchronize(ctx.ptr)
    prefill = streams * prompt / (time.perf_counter() - start)
    start = time.perf_counter()
    for step in range(tokens):
        batch.fill([200 + step % 7] * streams, [prompt + step] * streams, list(range(streams)),
                   [1] * streams)  # fmt: skip
        assert ctx.decode(batch) == 0
        llama_cpp.llama_synchronize(ctx.ptr)
    return prefill, streams * tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--contexts", default="32,128,256,512,2048")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    model = LlamaModel(args.model, -1 if gpus() else 0, None)
    size = max(contexts) + args.tokens + 16
    ctxs = {
        name: LlamaContext(model, size, args.streams, UBATCH, args.threads, flash)
        for name, flash in MODES.items()
    }
    batch = Batch(max(UBATCH, args.streams))
    print(f"{args.model}: {args.streams} stream(s), {args.threads} thread(s); tokens/s, "
          f"median of {args.rounds}")  # fmt: skip
    print("| context | decode auto | decode off | off / auto | prefill auto | prefill off | "
          "off / auto |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for prompt in contexts:
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
        for _ in range(args.rounds):
            for name, ctx in ctxs.items():
                runs[name].append(timed(ctx, batch, args.streams, prompt, args.tokens))
        pre = {name: statistics.median(r[0] for r in rs) for name, rs in runs.items()}
        dec = {name: statistics.median(r[1] for r in rs) for name, rs in runs.items()}
        print(f"| {prompt} | {dec['auto']:,.1f} | {dec['off']:,.1f} | "
              f"{dec['off'] / dec['auto']:.2f} | {pre['auto']:,.0f} | {pre['off']:,.0f} | "
              f"{pre['off'] / pre['auto']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
