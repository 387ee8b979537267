"""A lone stream's run in C (issue 38 §1, lone_run.py): one stream with nothing beside it
decodes back to back in C while a thread makes its text. The run draws what the batch loop's
steps draw (the same decodes, the same sampling), and it yields to whatever needs the loop: a
new job, a cancel, a stop string, the job's end."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from infertui.core.engine.llama import cpu_turns, guess_plan, lone_run, step
from infertui.core.engine.llama.step_cost import StepCost
from infertui.core.protocol.common import ChatMessage, SamplingParams
from infertui.core.protocol.events import TokenText
from infertui.core.scheduler import Pool

from ..jobs import submit

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not lone_run.AVAILABLE, reason="the host's C loops are not built here"),
]


@pytest.fixture(autouse=True)
def cpus_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engines other tests of this worker hold would make these take turns on the CPU,
    which stops lone runs (`test_engines_taking_turns_go_step_by_step`)."""
    monkeypatch.setattr(cpu_turns, "_CPUS", 64)


GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
SAMPLINGS = {
    "greedy": GREEDY,
    "seeded temperature 0.8, top-k 40, top-p 0.95": SamplingParams(
        temperature=0.8, top_k=40, top_p=0.95, seed=7, max_tokens=40, ignore_eos=True
    ),
    "greedy with a repeat penalty": SamplingParams(
        temperature=0.0, repeat_penalty=1.3, max_tokens=40, ignore_eos=True
    ),
}


def lone_decodes(pool: Pool) -> int:
    """Decodes the pool's engine made in lone runs so far."""
    stepper = pool.engine._loop._stepper  # type: ignore[union-attr]
    assert stepper is not None
    return int(stepper.lone_decodes)


async def by_steps(
    make_pool: Any, monkeypatch: pytest.MonkeyPatch, pool_options: dict[str, Any], **ask: Any
) -> Any:
    """The same job on an engine whose lone stream goes step by step (runs turned off)."""
    monkeypatch.setattr(step, "LONE_RUNS", False)
    pool = await make_pool(parallel=1, engine_id="steps", **pool_options)
    monkeypatch.undo()
    result = await submit(pool, **ask).text()
    assert lone_decodes(pool) == 0
    return result


@pytest.mark.parametrize("in_graph", [False, True], ids=["host sampling", "graph sampling"])
@pytest.mark.parametrize("params", SAMPLINGS.values(), ids=SAMPLINGS.keys())
async def test_a_lone_stream_runs_in_c_and_draws_what_the_steps_draw(
    make_pool, monkeypatch: pytest.MonkeyPatch, params: SamplingParams, in_graph: bool
) -> None:
    """Both engines decode the stream one token at a time in one sequence of the same context
    (the same graph, the same logits), and draw with the same code: the texts are equal. In
    the graph (as on a GPU that holds every layer), the run reads the graph's token."""
    options = {"backend_sampling": in_graph}
    pool = await make_pool(parallel=1, **options)
    text, end = await submit(pool, prompt="The history of tea", params=params).text()
    assert lone_decodes(pool) >= params.max_tokens - 2  # (the first token comes from the prompt)
    assert end.finish_reason == "length" and end.timings.tokens_out == params.max_tokens
    stepped, stepped_end = await by_steps(
        make_pool, monkeypatch, options, prompt="The history of tea", params=params
    )
    assert (text, end.timings.tokens_out) == (stepped, stepped_end.timings.tokens_out)


