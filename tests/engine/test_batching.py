"""Prefill batched with decode, on the real engine (issue 10 §2): mixed prompts of 1 to 3,000
tokens all complete, deterministic mode gives each job its solo text, prompts share a step
fairly, and a cancel in the middle of a prefill frees the slot at once. Jobs with the same
prompt read it once (issue 14 §3, `n` > 1)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from infertui.core.engine.llama.native import Batch, LlamaContext
from infertui.core.engine.llama.step import Stepper
from infertui.core.engine.llama.step_cost import StepCost
from infertui.core.engine.llama.step_plan import output_ubatches
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.errors import ErrorKind
from infertui.core.protocol.events import Finished, TokenLogprob, TokenText
from infertui.core.scheduler import Job, Pool

from ..conftest import wait_until
from ..jobs import submit

pytestmark = pytest.mark.model

SHORT = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
LENGTHS = [1, 3, 9, 20, 45, 80, 130, 200, 320, 480, 700, 1000, 1400, 1900, 2500, 3000]


def prompt_of(pool: Pool, tokens: int, topic: int) -> str:
    """A plain-text prompt of about `tokens` tokens (BOS included)."""
    engine = pool.engine
    assert engine is not None
    words = f"Item {topic}: the river runs past the old mill and on to the sea. " * 400
    start = 1 if engine.model.add_bos else 0  # the BOS the prompt's reading adds again
    ids = engine.tokenizer.text_prompt(words)[:tokens]
    text = engine.model.detokenize(ids[start:])
    assert abs(len(engine.tokenizer.text_prompt(text)) - tokens) <= 2
    return text


async def run_all(pool: Pool, prompts: list[str]) -> list[tuple[str, Finished]]:
    return await asyncio.gather(*(job.text() for job in submit_all(pool, prompts)))


def submit_all(pool: Pool, prompts: list[str], params: SamplingParams = SHORT) -> list[Job]:
    return [submit(pool, prompt=p, params=params) for p in prompts]


PROBE = SHORT.model_copy(update={"logprobs": 5})  # SHORT, with each token's distribution


async def test_sixteen_mixed_prompts_of_1_to_3000_tokens_all_complete(
    make_pool, cut_model_path: Path
) -> None:
    pool = await make_pool(parallel=4, ctx=3100, batch=512, path=cut_model_path)
    prompts = [prompt_of(pool, n, i) for i, n in enumerate(LENGTHS)]
    results = await run_all(pool, prompts)
    for (text, end), n in zip(results, LENGTHS, strict=True):
        assert end.finish_reason in ("stop", "length"), n
        assert abs(end.timings.tokens_in - n) <= 2
        if end.finish_reason == "length":
            assert end.timings.tokens_out == SHORT.max_tokens and text
    assert pool.metrics_snapshot().completed == len(LENGTHS)
    assert pool.engine is not None and pool.engine.busy_slots == 0


async def test_deterministic_mode_gives_every_job_its_solo_text(make_pool) -> None:
    """On the whole model: its solo pool (1 slot) and the batched one (4) attend over KV
    caches of other sizes, which moves logits in float rounding, and the cut model's flat
    distributions then break near ties the other way (seen at 480 tokens). Prompts of up to
    480 tokens in chunks of 96 are split as those of up to 3,000 are in chunks of 512 (one to
    six chunks), at a ninth of the reading."""
    lengths = LENGTHS[: LENGTHS.index(480) + 1]
    solo = await make_pool(parallel=1, ctx=3100, batch=96, engine_id="solo", deterministic=True)
    prompts = [prompt_of(solo, n, i) for i, n in enumerate(lengths)]
    alone = [await submit(solo, prompt=p, params=SHORT).text() for p in prompts]
    await solo.close()
    pool = await make_pool(parallel=4, ctx=3100, batch=96, deterministic=True)
    together = await run_all(pool, prompts)
    for (solo_text, solo_end), (text, end), n in zip(alone, together, lengths, strict=True):
        assert (text, end.finish_reason) == (solo_text, solo_end.finish_reason), n


async def test_a_short_prompt_is_not_kept_waiting_behind_a_long_one(
    make_pool, cut_model_path: Path
) -> None:
    """The long prompt is admitted first; with its prompt shared fairly, the short one's first
    token comes long before the long one has been read."""
    pool = await make_pool(parallel=2, ctx=3100, batch=128, path=cut_model_path)
    long_job = submit(pool, prompt=prompt_of(pool, 3000, 1), params=SHORT)
    engine = pool.engine
    assert engine is not None
    await wait_until(  # the long prompt is in its first chunks
        lambda: (
            long_job.request.slot is not None and engine.sequence_length(long_job.request.slot) > 0
        ),
        seconds=60,
    )
    short_job = submit(pool, prompt=prompt_of(pool, 20, 2), params=SHORT)
    (_, short_end), (_, long_end) = await asyncio.gather(short_job.text(), long_job.text())
    assert short_end.timings.ttft_ms is not None and long_end.timings.ttft_ms is not None
    assert short_end.timings.ttft_ms < long_end.timings.ttft_ms / 3


async def test_running_streams_keep_going_while_a_long_prompt_is_read(
    make_pool, cut_model_path: Path
) -> None:
    """A long prompt holds running streams back by at most one batch per step: a stream that
    is decoding keeps producing tokens while 3,000 prompt tokens go in beside it."""
    pool = await make_pool(parallel=2, ctx=3100, batch=128, path=cut_model_path)
    params = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
    runner = submit(pool, prompt="Once upon a time", params=params)
    stamps: list[float] = []

    async def consume() -> None:
        async for event in runner.events():
            if isinstance(event, TokenText):
                stamps.append(time.perf_counter())

    consumer = asyncio.create_task(consume())
    while len(stamps) < 5:
        await asyncio.sleep(0.01)
    long_job = submit(pool, prompt=prompt_of(pool, 3000, 3), params=SHORT)
    _, long_end = await long_job.text()
    during = [t for t in stamps if t > stamps[4]]
    runner.cancel()
    await consumer
    prefill_s = long_end.timings.prefill_ms / 1000
    assert len(during) >= 3000 // 128 // 2, "the stream kept decoding during the long prefill"
    assert prefill_s > 0


async def test_a_cancel_in_the_middle_of_a_prefill_frees_the_slot(make_pool) -> None:
    pool = await make_pool(parallel=1, ctx=3100, batch=64)
    job = submit(pool, prompt=prompt_of(pool, 3000, 4), params=SHORT)
    engine = pool.engine
    assert engine is not None
    for _ in range(500):  # until some, not all, of the prompt is in the KV cache
        cells = engine.sequence_length(0)
        if 0 < cells < 3000:
            break
        await asyncio.sleep(0.005)
    assert 0 < engine.sequence_length(0) < 3000, "caught the prompt half-read"
    assert job.cancel()
    await asyncio.wait_for(job.wait_released(), 10)
    assert engine.sequence_length(0) == 0 and engine.busy_slots == 0
    text, end = await submit(pool, prompt="The sky is", params=SHORT).text()
    assert end.finish_reason in ("stop", "length") and text


@pytest.mark.parametrize("backend", [False, True], ids=["host sampling", "graph sampling"])
async def test_prompts_joining_a_running_stream_give_all_their_rows_in_one_rectangle(
    make_pool, monkeypatch: pytest.MonkeyPatch, backend: bool
) -> None:
    """Seven prompts of 9 to 40 tokens join a running stream. Each decode that carries logits
    rows carries them in one ubatch: the prompts go first without their last tokens, which
    then ride with the running stream's token (step_plan.py, "Last tokens apart"). On the
    host, each prompt's next-token distribution is still the one it gets alone; in the graph
    (whose chains give no logprobs), every job still samples its tokens."""
    rows_in: list[int] = []  # per decode with rows: in how many ubatches they are
    decode = LlamaContext.decode

    def counting(ctx: LlamaContext, batch: Batch) -> int:
        seqs, logits = batch.seq[: batch.n].tolist(), batch.logits[: batch.n].tolist()
        rows = {seq for seq, wanted in zip(seqs, logits, strict=True) if wanted}
        if rows:
            rows_in.append(output_ubatches(dict(Counter(seqs)), rows, ctx.n_ubatch))
        return decode(ctx, batch)

    pool = await make_pool(parallel=8, backend_sampling=backend)
    prompts = [prompt_of(pool, n, i) for i, n in enumerate((9, 12, 15, 19, 24, 31, 40))]
    probe = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, logprobs=5)
    if backend:
        probe = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    running = submit(pool, prompt="The sea", params=SamplingParams(max_tokens=400, ignore_eos=True))
    for _ in range(1000):
        if running.tokens_out >= 2:
            break
        await asyncio.sleep(0.005)
    monkeypatch.setattr(LlamaContext, "decode", counting)
    together = [submit(pool, prompt=p, params=probe) for p in prompts]
    results = [await job.text() for job in together]
    assert running.tokens_out < 400, "the prompts were read while the stream was running"
    running.cancel()
    assert rows_in and set(rows_in) == {1}, rows_in
    assert all(end.timings.tokens_out == 4 and text for text, end in results)
    if not backend:
        solo = await make_pool(parallel=1, engine_id="solo")
        for prompt, job in zip(prompts, together, strict=True):
            alone = submit(solo, prompt=prompt, params=probe)
            await alone.text()
            assert_same_distribution(job.logprobs[0], alone.logprobs[0])


@pytest.mark.parametrize("backend", [False, True], ids=["host sampling", "graph sampling"])
async def test_the_same_prompt_asked_three_times_at_once_is_read_once(make_pool, backend) -> None:
    """The `n` choices of one request: the first job reads the prompt, the others copy its
    cells but the last token, and each still computes what the prompt gives alone. Not to the
    bit: the reader reads it in chunks of 64 beside another prompt, the copies read only the
    last token, a fresh pool reads it in one chunk, so on the host each job's greedy tokens
    are compared with the fresh pool's by their distributions (assert_same_greedy); in the
    graph (whose chains give no logprobs) every job gives its tokens."""
    pool = await make_pool(parallel=4, batch=64, backend_sampling=backend)
    prompt = prompt_of(pool, 300, 5)
    params = SHORT if backend else PROBE
    solo = await make_pool(parallel=1, engine_id="solo")  # its kept cells are not this pool's
    alone = submit(solo, prompt=prompt, params=params)
    _, solo_end = await alone.text()
    other = prompt_of(pool, 200, 6)  # a different prompt beside them reads its own
    jobs = submit_all(pool, [prompt, prompt, prompt, other], params)
    results = await asyncio.gather(*(job.text() for job in jobs))
    n = solo_end.timings.tokens_in
    assert sorted(end.timings.tokens_cached for _, end in results[:3]) == [0, n - 1, n - 1]
    assert all(text and end.timings.tokens_out == SHORT.max_tokens for text, end in results)
    if not backend:
        for job in jobs[:3]:
            assert_same_greedy(job.logprobs, alone.logprobs)
    assert results[3][1].timings.tokens_cached == 0
    assert pool.engine is not None and pool.engine.busy_slots == 0


async def test_when_the_job_reading_a_shared_prompt_is_cancelled_the_others_read_it(
    make_pool,
) -> None:
    """The two jobs left each read the prompt themselves, side by side in shares of one
    batch: not the same chunks, so their greedy tokens are compared by their distributions.
    Twenty chunks of 32 give the cancel as many moments to land as 2,000 tokens in 64s did,
    at a third of the reading."""
    pool = await make_pool(parallel=3, ctx=700, batch=32)
    prompt = prompt_of(pool, 640, 7)
    jobs = submit_all(pool, [prompt] * 3, PROBE)
    engine = pool.engine
    assert engine is not None

    def reading() -> list[Job]:  # the job with some, not all, of the prompt in its cells
        slots = [(job, job.request.slot) for job in jobs]
        return [j for j, s in slots if s is not None and 0 < engine.sequence_length(s) < 640]

    for _ in range(500):  # until all three have a slot, and the prompt is half read
        if reading() and all(job.request.slot is not None for job in jobs):
            break
        await asyncio.sleep(0.005)
    (first,) = reading()  # one reads; the other two wait for it
    assert first.cancel()
    others = [job for job in jobs if job is not first]
    results = await asyncio.gather(*(job.text() for job in others))
    for text, end in results:  # each waited for the first, and then read the prompt itself
        assert end.finish_reason in ("stop", "length") and text
        assert end.timings.tokens_cached == 0
    assert_same_greedy(others[0].logprobs, others[1].logprobs)


@pytest.mark.parametrize(
    ("length", "copied"),
    [(300, True), (700, False)],
    ids=["within the window", "beyond the window"],
)
async def test_a_prompt_already_running_is_copied_where_its_cells_are_intact(
    make_pool, swa_model_path: Path, length: int, copied: bool
) -> None:
    """The same prompt asked again while its first job decodes: the cells are copied while
    they hold all the last prompt token attends to. Gemma 3's sliding-window layers (512
    tokens) reuse cells that fall out of the newest token's window, so beyond it the second
    job reads the prompt itself; either way it computes its solo tokens, to float rounding
    (it reads beside the first job's decode, or only its last token on copied cells, and the
    first decodes beside it), so the greedy tokens are compared by their distributions.
    (Gemma 3 270M, the suite's model with sliding-window layers.)"""
    pool = await make_pool(parallel=2, batch=512, path=swa_model_path)
    prompt = prompt_of(pool, length, 8)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=5)
    solo = await make_pool(
        parallel=1, engine_id="solo", path=swa_model_path
    )  # its kept cells are not this pool's
    alone = submit(solo, prompt=prompt, params=params)
    await alone.text()
    first = submit(pool, prompt=prompt, params=params)
    while first.tokens_out < 3:  # decoding, a few tokens past its prompt
        await asyncio.sleep(0.005)
    second = submit(pool, prompt=prompt, params=params)
    end = (await second.text())[1]
    assert end.timings.tokens_cached == (end.timings.tokens_in - 1 if copied else 0)
    assert_same_greedy(second.logprobs, alone.logprobs)
    await first.text()
    assert_same_greedy(first.logprobs, alone.logprobs)


