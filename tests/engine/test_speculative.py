"""Issue 38 §2 on the real model: a stream that quotes its prompt guesses tokens ahead from
it and keeps those the model picks (drafts.py, step.py `_check_guesses`); the cells of the
guesses it drops are gone; a seeded job draws the same text run after run with guesses; its
logprobs cover every token, guessed or not. That guesses leave a job's text as it is without
them is measured in bench/bench_speculative.py, not asserted here: the two take different
paths through llama.cpp's kernels, whose rounding differs between CPUs."""

from __future__ import annotations

import pytest

from infertui.core.engine.llama import guess_plan
from infertui.core.engine.llama.step_cost import StepCost
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.errors import ErrorKind, InferError

from ..jobs import submit

pytestmark = pytest.mark.model

TEXT = (
    "The river runs through the old town, under seven stone bridges, past the market and the "
    "cathedral. In spring the river rises and the boatmen wait on the quay."
)
QUOTE = [ChatMessage(role="user", content=f"Repeat this text exactly:\n\n{TEXT}")]


@pytest.fixture(autouse=True)
def cheap_guesses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU's step cost, where guesses pay: on one CPU thread a guessed token costs about
    what a step does, the engine measures so and guesses nothing (test_guesses.py has the
    policy); these tests are about what happens to the guesses made."""
    cost = StepCost(fixed=0.01, per_token=0.0005)
    monkeypatch.setattr(StepCost, "measure", classmethod(lambda cls, *args: cost))
    monkeypatch.setattr(guess_plan, "TRUSTED", 10**9)  # (nor the steps' own timing says no)


async def test_a_quote_is_guessed_ahead_and_the_dropped_guesses_leave_no_cells(make_pool):
    pool = await make_pool(parallel=1, speculative=True)
    job = submit(pool, messages=QUOTE, params=SamplingParams(temperature=0.0, max_tokens=80))
    text, end = await job.text()
    assert "seven stone bridges" in text
    engine = pool.ready_engine()
    guessed, kept = engine.usage().guesses
    assert 0 < kept <= guessed
    assert kept >= end.timings.tokens_out // 3  # most of a quote comes from guesses
    # the job's cells stay for the next prompt: its prompt and output, no dropped guess
    cells = engine._loop.sequence_length(0)
    assert cells <= end.timings.tokens_in + end.timings.tokens_out + 1
    # what sampling a guessed row costs the host was timed, in tokens' worth of a step
    row = engine._loop._stepper._plan.cost.row
    assert row != StepCost.row and 0.02 <= row < 1


async def test_a_seeded_job_draws_the_same_text_with_guesses_run_after_run(make_pool):
    """Each run on a fresh engine, so that both take the same path: the same prompt read
    anew (no kept cells), the same guesses from the same starting rate and step cost."""
    params = SamplingParams(temperature=0.7, top_k=40, top_p=0.95, seed=7, max_tokens=60)
    texts = []
    for _ in range(2):
        pool = await make_pool(parallel=1, speculative=True)
        text, _ = await submit(pool, messages=QUOTE, params=params).text()
        texts.append(text)
        assert pool.ready_engine().usage().guesses[1] > 0
        await pool.close()
    assert texts[0] == texts[1]


async def test_logprobs_cover_every_token_guessed_or_not(make_pool):
    pool = await make_pool(parallel=1, speculative=True)
    params = SamplingParams(temperature=0.0, max_tokens=40, logprobs=2)
    job = submit(pool, messages=QUOTE, params=params)
    logprobs = []
    async for event in job.events():
        logprobs.extend(getattr(event, "logprobs", ()))
    assert pool.ready_engine().usage().guesses[1] > 0
    assert len(logprobs) == job.tokens_out > 0


async def test_a_draft_model_guesses_and_follows_each_streams_text(make_pool, model_path):
    """`--draft MODEL`, with the model as its own draft: its greedy guesses are the model's
    own picks, so nearly all are kept (a near tie may round the other way in a batch); a
    second job on the slot follows from the draft's cells of the first (the shared head kept,
    the rest read anew), and its guesses are kept as well."""
    pool = await make_pool(parallel=2, speculative=True, draft_model_path=str(model_path))
    params = SamplingParams(temperature=0.0, max_tokens=40)
    text, _ = await submit(pool, messages=QUOTE, params=params).text()
    assert "seven stone bridges" in text
    guessed, kept = pool.ready_engine().usage().guesses
    assert guessed > 0 and kept >= guessed * 3 // 4
    other = [ChatMessage(role="user", content="Name three colours and say why you like them.")]
    text, _ = await submit(pool, messages=other, params=params).text()
    more_guessed, more_kept = pool.ready_engine().usage().guesses
    assert text and more_guessed > guessed and more_kept - kept >= (more_guessed - guessed) // 2


async def test_a_draft_model_of_another_vocabulary_is_refused_by_name(make_pool, swa_model_path):
    """Gemma 3's 262k tokens cannot guess for SmolLM2's 49k: the engine does not load, and
    says which file and why."""
    with pytest.raises(InferError) as caught:
        await make_pool(parallel=1, speculative=True, draft_model_path=str(swa_model_path))
    assert caught.value.kind == ErrorKind.INVALID_PARAMS and caught.value.param == "draft"
    assert "vocabulary" in caught.value.message
