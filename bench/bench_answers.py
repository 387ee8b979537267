"""Whether a model's replies end by themselves, under several sampling settings, through the
real Pool path (issue 34 §2: the bundled model's default sampling). Prints figures; not a test.

    .venv/bin/python bench/bench_answers.py [--model PATH] [--seeds 4] [--max-tokens 256]
    .venv/bin/python bench/bench_answers.py --per-question --seeds 16   # the default, by question

For each setting, ten plain questions are asked once per seed: how many replies end with
`stop` (not `length`), how many repeat a line, and the replies' median and longest length.
The settings compared: llama.cpp's defaults, Ollama's, the model card's (temperature 0.2,
top-p 0.9) with and without a repeat penalty, and greedy. `--per-question` asks under the
model's own default instead (no sampling field but the seed), and says for each question how
many replies went wrong: ran to 256 tokens or past, did not end, or repeated a line (what
tests/http/test_default_model.py and the chat app's test assert).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
from pathlib import Path
from typing import Any

from infertui.core.engine import BUNDLED_SAMPLING, EngineSpec, bundled_model_path, is_bundled
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.events import Finished, TokenText
from infertui.core.scheduler import Pool

QUESTIONS = [
    "What is the capital of France?",
    "Why is the sky blue?",
    "Write a Python function that reverses a string.",
    "Give me three tips for better sleep.",
    "What is 12 times 7?",
    "Who wrote Romeo and Juliet?",
    "Explain what a GPU is in two sentences.",
    "Say hi.",
    "Translate 'good morning' into Spanish.",
    "What is photosynthesis?",
]

SETTINGS: dict[str, dict[str, Any]] = {
    "llama.cpp defaults (0.8, top-p 0.95, min-p 0.05)": {},
    "Ollama's (0.8, top-p 0.9, min-p 0, repeat 1.1)": {
        "temperature": 0.8, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
    },
    "card (0.2, top-p 0.9)": {"temperature": 0.2, "top_p": 0.9},
    "card + repeat 1.1 (the bundled default)": {
        "temperature": 0.2, "top_p": 0.9, "repeat_penalty": 1.1,
    },
    "greedy": {"temperature": 0.0},
}  # fmt: skip


async def ask(pool: Pool, question: str, params: SamplingParams) -> tuple[str, str, int]:
    job = pool.submit(messages=[ChatMessage(role="user", content=question)], params=params)
    text, reason, tokens = [], "", 0
    async for event in job.events():
        if isinstance(event, TokenText):
            text.append(event.text)
        elif isinstance(event, Finished):
            reason, tokens = event.finish_reason, event.timings.tokens_out
    return "".join(text), reason, tokens


def repeats_a_line(text: str) -> bool:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return len(lines) != len(set(lines))


def went_wrong(text: str, reason: str, tokens: int) -> bool:
    return reason != "stop" or tokens >= 256 or repeats_a_line(text)


async def per_question(pool: Pool, seeds: int) -> None:
    wrong = {question: 0 for question in QUESTIONS}
    lengths: dict[str, list[int]] = {question: [] for question in QUESTIONS}
    for seed in range(seeds):
        params = SamplingParams(seed=seed, max_tokens=400)  # the engine's defaults otherwise
        replies = await asyncio.gather(*(ask(pool, q, params) for q in QUESTIONS))
        for question, (text, reason, tokens) in zip(QUESTIONS, replies, strict=True):
            wrong[question] += went_wrong(text, reason, tokens)
            lengths[question].append(tokens)
    for question in QUESTIONS:
        print(
            f"{wrong[question]:3d}/{seeds} went wrong, tokens median "
            f"{statistics.median(lengths[question]):.0f}, longest {max(lengths[question])}: "
            f"{question}",
            flush=True,
        )
    total = sum(wrong.values())
    print(f"all: {total}/{seeds * len(QUESTIONS)} went wrong", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(bundled_model_path()))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--per-question", action="store_true")
    args = parser.parse_args()
    # The settings are compared as written, over llama.cpp's defaults; --per-question takes
    # the model's own, as the host gives the bundled file its sampling (host/service.py).
    own = BUNDLED_SAMPLING if args.per_question and is_bundled(Path(args.model)) else ()
    spec = EngineSpec(
        args.model, "bench", n_ctx=1024, n_parallel=4, n_threads=args.threads, sampling=own
    )
    pool = await Pool.start(spec, queue_capacity=64)
    if args.per_question:
        try:
            await per_question(pool, args.seeds)
        finally:
            await pool.close()
        return
    try:
        for name, fields in SETTINGS.items():
            runs = []
            for seed in range(args.seeds):
                params = SamplingParams(seed=seed, max_tokens=args.max_tokens, **fields)
                runs += await asyncio.gather(*(ask(pool, q, params) for q in QUESTIONS))
            stops = sum(reason == "stop" for _, reason, _ in runs)
            looping = sum(repeats_a_line(text) for text, _, _ in runs)
            lengths = [tokens for _, _, tokens in runs]
            print(
                f"{name}: stop {stops}/{len(runs)}, a line repeated in {looping}, tokens "
                f"median {statistics.median(lengths):.0f}, longest {max(lengths)}",
                flush=True,
            )
    finally:
        await pool.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