async def test_a_prompt_that_begins_as_a_running_one_copies_that_head(make_pool) -> None:
    """Chats with one system prompt: a job whose prompt begins as a running job's copies the
    cells of that head and decodes only its own question. It computes what a host computes
    from its own kept cells of that head (the prompt cache of the next turn of a chat): the
    same head cells, both prefilled in one chunk, but the question read beside the running
    stream's token here and alone there, so the same distribution to float rounding."""
    pool = await make_pool(parallel=2, batch=512)
    head = prompt_of(pool, 300, 11)
    first = submit(pool, prompt=head + " Question: where does it go?", params=TURN)
    while first.tokens_out < 3:  # decoding, past its prompt
        await asyncio.sleep(0.005)
    asked = head + " Question: who built the mill?"
    probe = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5)
    copied = submit(pool, prompt=asked, params=probe)
    end = (await copied.text())[1]
    assert 290 <= end.timings.tokens_cached < end.timings.tokens_in - 4, end.timings
    other = await make_pool(parallel=1, engine_id="other")
    await submit(other, prompt=head + " Question: where does it go?", params=TURN).text()
    kept = submit(other, prompt=asked, params=probe)
    assert (await kept.text())[1].timings.tokens_cached == end.timings.tokens_cached
    (a,), (b,) = copied.logprobs, kept.logprobs
    assert_same_distribution(a, b)
    await first.text()


