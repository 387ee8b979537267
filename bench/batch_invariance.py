"""Whether a row's logits depend on the graph it is computed in, with flash attention on and
off (why `flash_attention` keeps llama.cpp's choice on the CPU).

    .venv/bin/python bench/batch_invariance.py [MODEL.gguf] [--guesses 6] [--threads 2]

One sequence reads a prompt, then decodes `--guesses` tokens one a step (as a stream without
guesses does). The same tokens are then decoded again from the prompt's cells in one graph,
each with its logits row (as speculative decoding checks its guesses), and beside another
sequence's step (as a batch of streams does). Printed: the largest difference of any logit
from the one-a-step rows, per row. 0 means the same numbers; without flash attention ggml
multiplies a single row with its own dot products and several with llamafile's tiles, which
round otherwise, and greedy text then parts at near ties.
"""

from __future__ import annotations

import argparse
import logging

import llama_cpp as llama
import numpy as np
from bench_speculative import ask  # bench/ is this script's folder: on sys.path

from infertui.core.engine.bundled import bundled_model_path
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel

log = logging.getLogger("batch_invariance")


class Probe:
    def __init__(self, model: LlamaModel, flash_attn: int, threads: int, guesses: int) -> None:
        self.model = model
        self.ctx = LlamaContext(model, 512, 2, 512, threads, flash_attn, guesses)
        self.batch = Batch(600)
        self.prompts = [
            model.tokenize(ask(i)[0]["content"], add_bos=model.add_bos, parse_special=False)
            for i in range(2)
        ]

    def row(self, i: int) -> np.ndarray:
        logits = llama.llama_get_logits_ith(self.ctx.ptr, i)
        return np.ctypeslib.as_array(logits, shape=(self.model.n_vocab,)).copy()

    def decode(self, tokens: list[tuple[int, int, int]], all_rows: bool = True) -> list[np.ndarray]:
        """(token, position, sequence); the rows of all, or of the last, in that order."""
        self.batch.clear()
        for i, (token, pos, seq) in enumerate(tokens):
            self.batch.add(token, pos, seq, all_rows or i == len(tokens) - 1)
        if self.ctx.decode(self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [self.row(i) for i in range(len(tokens)) if self.batch.logits[i]]

    def restart(self) -> list[int]:
        """Both prompts read anew; the first token each would decode next."""
        firsts = []
        for seq, prompt in enumerate(self.prompts):
            self.ctx.free_sequence(seq)
            rows = self.decode([(t, pos, seq) for pos, t in enumerate(prompt)], all_rows=False)
            firsts.append(int(rows[-1].argmax()))
        return firsts

    def compare(self, n: int) -> dict[str, list[float]]:
        first, other = self.restart()
        start = len(self.prompts[0])
        tokens, alone = [first], []
        for k in range(n):  # one a step: the stream without guesses
            (row,) = self.decode([(tokens[-1], start + k, 0)])
            alone.append(row)
            tokens.append(int(row.argmax()))
        checked = [(t, start + k, 0) for k, t in enumerate(tokens[:n])]
        self.restart()
        together = self.decode(checked)
        self.restart()
        beside = self.decode([*checked, (other, len(self.prompts[1]), 1)])[:n]
        return {
            "checked together": diffs(alone, together),
            "together, beside another stream": diffs(alone, beside),
        }


def diffs(reference: list[np.ndarray], rows: list[np.ndarray]) -> list[float]:
    return [float(np.abs(a - b).max()) for a, b in zip(reference, rows, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a GGUF (default: the bundled model)")
    parser.add_argument("--guesses", type=int, default=6, help="rows checked in one graph")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model = LlamaModel(args.model or str(bundled_model_path()), 0, None)
    log.info("%s: largest |logit difference| from the rows decoded one a step", model.description)
    for name, flash in (("on", 1), ("off", 0)):
        probe = Probe(model, flash, args.threads, args.guesses)
        for what, found in probe.compare(args.guesses).items():
            log.info(
                "flash attention %-3s  %-32s %s", name, what, " ".join(f"{d:.1e}" for d in found)
            )
        probe.ctx.free()


if __name__ == "__main__":
    main()
