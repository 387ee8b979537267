"""The continuous-batching decode loop: one thread, one context, one KV stream per slot.

The scheduler hands it a job only when a slot is free (an embedding job needs none), so what
it holds between steps is no queue, only the jobs given since the last step. Each step, under
the lock that the event loop's calls take: retire cancelled jobs, take the embedding jobs,
and put the jobs given into free sequences (slot_table.py: kept and shared cells). Then,
without the lock: embed, run one step over the sequences (step.py: one `llama_decode` for
the running streams and prompt chunks, sampling, text), and publish the step's events to the
event loop in one call.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import llama_cpp as llama

from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Finished
from ...protocol.snapshots import SlotSnapshot, TimingStats
from ..types import Events, GenerationRequest, LoopOptions, Publisher
from . import cpu_turns
from .embedder import MAX_INPUT_TOKENS, MAX_SEQUENCES, Embedder
from .native import LlamaContext, LlamaModel, release_freed_heap
from .slot import Slot
from .slot_table import SlotTable
from .step import Stepper

log = logging.getLogger(__name__)

# Loads the model and its context on the loop's thread, and says how the loop runs them: some
# options (sampling in the graph, overlap) depend on where the model's layers landed.
Opened = tuple[LlamaModel, LlamaContext, LoopOptions]
Opener = Callable[[], Opened]
_SETTLE_TURNS = 4  # event-loop turns an idle loop waits at most for a burst to be read
# How long the loop thread may wait for the GIL while the event loop runs Python. CPython's
# default (5 ms) lets a thread that drops the GIL for each socket write and takes it back at
# once (the event loop, streaming to many clients) keep it for 5 ms from a thread that waits.
GIL_TURN_S = 0.0005


class BatchLoop:
    """Owns the model, the context and the slots, on one thread; the event loop talks to it
    only through the methods marked thread-safe.

    The thread also loads and frees the model: llama.cpp's CPU backend runs on OpenMP, whose
    thread team belongs to the calling thread, and a second team idling beside the one that
    decodes costs ~7% of decode speed on two cores.
    """

    def __init__(self, name: str, publish: Publisher) -> None:
        self._publish = publish
        self._slots: list[Slot | None] = []  # the sequences', once the thread has made them
        self._given: list[GenerationRequest] = []  # started since the last step
        self._embedder: Embedder | None = None  # made on the first embedding job
        self._stepper: Stepper | None = None  # made on the loop's thread
        # Seconds of device work (the step's decodes, embedding), and seconds the loop had work
        # (the decodes and the host's own work around them, when the device idles). The loop
        # thread adds them up and publishes the pair once per step, so that a reader never
        # sees decoding beyond the time with work.
        self._embed_s = 0.0
        self._busy_s = 0.0
        self.loop_time = (0.0, 0.0)
        self.guesses = (0, 0)  # speculative decoding's tokens since loading: guessed, kept
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._wake_due: asyncio.AbstractEventLoop | None = None  # where a wake is on its way
        self._submitted = 0  # jobs ever submitted: whether more came in a turn
        self._stopping = False
        self._crashed = False  # the loop ended by an error: the model stays until `stop`
        self._thread = threading.Thread(target=self._main, name=f"batch-loop-{name}", daemon=True)

    # ---- thread-safe API (called from the event loop) ---------------------------------------

    def open(self, opener: Opener) -> Opened:
        """Start the thread, which loads the model and context; block until they are ready.
        A loading error (an InferError) is raised here and the thread ends."""
        self._opener = opener
        self._opened: Future[Opened] = Future()
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_TURN_S))
        self._thread.start()
        return self._opened.result()

    def start(self, request: GenerationRequest) -> None:
        """Run a job (on a free slot, unless it embeds). An idle loop is woken once the event
        loop has had a turn with no new job (a few turns at most): a burst's requests, read
        over a turn or two, then start in one step. Woken at the first, the loop prefilled
        that one alone while the others waited behind its decode."""
        with self._lock:
            if self._stopping:
                why = (
                    "the engine stopped after an error (the host's log says which): load it again"
                    if self._crashed
                    else "the engine is shutting down"
                )
                raise InferError(ErrorKind.POOL_UNREADY, why)
            self._given.append(request)
            self._submitted += 1
            self._interrupt()
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not from an event loop: nothing else can be on its way
                self._wake.notify()
                return
            if self._wake_due is loop:  # a wake is on its way on this loop
                return
            self._wake_due = loop  # (a wake due on a loop since closed never comes)
            seen = self._submitted
        loop.call_soon(self._wake_when_settled, loop, seen, 1)

    def _wake_when_settled(self, loop: asyncio.AbstractEventLoop, seen: int, turns: int) -> None:
        with self._lock:
            if self._submitted != seen and turns < _SETTLE_TURNS:  # more came: one more turn
                loop.call_soon(self._wake_when_settled, loop, self._submitted, turns + 1)
                return
            if self._wake_due is loop:
                self._wake_due = None
            self._wake.notify()

    def wake(self) -> None:
        """Make the loop look at its jobs now (after a cancel flag was set)."""
        with self._lock:
            self._interrupt()
            self._wake.notify()

    def slots(self) -> list[SlotSnapshot]:
        return [
            SlotSnapshot(slot=i) if slot is None else slot.snapshot()
            for i, slot in enumerate(list(self._slots))
        ]

    def sequence_length(self, slot: int) -> int:
        """KV cells held by a slot's sequence (0 when free); for tests and diagnostics."""
        return self._ctx.sequence_length(slot)

    def kept_cells(self, slot: int) -> int:
        """Cells a free sequence keeps for a prompt that goes on from them (0 if none)."""
        return self._seqs.kept.cells(slot)

    def stop(self, timeout: float | None = 10.0) -> None:
        with self._lock:
            self._stopping = True
            self._interrupt()
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._crashed and not self._thread.is_alive():
            self._crashed = False
            self._free_native()

    def _interrupt(self) -> None:
        """A lone stream's run (step.py) stops: the loop has something to look at."""
        if self._stepper is not None:
            self._stepper.interrupt()

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self._slots if s is not None)

    # ---- the loop (engine thread) -----------------------------------------------------------

    def _main(self) -> None:
        try:
            self._model, self._ctx, options = self._opener()
        except BaseException as exc:
            self._opened.set_exception(exc)
            return
        try:  # (a draft model that cannot guess for this one fails here)
            self._seqs = SlotTable(self._model, self._ctx, options)
            stepper = Stepper(self._seqs, self._publish)
        except BaseException as exc:
            self._ctx.free()
            self._model.free()
            self._opened.set_exception(exc)
            return
        self._slots = self._seqs.slots
        with self._lock:
            self._stepper = stepper
        self._opened.set_result((self._model, self._ctx, options))
        try:
            self._run(stepper)
        finally:
            stepper.close()
            self._seqs.close()
            if self._embedder is not None:
                self._embedder.free()
            cpu_turns.leave()  # this thread decodes no more
            if not self._crashed:  # (else the event loop may still tokenize: `stop` frees it)
                self._free_native()

    def _free_native(self) -> None:
        self._ctx.free()
        self._model.free()
        release_freed_heap()

    def _run(self, stepper: Stepper) -> None:
        seqs = self._seqs
        try:
            while True:
                with self._lock:
                    while not self._stopping and not self._given and self.busy_slots == 0:
                        self._wake.wait()
                    if self._stopping:
                        break
                    began = time.perf_counter()
                    events: Events = []
                    seqs.retire_cancelled(events)
                    if seqs.graph is not None and not self._given:
                        seqs.graph.remove_idle(seqs.steps, lambda i: self._slots[i] is not None)
                    embeddings = self._take_embeddings(events)
                    self._admit_given(events)
                    quiet = not self._given  # (a new job interrupts a lone run from here on)
                    stepper.arm()
                if embeddings:  # their decodes, in the embedder's context, are device work
                    start = time.perf_counter()
                    self._embed(embeddings, events)
                    self._embed_s += time.perf_counter() - start
                stepper.step(events, quiet=quiet and not embeddings)
                self._busy_s += time.perf_counter() - began
                self.loop_time = (stepper.decode_s + self._embed_s, self._busy_s)
                self.guesses = (stepper.guessed, stepper.kept)
                if events:
                    self._publish(events)
        except Exception:
            log.exception("batch loop crashed; failing its jobs")
            with self._lock:  # (a job given from here on is refused, saying why)
                self._crashed = self._stopping = True
            self._fail_all(InferError(ErrorKind.GENERATION_FAILED, "the engine loop crashed"))
        finally:
            self._shutdown()

    # ---- admission --------------------------------------------------------

    def _admit_given(self, events: Events) -> None:
        """Put the jobs given into free sequences (there is one for each: the scheduler
        counts them), under the lock. One cancelled before it got there ends here."""
        given = [r for r in self._given if not r.embed]
        self._given = [r for r in self._given if r.embed]
        admitted = self._live(given, events)
        if admitted:
            if len(admitted) > len(self._seqs.free()):
                raise RuntimeError("the scheduler started more jobs than the engine has slots")
            self._seqs.admit(admitted, events)

    def _take_embeddings(self, events: Events) -> list[GenerationRequest]:
        """Embedding jobs need no slot: this step takes, in the order given, as many as one
        decode of the embedding context holds, so running streams wait at most that one
        decode; the rest stay for the next step."""
        taken: list[GenerationRequest] = []
        rest: list[GenerationRequest] = []
        tokens, full = 0, False
        for request in self._given:
            if request.embed and not full:
                full = bool(taken) and (
                    len(taken) == MAX_SEQUENCES
                    or tokens + len(request.prompt_tokens) > MAX_INPUT_TOKENS
                )
                if not full:
                    taken.append(request)
                    tokens += len(request.prompt_tokens)
                    continue
            rest.append(request)
        self._given = rest
        return self._live(taken, events)

    @staticmethod
    def _live(requests: list[GenerationRequest], events: Events) -> list[GenerationRequest]:
        """The requests not cancelled; a cancelled one ends (the event loop has closed it
        for its consumer already; this frees its place in the scheduler's count)."""
        live = []
        for request in requests:
            if request.cancelled:
                timings = TimingStats(tokens_in=len(request.prompt_tokens))
                events.append((request, Finished("abort", timings)))
            else:
                live.append(request)
        return live

    def _embed(self, requests: list[GenerationRequest], events: Events) -> None:
        if not requests:
            return
        try:
            if self._embedder is None:
                threads = int(llama.llama_n_threads(self._ctx.ptr))
                self._embedder = Embedder(self._model, threads, self._seqs.options.pooling)
        except InferError as error:
            for request in requests:
                timings = TimingStats(tokens_in=len(request.prompt_tokens))
                events.append((request, Finished("error", timings, error)))
            return
        events.extend(self._embedder.embed_jobs(requests))

    def _fail_all(self, error: InferError) -> None:
        events: Events = []
        self._seqs.finish_all("error", events, error)
        if events:
            self._publish(events)

    def _shutdown(self) -> None:
        """Stopping: every job still here ends as aborted, so no consumer waits forever."""
        events: Events = []
        self._seqs.finish_all("abort", events)
        with self._lock:
            self._stopping = True
            given, self._given = self._given, []
        for request in given:
            events.append(
                (request, Finished("abort", TimingStats(tokens_in=len(request.prompt_tokens))))
            )
        if events:
            self._publish(events)
