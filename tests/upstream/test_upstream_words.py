"""What people read when an upstream server fails, and what its engine says of its context.

The upstream is fake_upstream.py's small server: no model is loaded, the words and the figures
are the front's own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from infertui.core.client import explain
from infertui.core.engine import UpstreamSpec
from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.snapshots import PoolState
from infertui.core.scheduler import Pool

from ..conftest import wait_until
from ..jobs import submit
from .fake_upstream import FakeUpstream

CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b")  # UpstreamError, ConnectError...
HEADLINE = "The model is not ready: it may be loading or draining, or its server cannot be reached."
ASK = SamplingParams(temperature=0, max_tokens=8)


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    upstream = FakeUpstream({"id": "far-model", "object": "model"})
    await upstream.start()
    yield upstream
    await upstream.stop()


@pytest.fixture
async def pools() -> AsyncIterator[list[Pool]]:
    started: list[Pool] = []
    yield started
    for pool in started:
        await pool.close()


async def start_pool(pools: list[Pool], url: str, health_s: float = 0.2) -> Pool:
    pool = await Pool.start(UpstreamSpec(url=url, engine_id="up", health_interval_s=health_s))
    pools.append(pool)
    return pool


async def test_an_upstream_that_drops_mid_reply_and_then_goes_is_told_in_plain_words(
    fake: FakeUpstream, pools: list[Pool]
) -> None:
    """The job in flight ends with POOL_UNREADY (what the front knows: the server went; the
    health check tells unready from back), and no sentence names a Python class."""
    fake.reply = "break"
    pool = await start_pool(pools, fake.url)
    job = submit(pool, params=ASK, prompt="Hi")
    text, final = await asyncio.wait_for(job.text(), 10)
    assert text == "Hel" and final.error is not None
    assert final.error.kind is ErrorKind.POOL_UNREADY
    assert final.error.message == f"the upstream {fake.url} closed the connection mid-reply"
    said = explain(final.error)
    assert said.startswith(HEADLINE) and not CLASS_NAME.search(said), said

    await fake.stop()  # nothing listens there now
    await wait_until(lambda: pool.state is PoolState.FAILED, seconds=5)
    with pytest.raises(InferError) as refused:
        submit(pool, params=ASK, prompt="Hi again")
    assert refused.value.kind is ErrorKind.POOL_UNREADY
    assert refused.value.message == (
        f"engine 'up' is not ready: the upstream {fake.url} cannot be reached (connection refused)"
    )
    said = explain(refused.value)
    assert said.startswith(HEADLINE) and not CLASS_NAME.search(said), said


async def test_a_job_sent_while_nothing_listens_says_so_in_plain_words(pools: list[Pool]) -> None:
    """Before the health check has noticed, a job's own connection fails: the same words."""
    fake = FakeUpstream({"id": "far-model"})
    await fake.start()
    pool = await start_pool(pools, fake.url, health_s=60.0)
    await fake.stop()
    _, final = await asyncio.wait_for(submit(pool, params=ASK, prompt="Hi").text(), 10)
    assert final.error is not None and final.error.kind is ErrorKind.POOL_UNREADY
    assert final.error.message == (
        f"the upstream {fake.url} cannot be reached (cannot connect: connection refused)"
    )


async def test_every_unready_state_reads_as_a_sentence(
    fake: FakeUpstream, pools: list[Pool]
) -> None:
    def refusal(pool: Pool) -> str:
        with pytest.raises(InferError) as refused:
            submit(pool, params=ASK, prompt="Hi")
        assert refused.value.kind is ErrorKind.POOL_UNREADY
        return refused.value.message

    loading = Pool(UpstreamSpec(url=fake.url, engine_id="later"))  # not started yet
    assert refusal(loading) == "engine 'later' is still loading"

    broken = Pool(UpstreamSpec(url="ftp://nowhere", engine_id="bad"))
    pools.append(broken)
    with pytest.raises(InferError):
        await broken.load()
    assert refusal(broken) == (
        "engine 'bad' failed to load: an upstream URL starts with http:// or https://, "
        "not 'ftp://nowhere'"
    )

    fake.reply = "hang"
    pool = await start_pool(pools, fake.url)
    job = submit(pool, params=ASK, prompt="Hi")
    await wait_until(lambda: job.tokens_published > 0)
    drain = asyncio.create_task(pool.drain(10_000))
    await wait_until(lambda: pool.state is PoolState.DRAINING)
    assert refusal(pool) == "engine 'up' is draining"
    with pytest.raises(InferError) as early:
        pool.resume()
    assert early.value.message == "engine 'up' is draining; only a drained engine can resume"
    job.cancel()
    await asyncio.wait_for(drain, 10)
    assert refusal(pool) == "engine 'up' is drained until an admin resumes it"
    pool.resume()
    assert pool.state is PoolState.READY


async def test_an_upstream_that_does_not_say_its_context_shows_none_as_fact(
    fake: FakeUpstream, pools: list[Pool]
) -> None:
    """The engine's status says 0 (not known), as before the server was reached, never a
    made-up 32768; a job without max_tokens is still admitted (the server bounds it)."""
    pool = await start_pool(pools, fake.url)
    assert pool.engine is not None and pool.engine.describe().parameters.n_ctx == 0
    assert "context not known" in pool.engine.placement()
    text, final = await asyncio.wait_for(
        submit(pool, params=SamplingParams(temperature=0), prompt="Hi").text(), 10
    )
    assert text == "Hello" and final.error is None
    with pytest.raises(InferError) as too_long:  # it said "prompt of 0 tokens plus ..."
        submit(pool, params=SamplingParams(max_tokens=100_000), prompt="Hi")
    assert too_long.value.param == "max_tokens" and "prompt" not in too_long.value.message
    assert "does not say its context" in too_long.value.message


@pytest.mark.parametrize(
    ("listed", "n_ctx"),
    [
        ({"max_model_len": 4096}, 4096),  # vLLM, infertui
        ({"max_model_len": 0}, 0),  # only a positive int is a context
        ({"max_model_len": True}, 0),
        ({"max_model_len": "4096"}, 0),
        ({"meta": {"n_ctx": 2048, "n_ctx_train": 32768}}, 2048),  # llama-server: a slot's
        ({"meta": {"n_ctx_train": 32768}}, 0),  # the training length is not what it runs with
    ],
)
async def test_an_upstream_context_is_learned_from_its_model_list(
    pools: list[Pool], listed: dict[str, object], n_ctx: int
) -> None:
    fake = FakeUpstream({"id": "far-model", "object": "model", **listed})
    await fake.start()
    try:
        pool = await start_pool(pools, fake.url)
        assert pool.engine is not None and pool.engine.describe().parameters.n_ctx == n_ctx
    finally:
        await fake.stop()
