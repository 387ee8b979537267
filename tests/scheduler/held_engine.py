"""A scripted engine for exact scheduler orderings: it holds every job it is given until the
test ends it, so the order jobs reach it is the scheduler's alone. Only for orderings: the
fairness is tested end to end on the real engine in tests/http/test_fair_sharing.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infertui.core.engine import EngineSpec
from infertui.core.engine.types import EngineInfo, EngineUsage, GenerationRequest
from infertui.core.host import Ask
from infertui.core.host.prepare import prepare
from infertui.core.protocol.events import Admitted, Finished
from infertui.core.protocol.snapshots import EngineParameters, PoolState, SlotSnapshot, TimingStats
from infertui.core.scheduler import Job, Pool
from infertui.core.scheduler.shares import Shares

N_CTX = 4096


class HeldEngine:
    problem: str | None = None
    chat_format: Any = None
    embeddings = None
    stop_tokens: frozenset[int] = frozenset()

    def __init__(self, pool: Pool, slots: int) -> None:
        self.pool, self.n_slots = pool, slots
        self.sampling_defaults: dict[str, float] = {}
        self.given: list[GenerationRequest] = []  # in the order the pool gave them
        self.held: dict[str, GenerationRequest] = {}

    @property
    def tokenizer(self) -> HeldEngine:
        return self

    def text_prompt(self, prompt: str) -> list[int]:
        return [1] * len(prompt.split())  # a token a word

    def describe(self) -> EngineInfo:
        parameters = EngineParameters(n_ctx=N_CTX, n_gpu_layers=0, n_parallel=self.n_slots)
        return EngineInfo("held", "0", ("held",), N_CTX, self.n_slots, 0, parameters)

    def usage(self) -> EngineUsage:
        return EngineUsage(None, None)

    def start(self, request: GenerationRequest) -> None:
        assert len(self.held) < self.n_slots, "given a job with no free slot"
        self.given.append(request)
        self.held[request.job_id] = request
        self.pool._publish([(request, Admitted(slot=len(self.held) - 1, queue_wait_ms=0.0))])

    def cancel(self, request: GenerationRequest) -> None:
        self.end(request.job_id, "abort")

    def end(self, job_id: str, reason: str = "length", tokens_out: int | None = None) -> None:
        """The job ends, having made `tokens_out` tokens (its max_tokens unless said)."""
        request = self.held.pop(job_id)
        made = request.max_tokens if tokens_out is None else tokens_out
        timings = TimingStats(tokens_in=len(request.prompt_tokens), tokens_out=made)
        self.pool._publish([(request, Finished(reason, timings))])  # type: ignore[arg-type]

    def end_oldest(self, tokens_out: int | None = None) -> None:
        self.end(next(iter(self.held)), tokens_out=tokens_out)

    def slots(self) -> list[SlotSnapshot]:
        return [
            SlotSnapshot(slot=i, job_id=job_id, phase="decode")
            for i, job_id in enumerate(self.held)
        ]

    async def shutdown(self) -> None:
        for job_id in list(self.held):
            self.end(job_id, "abort")


def held_pool(slots: int = 2, shares: Shares | None = None, queue: int = 512) -> Pool:
    """A pool on a HeldEngine with `slots` slots (call inside a running event loop)."""
    spec = EngineSpec(model_path="held.gguf", engine_id="held", n_ctx=N_CTX, n_parallel=slots)
    pool = Pool(spec, queue, shares)
    pool.engine = HeldEngine(pool, slots)  # type: ignore[assignment]
    pool.state = PoolState.READY
    return pool


def engine_of(pool: Pool) -> HeldEngine:
    assert isinstance(pool.engine, HeldEngine)
    return pool.engine


def ask(pool: Pool, who: str, *, tokens: int = 100, words: int = 8, **more: Any) -> Job:
    """A job of `who` asking for `tokens` tokens after a prompt of `words` tokens."""
    from infertui.core.protocol.common import SamplingParams

    params = SamplingParams(max_tokens=tokens)
    prepared = prepare(
        pool.ready_engine(),
        Ask(params=params, prompt=" ".join(["w"] * words), identity=who, **more),
    )
    return pool.submit(prepared)


def owners(requests: Sequence[GenerationRequest], jobs: dict[str, Job]) -> list[str]:
    """Who asked each of these, in order."""
    return [jobs[request.job_id].identity for request in requests]
