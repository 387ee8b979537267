"""Race-free cancel (OC-CTRL-2012) with the real engine: 200 cancels at random moments."""

from __future__ import annotations

import asyncio
import random

import pytest

from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.events import Finished, TokenText
from infertui.core.scheduler import Job

from ..jobs import submit

pytestmark = pytest.mark.model

PARAMS = SamplingParams(temperature=0.7, seed=7, max_tokens=40, ignore_eos=True)


class Watched:
    """Consumes a job and records every token it receives after cancel() returned."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.cancel_returned = False
        self.tokens_after_cancel = 0
        self.final: Finished | None = None

    async def consume(self) -> None:
        async for event in self.job.events():
            if isinstance(event, TokenText) and self.cancel_returned:
                self.tokens_after_cancel += 1
            if isinstance(event, Finished):
                self.final = event

    def cancel(self) -> bool:
        cancelled = self.job.cancel()
        self.cancel_returned = True
        return cancelled


async def cancel_at_random(pool, rng: random.Random, index: int) -> Watched:
    watched = Watched(submit(pool, prompt=f"Story number {index}: once upon a time", params=PARAMS))
    consumer = asyncio.create_task(watched.consume())
    moment = rng.choice(["now", "soon", "later", "tokens"])
    if moment == "soon":
        await asyncio.sleep(0)
    elif moment == "later":
        await asyncio.sleep(rng.uniform(0.0, 0.4))
    elif moment == "tokens":
        target = rng.randint(1, 30)
        while not watched.job.done and watched.job.request.tokens_out < target:
            await asyncio.sleep(0.002)
    watched.cancel()
    await consumer
    await asyncio.wait_for(watched.job.wait_released(), 10)
    return watched


async def test_two_hundred_cancels_at_random_moments_never_leak_a_token(make_pool) -> None:
    pool = await make_pool(parallel=4, queue=64)
    rng = random.Random(2024)
    results: list[Watched] = []
    for wave in range(25):  # 8 at a time: some queued, some prefilling, some decoding
        results += await asyncio.gather(
            *(cancel_at_random(pool, rng, wave * 8 + i) for i in range(8))
        )
    # A job through the engine after them: its steps are the ones in which anything still in
    # flight would have arrived.
    await submit(pool, prompt="Hi", params=SamplingParams(temperature=0, max_tokens=2)).text()

    assert len(results) == 200
    for watched in results:
        assert watched.tokens_after_cancel == 0
        assert watched.final is not None
        assert watched.job.released
    aborted = sum(w.final.finish_reason == "abort" for w in results if w.final)
    assert aborted > 150, "most cancels land before the 40-token reply ends"

    engine = pool.engine
    assert engine.busy_slots == 0
    assert pool.queue().depth == 0
    for slot in range(pool.n_slots):  # only what a finished job left for a next turn
        cells = engine.sequence_length(slot)
        assert cells == engine.kept_cells(slot), f"slot {slot} still holds KV cells"
    snapshot = pool.metrics_snapshot()
    assert snapshot.cancelled == aborted
    assert snapshot.slots_busy == 0

    # and the pool still serves in full afterwards
    text, end = await submit(pool, prompt="The capital of France is", params=PARAMS).text()
    assert end.finish_reason in ("stop", "length")
    assert text


async def test_cancel_of_a_queued_job_frees_its_place_without_reaching_a_slot(make_pool) -> None:
    pool = await make_pool(parallel=1)
    running = submit(pool, prompt="Count slowly:", params=SamplingParams(max_tokens=64))
    queued = submit(pool, prompt="Never started", params=PARAMS)
    assert pool.queue().depth >= 1
    assert queued.cancel() is True
    assert queued.released
    assert queued.result is not None and queued.result.finish_reason == "abort"
    assert queued.result.timings.tokens_out == 0
    assert all(e.job_id != queued.id for e in pool.queue().waiting)
    running.cancel()
    await running.wait_released()


async def test_cancel_after_the_end_is_a_no_op(make_pool) -> None:
    pool = await make_pool(parallel=1)
    job = submit(
        pool, prompt="Hi", params=SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    )
    _, end = await job.text()
    assert end.finish_reason == "length"
    assert job.cancel() is False
    assert job.result is end


async def test_a_consumer_that_goes_away_cancels_its_job(make_pool) -> None:
    pool = await make_pool(parallel=1)
    job = submit(
        pool, prompt="A very long story:", params=SamplingParams(max_tokens=400, ignore_eos=True)
    )

    async def reader() -> None:
        async for _ in job.events():
            pass

    task = asyncio.create_task(reader())
    while job.request.tokens_out < 3:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert job.cancelled
    await asyncio.wait_for(job.wait_released(), 5)
    assert pool.engine.busy_slots == 0


async def test_an_aborted_job_reports_its_ttft_and_decode_rate(make_pool) -> None:
    """What the host logs and what chat_end carries for an abort: the figures so far."""
    pool = await make_pool(parallel=1)
    job = submit(
        pool, prompt="A very long story:", params=SamplingParams(max_tokens=400, ignore_eos=True)
    )
    seen, final = 0, None
    async for event in job.events():
        if isinstance(event, TokenText):
            seen += 1
            if seen == 10:
                job.cancel()
        elif isinstance(event, Finished):
            final = event  # the consumer's end, made by cancel() itself
    assert final is not None and final.finish_reason == "abort"
    timings = final.timings
    assert timings.ttft_ms is not None and timings.ttft_ms > 0
    assert timings.tokens_out >= 10 and timings.decode_tps > 0
