"""The continuous-batching decode loop: one thread, one context, n_parallel sequences.

Each step: retire cancelled jobs, admit waiting jobs into free slots, decode one token of every
running sequence in a single `llama_decode`, prefill new prompts in chunks (at most one batch of
tokens per step), sample each sequence with its own native chain, and publish the step's events
to the event loop in one call. A sequence that finishes or is cancelled frees its KV cells at once.

Cancel is race-free in two places: the loop re-checks `request.cancelled` after sampling and
before publishing, and the event-loop side drops any token of a cancelled job that was already
in flight (see scheduler/job.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Admitted, Finished, TokenText
from ..protocol.snapshots import FinishReason, SlotSnapshot, TimingStats
from .native import Batch, LlamaContext, LlamaModel
from .sampler import SamplerChain
from .text import StopMatcher, Utf8Stream
from .types import EngineEvent, GenerationRequest, Publisher

log = logging.getLogger(__name__)

Events = list[tuple[GenerationRequest, EngineEvent]]


class _Slot:
    """One sequence in flight: its place in the KV cache, its sampler and its text state."""

    __slots__ = (
        "admitted_at", "chunks", "first_token_at", "index", "last_token", "n_past",
        "prefill_done_at", "prompt_pos", "request", "sampler", "stops", "utf8",
    )  # fmt: skip

    def __init__(self, index: int, request: GenerationRequest, sampler: SamplerChain) -> None:
        self.index = index
        self.request = request
        self.sampler = sampler
        self.prompt_pos = 0  # prompt tokens already in the batch pipeline
        self.n_past = 0  # tokens in this sequence's KV cells
        self.last_token = -1
        self.chunks = 0
        self.utf8 = Utf8Stream()
        self.stops = StopMatcher(request.params.stop)
        self.admitted_at = time.perf_counter()
        self.prefill_done_at: float | None = None
        self.first_token_at: float | None = None

    @property
    def prefilling(self) -> bool:
        return self.prompt_pos < len(self.request.prompt_tokens)


Opener = Callable[[], tuple[LlamaModel, LlamaContext]]


class BatchLoop:
    """Owns the model, the context and the slots, on one thread; the event loop talks to it
    only through the methods marked thread-safe.

    The thread also loads and frees the model: llama.cpp's CPU backend runs on OpenMP, whose
    thread team belongs to the calling thread, and a second team idling beside the one that
    decodes costs ~7% of decode speed on two cores.
    """

    def __init__(self, name: str, n_parallel: int, n_batch: int, publish: Publisher) -> None:
        self._publish = publish
        self._n_batch = n_batch
        self._slots: list[_Slot | None] = [None] * n_parallel
        self._waiting: deque[GenerationRequest] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name=f"batch-loop-{name}", daemon=True)

    # ---- thread-safe API (called from the event loop) ---------------------------------------

    def open(self, opener: Opener) -> tuple[LlamaModel, LlamaContext]:
        """Start the thread, which loads the model and context; block until they are ready.
        A loading error (an InferError) is raised here and the thread ends."""
        self._opener = opener
        self._opened: Future[tuple[LlamaModel, LlamaContext]] = Future()
        self._thread.start()
        return self._opened.result()

    def submit(self, request: GenerationRequest) -> None:
        with self._lock:
            if self._stopping:
                raise InferError(ErrorKind.POOL_UNREADY, "the engine is shutting down")
            self._waiting.append(request)
            self._wake.notify()

    def withdraw(self, request: GenerationRequest) -> bool:
        """Take a job out of the queue before it reached a slot; False if it already left."""
        with self._lock:
            try:
                self._waiting.remove(request)
            except ValueError:
                return False
            return True

    def wake(self) -> None:
        """Make the loop look at its slots now (after a cancel flag was set)."""
        with self._lock:
            self._wake.notify()

    def waiting(self) -> list[GenerationRequest]:
        with self._lock:
            return list(self._waiting)

    def occupancy(self) -> tuple[int, int]:
        """(jobs waiting, slots busy), read together."""
        with self._lock:
            return len(self._waiting), self.busy_slots

    def slots(self) -> list[SlotSnapshot]:
        out = []
        for i, slot in enumerate(list(self._slots)):
            if slot is None:
                out.append(SlotSnapshot(slot=i))
                continue
            req = slot.request
            started = slot.first_token_at
            elapsed = time.perf_counter() - started if started else 0.0
            out.append(
                SlotSnapshot(
                    slot=i,
                    job_id=req.job_id,
                    phase="prefill" if slot.prefilling else "decode",
                    tokens_in=len(req.prompt_tokens),
                    tokens_out=req.tokens_out,
                    tps=(req.tokens_out - 1) / elapsed
                    if elapsed > 0 and req.tokens_out > 1
                    else 0.0,
                )
            )
        return out

    def sequence_length(self, slot: int) -> int:
        """KV cells held by a slot's sequence (0 when free); for tests and diagnostics."""
        return self._ctx.sequence_length(slot)

    def stop(self, timeout: float | None = 10.0) -> None:
        with self._lock:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self._slots if s is not None)

    # ---- the loop (engine thread) -----------------------------------------------------------

    def _main(self) -> None:
        try:
            self._model, self._ctx = self._opener()
        except BaseException as exc:
            self._opened.set_exception(exc)
            return
        self._batch = Batch(max(self._n_batch, self._ctx.n_seq))
        self._opened.set_result((self._model, self._ctx))
        try:
            self._run()
        finally:
            self._batch.free()
            self._ctx.free()
            self._model.free()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._stopping and not self._waiting and self.busy_slots == 0:
                        self._wake.wait()
                    if self._stopping:
                        break
                    events: Events = []
                    self._admit_waiting(events)
                self._step(events)
                if events:
                    self._publish(events)
        except Exception:
            log.exception("batch loop crashed; failing its jobs")
            self._fail_all(InferError(ErrorKind.GENERATION_FAILED, "the engine loop crashed"))
        finally:
            self._shutdown()

    def _admit_waiting(self, events: Events) -> None:
        """Move waiting jobs into free slots. Called under the lock, so that a job is always
        either waiting or in a slot when the event loop looks (see occupancy)."""
        free = [i for i, s in enumerate(self._slots) if s is None]
        while free and self._waiting:
            request = self._waiting.popleft()
            if not request.cancelled:  # a cancelled one was already ended by the event loop
                self._admit(free.pop(0), request, events)

    def _admit(self, index: int, request: GenerationRequest, events: Events) -> None:
        sampler = SamplerChain(request.params, self._model.n_vocab)
        if request.params.uses_penalties:
            sampler.accept_prompt(request.prompt_tokens)
        slot = _Slot(index, request, sampler)
        self._slots[index] = slot
        request.slot = index
        wait_ms = (slot.admitted_at - request.enqueued_at) * 1000
        events.append((request, Admitted(slot=index, queue_wait_ms=wait_ms)))

    def _step(self, events: Events) -> None:
        for slot in [s for s in self._slots if s is not None]:
            if slot.request.cancelled:
                self._finish(slot, "abort", events)
        self._decode_running(events)
        self._prefill_waiting(events)

    def _decode_running(self, events: Events) -> None:
        """One token for every sequence past its prompt, in a single llama_decode."""
        decoding = [s for s in self._slots if s is not None and not s.prefilling]
        if not decoding:
            return
        batch = self._batch
        batch.clear()
        rows = [(s, batch.add(s.last_token, s.n_past, s.index, True)) for s in decoding]
        rc = self._ctx.decode(batch)
        if rc != 0:
            self._decode_failed(rc, decoding, events)
            return
        for slot, row in rows:
            slot.n_past += 1
            self._on_token(slot, slot.sampler.sample(self._ctx.ptr, row), events)

    def _prefill_waiting(self, events: Events) -> None:
        """Prompt chunks, one sequence per llama_decode, at most n_batch tokens per step.

        A chunk always starts at a multiple of n_batch and never shares a call with another
        sequence: llama.cpp's logits depend on how a prompt is split into ubatches, so this
        keeps every job's output identical to what it gives alone, whatever runs beside it.
        """
        budget = self._n_batch
        for slot in [s for s in self._slots if s is not None and s.prefilling]:
            prompt = slot.request.prompt_tokens
            take = min(self._n_batch, len(prompt) - slot.prompt_pos)
            if take > budget:
                return  # the rest waits a step: running streams are held back by one batch
            batch = self._batch
            batch.clear()
            start, last = slot.prompt_pos, slot.prompt_pos + take == len(prompt)
            for pos in range(start, start + take):
                row = batch.add(prompt[pos], pos, slot.index, last and pos == start + take - 1)
            rc = self._ctx.decode(batch)
            if rc != 0:
                self._decode_failed(rc, [slot], events)
                continue
            slot.prompt_pos += take
            slot.n_past += take
            budget -= take
            if last:
                slot.prefill_done_at = time.perf_counter()
                self._on_token(slot, slot.sampler.sample(self._ctx.ptr, row), events)

    def _on_token(self, slot: _Slot, token: int, events: Events) -> None:
        request = slot.request
        if request.cancelled:  # checked after sampling, before anything is published
            self._finish(slot, "abort", events)
            return
        if slot.first_token_at is None:
            slot.first_token_at = time.perf_counter()
        if token in request.stop_tokens or (
            self._model.is_end_of_generation(token) and not request.params.ignore_eos
        ):
            self._finish(slot, "stop", events)
            return
        request.tokens_out += 1
        text = slot.utf8.feed(self._model.piece(token))
        if text:
            safe, hit_stop = slot.stops.feed(text)
            if safe:
                self._emit(slot, safe, events)
            if hit_stop:
                self._finish(slot, "stop", events, flush=False)
                return
        if request.tokens_out >= request.max_tokens or slot.n_past + 1 >= self._ctx.n_ctx_seq:
            self._finish(slot, "length", events)
            return
        slot.last_token = token

    def _emit(self, slot: _Slot, text: str, events: Events) -> None:
        events.append((slot.request, TokenText(text, slot.chunks, slot.request.tokens_out)))
        slot.chunks += 1

    def _finish(
        self,
        slot: _Slot,
        reason: FinishReason,
        events: Events,
        *,
        flush: bool = True,
        error: InferError | None = None,
    ) -> None:
        if flush and reason in ("stop", "length"):
            tail = slot.stops.feed(slot.utf8.flush())[0] + slot.stops.flush()
            if tail:
                self._emit(slot, tail, events)
        self._ctx.free_sequence(slot.index)
        slot.sampler.free()
        self._slots[slot.index] = None
        events.append((slot.request, Finished(reason, self._timings(slot), error)))

    def _timings(self, slot: _Slot) -> TimingStats:
        now = time.perf_counter()
        req = slot.request
        first = slot.first_token_at
        return TimingStats(
            queue_wait_ms=(slot.admitted_at - req.enqueued_at) * 1000,
            prefill_ms=((slot.prefill_done_at or now) - slot.admitted_at) * 1000,
            ttft_ms=(first - req.enqueued_at) * 1000 if first else None,
            decode_ms=(now - first) * 1000 if first else 0.0,
            total_ms=(now - req.enqueued_at) * 1000,
            tokens_in=len(req.prompt_tokens),
            tokens_out=req.tokens_out,
        )

    def _decode_failed(self, rc: int, slots: Sequence[_Slot], events: Events) -> None:
        log.error("llama_decode returned %d for %d sequences; failing them", rc, len(slots))
        error = InferError(ErrorKind.GENERATION_FAILED, f"llama_decode failed (code {rc})")
        for slot in {s.index: s for s in slots}.values():
            self._finish(slot, "error", events, error=error)

    def _fail_all(self, error: InferError) -> None:
        events: Events = []
        for slot in [s for s in self._slots if s is not None]:
            self._finish(slot, "error", events, error=error)
        if events:
            self._publish(events)

    def _shutdown(self) -> None:
        """Stopping: every job still here ends as aborted, so no consumer waits forever."""
        events: Events = []
        for slot in [s for s in self._slots if s is not None]:
            self._finish(slot, "abort", events)
        with self._lock:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), deque()
        for request in waiting:
            events.append(
                (request, Finished("abort", TimingStats(tokens_in=len(request.prompt_tokens))))
            )
        if events:
            self._publish(events)