async def test_a_reader_that_falls_asleep_between_tokens_is_woken_for_each(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader looks by itself only while tokens come faster than LOOK_S[1]; slower, it
    sleeps, and C writes its wake byte once it does. With looks turned off, the reader
    sleeps before every token: C wakes it, and it takes them while the run goes on (what it
    has not taken when C stops, the batch loop's thread takes: without the wake-ups that
    would be every token)."""
    on_reader = 0
    tokens_of = step.Stepper._lone_tokens

    def counted(self: step.Stepper, *args: Any) -> bool:
        nonlocal on_reader
        if threading.current_thread().name == "lone-run-reader":
            on_reader += len(args[-1])
        return tokens_of(self, *args)

    monkeypatch.setattr(step.Stepper, "_lone_tokens", counted)
    monkeypatch.setattr(lone_run, "LOOK_S", (1e-6, 1e-6))
    pool = await make_pool(parallel=1)
    _, end = await submit(pool, prompt="The history of tea", params=GREEDY).text()
    decoded = lone_decodes(pool)
    assert end.finish_reason == "length" and end.timings.tokens_out == GREEDY.max_tokens
    assert decoded >= GREEDY.max_tokens - 2
    assert on_reader >= decoded // 4  # (broken wake-ups leave it a stale byte's one or two)


async def test_a_lone_run_ends_at_the_models_end_of_turn(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat reply ends at the model's end-of-turn token, found in C, as step by step."""
    messages = [ChatMessage(role="user", content="Say hello in one short sentence.")]
    params = SamplingParams(temperature=0.0, max_tokens=200)
    pool = await make_pool(parallel=1)
    text, end = await submit(pool, messages=messages, params=params).text()
    assert end.finish_reason == "stop" and 0 < end.timings.tokens_out < 200
    assert lone_decodes(pool) > 0
    stepped, stepped_end = await by_steps(
        make_pool, monkeypatch, {}, messages=messages, params=params
    )
    assert (text, end.timings.tokens_out) == (stepped, stepped_end.timings.tokens_out)


async def test_a_stop_string_ends_a_lone_run_and_its_sequence_keeps_only_its_cells(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow reader lags far behind C, which decodes on past the job's end (to the reader's
    stop or the job's limit) before the reader finds the stop string: the text ends before
    the stop string, the cells decoded past the job's end are dropped, so the cells kept for
    the next turn are exactly the job's, and the kept cells remember the furthest position
    decoded (a sliding window may have let go of cells for it, prompt_cache.window_intact)."""
    pool = await make_pool(parallel=1)
    full, _ = await submit(pool, prompt="The history of tea", params=GREEDY).text()
    words = full.split()
    stop = " ".join(words[len(words) // 2 : len(words) // 2 + 2])
    assert stop and full.index(stop) > 0
    text_of = step.Stepper._text

    def slow_text(self: step.Stepper, *args: Any) -> bool:
        time.sleep(0.1)  # several of the bundled model's decodes, even on a slow CPU
        return text_of(self, *args)

    monkeypatch.setattr(step.Stepper, "_text", slow_text)
    # one run: C does not stop at MAX_S to wait for the slow reader, so it runs ahead
    monkeypatch.setattr(lone_run, "MAX_S", 60.0)
    params = GREEDY.model_copy(update={"stop": [stop]})
    before = lone_decodes(pool)
    text, end = await submit(pool, prompt="The history of tea", params=params).text()
    decoded = lone_decodes(pool) - before
    assert end.finish_reason == "stop" and text == full[: full.index(stop)]
    assert decoded > end.timings.tokens_out + 1  # C went on past the end: the reader lagged
    engine = pool.engine
    assert engine is not None
    assert engine.kept_cells(0) > 0
    assert engine.sequence_length(0) == engine.kept_cells(0)
    kept = engine._loop._seqs.kept._kept[0]  # type: ignore[union-attr]
    prompt = end.timings.tokens_in
    assert kept.highest >= prompt + decoded - 1  # the last position the run decoded


async def test_a_new_job_interrupts_a_lone_run(make_pool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone run stops for a job that comes in (and for nothing else here: no time limit):
    the short job is done long before the long one, which still makes every token."""
    monkeypatch.setattr(lone_run, "MAX_S", 600.0)
    pool = await make_pool(parallel=2)
    long = submit(pool, prompt="A long story", params=GREEDY.model_copy(update={"max_tokens": 160}))
    events = long.events()
    async for event in events:
        if isinstance(event, TokenText):
            break  # the long job runs alone now
    short_text, short_end = await submit(pool, prompt="Tea is", params=GREEDY).text()
    assert short_end.timings.tokens_out == GREEDY.max_tokens and short_text
    assert not long.released, "the short job waited for the long one"
    async for _ in events:
        pass
    assert long.result is not None and long.result.timings.tokens_out == 160
    assert lone_decodes(pool) > 0


async def test_a_cancel_ends_a_lone_run_and_the_engine_serves_on(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No time limit on the run: only the cancel stops it, long before its 900 tokens."""
    monkeypatch.setattr(lone_run, "MAX_S", 600.0)
    pool = await make_pool(parallel=1)
    job = submit(pool, prompt="A long story", params=GREEDY.model_copy(update={"max_tokens": 900}))
    events = job.events()  # (held: a reader that lets go of its events cancels the job)
    async for event in events:
        if isinstance(event, TokenText):
            break
    await asyncio.sleep(0.1)  # the lone run is under way
    began = time.perf_counter()
    assert job.cancel()
    await asyncio.wait_for(job.wait_released(), 10)
    assert time.perf_counter() - began < 5
    assert 0 < lone_decodes(pool) < 800  # the run under way stopped at the cancel
    engine = pool.engine
    assert engine is not None and engine.busy_slots == 0 and engine.sequence_length(0) == 0
    text, end = await submit(pool, prompt="The sky is", params=GREEDY).text()
    assert end.finish_reason == "length" and text


async def test_the_context_end_stops_a_lone_run_where_steps_stop(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No max_tokens: the job may fill its context, and ends where it is full."""
    params = GREEDY.model_copy(update={"max_tokens": None})
    pool = await make_pool(parallel=1, ctx=256)
    text, end = await submit(pool, prompt="The history of tea", params=params).text()
    assert end.finish_reason == "length" and 200 < end.timings.tokens_out < 256
    monkeypatch.setattr(step, "LONE_RUNS", False)
    stepped = await make_pool(parallel=1, ctx=256, engine_id="steps")
    stepped_text, stepped_end = await submit(
        stepped, prompt="The history of tea", params=params
    ).text()
    assert (text, end.timings.tokens_out) == (stepped_text, stepped_end.timings.tokens_out)


async def test_engines_taking_turns_go_step_by_step(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run holds the CPU for up to MAX_S, which an engine taking turns may not."""
    monkeypatch.setattr(cpu_turns, "_CPUS", 0)
    pool = await make_pool(parallel=1, n_gpu_layers=0)  # (on a GPU, no turns are taken)
    _, end = await submit(pool, prompt="The history of tea", params=GREEDY).text()
    assert end.timings.tokens_out == GREEDY.max_tokens and lone_decodes(pool) == 0


async def test_a_lone_stream_stops_its_run_for_guesses_that_pay_and_goes_on_after(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a GPU's step cost, where guesses pay: the reader looks for guesses after its
    tokens and stops the run where a step would take some; the stream then guesses in steps
    (this small model's text comes back to its own phrases), and runs alone again where its
    text is new."""
    cost = StepCost(fixed=0.01, per_token=0.0005)
    monkeypatch.setattr(StepCost, "measure", classmethod(lambda cls, *args: cost))
    monkeypatch.setattr(guess_plan, "TRUSTED", 10**9)  # (nor the steps' own timing says no)
    pool = await make_pool(parallel=1, speculative=True)
    params = SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)
    _, end = await submit(pool, prompt="The history of tea", params=params).text()
    assert end.timings.tokens_out == 120
    guessed, kept = pool.ready_engine().usage().guesses
    assert 0 < kept <= guessed and 0 < lone_decodes(pool) < 120


async def test_a_lone_stream_learns_what_its_guesses_cost_from_its_own_steps(
    make_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load's measure said a guess costs a twentieth of a step (a GPU's); the engine
    times its lone runs and the steps that guessed, and weighs a lone stream's guesses with
    those instead (guess_plan.py, `time_lone_run` and `time_guessing`)."""
    cost = StepCost(fixed=0.01, per_token=0.0005)
    monkeypatch.setattr(StepCost, "measure", classmethod(lambda cls, *args: cost))
    pool = await make_pool(parallel=1, speculative=True)
    params = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
    await submit(pool, prompt="The history of tea", params=params).text()
    stepper = pool.engine._loop._stepper  # type: ignore[union-attr]
    assert stepper._plan._guess_steps >= guess_plan.TRUSTED and stepper.lone_decodes > 0
    learnt = stepper._plan.cost  # (the load's left `one` and `second` unset: 0)
    assert learnt.one not in (0, cost.fixed + cost.per_token) and learnt.second > 0
