"""Pool: one engine and its jobs, with admission, a bounded queue, drain and reload.

The engine is a local llama.cpp model or an upstream server (engine/interface.py); the pool
does not tell them apart. The waiting jobs themselves sit in the engine, which admits them to
slots in arrival order; the pool bounds how many may wait and predicts when each will start.
An upstream that stops answering makes the pool FAILED (unready) until it answers again.

Admission happens before a job is queued (OC-CTRL-2010): the pool must be ready, the client
under its concurrent-job limit, prompt plus max_tokens within the context, and the queue not
full; each refusal is a typed InferError with advisory retry hints. Engine events arrive from
the batch-loop thread in one batch per step and are handed to jobs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Unpack

from ..engine import AnySpec, Engine, EngineEvent, GenerationRequest, open_engine
from ..engine.embedder import MAX_INPUT_TOKENS
from ..protocol.common import ChatMessage, SamplingParams
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Finished, TokenText
from ..protocol.snapshots import (
    MetricsSnapshot,
    PoolState,
    QueueEntry,
    QueueSnapshot,
    SlotSnapshot,
)
from .forecast import FALLBACK_DECODE_TPS, Rates, start_times
from .job import Job, JobArgs, new_job_id
from .metrics import MetricsRecorder

log = logging.getLogger(__name__)

DEFAULT_QUEUE_CAPACITY = 64
# what a pool that takes no job is doing, after "engine 'x'" (FAILED says why in its own way)
_STATE_WORDS = {
    PoolState.LOADING: "is still loading",
    PoolState.DRAINING: "is draining",
    PoolState.DRAINED: "is drained until an admin resumes it",
}


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


class Pool:
    """Serves jobs on one engine. Create with `await Pool.start(spec)`."""

    def __init__(self, spec: AnySpec, queue_capacity: int = DEFAULT_QUEUE_CAPACITY) -> None:
        self.id = spec.engine_id
        self.spec = spec
        self.queue_capacity = queue_capacity
        self.state = PoolState.LOADING
        self.engine: Engine | None = None
        self.error: str | None = None
        self.metrics = MetricsRecorder(self.id)
        self.total_requests = 0
        self._jobs: dict[str, Job] = {}
        self._per_client: Counter[str] = Counter()
        self._retiring: set[Engine] = set()
        self._closing: set[asyncio.Task[None]] = set()  # retired engines shutting down
        self._unreachable = False  # FAILED because its upstream stopped answering
        self._idle = asyncio.Event()  # set while no job is queued or running
        self._idle.set()
        self._hurried = asyncio.Event()  # a drain's deadline is now (hurry)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    # What the engine has, or before it has loaded what its spec asks for.
    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx if self.engine else self.spec.n_ctx

    @property
    def n_slots(self) -> int:
        return self.engine.n_parallel if self.engine else self.spec.slots_requested

    @property
    def model_names(self) -> tuple[str, ...]:
        """What a request's `model` may call this pool besides its id (its file's name, or
        its upstream's model), the first one its name."""
        return self.engine.model_names if self.engine else self.spec.names

    @property
    def gpu_offload(self) -> bool:
        return bool(self.engine and self.engine.n_gpu_layers != 0)

    @classmethod
    async def start(cls, spec: AnySpec, queue_capacity: int = DEFAULT_QUEUE_CAPACITY) -> Pool:
        pool = cls(spec, queue_capacity)
        await pool.load()
        return pool

    async def load(self) -> None:
        """Load the model (in a worker thread) or connect to the upstream. On failure the pool
        is FAILED and raises; an upstream that does not answer yet leaves it unready instead."""
        self.state = PoolState.LOADING
        try:
            self.engine = await self._open(self.spec)
        except InferError as exc:
            self.state, self.error = PoolState.FAILED, exc.message
            raise
        self.state, self.error = PoolState.READY, None
        if self.engine.problem is not None:  # an upstream that is not up yet
            self._on_health(self.engine.problem)

    async def _open(self, spec: AnySpec) -> Engine:
        """Start an engine whose reachability reports count while it is the pool's own (a
        reloaded-away one may still report until it shuts down)."""
        opened: list[Engine] = []

        def on_health(problem: str | None) -> None:
            if opened and opened[0] is self.engine:
                self._on_health(problem)

        engine = await open_engine(spec, self._publish, on_health)
        opened.append(engine)
        return engine

    def _on_health(self, problem: str | None) -> None:
        """The engine's upstream stopped answering (why), or answers again (None). Only a
        pool that admits work turns unready and back: a drained one stays drained, and
        resumes as what its upstream is then."""
        was, self._unreachable = self._unreachable, problem is not None
        if problem is not None:
            self.error = problem
            if self.state is PoolState.READY:
                self.state = PoolState.FAILED
                log.warning("pool %s unready: %s", self.id, problem)
        elif was:
            self.error = None
            if self.state is PoolState.FAILED:
                self.state = PoolState.READY
                log.info("pool %s ready again", self.id)

    # ---- admission ---------------------------------------------------------------------------

    def submit(self, **args: Unpack[JobArgs]) -> Job:
        """Admit a chat (`messages`) or a plain completion (`prompt`), or raise InferError."""
        client_id = args.get("client_id")
        try:
            job = self._admit(
                args["params"], args.get("messages"), args.get("prompt"), client_id,
                args.get("client_limit"), args.get("job_id"), args.get("prompt_tokens"),
                embed=args.get("embed", False),
            )  # fmt: skip
            job.correlation_id = args.get("correlation_id")
        except InferError as exc:
            self.metrics.record_reject(exc.kind.value)
            log.info("pool %s rejected a job from %s: %s", self.id, client_id or "-", exc.message)
            raise
        self.metrics.record_accept()
        self.total_requests += 1
        # One line per job at INFO, when it ends (below); here only one that must wait. A
        # line is ~20 µs on the event loop, and a burst's requests wait for each other's.
        log.log(
            logging.INFO if job.queue_position else logging.DEBUG,
            "pool %s accepted %s from %s: %d prompt tokens, position %d, predicted start %d ms",
            self.id, job.id, client_id or "-", job.tokens_in, job.queue_position,
            job.predicted_start_ms,
        )  # fmt: skip
        return job

    def prompt_tokens(
        self,
        messages: Sequence[ChatMessage] | None,
        prompt: str | None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """A job's prompt as tokens: its messages through the chat template, or its plain
        prompt. Safe on any thread (it reads only the model's vocabulary), and for a long
        prompt worth running on one: a megabyte of text takes most of a second."""
        engine = self._ready_engine()
        if messages is not None:
            return engine.chat_prompt(messages, tools)
        if prompt is not None:
            return engine.text_prompt(prompt)
        raise InferError(ErrorKind.INVALID_PARAMS, "a job needs messages or a prompt")

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """The text as the model's tokens (any thread: a long text is worth running on one)."""
        return self._ready_engine().tokenize(text, add_special=add_special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._ready_engine().detokenize(tokens)

    def _ready_engine(self) -> Engine:
        engine = self.engine
        if self.state is not PoolState.READY or engine is None:
            raise InferError(
                ErrorKind.POOL_UNREADY,
                self._why_unready(),
                engine_id=self.id,
                retry_after_ms=1000
                if self.state is PoolState.LOADING or self._unreachable
                else None,
            )
        return engine

    def _why_unready(self) -> str:
        """Why the pool takes no job now, as a sentence about its engine."""
        if self.state is PoolState.FAILED and self._unreachable:
            return f"engine '{self.id}' is not ready: {self.error}"
        if self.state is PoolState.FAILED:
            return f"engine '{self.id}' failed to load" + (f": {self.error}" if self.error else "")
        return f"engine '{self.id}' {_STATE_WORDS.get(self.state, 'is not ready')}"

    def _admit(
        self,
        params: SamplingParams,
        messages: Sequence[ChatMessage] | None,
        prompt: str | None,
        client_id: str | None,
        client_limit: int | None,
        job_id: str | None,
        tokens: list[int] | None,
        *,
        embed: bool = False,
    ) -> Job:
        engine = self._ready_engine()
        params = params.with_defaults(engine.sampling_defaults)
        if (
            client_id is not None
            and client_limit is not None
            and self._per_client[client_id] >= client_limit
        ):
            raise InferError(
                ErrorKind.CLIENT_BUSY,
                f"this client already has {client_limit} job(s) running; wait or abort first",
                retry_after_ms=self._eta_ms(0),
                engine_id=self.id,
            )
        if job_id is not None and job_id in self._jobs:
            raise InferError(
                ErrorKind.INVALID_PARAMS, f"job id '{job_id}' is already in use", param="task_id"
            )
        if tokens is None:
            tokens = self.prompt_tokens(messages, prompt)
        if not tokens and not embed and engine.tokenizes:
            # a model that reads no start token (SmolLM2) has nothing to go on, as llama.cpp's
            # own tools say; llama_decode would refuse the empty batch
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                "the prompt is empty: this model needs at least one token to go on from",
                param="prompt",
                engine_id=self.id,
            )
        n_ctx = engine.n_ctx
        max_tokens = params.max_tokens if params.max_tokens is not None else n_ctx - len(tokens)
        if embed and not engine.embeds:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"engine '{self.id}' is an upstream server; ask it for embeddings directly",
                param="model",
                engine_id=self.id,
            )
        if embed:
            max_tokens = 0
            if not tokens or len(tokens) > MAX_INPUT_TOKENS:
                raise InferError(
                    ErrorKind.CONTEXT_OVERFLOW,
                    f"an input of {len(tokens)} tokens: embeddings take 1 to "
                    f"{MAX_INPUT_TOKENS} tokens per input",
                    param="input",
                    engine_id=self.id,
                )
        elif len(tokens) + max_tokens > n_ctx or max_tokens < 1:
            raise self._too_long(engine, len(tokens), max_tokens, params.max_tokens is not None,
                                 chat=messages is not None)  # fmt: skip
        # Jobs submitted a moment ago that will take a free slot at the next step do not wait.
        behind, busy = engine.occupancy()
        depth = max(0, behind - (engine.n_parallel - busy))
        if depth >= self.queue_capacity:
            raise InferError(
                ErrorKind.QUEUE_FULL,
                f"the queue of engine '{self.id}' is full ({depth} waiting)",
                retry_after_ms=self._eta_ms(behind),
                engine_id=self.id,
            )
        stops = engine.chat_stop_tokens if messages is not None else frozenset()
        request = GenerationRequest(
            job_id or new_job_id(), tokens, params, max_tokens, stop_tokens=stops, embed=embed,
            messages=messages, prompt_text=prompt,
        )  # fmt: skip
        position = depth
        job = Job(
            request, engine, self.id, client_id, self._on_job_closed, position, self._eta_ms(behind)
        )
        self._jobs[job.id] = job
        self._idle.clear()
        if client_id is not None:
            self._per_client[client_id] += 1
        engine.submit(request)
        return job

    def _too_long(
        self, engine: Engine, n_prompt: int, max_tokens: int, asked: bool, *, chat: bool
    ) -> InferError:
        """CONTEXT_OVERFLOW naming what to shorten: the prompt where it leaves no room, else
        max_tokens. An upstream tokenizes on its own server: its prompt's size is not known."""
        n_ctx = engine.n_ctx
        prompt = "messages" if chat else "prompt"
        if not engine.tokenizes:
            known = engine.parameters.n_ctx
            bound = f"the context of {n_ctx} tokens" if known else (
                f"{n_ctx} tokens, the most infertui asks of an upstream that does not say its "
                "context"
            )  # fmt: skip
            message = f"max_tokens {max_tokens} is more than {bound}"
            return InferError(ErrorKind.CONTEXT_OVERFLOW, message, param="max_tokens",
                              engine_id=self.id)  # fmt: skip
        if n_prompt >= n_ctx or not asked:
            message = (
                f"a prompt of {n_prompt} tokens leaves no room for a reply in the context of "
                f"{n_ctx} tokens"
            )
            param = prompt
        else:
            message = (
                f"prompt of {n_prompt} tokens plus max_tokens {max_tokens} exceeds the context "
                f"of {n_ctx} tokens"
            )
            param = "max_tokens"
        return InferError(ErrorKind.CONTEXT_OVERFLOW, message, param=param, engine_id=self.id)

    def _eta_ms(self, index: int) -> int:
        """When the job at this index of the engine's waiting list should start (the index
        one past the end: a job that joins now), forecast from the slots' and the queue's
        expected work at the measured rates (forecast.py)."""
        engine = self.engine
        if engine is not None:
            _, busy = engine.occupancy()
            if index < engine.n_parallel - busy:
                return 0  # a free slot awaits it: no forecast to walk (O(jobs) each time)
        starts = self._forecast()
        return int(1000 * starts[min(index, len(starts) - 1)])

    def _forecast(self) -> list[float]:
        engine = self.engine
        if engine is None:
            return [1.0]
        queue = engine.waiting()
        queued = {request.job_id for request in queue}
        # Taken by the engine (a job it popped a moment ago counts before it is told so).
        running = [job for job in self._jobs.values() if job.id not in queued and not job.done]
        rates = Rates(
            decode_tps=self._decode_tps_per_sequence(len(running)),
            prefill_tps=self.metrics.prefill_rate(),
            typical_tokens_out=self.metrics.typical_tokens_out(),
        )
        busy_for = [
            rates.expected_tokens(job.request.max_tokens, job.tokens_out) / rates.decode_tps
            for job in running
        ]
        waiting = [
            rates.service_s(request.max_tokens, len(request.prompt_tokens)) for request in queue
        ]
        return start_times(busy_for, max(0, engine.n_parallel - len(busy_for)), waiting)

    def _decode_tps_per_sequence(self, running: int) -> float:
        """What one sequence gets at the batch size now: the rate of the latest steady run
        over all slots shared out, else the last job's own rate, else a slow guess."""
        total = self.metrics.active_decode_rate()
        if total and running:
            return total / running
        return self.metrics.last_job_tps or FALLBACK_DECODE_TPS

    # ---- events from the engine thread -------------------------------------------------------

    def _publish(self, batch: list[tuple[GenerationRequest, EngineEvent]]) -> None:
        """Hand a step's events to the event loop in one call: from the engine thread, or at
        once from the loop itself (an upstream engine's tasks), sparing a wake-up per token."""
        if threading.get_ident() == self._loop_thread:
            self._dispatch(batch)
            return
        try:
            self._loop.call_soon_threadsafe(self._dispatch, batch)
        except RuntimeError:
            log.debug("pool %s: event loop closed; dropping %d events", self.id, len(batch))

    def _dispatch(self, batch: list[tuple[GenerationRequest, EngineEvent]]) -> None:
        tokens = 0
        for request, event in batch:
            job = self._jobs.get(request.job_id)
            if job is None:
                continue
            first = False  # the job's first text: its TTFT counts once delivered
            if isinstance(event, TokenText):
                tokens += 1
                first = job.first_token_at is None
                if event.prefill is not None:
                    self.metrics.record_prefill(*event.prefill)
                    job.prefill_recorded = True
            job._deliver(event)
            if first and job.first_token_at is not None:  # (None: cancelled meanwhile)
                self.metrics.record_first_token((job.first_token_at - job.enqueued_at) * 1000)
            if isinstance(event, Finished):
                self._forget(job)
        if tokens:
            self.metrics.record_tokens(tokens)

    def _forget(self, job: Job) -> None:
        """The engine no longer holds the job: drop it (idempotent)."""
        if self._jobs.pop(job.id, None) is not None and not self._jobs:
            self._idle.set()
        self._retire_idle_engines()

    def _on_job_closed(self, job: Job, final: Finished) -> None:
        if job.released:  # withdrawn from the queue: no engine event will follow
            self._forget(job)
        if job.client_id is not None:
            self._per_client[job.client_id] -= 1
            if self._per_client[job.client_id] <= 0:
                del self._per_client[job.client_id]
        self.metrics.record_finish(
            final,
            prefill_recorded=job.prefill_recorded,
            ttft_recorded=job.first_token_at is not None,
        )
        t = final.timings
        log.info(
            "pool %s: %s from %s finished (%s): %d in, %d out, queued %.0f ms, ttft %s ms, "
            "%.1f tok/s",
            self.id, job.id, job.client_id or "-", final.finish_reason, t.tokens_in,
            t.tokens_out, t.queue_wait_ms, f"{t.ttft_ms:.0f}" if t.ttft_ms is not None else "-",
            t.decode_tps,
            extra={"cid": job.correlation_id},
        )  # fmt: skip

    # ---- control plane -----------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def position(self, job: Job) -> tuple[int, int]:
        """(queue position, predicted start in ms) of a job now; (0, 0) once it has a slot."""
        engine = job.engine
        waiting = engine.waiting()
        if job.request not in waiting:
            return 0, 0
        index = waiting.index(job.request)
        free = engine.n_parallel - engine.occupancy()[1]
        return max(0, index - free), self._eta_ms(index)

    async def drain(self, deadline_ms: int) -> dict[str, int]:
        """Stop admitting; let jobs finish until the deadline; cancel the rest (OC-CTRL-2002)."""
        if self.state is PoolState.READY or self._unreachable:
            self.state = PoolState.DRAINING
        log.info(
            "pool %s draining (deadline %d ms, %s)", self.id, deadline_ms, _jobs(len(self._jobs))
        )
        waits = [asyncio.ensure_future(e.wait()) for e in (self._idle, self._hurried)]
        try:  # until the jobs are done, the deadline, or hurry()
            await asyncio.wait(
                waits, timeout=deadline_ms / 1000, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
        late = [job for job in self._jobs.values() if not job.done]
        for job in late:
            job.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 10)
        self.state = PoolState.DRAINED
        log.info("pool %s drained (%d cancelled at the deadline)", self.id, len(late))
        return {"cancelled": len(late)}

    def hurry(self) -> None:
        """Bring a drain's deadline forward to now, this one's and any to come: its jobs are
        cancelled at once (a second Ctrl-C while the host stops). `resume` takes it back."""
        self._hurried.set()

    def resume(self) -> None:
        """Admit again after a drain (a no-op when already admitting). A drain still running
        must finish first: its deadline would cancel the jobs admitted meanwhile."""
        if self.state is PoolState.READY:
            return
        if self.state is not PoolState.DRAINED or self.engine is None:
            closed = self.state is PoolState.DRAINED  # drained with no engine: closed
            why = f"engine '{self.id}' is closed" if closed else self._why_unready()
            raise InferError(ErrorKind.POOL_UNREADY, f"{why}; only a drained engine can resume")
        self.state = PoolState.FAILED if self._unreachable else PoolState.READY
        self._hurried.clear()
        log.info("pool %s resumed", self.id)

    async def reload(self, model_path: str | None = None) -> None:
        """Load the new model beside the old, then switch atomically (OC-CTRL-2003). If the new
        one fails to load, the old one keeps serving and the error is raised."""
        spec = self.spec if model_path is None else self.spec.with_model(model_path)
        log.info("pool %s reloading %s", self.id, spec.model_path)
        try:
            new = await self._open(spec)
        except InferError as exc:
            self.error = f"reload failed, kept the previous model: {exc.message}"
            log.warning("pool %s: %s", self.id, self.error)
            raise
        old, self.engine, self.spec = self.engine, new, spec
        self.error, self._unreachable = None, False
        if self.state in (PoolState.DRAINED, PoolState.FAILED):
            self.state = PoolState.READY
        if new.problem is not None:
            self._on_health(new.problem)
        if old is not None:
            self._retiring.add(old)  # its running and queued jobs finish on it
            self._retire_idle_engines()

    def _retire_idle_engines(self) -> None:
        for engine in list(self._retiring):
            if not any(job.engine is engine for job in self._jobs.values()):
                self._retiring.discard(engine)
                task = self._loop.create_task(engine.shutdown())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Cancel everything and free the engine(s)."""
        self.state = PoolState.DRAINED
        for job in list(self._jobs.values()):
            job.cancel()
        engines = [e for e in (self.engine, *self._retiring) if e is not None]
        self.engine, self._retiring = None, set()
        for engine in engines:
            await engine.shutdown()
        await asyncio.gather(*self._closing, return_exceptions=True)

    # ---- snapshots ---------------------------------------------------------------------------

    def slots(self) -> list[SlotSnapshot]:
        if self.engine is None:
            return []
        clients = {job.id: job.client_id for job in self._jobs.values()}
        return [
            s.model_copy(update={"client_id": clients.get(s.job_id or "")})
            for s in self.engine.slots()
        ]

    def queue(self) -> QueueSnapshot:
        engine = self.engine
        waiting = engine.waiting() if engine else []
        now = time.perf_counter()
        starts = self._forecast()
        entries = []
        for position, request in enumerate(waiting):
            job = self._jobs.get(request.job_id)
            entries.append(
                QueueEntry(
                    job_id=request.job_id,
                    client_id=job.client_id if job else None,
                    position=position,
                    predicted_start_ms=int(1000 * starts[min(position, len(starts) - 1)]),
                    tokens_in=len(request.prompt_tokens),
                    waited_ms=round((now - request.enqueued_at) * 1000, 1),
                )
            )
        return QueueSnapshot(
            pool_id=self.id,
            capacity=self.queue_capacity,
            depth=len(waiting),
            waiting=tuple(entries),
            slots=tuple(self.slots()),
        )

    def metrics_snapshot(self) -> MetricsSnapshot:
        engine = self.engine
        return self.metrics.snapshot(
            queue_depth=len(engine.waiting()) if engine else 0,
            queue_capacity=self.queue_capacity,
            slots_busy=engine.busy_slots if engine else 0,
            slots_total=self.n_slots,
            memory=engine.memory if engine else None,
            loop_time=engine.loop_time if engine else None,
        )
