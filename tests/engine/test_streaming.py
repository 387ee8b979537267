"""Per-token delivery that never holds up the batch loop (issue 10 §4): a consumer that falls
behind gets what it missed as one event, and a slow reader does not slow anyone else."""

from __future__ import annotations

import asyncio
import sys

import pytest

from infertui.core.engine.llama.batch_loop import GIL_TURN_S
from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.events import Admitted, Finished, TokenText

from ..jobs import submit

pytestmark = pytest.mark.model

PARAMS = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)


async def test_a_reader_that_falls_behind_gets_the_missed_text_as_one_event(make_pool) -> None:
    pool = await make_pool(parallel=2)
    expected, _ = await submit(pool, prompt="The history of tea", params=PARAMS).text()
    job = submit(pool, prompt="The history of tea", params=PARAMS)
    await job.wait_released()  # the whole reply was generated before anyone read it
    events = [event async for event in job.events()]
    assert [type(e) for e in events] == [Admitted, TokenText, Finished]
    text = events[1]
    assert isinstance(text, TokenText) and text.text == expected
    assert text.n_tokens == PARAMS.max_tokens and text.index == 0


async def test_a_slow_reader_does_not_slow_the_others(make_pool) -> None:
    pool = await make_pool(parallel=2)
    long = PARAMS.model_copy(update={"max_tokens": 96})
    slow_job = submit(pool, prompt="A slow reader", params=long)
    fast_job = submit(pool, prompt="A fast reader", params=long)
    slow_events = 0

    async def read_slowly() -> None:
        nonlocal slow_events
        async for event in slow_job.events():
            slow_events += isinstance(event, TokenText)
            await asyncio.sleep(0.25)

    slow_reader = asyncio.create_task(read_slowly())
    _, fast_end = await fast_job.text()
    await asyncio.wait_for(slow_job.wait_released(), 30)
    slow_end = slow_job.result  # the engine's figures, there before the reader got that far
    assert slow_end is not None and not slow_reader.done()
    await slow_reader
    assert fast_end.timings.tokens_out == slow_end.timings.tokens_out == 96
    # generated in the same steps as the fast one: the reader's pace did not matter
    assert slow_end.timings.decode_ms < 1.5 * fast_end.timings.decode_ms + 100
    assert slow_events < 96 // 4, "the backlog arrived merged, not token by token"


async def test_a_running_engine_waits_at_most_half_a_millisecond_for_the_gil(make_pool) -> None:
    """CPython's default switch interval (5 ms) would let the event loop, dropping the GIL for
    each socket write and taking it back at once, hold off the batch loop for that long."""
    sys.setswitchinterval(0.005)
    try:
        pool = await make_pool(parallel=1)
        assert sys.getswitchinterval() <= GIL_TURN_S == 0.0005
        _, end = await submit(pool, prompt="The history of tea", params=PARAMS).text()
        assert end.finish_reason == "length"
    finally:
        sys.setswitchinterval(0.005)