@pytest.mark.parametrize(
    ("length", "batch"), [(400, 128), (700, 512)], ids=["within the window", "past the window"]
)
async def test_prompts_with_one_head_arriving_together_read_it_once(
    make_pool, swa_model_path: Path, length: int, batch: int
) -> None:
    """Four jobs with one head and different questions, at once: one reads the head, the
    others wait for its cells and copy them, then read their own questions. Past Gemma 3's
    512-token window the reader's chunk stops at the head's end, so that its cells still hold
    what the questions attend to. The reader computes its solo tokens: read in the same
    chunks, but decoded beside the others' questions, so compared by their distributions."""
    pool = await make_pool(parallel=4, batch=batch, path=swa_model_path)  # several steps
    head = prompt_of(pool, length, 12)
    prompts = [f"{head} Question {k}: what is item {k}?" for k in range(4)]
    jobs = submit_all(pool, prompts, PROBE)
    results = await asyncio.gather(*(job.text() for job in jobs))
    cached = [end.timings.tokens_cached for _, end in results]
    assert sorted(cached)[0] == 0, cached
    assert all(length - 10 <= c < length + 10 for c in sorted(cached)[1:]), cached
    assert all(text and end.finish_reason == "length" for text, end in results)
    reader = cached.index(0)
    solo = await make_pool(parallel=1, batch=batch, engine_id="solo", path=swa_model_path)
    alone = submit(solo, prompt=prompts[reader], params=PROBE)
    await alone.text()
    if length < 512:  # past the window the reader's chunks are cut at the head, not alone
        assert_same_greedy(jobs[reader].logprobs, alone.logprobs)


