"""Issue 35 §1: the scheduler owns the one queue. The engine (real llama.cpp) is given a job
only when it has a free slot; the rest wait in the pool, whose positions and forecasts come
from that one queue, and start in order as slots free."""

from __future__ import annotations

import asyncio

import pytest

from infertui.core.engine.types import Events, GenerationRequest
from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.events import Admitted, Finished
from infertui.core.scheduler import Pool

from ..conftest import wait_until
from ..jobs import submit

pytestmark = pytest.mark.model

SHORT = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


class Counting:
    """Watches a pool's engine: how many jobs it held at most (given, not yet ended), and in
    which order they were given."""

    def __init__(self, pool: Pool) -> None:
        assert pool.engine is not None
        self.held, self.most, self.order = 0, 0, []
        engine, dispatch = pool.engine, pool._dispatch
        start = engine.start

        def counted_start(request: GenerationRequest) -> None:
            self.held += 1
            self.most = max(self.most, self.held)
            self.order.append(request.job_id)
            start(request)

        def counted_dispatch(batch: Events) -> None:
            self.held -= sum(isinstance(event, Finished) for _, event in batch)
            dispatch(batch)  # (which gives the engine the jobs that wait)

        engine.start = counted_start  # type: ignore[method-assign]
        pool._dispatch = counted_dispatch  # type: ignore[method-assign]


async def test_the_engine_is_given_no_more_jobs_than_slots_and_the_rest_start_in_order(
    make_pool,
) -> None:
    pool = await make_pool(parallel=2)
    counting = Counting(pool)
    jobs = [submit(pool, prompt=f"Job {i}:", params=SHORT) for i in range(6)]
    assert [job.queue_position for job in jobs] == [0, 0, 0, 1, 2, 3]
    assert [pool.position(job)[0] for job in jobs[2:]] == [0, 1, 2, 3]
    queue = pool.queue()
    assert queue.depth == 4 and [e.job_id for e in queue.waiting] == [j.id for j in jobs[2:]]
    starts = [e.predicted_start_ms for e in queue.waiting]
    assert starts == sorted(starts) and starts[0] > 0
    assert pool.metrics_snapshot().queue_depth == 4

    await asyncio.gather(*(job.text() for job in jobs))
    assert counting.most <= 2
    assert counting.order == [job.id for job in jobs]  # first come, first served
    assert all(job.result is not None and job.result.finish_reason == "length" for job in jobs)
    assert pool.queue().depth == 0 and pool.metrics_snapshot().slots_busy == 0


async def test_a_cancelled_waiting_job_never_reaches_the_engine(make_pool) -> None:
    pool = await make_pool(parallel=1)
    counting = Counting(pool)
    running = submit(pool, prompt="Running:", params=SamplingParams(max_tokens=40, ignore_eos=True))
    waiting = submit(pool, prompt="Waiting:", params=SHORT)
    behind = submit(pool, prompt="Behind:", params=SHORT)
    assert pool.position(behind)[0] == 1
    assert waiting.cancel()
    assert waiting.released  # nothing of it was ever on the engine
    assert pool.position(behind)[0] == 0
    await running.text()
    _, end = await behind.text()
    assert end.finish_reason == "length"
    assert counting.order == [running.id, behind.id]


async def test_a_job_cancelled_between_its_start_and_its_slot_frees_its_place(make_pool) -> None:
    """Given to the engine but cancelled before the loop put it in a sequence, a job still
    ends on the engine's side, so its slot is counted free again."""
    pool = await make_pool(parallel=1)
    first = submit(pool, prompt="First:", params=SHORT)
    assert first.cancel()  # before the loop's next step took it
    await asyncio.wait_for(first.wait_released(), 5)
    await wait_until(lambda: pool.metrics_snapshot().slots_busy == 0)
    events = [event async for event in submit(pool, prompt="Next:", params=SHORT).events()]
    assert isinstance(events[0], Admitted) and events[0].slot == 0
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "length"
