"""The continuous-batching decode loop: one thread, one context, one KV stream per slot.

Each step: retire cancelled jobs, admit waiting jobs into free slots, run one `llama_decode`
holding the next token of every running sequence and chunks of the prompts being prefilled
(shared within `n_batch`, see step_plan.py), sample every sequence (in the graph when its
chain is installed there, see graph_samplers.py, else on the host), and publish the step's
events to the event loop in one call. A sequence that is cancelled or fails frees its KV
cells at once; one that finishes keeps them for a prompt that goes on from them (below).

A job whose prompt begins as a running one's (the `n` choices of one request, chats with
one system prompt) does not prefill that head again: it takes a copy of that sequence's cells,
waiting for the prefill if it is under way, and decodes the rest itself, at least its last
token, so that each sequence gets a logits row of its own (shared_prefix.py).

A finished job's cells stay in its sequence until another job needs the sequence: a job whose
prompt begins with those tokens (the next turn of a chat, which repeats the whole history)
takes that sequence and decodes only the rest of its prompt, as llama-server's prompt cache
does (kept_cells.py). Cancelled and failed jobs free their cells at once.

In deterministic mode every prompt is instead prefilled alone, in chunks at fixed `n_batch`
boundaries: llama.cpp's logits depend on how a prompt is split into ubatches, so this keeps a
job's output what it gives alone, whatever runs beside it (at a cost in throughput and TTFT).

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
from dataclasses import dataclass

import llama_cpp as llama

from ..protocol.common import SamplingParams
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Admitted, Finished
from ..protocol.snapshots import FinishReason, SlotSnapshot, TimingStats
from .embedder import MAX_INPUT_TOKENS, MAX_SEQUENCES, Embedder
from .graph_samplers import GraphSamplers
from .kept_cells import KeptCells, window_intact
from .native import Batch, LlamaContext, LlamaModel, release_freed_heap
from .sampler import SamplerChain, UnusableParam, token_logprob
from .shared_prefix import best_donor
from .slot import Slot
from .step_plan import admission_order, fillers, last_tokens_apart, prompt_shares
from .step_sampler import StepSampler
from .types import EngineEvent, GenerationRequest, Publisher

log = logging.getLogger(__name__)

Events = list[tuple[GenerationRequest, EngineEvent]]


@dataclass(frozen=True, slots=True)
class LoopOptions:
    n_batch: int = 512  # prompt tokens per step, beyond one token per running sequence
    deterministic: bool = False  # prefill each prompt alone, at fixed chunk boundaries
    backend_sampling: bool = False  # sample in the graph, on the device that decodes
    # Make text while the device decodes the next step. Only worth it where llama_decode
    # returns before the device is done (a GPU); on the CPU it would delay text by a step.
    overlap: bool = False
    pooling: str | None = None  # embeddings: the GGUF's when None (see embedder.py)


# Loads the model and its context on the loop's thread, and says how the loop runs them: some
# options (sampling in the graph, overlap) depend on where the model's layers landed.
Opened = tuple[LlamaModel, LlamaContext, LoopOptions]
Opener = Callable[[], Opened]


class BatchLoop:
    """Owns the model, the context and the slots, on one thread; the event loop talks to it
    only through the methods marked thread-safe.

    The thread also loads and frees the model: llama.cpp's CPU backend runs on OpenMP, whose
    thread team belongs to the calling thread, and a second team idling beside the one that
    decodes costs ~7% of decode speed on two cores.
    """

    def __init__(self, name: str, publish: Publisher) -> None:
        self._publish = publish
        self._options = LoopOptions()  # the opener's, once it has run
        self._slots: list[Slot | None] = []
        self._graph: GraphSamplers | None = None  # chains sampling in the graph, if any
        self._waiting: deque[GenerationRequest] = deque()
        self._pending: list[tuple[Slot, int]] = []  # sampled, text not made yet (overlap)
        self._embedder: Embedder | None = None  # made on the first embedding job
        self._steps = 0
        # Seconds from starting each decode to its outputs being ready, and seconds the loop
        # had work (the decodes and the host's own work around them, when the device idles).
        # The loop thread adds them up and publishes the pair once per step, so that a reader
        # never sees decoding beyond the time with work.
        self._decode_s = 0.0
        self._busy_s = 0.0
        self.loop_time = (0.0, 0.0)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name=f"batch-loop-{name}", daemon=True)

    # ---- thread-safe API (called from the event loop) ---------------------------------------

    def open(self, opener: Opener) -> Opened:
        """Start the thread, which loads the model and context; block until they are ready.
        A loading error (an InferError) is raised here and the thread ends."""
        self._opener = opener
        self._opened: Future[Opened] = Future()
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
        return [
            SlotSnapshot(slot=i) if slot is None else slot.snapshot()
            for i, slot in enumerate(list(self._slots))
        ]

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
            self._model, self._ctx, self._options = self._opener()
        except BaseException as exc:
            self._opened.set_exception(exc)
            return
        n_seq = self._ctx.n_seq
        self._slots = [None] * n_seq
        if self._options.backend_sampling:
            self._graph = GraphSamplers(self._ctx, self._model.n_vocab)
        self._batch = Batch(self._options.n_batch + n_seq)
        self._kept = KeptCells(self._ctx, self._model.n_swa)
        self._sampler = StepSampler(self._model.n_vocab)
        self._filler_token = max(0, self._model.bos)
        self._opened.set_result((self._model, self._ctx, self._options))
        try:
            self._run()
        finally:
            self._sampler.close()
            if self._graph is not None:
                self._graph.close()
            if self._embedder is not None:
                self._embedder.free()
            self._ctx.free()
            self._model.free()
            release_freed_heap()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._stopping and not self._waiting and self.busy_slots == 0:
                        self._wake.wait()
                    if self._stopping:
                        break
                    began = time.perf_counter()
                    events: Events = []
                    self._retire_cancelled(events)
                    if self._graph is not None and not self._waiting:
                        self._graph.remove_idle(self._steps, lambda i: self._slots[i] is not None)
                    embeddings = self._take_embeddings()
                    self._admit_waiting(events)
                if embeddings:  # their decodes, in the embedder's context, are device work
                    start = time.perf_counter()
                    self._embed(embeddings, events)
                    self._decode_s += time.perf_counter() - start
                self._step(events)
                self._busy_s += time.perf_counter() - began
                self.loop_time = (self._decode_s, self._busy_s)
                if events:
                    self._publish(events)
        except Exception:
            log.exception("batch loop crashed; failing its jobs")
            self._fail_all(InferError(ErrorKind.GENERATION_FAILED, "the engine loop crashed"))
        finally:
            self._shutdown()

    # ---- admission --------------------------------------------------------

    def _admit_waiting(self, events: Events) -> None:
        """Move waiting jobs into free slots. Called under the lock, so that a job is always
        either waiting or in a slot when the event loop looks (see occupancy)."""
        free = [i for i, s in enumerate(self._slots) if s is None]
        admitted: list[GenerationRequest] = []
        passed: list[GenerationRequest] = []  # embedding jobs beyond this step's batch
        while len(admitted) < len(free) and self._waiting:
            request = self._waiting.popleft()
            if request.embed:
                passed.append(request)
            elif not request.cancelled:  # else already ended by the event loop
                admitted.append(request)
        self._waiting.extendleft(reversed(passed))
        # Shortest prompt on the lowest free sequence: see step_plan.admission_order.
        for k in admission_order([len(r.prompt_tokens) for r in admitted]):
            try:
                self._admit(free, admitted[k], events)
            except Exception:  # a defect met by one job must not end the others, nor the loop
                log.exception("job %s could not start", admitted[k].job_id)
                error = InferError(ErrorKind.GENERATION_FAILED, "the engine could not start it")
                timings = TimingStats(tokens_in=len(admitted[k].prompt_tokens))
                events.append((admitted[k], Finished("error", timings, error)))

    def _admit(self, free: list[int], request: GenerationRequest, events: Events) -> None:
        # A sequence whose kept cells this prompt begins with, else one that keeps nothing. Not
        # in deterministic mode, where a job's cells must be decoded as they would be alone.
        reuse = (
            None
            if self._options.deterministic
            else self._kept.best_for(free, request.prompt_tokens)
        )
        choices = [reuse[0]] if reuse else [i for i in free if i not in self._kept] or free
        try:
            index, chain = self._place(choices, request.params)
        except UnusableParam as err:  # an unparsable grammar, a biased token not in the vocabulary
            error = InferError(ErrorKind.INVALID_PARAMS, str(err), param=err.param)
            timings = TimingStats(tokens_in=len(request.prompt_tokens))
            events.append((request, Finished("error", timings, error)))
            return
        free.remove(index)
        if request.params.uses_penalties:
            chain.accept_prompt(request.prompt_tokens)
        slot = Slot(index, request, chain, self._steps)
        keep = self._kept.take(index, reuse[1] if reuse else 0)
        slot.prompt_pos = slot.n_past = slot.cached = keep
        if donor := self._donor_for(request, keep):
            slot.donor, slot.shared = donor
        self._slots[index] = slot
        if slot.donor is not None and not slot.donor.prefilling:
            self._take_prompt(slot.donor, [slot])  # now; else after a step that reads the head
        request.slot = index
        wait_ms = (slot.admitted_at - request.enqueued_at) * 1000
        events.append((request, Admitted(slot=index, queue_wait_ms=wait_ms)))

    def _donor_for(self, request: GenerationRequest, have: int) -> tuple[Slot, int] | None:
        """A running slot whose prompt begins as this one's, and how many of its cells to
        copy (see shared_prefix.py). Not in deterministic mode: a job's cells must be decoded
        as they would be alone."""
        prompt = request.prompt_tokens
        if self._options.deterministic or len(prompt) < 2 or not self._model.can_trim:
            return None
        return best_donor(prompt, self._slots, have, self._model.n_swa)

    def _take_prompt(self, donor: Slot, waiting: Sequence[Slot]) -> None:
        """Copy the donor's cells to the slots waiting for them whose shared head the donor
        has read. One whose window the donor's cells no longer hold reads its prompt itself."""
        for other in waiting:
            if other.donor is not donor or donor.prompt_pos < other.shared:
                continue
            other.donor, n = None, other.shared
            if not window_intact(self._model.n_swa, donor.n_past - 1, n):
                continue
            if self._ctx.copy_prefix(donor.index, other.index, n):
                other.prompt_pos = other.n_past = other.cached = n
            else:  # its own cells went with the attempt
                other.prompt_pos = other.n_past = other.cached = 0

    def _take_embeddings(self) -> list[GenerationRequest]:
        """Embedding jobs need no slot: this step takes, in queue order, as many as one decode
        of the embedding context holds, so running streams wait at most that one decode."""
        if not any(r.embed for r in self._waiting):
            return []
        taken: list[GenerationRequest] = []
        tokens = 0
        for request in self._waiting:
            if not request.embed:
                continue
            if taken and (
                len(taken) == MAX_SEQUENCES
                or tokens + len(request.prompt_tokens) > MAX_INPUT_TOKENS
            ):
                break
            taken.append(request)
            tokens += len(request.prompt_tokens)
        for request in taken:
            self._waiting.remove(request)
        return [r for r in taken if not r.cancelled]

    def _embed(self, requests: list[GenerationRequest], events: Events) -> None:
        if not requests:
            return
        try:
            if self._embedder is None:
                threads = int(llama.llama_n_threads(self._ctx.ptr))
                self._embedder = Embedder(self._model, threads, self._options.pooling)
        except InferError as error:
            for request in requests:
                timings = TimingStats(tokens_in=len(request.prompt_tokens))
                events.append((request, Finished("error", timings, error)))
            return
        events.extend(self._embedder.embed_jobs(requests))

    def _place(self, free: list[int], params: SamplingParams) -> tuple[int, SamplerChain]:
        """A free sequence and the chain that samples it: in the graph where it can run there
        (a grammar cannot, nor a job that wants logprobs: they come from the logits), else on
        the host."""
        if self._graph is not None and not params.constrained and params.logprobs is None:
            return self._graph.place(free, params)
        index = self._graph.place_on_host(free) if self._graph is not None else free[0]
        return index, SamplerChain(params, self._model.n_vocab, self._model.vocab)

    # ---- one step ------------------------------------------------------------------------------

    def _retire_cancelled(self, events: Events) -> None:
        for slot in self._slots:
            if slot is not None and slot.request.cancelled:
                self._finish(slot, "abort", events)

    def _step(self, events: Events) -> None:
        self._steps += 1
        running = [s for s in self._slots if s is not None]
        if not running:
            return
        decoding = [s for s in running if not s.prefilling]
        prefilling = sorted(
            (s for s in running if s.prefilling and s.donor is None), key=lambda s: s.admitted_at
        )
        waiting: dict[Slot, list[Slot]] = {}  # by donor, the jobs waiting for its cells
        for s in running:
            if s.donor is not None:
                waiting.setdefault(s.donor, []).append(s)
        n_batch = self._options.n_batch
        if self._options.deterministic:
            if decoding:
                self._decode(decoding, [], use_fillers=False, events=events)
            self._prefill_alone(prefilling, events)
            return
        # n_batch prompt tokens whatever runs beside them: taking the running streams' tokens
        # out of it cut admission to a trickle at 256 streams (4.4 s worst TTFT, measured).
        remaining = [len(s.request.prompt_tokens) - s.prompt_pos for s in prefilling]
        waited = [self._steps - s.admitted_step for s in prefilling]
        shares = prompt_shares(remaining, waited, n_batch)
        chunks = [
            (s, self._stop_at_shared_head(s, n, waiting.get(s, [])))
            for s, n in zip(prefilling, shares, strict=True)
            if n > 0
        ]
        lasts = self._prefill_bodies(decoding, chunks, events)
        if lasts is not chunks:  # the bodies' decode made text meanwhile, which may end jobs
            decoding = [s for s in decoding if self._slots[s.index] is s]
        chunks = lasts
        if decoding or chunks:  # nothing left when the bodies' decode failed alone
            self._decode(decoding, chunks, use_fillers=True, events=events)
        # Jobs waiting for a donor still reading its prompt copy after the step, and read
        # their rest in the next: joining this step's last decode delayed the first tokens
        # of all the others (+15 ms p50 TTFT at 64 streams, bench_gpu).
        for donor, others in waiting.items():
            self._take_prompt(donor, others)

    def _stop_at_shared_head(self, slot: Slot, n: int, waiting: Sequence[Slot]) -> int:
        """A chunk cut where a job waiting for this slot's cells can copy them: a model with
        sliding-window layers drops the cells a head's end attends to once the prompt is
        read far past it (window_intact)."""
        n_swa = self._model.n_swa
        if not n_swa:
            return n
        end = slot.prompt_pos + n
        for other in waiting:
            if slot.prompt_pos < other.shared < end and not window_intact(
                n_swa, end - 1, other.shared
            ):
                end = other.shared
        return end - slot.prompt_pos

    def _prefill_bodies(
        self, decoding: Sequence[Slot], chunks: list[tuple[Slot, int]], events: Events
    ) -> list[tuple[Slot, int]]:
        """Where the prompts finishing this step would scatter their logits rows over the
        staircase (see step_plan.py, "Last tokens apart"), decode the chunks now without
        those last tokens, and return the last tokens for the step's one-token rectangle.
        Otherwise return the chunks untouched (the very list: the step tells the two apart)."""
        share = {slot.index: n for slot, n in chunks}
        last = {s.index for s, n in chunks if s.prompt_pos + n == len(s.request.prompt_tokens)}
        running = [s.index for s in decoding]
        free = [i for i, s in enumerate(self._slots) if s is None]
        if not last_tokens_apart(running, share, last, free, self._ctx.n_ubatch):
            return chunks
        # No fillers: with no logits rows, a gap costs a pass over the layers, not the output's.
        bodies = [(s, n - 1 if s.index in last else n) for s, n in chunks]
        if not self._decode([], [b for b in bodies if b[1]], use_fillers=False, events=events):
            return []
        return [(s, 1) for s, _ in chunks if s.index in last]

    def _decode(
        self,
        decoding: Sequence[Slot],
        chunks: Sequence[tuple[Slot, int]],
        *,
        use_fillers: bool,
        events: Events,
    ) -> bool:
        """One llama_decode: the next token of each decoding slot and the given prompt chunks,
        in sequence order (llama.cpp forms its ubatches over consecutive sequences), then one
        sample per slot that has logits. False where llama.cpp failed it (its jobs ended)."""
        share = {slot.index: n for slot, n in chunks}
        slots = {s.index: s for s in decoding}
        slots.update((slot.index, slot) for slot, _ in chunks)
        fill = (
            fillers(slots, (i for i, s in enumerate(self._slots) if s is None))
            if use_fillers
            else []
        )
        self._kept.drop_longer(fill, max((s.n_past for s in slots.values()), default=0))
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        logits: list[int] = []
        rows: list[tuple[Slot, int]] = []  # slots to sample, with their batch index
        for seq in sorted([*slots, *fill]):
            slot = slots.get(seq)
            if slot is None:  # a filler: a throw-away token on a free sequence
                tokens.append(self._filler_token)
                positions.append(self._kept.cells(seq))
                seqs.append(seq)
                logits.append(0)
            elif seq not in share:
                rows.append((slot, len(tokens)))
                tokens.append(slot.last_token)
                positions.append(slot.n_past)
                seqs.append(seq)
                logits.append(1)
            else:
                n, start = share[seq], slot.prompt_pos
                prompt = slot.request.prompt_tokens
                tokens.extend(prompt[start : start + n])
                positions.extend(range(start, start + n))
                seqs.extend([seq] * n)
                logits.extend([0] * n)
                if start + n == len(prompt):
                    logits[-1] = 1
                    rows.append((slot, len(tokens) - 1))
        self._batch.fill(tokens, positions, seqs, logits)
        began = time.perf_counter()
        rc = self._ctx.decode(self._batch)
        for seq in fill:
            self._kept.filled(seq)
        if rc != 0:
            self._decode_s += time.perf_counter() - began
            self._decode_failed(rc, list(slots.values()), events)
            return False
        for slot in decoding:
            slot.n_past += 1
        now = time.perf_counter()
        for slot, n in chunks:
            slot.prompt_pos += n
            slot.n_past += n
            if not slot.prefilling:
                slot.prefill_done_at = now
        ranks = list(range(len(rows)))  # each row's place among the batch's outputs
        if self._pending:
            # A GPU is decoding this batch now: meanwhile, turn the last step's tokens into
            # text and hand it out, instead of leaving the device idle while we do it.
            self._make_text(events)
            self._publish(events[:])
            events.clear()
            live = [k for k, (slot, _) in enumerate(rows) if self._slots[slot.index] is slot]
            rows, ranks = [rows[k] for k in live], live
        if rows:  # the outputs are needed now: wait for them (sampling would anyway)
            self._ctx.synchronize()
        self._decode_s += time.perf_counter() - began
        if rows:
            sampled = self._sampler.sample(self._ctx.ptr, [(i, s.chain) for s, i in rows], ranks)
            for (slot, i), token in zip(rows, sampled, strict=True):
                if slot.request.params.logprobs is not None:
                    alternatives = slot.request.params.logprobs
                    logprob = token_logprob(self._ctx.ptr, i, token, alternatives, self._model)
                    slot.logprobs.append(logprob)
                self._on_token(slot, token, events)
        return True

    def _prefill_alone(self, prefilling: Sequence[Slot], events: Events) -> None:
        """Deterministic mode: each prompt chunk in its own llama_decode, starting at a
        multiple of n_batch, at most n_batch prompt tokens per step."""
        n_batch = budget = self._options.n_batch
        for slot in prefilling:
            take = min(n_batch, len(slot.request.prompt_tokens) - slot.prompt_pos)
            if take > budget:
                return  # the rest waits a step: running streams are held back by one batch
            self._decode([], [(slot, take)], use_fillers=False, events=events)
            budget -= take

    # ---- tokens out --------------------------------------------------------------------------

    def _on_token(self, slot: Slot, token: int, events: Events) -> None:
        """A sampled token: end the job, or keep it going. What only the text decides (a stop
        string) comes from `_text`, now or, when overlapping, during the next decode."""
        request = slot.request
        if request.cancelled:  # checked after sampling, before anything is published
            self._finish(slot, "abort", events)
            return
        if slot.first_token_at is None:
            slot.first_token_at = time.perf_counter()
        slot.generated.append(token)
        if token in request.stop_tokens or (
            self._model.is_end_of_generation(token) and not request.params.ignore_eos
        ):
            self._finish(slot, "stop", events)
            return
        request.tokens_out += 1
        full = request.tokens_out >= request.max_tokens or slot.n_past + 1 >= self._ctx.n_ctx_seq
        if self._options.overlap and not full:
            slot.last_token = token
            self._pending.append((slot, token))
            return
        if not self._text(slot, token, events):
            return
        if full:
            self._finish(slot, "length", events)
            return
        slot.last_token = token

    def _text(self, slot: Slot, token: int, events: Events) -> bool:
        """Publish a token's text; False when a stop string ended the job."""
        text, hit_stop = slot.text(self._model.piece(token))
        if text:
            events.append((slot.request, slot.token_text(text)))
        if hit_stop:
            self._finish(slot, "stop", events, flush=False)
        return not hit_stop

    def _make_text(self, events: Events) -> None:
        """Overlap mode: the text of the tokens the last step sampled. A job a stop string ends
        here already has its next token in the batch being decoded; that token is dropped."""
        pending, self._pending = self._pending, []
        for slot, token in pending:
            if self._slots[slot.index] is not slot:
                continue  # ended meanwhile
            if slot.request.cancelled:
                self._finish(slot, "abort", events)
                continue
            self._text(slot, token, events)

    def _finish(
        self,
        slot: Slot,
        reason: FinishReason,
        events: Events,
        *,
        flush: bool = True,
        error: InferError | None = None,
    ) -> None:
        if flush and reason in ("stop", "length") and (tail := slot.tail()):
            events.append((slot.request, slot.token_text(tail)))
        self._keep_or_free(slot, reason)
        for other in self._slots:
            if other is not None and other.donor is slot:
                other.donor = None  # it prefills its own prompt after all
        if self._graph is not None and self._graph.installed(slot.index) is slot.chain:
            self._graph.freed(slot.index, self._steps)  # its chain stays for the next job
        else:
            slot.chain.free()
        self._slots[slot.index] = None
        events.append((slot.request, Finished(reason, slot.timings(), error)))

    def _keep_or_free(self, slot: Slot, reason: FinishReason) -> None:
        """A job that ended well leaves its cells for a prompt that goes on from them; one that
        was cancelled or failed frees them."""
        if (
            reason not in ("stop", "length")
            or self._options.deterministic
            or not self._model.can_trim
        ):
            self._ctx.free_sequence(slot.index)
            return
        tokens = [*slot.request.prompt_tokens, *slot.generated][: slot.n_past]
        # highest n_past, not n_past - 1: a token may still be in flight (overlap mode)
        self._kept.keep(slot.index, tokens, slot.n_past)

    def kept_cells(self, slot: int) -> int:
        """Cells a free sequence keeps for a prompt that goes on from them (0 if none)."""
        return self._kept.cells(slot)

    def _decode_failed(self, rc: int, slots: Sequence[Slot], events: Events) -> None:
        log.error("llama_decode returned %d for %d sequences; failing them", rc, len(slots))
        error = InferError(ErrorKind.GENERATION_FAILED, f"llama_decode failed (code {rc})")
        for slot in slots:
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