TURN = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


async def test_the_next_turn_of_a_chat_decodes_only_what_is_new(make_pool) -> None:
    """A finished job's cells stay in its sequence: the next turn, which repeats the whole
    history, takes that sequence and decodes only the new turn. Its next-token distribution is
    the one a fresh host computes: to the last bit where the kept cells were prefilled, and
    within float rounding where the reply's cells were written as it was generated (greedy
    text may part after a near tie)."""
    pool = await make_pool(parallel=2)
    first = [ChatMessage(role="user", content="Tell me about the sea.")]
    reply, end = await submit(pool, messages=first, params=TURN).text()
    second = [
        *first,
        ChatMessage(role="assistant", content=reply),
        ChatMessage(role="user", content="And the mountains?"),
    ]
    probe = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5)
    reused = submit(pool, messages=second, params=probe)
    again = (await reused.text())[1]
    assert again.timings.tokens_cached >= end.timings.tokens_in
    fresh_pool = await make_pool(parallel=1, engine_id="fresh")
    fresh = submit(fresh_pool, messages=second, params=probe)
    assert (await fresh.text())[1].timings.tokens_cached == 0
    assert_same_distribution(reused.logprobs[0], fresh.logprobs[0], generated=True)
    # The fresh host's cells of that history were prefilled: a next turn from them reads, to
    # the last bit, what a host reads alone that cuts the prompt where the kept cells end
    # (the positions and the cells line up exactly; chunking itself moves the logits).
    third = [*second, ChatMessage(role="assistant", content="Tell"), ChatMessage(role="user",
             content="Go on.")]  # fmt: skip
    from_prefill = submit(fresh_pool, messages=third, params=probe)
    kept = len(fresh.request.prompt_tokens)
    assert (await from_prefill.text())[1].timings.tokens_cached == kept
    alone_pool = await make_pool(parallel=1, batch=kept, engine_id="alone")
    alone = submit(alone_pool, messages=third, params=probe)
    await alone.text()
    assert from_prefill.logprobs[0].top == alone.logprobs[0].top


