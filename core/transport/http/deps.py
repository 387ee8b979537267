"""What every route needs from a request: the host, the client's identity, and a submit that
carries both (one job, or several admitted together); the whole reply of jobs, for the
non-streaming answers; and embeddings, which every dialect gives the same way."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from fastapi import Request

from ...host import Ask, HostService
from ...protocol.common import SamplingParams
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Finished
from ...scheduler import Job
from .access import access_of, address_of


def service_of(request: Request) -> HostService:
    service: HostService = request.app.state.service
    return service


def reply_limit(request: Request, asked: int | None) -> int | None:
    """A reply's max tokens: the request's, else the host's default (`http.default_max_tokens`;
    None: until the context is full, which the pool makes the limit)."""
    if asked is not None:
        return asked
    default: int | None = request.app.state.default_max_tokens
    return default


async def submit(request: Request, ask: Ask) -> Job:
    """One job, queued; see `wait_one_loop_turn`."""
    job = await queue_job(request, ask)
    await wait_one_loop_turn([job])
    return job


async def queue_job(request: Request, ask: Ask) -> Job:
    """The job `ask` means, queued in the name of this request's client; its reply carries
    the identity's rate-limit headers, refused or not (CorrelationMiddleware writes them)."""
    identity = access_of(request).who(request)
    who = replace(
        ask,
        client_id=address_of(request),
        identity=identity,
        correlation_id=request.state.correlation_id,
    )
    service = service_of(request)
    try:
        return await service.submit(who)
    finally:
        headers = service.shares.rate_headers(identity)
        if (budget := service.shares.budget_left(identity, ask.session_id)) is not None:
            headers |= budget.headers()
        if headers:
            request.state.rate_headers = headers


async def wait_one_loop_turn(jobs: list[Job]) -> None:
    """Once a request's jobs are queued, wait one turn of the event loop before answering:
    the requests of a burst, read in the same turn, then all reach their engines (an
    upstream's client writes each at once) before any of them starts its reply (measured in
    bench/README.md). A cancel meanwhile cancels the jobs: nobody would read them."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        for job in jobs:
            job.cancel()
        raise


async def collect(request: Request, *jobs: Job) -> list[tuple[str, Finished]]:
    """The jobs' whole replies, or the first error raised (a pre-stream error: an HTTP
    status). A client that leaves before the replies are done cancels them: nobody would read
    them, and they would hold their slots to the end."""
    watcher = asyncio.create_task(_cancel_on_disconnect(request, jobs))
    try:
        results = await asyncio.gather(*(job.text() for job in jobs))
    finally:
        watcher.cancel()
    for _, final in results:
        if final.failure is not None:
            raise final.failure
    return results


async def _cancel_on_disconnect(request: Request, jobs: tuple[Job, ...]) -> None:
    # The body has been read, so the server's next message is the client leaving.
    while (await request.receive())["type"] != "http.disconnect":
        pass
    for job in jobs:
        job.cancel()


async def submit_all(request: Request, asks: list[Ask], param: str = "prompt") -> list[Job]:
    """Every job of one request (n choices, several prompts) is admitted, or none is: a
    refusal cancels those already queued, and one that no retry could cure says so."""
    jobs: list[Job] = []
    try:
        for ask in asks:
            jobs.append(await queue_job(request, ask))
    except BaseException as err:  # a refusal, or the request's task cancelled
        for job in jobs:
            job.cancel()
        if not isinstance(err, InferError):
            raise
        if err.kind is ErrorKind.QUEUE_FULL and jobs:
            m = service_of(request).pool_metrics(jobs[0].pool_id)
            if len(asks) > m.queue_capacity + m.slots_total:  # a retry cannot help
                raise InferError(
                    ErrorKind.INVALID_PARAMS,
                    f"{len(asks)} choices, prompts or inputs are more than engine "
                    f"'{m.pool_id}' can hold ({m.slots_total} slots and a queue of "
                    f"{m.queue_capacity})",
                    param=param,
                ) from None
        raise
    await wait_one_loop_turn(jobs)
    return jobs


EMBED_WAVE = 16  # inputs queued at once: engine/embedder.py's MAX_SEQUENCES, one decode's


async def embed_texts(
    request: Request, model: str, texts: list[str], keep_alive_s: float | None = None
) -> tuple[list[list[float]], list[Job]]:
    """Each text as an embedding job through the engine's queue, a wave at a time; the
    vectors in order. All at once, a RAG client's batch of 100 chunks was refused: more
    than the slots and the queue hold, though the engine takes 16 a step and needs no slot."""
    params = SamplingParams()
    size = max(1, min(EMBED_WAVE, service_of(request).queue_capacity(model)))
    vectors: list[list[float]] = []
    jobs: list[Job] = []
    for start in range(0, len(texts), size):
        wave = await submit_all(
            request,
            [Ask(model=model, prompt=t, params=params, embed=True, keep_alive_s=keep_alive_s)
             for t in texts[start : start + size]],
            "input",
        )  # fmt: skip
        vectors += [list(final.embedding or ()) for _, final in await collect(request, *wave)]
        jobs += wave
    return vectors, jobs
