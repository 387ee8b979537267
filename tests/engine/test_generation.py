"""Generation with the real model: determinism, batching parity, UTF-8, stop strings (issue 2 §2, §6)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.events import Admitted, Finished, TokenText
from infertui.core.scheduler import Job

from ..jobs import submit

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0.0, max_tokens=48)
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "In 1969, the first humans",
    "A recipe for pancakes: first,",
    "The quick brown fox",
    "Water boils at",
]


async def stream(job: Job) -> tuple[list[str], Finished]:
    chunks = [e.text async for e in job.events() if isinstance(e, TokenText)]
    assert job.result is not None
    return chunks, job.result


async def test_same_prompt_and_seed_at_temperature_0_give_identical_text(make_pool) -> None:
    pool = await make_pool(parallel=1)
    first, _ = await submit(pool, prompt=PROMPTS[0], params=GREEDY).text()
    second, _ = await submit(pool, prompt=PROMPTS[0], params=GREEDY).text()
    assert first and first == second


async def test_a_seed_makes_sampling_reproducible(make_pool) -> None:
    pool = await make_pool(parallel=1)
    params = SamplingParams(temperature=1.0, seed=1234, max_tokens=32)
    runs = [(await submit(pool, prompt=PROMPTS[1], params=params).text())[0] for _ in range(2)]
    other = (
        await submit(pool, prompt=PROMPTS[1], params=params.model_copy(update={"seed": 99})).text()
    )[0]
    assert runs[0] == runs[1]
    assert other != runs[0]


_SOLO: list[tuple[str, Finished]] = []


async def solo_texts(make_pool) -> list[tuple[str, Finished]]:
    """Each prompt's text alone, on a deterministic 1-slot pool: the same for both tests that
    compare with it, so made once."""
    if not _SOLO:
        pool = await make_pool(parallel=1, engine_id="solo", deterministic=True)
        _SOLO.extend([await submit(pool, prompt=p, params=GREEDY).text() for p in PROMPTS])
        await pool.close()
    return _SOLO


async def test_eight_concurrent_jobs_on_default_slots_give_exactly_their_solo_text(
    make_pool,
) -> None:
    """In deterministic mode batching does not change results: with the default 4 slots, 8
    concurrent jobs at temperature 0 each give the very text that job gives alone."""
    solo = await solo_texts(make_pool)
    pool = await make_pool(parallel=4, deterministic=True)
    jobs = [submit(pool, prompt=p, params=GREEDY) for p in PROMPTS]
    batched = await asyncio.gather(*(job.text() for job in jobs))
    for (solo_text, solo_end), (text, end), prompt in zip(solo, batched, PROMPTS, strict=True):
        assert end.finish_reason == solo_end.finish_reason, prompt
        assert end.timings.tokens_out == solo_end.timings.tokens_out, prompt
        assert text == solo_text, prompt
    assert pool.metrics_snapshot().completed == 8


async def test_eight_slots_decoding_together_complete_in_full_and_start_exactly(
    make_pool,
) -> None:
    """With 8 sequences in one llama_decode, ggml's CPU kernels switch paths and some rows'
    logits move by up to ~1.3, so a greedy near-tie can flip late in a reply. What holds:
    every job completes in full, its first token is exact (prompts are prefilled alone), and
    most replies are identical to their solo text."""
    solo = await solo_texts(make_pool)
    pool = await make_pool(parallel=8, deterministic=True)
    jobs = [submit(pool, prompt=p, params=GREEDY) for p in PROMPTS]
    batched = await asyncio.gather(*(stream(job) for job in jobs))
    identical = 0
    for (solo_text, _solo_end), (chunks, end) in zip(solo, batched, strict=True):
        assert end.finish_reason in ("stop", "length")
        if end.finish_reason == "length":
            assert end.timings.tokens_out == GREEDY.max_tokens
        assert solo_text.startswith(chunks[0]), "the first token comes from an exact prefill"
        identical += "".join(chunks) == solo_text
    assert identical >= len(PROMPTS) // 2, f"only {identical} of 8 replies match their solo text"


async def test_chat_messages_use_the_models_turn_format(make_pool) -> None:
    pool = await make_pool(parallel=1)
    assert "gguf template" in pool.engine.chat_format.description  # ChatML, from the GGUF
    messages = [
        ChatMessage(role="system", content="Answer in one word."),
        ChatMessage(role="user", content="What color is the sky?"),
    ]
    job = submit(pool, messages=messages, params=GREEDY)
    # system + user turn, rendered with ChatML's <|im_start|> markers, is more than the text
    assert job.tokens_in > 12
    events = [e async for e in job.events()]
    assert isinstance(events[0], Admitted)
    assert isinstance(events[-1], Finished) and events[-1].finish_reason in ("stop", "length")


async def test_emoji_and_cjk_stream_valid_utf8_in_every_chunk(make_pool) -> None:
    """A character whose bytes span tokens is never cut between chunks. What is compared is
    the stream with the reply's own bytes (its tokens', joined): a model may itself write bytes
    that are no UTF-8 (a byte-level BPE can), and those may show as U+FFFD, but only there."""
    pool = await make_pool(parallel=2)
    prompts = ["日本の首都は東京です。中国の首都は", "I love 🍕 and 🍣 and 🎉🎉 because 😀"]
    params = SamplingParams(temperature=0, max_tokens=64, logprobs=0)
    jobs = [submit(pool, prompt=p, params=params) for p in prompts]
    results = await asyncio.gather(*(job_events(job) for job in jobs))
    produced = "".join(e.text for events, _ in results for e in events)
    assert any(ord(ch) > 0x2E80 for ch in produced), "the model should answer with CJK or emoji"
    for events, end in results:
        assert end.finish_reason in ("stop", "length")
        written = b"".join(lp.token for e in events for lp in e.logprobs)
        assert "".join(e.text for e in events) == written.decode("utf-8", "replace")
        try:
            written.decode("utf-8")
        except UnicodeDecodeError:
            continue  # the model's own broken bytes: the join above is what can be asked
        for event in events:
            assert "\ufffd" not in event.text, f"broken UTF-8 in {event.text!r}"
            event.text.encode("utf-8")  # no lone surrogates either


async def job_events(job: Job) -> tuple[list[TokenText], Finished]:
    events = [e async for e in job.events() if isinstance(e, TokenText)]
    assert job.result is not None
    return events, job.result


async def test_a_stop_string_is_never_emitted_not_even_its_first_part(make_pool) -> None:
    pool = await make_pool(parallel=1)
    free_text, _ = await submit(pool, prompt=PROMPTS[1], params=GREEDY).text()
    words = free_text.split()
    assert len(words) > 6
    stop = " " + " ".join(words[4:6])  # two words in the middle, with the leading space
    cut = free_text.index(stop)

    job = submit(pool, prompt=PROMPTS[1], params=GREEDY.model_copy(update={"stop": (stop,)}))
    chunks, end = await stream(job)
    assert end.finish_reason == "stop"
    assert "".join(chunks) == free_text[:cut]
    assert not any(stop[:2] in chunk for chunk in chunks[-1:]), "no part of the stop string"


async def test_max_tokens_ends_with_length(make_pool) -> None:
    pool = await make_pool(parallel=1)
    _, end = await submit(
        pool, prompt=PROMPTS[2], params=SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    ).text()
    assert end.finish_reason == "length"
    assert end.timings.tokens_out == 5


async def test_per_job_timings_are_reported(make_pool) -> None:
    pool = await make_pool(parallel=1)
    _, end = await submit(
        pool, prompt=PROMPTS[3], params=SamplingParams(temperature=0, max_tokens=16)
    ).text()
    t = end.timings
    assert t.tokens_in > 0 and t.tokens_out > 0
    assert t.ttft_ms is not None and 0 < t.ttft_ms < t.total_ms
    assert t.prefill_ms > 0 and t.queue_wait_ms >= 0
    assert t.decode_tps > 1.0


async def test_the_prompt_rate_and_ttft_are_known_as_a_reply_starts(make_pool) -> None:
    """The dashboards' prompt tokens/s and TTFT move with a job's first text, not at its end
    (they were blank through a whole reply), and a prompt whose head came from kept cells
    counts only the tokens it read."""
    pool = await make_pool(parallel=1)
    head = "A long story about a lighthouse keeper and the sea. " * 12
    job = submit(
        pool, prompt=head, params=SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    )
    running = None
    async for event in job.events():  # read to the end: leaving early would cancel the job
        if isinstance(event, TokenText) and running is None:
            running = pool.metrics_snapshot()
    assert running is not None and running.completed == 0
    assert running.prefill_tps_recent > 0
    assert running.ttft_ms.p50 is not None and running.ttft_ms.p50 > 0
    assert job.result is not None and job.result.finish_reason == "length"
    await job.wait_released()
    after = pool.metrics_snapshot()
    assert after.prefill_tps_recent == running.prefill_tps_recent  # counted once, not again
    assert after.ttft_ms == running.ttft_ms
    follow = submit(pool, prompt=head + "The keeper", params=SamplingParams(max_tokens=4))
    _, end = await follow.text()
    assert end.timings.tokens_cached > 0
    metrics = pool.metrics
    assert metrics.tokens_read == metrics.tokens_in - end.timings.tokens_cached


async def test_a_written_bos_is_not_doubled(make_pool, swa_model_path: Path) -> None:
    """On a model that reads a BOS (Gemma 3, the suite's second model), a completion prompt
    that writes `<bos>` out is read as llama-server reads it: one BOS, not two."""
    pool = await make_pool(parallel=1, path=swa_model_path)
    assert pool.engine is not None
    assert pool.engine.tokenizer.text_prompt("<bos>Hi") == pool.engine.tokenizer.text_prompt("Hi")
    assert len(pool.engine.tokenizer.text_prompt("<start_of_turn>")) == 2  # the BOS and the token