LIKELY = math.log(0.01)  # a token the sampler may well draw


def assert_same_distribution(a: TokenLogprob, b: TokenLogprob, *, generated: bool = False) -> None:
    """The same next-token distribution from two paths that differ in float rounding only
    (cells read in other chunks, or beside other sequences), token by token, not by rank:
    each of the likeliest three of one is listed by the other, the likeliest two with
    log-probabilities within `bound` of the other's for that token where either path gives
    it 1 % or more (far down the tail rounding moves a log-probability most: Gemma 3's
    second token at -9.5 moved by 0.21 where the first held 99.9 %), and the picks differ only
    in a near tie (within `bound` of each other in both). The bound is as close as the same
    prompt gets when prefilled one token at a time instead of in one chunk (measured: up to
    0.1 for the likeliest two, 0.3 further down). On some CPUs the chunks alone move it more:
    on an AVX-512 machine the second likeliest token of one prompt moved by 0.37 between one
    chunk and chunks of 53, and the cells a reply wrote as it was generated by 0.34:
    `generated` allows 0.5 (a wrong cell or position moves the likeliest tokens themselves)."""
    bound = 0.5 if generated else 0.15
    tops = dict(a.top), dict(b.top)
    for mine, theirs in (tops, tops[::-1]):
        for rank, (token, x) in enumerate(list(mine.items())[:3]):
            assert token in theirs, (a, b)
            if rank < 2 and max(x, theirs[token]) >= LIKELY:
                assert abs(x - theirs[token]) < bound, (a, b)
    if a.token != b.token:  # a near tie, broken one way on one path and the other on the other
        for top in tops:
            assert abs(top[a.token] - top[b.token]) < bound, (a, b)


def assert_same_greedy(a: Sequence[TokenLogprob], b: Sequence[TokenLogprob]) -> None:
    """Two greedy replies to one prompt by paths that differ in float rounding only: token by
    token the same distribution (assert_same_distribution; past the first token, also over
    the cells each reply wrote as it went, `generated`) up to a near tie that broke each way,
    if one did: from there they go on from different tokens, and are not compared further.
    Equal text is asked only of replies that took the very same path."""
    assert a and len(a) == len(b), (a, b)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        assert_same_distribution(x, y, generated=k > 0)
        if x.token != y.token:
            return


