"""Pool: one engine and its jobs, with admission, the one queue, drain and reload.

The engine is a local llama.cpp model or an upstream server (engine/interface.py); the pool
does not tell them apart. Admitted jobs wait in the pool's queue (queue.py) and are given to
the engine one per free slot, as slots free; the pool bounds the queue and forecasts when
each job will start. An upstream that stops answering makes the pool FAILED (unready) until
it answers again.

Admission happens before a job is queued (OC-CTRL-2010): the pool must be ready, the client
under its concurrent-job limit, prompt plus max_tokens within the context, and the queue not
full; each refusal is a typed InferError with advisory retry hints. Engine events arrive from
the batch-loop thread in one batch per step and are handed to jobs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from ..engine import AnySpec, Engine, GenerationRequest
from ..engine.interface import Tokenizer
from ..engine.types import Events
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Finished, TokenText
from ..protocol.shares import Priority
from ..protocol.snapshots import (
    MetricsSnapshot,
    PoolState,
    QueueEntry,
    QueueSnapshot,
    SlotSnapshot,
    TimingStats,
)
from .admission import check_fits
from .forecast import expected_cost, forecast, spent_cost
from .job import Job, PreparedJob, new_job_id
from .mailbox import Mailbox
from .metrics import MetricsRecorder
from .pool_control import PoolControl
from .queue import JobQueue
from .shares import Shares

log = logging.getLogger(__name__)

DEFAULT_QUEUE_CAPACITY = 64
JobEnded = Callable[[Job, Finished], None]
# what a pool that takes no job is doing, after "engine 'x'" (FAILED says why in its own way)
_STATE_WORDS = {
    PoolState.LOADING: "is still loading",
    PoolState.DRAINING: "is draining",
    PoolState.DRAINED: "is drained until an admin resumes it",
}


class Pool(PoolControl):
    """Serves jobs on one engine. Create with `await Pool.start(spec)`."""

    def __init__(
        self,
        spec: AnySpec,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        shares: Shares | None = None,
        job_ended: JobEnded | None = None,
    ) -> None:
        self.id = spec.engine_id
        self.spec = spec
        self.queue_capacity = queue_capacity
        self.state = PoolState.LOADING
        self.engine: Engine | None = None
        self.error: str | None = None
        self.metrics = MetricsRecorder(self.id)
        self.total_requests = 0
        self._jobs: dict[str, Job] = {}  # admitted and not yet done, waiting or started
        self.shares = shares or Shares()  # the host's: who may do what, shared by its pools
        self._job_ended = job_ended  # told of every job that ends (the usage ledger)
        self._queue = JobQueue(self.shares.weight)
        self._started: Counter[tuple[Engine, bool]] = Counter()  # per engine and kind, as lines
        self._batch_started: Counter[Engine] = Counter()
        self._per_client: Counter[str] = Counter()
        self._retiring: set[Engine] = set()
        self._closing: set[asyncio.Task[None]] = set()  # retired engines shutting down
        self._unreachable = False  # FAILED because its upstream stopped answering
        self._idle = asyncio.Event()  # set while no job is queued or running
        self._idle.set()
        self.idle_since: float | None = time.monotonic()  # None while it has jobs
        self._deadline_now = asyncio.Event()  # a drain's deadline was brought to now
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._mailbox: Mailbox[Events] = Mailbox(self._loop, self._dispatch_steps)

    # What the engine has, or before it has loaded what its spec asks for.
    @property
    def n_ctx(self) -> int:
        return self.engine.describe().n_ctx if self.engine else self.spec.n_ctx

    @property
    def n_slots(self) -> int:
        return self.engine.describe().n_parallel if self.engine else self.spec.slots_requested

    @property
    def model_names(self) -> tuple[str, ...]:
        """What a request's `model` may call this pool besides its id (its file's name, or
        its upstream's model), the first one its name."""
        return self.engine.describe().model_names if self.engine else self.spec.names

    @property
    def gpu_offload(self) -> bool:
        return bool(self.engine and self.engine.describe().n_gpu_layers != 0)

    @classmethod
    async def start(
        cls,
        spec: AnySpec,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        shares: Shares | None = None,
        job_ended: JobEnded | None = None,
    ) -> Pool:
        pool = cls(spec, queue_capacity, shares, job_ended)
        await pool.load()
        return pool

    # ---- admission ---------------------------------------------------------------------------

    def submit(self, prepared: PreparedJob) -> Job:
        """Admit a job HostService.prepare made for this pool's engine, or raise InferError."""
        identity = prepared.identity or prepared.client_id or "anonymous"
        try:
            job = self._admit(prepared, identity)
        except InferError as exc:
            self.metrics.record_reject(exc.kind.value)
            log.info("pool %s rejected a job from %s: %s", self.id, identity, exc.message)
            raise
        self.metrics.record_accept()
        self.total_requests += 1
        # One line per job at INFO, when it ends (below); here only one that must wait. A
        # line is ~20 µs on the event loop, and a burst's requests wait for each other's.
        log.log(
            logging.INFO if job.queue_position else logging.DEBUG,
            "pool %s accepted %s from %s: %d prompt tokens, position %d, predicted start %d ms",
            self.id, job.id, identity, job.tokens_in, job.queue_position,
            job.predicted_start_ms,
        )  # fmt: skip
        return job

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """The text as the model's tokens (any thread: a long text is worth running on one)."""
        return self._needs_tokenizer().tokenize(text, add_special=add_special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._needs_tokenizer().detokenize(tokens)

    def _tokenizer(self) -> Tokenizer | None:
        return self.ready_engine().tokenizer

    def _needs_tokenizer(self) -> Tokenizer:
        tokenizer = self._tokenizer()
        if tokenizer is None:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"engine '{self.id}' is an upstream server: it tokenizes there",
                param="model",
                engine_id=self.id,
            )
        return tokenizer

    def ready_engine(self) -> Engine:
        """The engine, if the pool takes jobs now; else POOL_UNREADY, saying why."""
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

    def _admit(self, prepared: PreparedJob, identity: str) -> Job:
        engine = self.ready_engine()
        params = prepared.params.with_defaults(engine.sampling_defaults)
        client_id, client_limit, job_id = prepared.client_id, prepared.client_limit, prepared.job_id
        if (
            client_id is not None
            and client_limit is not None
            and self._per_client[client_id] >= client_limit
        ):
            raise InferError(
                ErrorKind.CLIENT_BUSY,
                f"this client already has {client_limit} job(s) running; wait or abort first",
                retry_after_ms=self._start_ms(0),
                engine_id=self.id,
            )
        if job_id is not None and job_id in self._jobs:
            raise InferError(
                ErrorKind.INVALID_PARAMS, f"job id '{job_id}' is already in use", param="task_id"
            )
        tokens, messages, embed = prepared.tokens, prepared.messages, prepared.embed
        max_tokens = check_fits(engine, self.id, tokens, params.max_tokens, embed=embed,
                                chat=messages is not None)  # fmt: skip
        depth = len(self._queue)
        if depth >= self.queue_capacity:  # (embeddings too, though they need no slot)
            raise InferError(
                ErrorKind.QUEUE_FULL,
                f"the queue of engine '{self.id}' is full ({depth} waiting)",
                retry_after_ms=self._start_ms(depth),
                engine_id=self.id,
            )
        # the identity's limits and its session's budget: the last checks, as they count
        shares, session = self.shares, prepared.session_id
        shares.admit(identity)
        max_tokens, reserved = shares.reserve(identity, session, len(tokens), max_tokens)
        tokenizer = engine.tokenizer
        stops = tokenizer.stop_tokens if tokenizer and messages is not None else frozenset()
        request = GenerationRequest(
            job_id or new_job_id(), tokens, params, max_tokens, stop_tokens=stops, embed=embed,
            messages=messages, prompt_text=prepared.prompt,
        )  # fmt: skip
        job = Job(request, engine, self.id, client_id, self._cancel, self._on_job_closed, 0, 0)
        job.identity, job.session_id, job.reserved = identity, session, reserved
        job.correlation_id = prepared.correlation_id
        job.batch = shares.priority(identity, prepared.priority) is Priority.BATCH
        job.expected_cost = expected_cost(self.metrics, max_tokens, len(tokens))
        self._jobs[job.id] = job
        self._idle.clear()
        self.idle_since = None
        if client_id is not None:
            self._per_client[client_id] += 1
        shares.queued(identity)
        self._queue.push(job)
        self._start_waiting()
        if not job.started:  # where the fair order puts it, and when that starts
            job.queue_position, job.predicted_start_ms = self.position(job)
        return job

    # ---- the queue: jobs start as their engine has room ----------------------------------------

    def _has_room(self, engine: Engine, embed: bool, batch: bool = False) -> bool:
        """Whether the engine can take one more job of this kind and class now: a free slot
        (for batch work, one beyond the slots kept for interactive work), or room in its
        embedding batch. An engine whose server is down takes none (its queue has ended)."""
        if engine.problem is not None:
            return False
        if embed:
            return engine.embeddings is not None and (
                self._started[engine, True] < engine.embeddings.capacity
            )
        slots = engine.describe().n_parallel
        if batch and self._batch_started[engine] >= slots - self.shares.interactive_slots:
            return False
        return self._started[engine, False] < slots

    def _start_waiting(self) -> None:
        """Give the engines the waiting jobs they have room for, in the queue's fair order."""
        for job in self._queue.take(self._has_room, self.shares.may_start):
            job.started = True
            self._count_start(job, +1)
            try:
                if job.request.embed and job.engine.embeddings is not None:
                    job.engine.embeddings.start(job.request)
                else:
                    job.engine.start(job.request)
            except InferError as exc:  # an engine shutting down: the job ends, the rest wait
                job.started = False
                self._count_start(job, -1)
                self._queue.settle(job, 0.0)
                job._deliver(Finished("error", TimingStats(tokens_in=job.tokens_in), exc))
            else:
                self.shares.started(job.identity)

    def _count_start(self, job: Job, step: int) -> None:
        """A job takes (+1) or gives back (-1) its place in its engine."""
        self._started[job.engine, job.request.embed] += step
        if job.batch and not job.request.embed:
            self._batch_started[job.engine] += step

    def _cancel(self, job: Job) -> None:
        """A job's cancel: out of the queue, or its engine stops it (and frees its slot)."""
        if self._queue.remove(job):
            job.release()
        elif job.started:
            job.engine.cancel(job.request)

    def _forecast(self) -> list[float]:
        """Seconds until each waiting job starts, in queue order, and last, until a job that
        joins now would: the one place positions turn into times."""
        if self.engine is None:
            return [1.0]
        running = [job for job in self._jobs.values() if job.started and not job.done]
        return forecast(running, self._queue.jobs(), self.n_slots, self.metrics)

    def _start_ms(self, position: int) -> int:
        """When the job at this queue position should start (the position one past the end:
        a job that joins now), forecast from the slots' and the queue's expected work at the
        measured rates (forecast.py)."""
        starts = self._forecast()
        return int(1000 * starts[min(position, len(starts) - 1)])

    # ---- events from the engine thread -------------------------------------------------------

    def _publish(self, batch: Events) -> None:
        """Hand a step's events to the event loop: from the engine thread through the mailbox
        (one wake-up for the steps the loop has not read yet), or at once from the loop itself
        (an upstream engine's tasks)."""
        if threading.get_ident() == self._loop_thread:
            self._dispatch(batch)
        else:
            self._mailbox.post(batch)

    def _dispatch_steps(self, batches: list[Events]) -> None:
        self._dispatch([event for batch in batches for event in batch])

    def _dispatch(self, batch: Events) -> None:
        tokens, freed = 0, False
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
                if job.started:  # its slot (or its place in an embedding batch) is free
                    self._count_start(job, -1)
                    t = event.timings
                    self._queue.settle(job, spent_cost(t.tokens_in, t.tokens_out))
                    freed = True
                self._forget(job)
        if tokens:
            self.metrics.record_tokens(tokens)
        if freed and self._queue:
            self._start_waiting()

    def _forget(self, job: Job) -> None:
        """The engine no longer holds the job: drop it (idempotent)."""
        if self._jobs.pop(job.id, None) is not None and not self._jobs:
            self._idle.set()
            self.idle_since = time.monotonic()
        self._retire_idle_engines()

    def _on_job_closed(self, job: Job, final: Finished) -> None:
        if job.released:  # withdrawn from the queue: no engine event will follow
            self._forget(job)
        if job.client_id is not None:
            self._per_client[job.client_id] -= 1
            if self._per_client[job.client_id] <= 0:
                del self._per_client[job.client_id]
        t = final.timings
        self.shares.ended(
            job.identity, started=job.started, tokens=t.tokens_in + t.tokens_out,
            session_id=job.session_id, reserved=job.reserved, decode_ms=t.decode_ms,
        )  # fmt: skip
        self.metrics.record_finish(
            final,
            prefill_recorded=job.prefill_recorded,
            ttft_recorded=job.first_token_at is not None,
        )
        log.info(
            "pool %s: %s from %s finished (%s): %d in, %d out, queued %.0f ms, ttft %s ms, "
            "%.1f tok/s",
            self.id, job.id, job.identity, final.finish_reason, t.tokens_in,
            t.tokens_out, t.queue_wait_ms, f"{t.ttft_ms:.0f}" if t.ttft_ms is not None else "-",
            t.decode_tps,
            extra={"cid": job.correlation_id},
        )  # fmt: skip
        if self._job_ended is not None:
            try:
                self._job_ended(job, final)
            except Exception:  # a record lost is logged; the host serves on
                log.exception("pool %s: recording %s failed", self.id, job.id)

    # ---- control plane -----------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def position(self, job: Job) -> tuple[int, int]:
        """(queue position, predicted start in ms) of a job now; (0, 0) once it started."""
        position = self._queue.position(job)
        if position is None:
            return 0, 0
        return position, self._start_ms(position)

    # ---- snapshots ---------------------------------------------------------------------------

    def slots(self) -> list[SlotSnapshot]:
        if self.engine is None:
            return []
        jobs = self._jobs
        return [
            s.model_copy(update={"client_id": job.client_id, "identity": job.identity})
            if (job := jobs.get(s.job_id or "")) is not None
            else s
            for s in self.engine.slots()
        ]

    def queue(self) -> QueueSnapshot:
        waiting = self._queue.jobs()
        now = time.perf_counter()
        starts = self._forecast()
        entries = tuple(
            QueueEntry(
                job_id=job.id,
                client_id=job.client_id,
                identity=job.identity,
                priority=Priority.BATCH if job.batch else Priority.INTERACTIVE,
                position=position,
                predicted_start_ms=int(1000 * starts[min(position, len(starts) - 1)]),
                tokens_in=len(job.request.prompt_tokens),
                waited_ms=round((now - job.enqueued_at) * 1000, 1),
            )
            for position, job in enumerate(waiting)
        )
        return QueueSnapshot(
            pool_id=self.id,
            capacity=self.queue_capacity,
            depth=len(waiting),
            waiting=entries,
            slots=tuple(self.slots()),
        )

    def metrics_snapshot(self) -> MetricsSnapshot:
        engine = self.engine
        usage = engine.usage() if engine else None
        return self.metrics.snapshot(
            queue_depth=len(self._queue),
            queue_capacity=self.queue_capacity,
            slots_busy=self._started[engine, False] if engine else 0,
            slots_total=self.n_slots,
            memory=usage.memory if usage else None,
            loop_time=usage.loop_time if usage else None,
            guesses=usage.guesses if usage else (0, 0),
        )
