"""The context's sequences and the jobs in them: where a job starts, and what it leaves.

A job takes a free sequence, and with it the chain that samples it (in the graph where the
chain can run there, see graph_samplers.py). Where it can, it reads less than its prompt:

- A finished job's cells stay in its sequence until another job needs it: a job whose prompt
  begins with those tokens (the next turn of a chat, which repeats the whole history) takes
  that sequence and decodes only the rest, as llama-server's prompt cache does
  (prompt_cache.py).
- A job whose prompt begins as a running one's (the `n` choices of one request, chats with
  one system prompt) takes a copy of that sequence's cells instead of reading the head
  again, waiting for the other's prefill if it is under way (shared_prefix.py). It decodes
  the rest itself, at least its last token, so that each sequence gets a logits row.

Neither in deterministic mode, where a job's cells must be decoded as they would be alone.
A job that ends well keeps its cells for the next; a cancelled or failed one frees them at
once. Loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...protocol.common import SamplingParams
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Admitted, Finished
from ...protocol.snapshots import FinishReason, TimingStats
from ..types import Events, GenerationRequest, LoopOptions
from .drafts import Guesser, KeptRates
from .graph_samplers import GraphSamplers
from .native import LlamaContext, LlamaModel
from .prompt_cache import PromptCache, window_intact
from .sampler import SamplerChain, UnusableParam
from .shared_prefix import best_source
from .slot import Slot
from .step_plan import admission_order

log = logging.getLogger(__name__)


class SlotTable:
    """The slots (one per sequence of the context), the cells kept in free ones, and the
    chains installed in the graph; the step count, which both the loop and they read."""

    def __init__(self, model: LlamaModel, ctx: LlamaContext, options: LoopOptions) -> None:
        self.model = model
        self.ctx = ctx
        self.options = options
        self.slots: list[Slot | None] = [None] * ctx.n_seq
        self.graph = GraphSamplers(ctx, model.n_vocab) if options.backend_sampling else None
        # of this engine's guesses, by run: shared by its streams
        self.kept_rates = KeptRates.for_drafts() if options.draft_path else KeptRates()
        self.kept = PromptCache(ctx, model.n_swa)
        self.steps = 0

    def free(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s is None]

    def running(self) -> list[Slot]:
        return [s for s in self.slots if s is not None]

    def holds(self, slot: Slot) -> bool:
        """Whether the job is still in its sequence (not ended since it was looked up)."""
        return self.slots[slot.index] is slot

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()

    # ---- where a job starts ----------------------------------------------------------------

    def admit(self, admitted: Sequence[GenerationRequest], events: Events) -> None:
        """Put each job in a free sequence (as many as there are): the shortest prompt on the
        lowest one (see step_plan.admission_order)."""
        free = self.free()
        for k in admission_order([len(r.prompt_tokens) for r in admitted]):
            try:
                self._admit(free, admitted[k], events)
            except Exception:  # a defect met by one job must not end the others, nor the loop
                log.exception("job %s could not start", admitted[k].job_id)
                error = InferError(ErrorKind.GENERATION_FAILED, "the engine could not start it")
                timings = TimingStats(tokens_in=len(admitted[k].prompt_tokens))
                events.append((admitted[k], Finished("error", timings, error)))

    def _admit(self, free: list[int], request: GenerationRequest, events: Events) -> None:
        # A sequence whose kept cells this prompt begins with, else one that keeps nothing.
        reuse = (
            None if self.options.deterministic else self.kept.best_for(free, request.prompt_tokens)
        )
        choices = [reuse[0]] if reuse else [i for i in free if i not in self.kept] or free
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
        slot = Slot(index, request, chain, self.steps)
        if self.options.speculative and not chain.on_backend and not request.params.constrained:
            slot.guesser = Guesser(list(request.prompt_tokens), self.kept_rates)
        keep = self.kept.take(index, reuse[1] if reuse else 0)
        slot.prompt_pos = slot.n_past = slot.cached = keep
        if source := self._source_for(request, keep):
            slot.copies_from, slot.shared_tokens = source
        self.slots[index] = slot
        if slot.copies_from is not None and not slot.copies_from.prefilling:
            self.take_prompt(slot.copies_from, [slot])  # now; else after a step that reads the head
        request.slot = index
        wait_ms = (slot.admitted_at - request.enqueued_at) * 1000
        events.append((request, Admitted(slot=index, queue_wait_ms=wait_ms)))

    def _place(self, free: list[int], params: SamplingParams) -> tuple[int, SamplerChain]:
        """A free sequence and the chain that samples it: in the graph where it can run there
        (a grammar cannot, nor a job that wants logprobs: they come from the logits), else on
        the host."""
        if self.graph is not None and not params.constrained and params.logprobs is None:
            return self.graph.place(free, params)
        index = self.graph.place_on_host(free) if self.graph is not None else free[0]
        return index, SamplerChain(params, self.model.n_vocab, self.model.vocab)

    def _source_for(self, request: GenerationRequest, have: int) -> tuple[Slot, int] | None:
        """A running slot whose prompt begins as this one's, and how many of its cells to
        copy (see shared_prefix.py)."""
        prompt = request.prompt_tokens
        if self.options.deterministic or len(prompt) < 2 or not self.model.can_trim:
            return None
        return best_source(prompt, self.slots, have, self.model.n_swa)

    def take_prompt(self, source: Slot, waiting: Sequence[Slot]) -> None:
        """Copy the source's cells to the slots waiting for them whose shared head the source
        has read. One whose window the source's cells no longer hold reads its prompt itself."""
        for other in waiting:
            if other.copies_from is not source or source.prompt_pos < other.shared_tokens:
                continue
            other.copies_from, n = None, other.shared_tokens
            if not window_intact(self.model.n_swa, source.n_past - 1, n):
                continue
            if self.ctx.copy_prefix(source.index, other.index, n):
                other.prompt_pos = other.n_past = other.cached = n
            else:  # its own cells went with the attempt
                other.prompt_pos = other.n_past = other.cached = 0

    # ---- what a job leaves -----------------------------------------------------------------

    def retire_cancelled(self, events: Events) -> None:
        for slot in self.running():
            if slot.request.cancelled:
                self.finish(slot, "abort", events)

    def finish(
        self,
        slot: Slot,
        reason: FinishReason,
        events: Events,
        *,
        flush: bool = True,
        error: InferError | None = None,
        placed: int = 0,
    ) -> None:
        """End the job: the text it held back (unless a stop string ended it), its cells kept
        or freed, its chain kept in the graph for the next job or freed, its last event.
        `placed`: the highest position its sequence ever held, where decodes went past the
        job's end (a lone run's, step.py)."""
        if flush and reason in ("stop", "length") and (tail := slot.tail()):
            events.append((slot.request, slot.token_text(tail)))
        self._keep_or_free(slot, reason, placed)
        for other in self.slots:
            if other is not None and other.copies_from is slot:
                other.copies_from = None  # it prefills its own prompt after all
        if self.graph is not None and self.graph.installed(slot.index) is slot.chain:
            self.graph.freed(slot.index, self.steps)  # its chain stays for the next job
        else:
            slot.chain.free()
        self.slots[slot.index] = None
        events.append((slot.request, Finished(reason, slot.timings(), error)))

    def finish_all(
        self, reason: FinishReason, events: Events, error: InferError | None = None
    ) -> None:
        for slot in self.running():
            self.finish(slot, reason, events, error=error)

    def _keep_or_free(self, slot: Slot, reason: FinishReason, placed: int) -> None:
        """A job that ended well leaves its cells for a prompt that goes on from them; one that
        was cancelled or failed frees them."""
        if (
            reason not in ("stop", "length")
            or self.options.deterministic
            or not self.model.can_trim
        ):
            self.ctx.free_sequence(slot.index)
            return
        tokens = [*slot.request.prompt_tokens, *slot.generated][: slot.n_past]
        # highest n_past, not n_past - 1: a token may still be in flight (overlap mode); past
        # it where later decodes placed more (a sliding window may have dropped cells for them)
        self.kept.keep(slot.index, tokens, max(slot.n_past, placed))