async def test_kept_cells_survive_fillers_and_serve_the_next_turn(make_pool) -> None:
    """Three jobs on sequences 0-2; the middle one ends first, and its sequence, kept, lies
    between two running ones: each step's throw-away filler token goes after its cells and is
    taken off again, so the next turn still finds them whole."""
    pool = await make_pool(parallel=3, batch=64)
    long = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    prompts = [prompt_of(pool, n, i) for i, n in enumerate((40, 41, 42))]
    jobs = [submit(pool, prompt=p, params=TURN if i == 1 else long) for i, p in enumerate(prompts)]
    results = await asyncio.gather(*(job.text() for job in jobs))
    assert [job.request.slot for job in jobs] == [0, 1, 2]
    engine = pool.engine
    assert engine is not None and engine.kept_cells(1) > 0
    follow_up = prompts[1] + results[1][0] + " And then"
    probe = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5)
    reused = submit(pool, prompt=follow_up, params=probe)
    assert (await reused.text())[1].timings.tokens_cached > 41
    fresh = submit(await make_pool(parallel=1, engine_id="fresh"), prompt=follow_up, params=probe)
    await fresh.text()
    # (the reply's cells were written as it was generated: within that rounding, as for the
    # next turn of a chat; without flash attention, the CPU's default, it moved by 0.22)
    assert_same_distribution(reused.logprobs[0], fresh.logprobs[0], generated=True)


async def test_kept_cells_past_a_sliding_window_serve_only_a_prompt_that_goes_on_from_them(
    make_pool, swa_model_path: Path
) -> None:
    """Gemma 3's sliding-window layers (512 tokens) reuse cells that fall out of the newest
    token's window: a prompt that shares only the start of 700 kept tokens decodes itself."""
    pool = await make_pool(parallel=1, path=swa_model_path)
    prompt = prompt_of(pool, 700, 10)
    await submit(pool, prompt=prompt, params=TURN).text()
    engine = pool.engine
    assert engine is not None and engine.kept_cells(0) > 700
    text, end = await submit(pool, prompt=prompt[: len(prompt) // 2], params=TURN).text()
    assert end.timings.tokens_cached == 0 and text


async def test_kept_cells_longer_than_the_running_streams_are_dropped_not_filled(
    make_pool, monkeypatch
) -> None:
    """A filler on a long kept sequence would make every stream of the step attend over its
    length (llama.cpp sizes a ubatch's attention by its longest stream): between two short
    running streams, long kept cells are freed instead. (On a device where a hole is worth
    a filler: on one CPU thread the engine measures it is not, and leaves the hole.)"""
    gpu_like = StepCost(fixed=0.01, per_token=0.0005)
    monkeypatch.setattr(StepCost, "measure", classmethod(lambda cls, *args: gpu_like))
    pool = await make_pool(parallel=3)
    long = SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True)
    first = submit(pool, prompt=prompt_of(pool, 20, 11), params=long)
    while first.request.slot is None:
        await asyncio.sleep(0.005)
    brief = submit(pool, prompt=prompt_of(pool, 300, 12), params=SHORT)
    while brief.request.slot is None:
        await asyncio.sleep(0.005)
    last = submit(pool, prompt=prompt_of(pool, 20, 13), params=long)
    await brief.text()
    engine = pool.engine
    assert engine is not None and brief.request.slot == 1
    await asyncio.gather(first.text(), last.text())
    assert engine.kept_cells(1) == 0 and engine.sequence_length(1) == 0
    assert engine.kept_cells(0) > 0 and engine.kept_cells(2) > 0  # they ended last: kept


async def test_a_crashed_loop_fails_its_jobs_and_the_engine_still_answers_with_errors(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that raises in a step fails the jobs with GENERATION_FAILED. The model stays
    loaded until the engine closes: the event loop still tokenizes with it (freed at once,
    the next request's tokenizer read freed memory and the whole host aborted)."""

    def broken(self: Stepper, events: object, **_: object) -> None:
        raise RuntimeError("a bug in a step")

    pool = await make_pool(parallel=1)
    monkeypatch.setattr(Stepper, "step", broken)
    _, end = await submit(pool, prompt="The sky is", params=SHORT).text()
    assert end.finish_reason == "error" and end.error is not None
    assert end.error.kind == ErrorKind.GENERATION_FAILED
    for _ in range(3):  # each one tokenized with the model, then refused by the loop
        assert pool.tokenize("The sky is", add_special=True)
        _, end = await submit(pool, prompt="The sky is", params=SHORT).text()
        assert end.finish_reason == "error" and end.error is not None
        assert end.error.kind == ErrorKind.POOL_UNREADY and "after an error" in end.error.message
