"""One decode step with prompts finishing in it, decoded two ways, side by side: as one
`llama_decode`, and with the last tokens apart (the prompts first without their last tokens,
then one token of every sequence). The figures behind step_plan.py's `APART_*` thresholds.

    .venv/bin/python bench/bench_step_split.py [--model GGUF] [--threads 2] [--slots 8]

Each case is `running + prompt lengths`: running sequences give one token each (with a row),
the prompts are read whole (a row at their last token). Prints the median milliseconds of each
way and what the split gains; the planner's choice is shown beside it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from infertui.core.engine.bundled import bundled_model_path
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel
from infertui.core.engine.llama.step_plan import last_tokens_apart

PAST = 4  # tokens already in a running sequence's cells

Item = tuple[int, int, int, bool]  # sequence, first position, tokens, row at the last


class Steps:
    def __init__(self, model: Path, threads: int, slots: int) -> None:
        self.model = LlamaModel(str(model), 0, 0)
        self.ctx = LlamaContext(self.model, 1024, slots, 512, threads)
        self.batch = Batch(512 + slots)
        self.slots = slots

    def decode(self, items: list[Item]) -> None:
        tokens, positions, seqs, logits = [], [], [], []
        for seq, start, n, row in items:
            tokens += [1000 + start + k for k in range(n)]
            positions += range(start, start + n)
            seqs += [seq] * n
            logits += [0] * (n - 1) + [int(row)]
        self.batch.fill(tokens, positions, seqs, logits)
        if self.ctx.decode(self.batch) != 0:
            raise RuntimeError("llama_decode failed")

    def time(self, running: int, lengths: list[int], apart: bool, reps: int) -> float:
        times = []
        for rep in range(reps + 1):  # the first is a warm-up
            for seq in range(self.slots):
                self.ctx.free_sequence(seq)
            if running:
                self.decode([(s, 0, PAST, False) for s in range(running)])
            start = time.perf_counter()
            rectangle: list[Item] = [(s, PAST, 1, True) for s in range(running)]
            prompts = [(running + i, n) for i, n in enumerate(lengths)]
            if apart:
                self.decode([(seq, 0, n - 1, False) for seq, n in prompts if n > 1])
                self.decode(rectangle + [(seq, n - 1, 1, True) for seq, n in prompts])
            else:
                self.decode(rectangle + [(seq, 0, n, True) for seq, n in prompts])
            if rep:
                times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)


def cases(slots: int) -> list[tuple[int, list[int]]]:
    rng = random.Random(1)

    def burst(k: int) -> list[int]:
        return sorted(rng.randint(12, 18) for _ in range(k))

    if slots >= 64:
        return [(0, [14]), (0, [12, 14]), (0, [12, 13, 15]), (0, burst(16)), (0, burst(32)),
                (16, burst(16)), (48, burst(8)), (60, burst(4)), (63, [14])]  # fmt: skip
    return [(0, [13]), (0, [12, 14]), (0, [14, 14]), (0, [12, 13, 15]),
            (0, [10, 11, 11, 12, 12, 13, 14, 14]), (1, [11, 12, 12, 13, 14, 15, 15]),
            (2, [12, 14]), (3, [13]), (5, [13]), (7, [13])]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF (default: the bundled Gemma)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    steps = Steps(args.model or bundled_model_path(), args.threads, args.slots)
    print("| running + prompts | one decode ms | last tokens apart ms | gain | planner |")
    print("|---|---|---|---|---|")
    for running, lengths in cases(args.slots):
        one = steps.time(running, lengths, False, args.reps)
        two = steps.time(running, lengths, True, args.reps)
        chunks = {running + i: n for i, n in enumerate(lengths)}
        apart = last_tokens_apart(range(running), chunks, chunks, [], steps.ctx.n_ubatch)
        choice = "apart" if apart else "one"
        print(f"| {running} + {lengths} | {one:.1f} | {two:.1f} | {one - two:+.1f} | {choice} |")


if __name__ == "__main__":
    main()
