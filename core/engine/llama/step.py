"""One step of the batch loop: one `llama_decode` holding the next token of every running
sequence and chunks of the prompts being prefilled (shared within `n_batch`, see
step_plan.py), then a sample for every sequence that has logits (in the graph when its chain
is installed there, else on the host: step_sampler.py), and each token's way out: the text
it makes, a stop, the end of the job.

A stream that decodes alone, with nothing else to run, goes on in C for a while instead
(lone_run.py): its decodes back to back, its tokens' way out on another thread meanwhile.

In deterministic mode every prompt is instead prefilled alone, in chunks at fixed `n_batch`
boundaries: llama.cpp's logits depend on how a prompt is split into ubatches, so this keeps a
job's output what it gives alone, whatever runs beside it (at a cost in throughput and TTFT).

Cancel is race-free here: a job's flag is checked again after sampling and before anything of
it is published (and the event-loop side drops a token of a cancelled job already in flight,
see scheduler/job.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

from ...protocol.errors import ErrorKind, InferError
from ...protocol.snapshots import FinishReason
from ..types import Events, Publisher
from . import lone_run
from .draft_model import DraftModel
from .drafts import MAX_GUESSES
from .guess_plan import GuessPlan
from .lone_run import IN_GRAPH, LoneRun
from .native import Batch
from .prompt_cache import window_intact
from .sampler import token_logprob
from .slot import Slot
from .slot_table import SlotTable
from .step_cost import StepCost
from .step_plan import fillers, last_tokens_apart, prompt_shares
from .step_sampler import StepSampler

log = logging.getLogger(__name__)

LONE_RUNS = True  # a stream alone runs in C (lone_run.py) where the library is built


class Stepper:
    """Runs steps over the sequences, on the loop's thread. `decode_s` adds up the seconds from
    starting each decode to its outputs being ready."""

    def __init__(self, seqs: SlotTable, publish: Publisher) -> None:
        self._seqs = seqs
        self._model, self._ctx, self._options = seqs.model, seqs.ctx, seqs.options
        self._publish = publish
        guesses = MAX_GUESSES if self._options.speculative else 0
        self._batch = Batch(self._options.n_batch + self._ctx.n_seq + guesses)
        self._sampler = StepSampler(self._model.n_vocab)
        self._filler_token = max(0, self._model.bos)
        self._widest_hole = float("inf")  # holes worth a filler (step_plan.fillers)
        self._draft: DraftModel | None = None  # guesses from a draft model, not the text
        self._plan: GuessPlan | None = None  # speculative decoding's
        if self._options.speculative and self._options.draft_path:
            self._draft = DraftModel(
                self._options.draft_path, self._model, self._ctx, self._options.n_batch,
                self._options.draft_gpu_layers,
            )  # fmt: skip
        if self._options.speculative or self._ctx.n_seq > 1:
            cost = StepCost.measure(self._ctx, 0, self._filler_token)
            self._widest_hole = cost.fixed_tokens
            if self._options.speculative:
                self._plan = GuessPlan(seqs, cost, self._draft)
            log.info(
                "a decode step takes %.2f ms + %.2f ms a token (its fixed part is worth %.1f "
                "tokens: guesses and fillers are weighed against it)", 1000 * cost.fixed,
                1000 * cost.per_token, cost.fixed_tokens,
            )  # fmt: skip
        self._checking_s = 0.0  # seconds spent checking guesses (their rows and tokens), in all
        self._pending: list[tuple[Slot, int]] = []  # sampled, text not made yet (overlap)
        self._lone = (
            LoneRun(self._model, self._ctx, self._batch)
            if lone_run.AVAILABLE and LONE_RUNS
            else None
        )
        self._lone_end: tuple[FinishReason, bool] | None = None  # a run's job ended: why, flush
        self._in_lone = False  # the lone run's reader is taking tokens
        self.lone_decodes = 0  # decodes made in lone runs (diagnostics)
        self.decode_s = 0.0
        self.guessed = self.kept = 0  # tokens guessed ahead, and of them those kept

    def close(self) -> None:
        self._sampler.close()
        if self._lone is not None:
            self._lone.close()
        if self._draft is not None:
            self._draft.free()

    def arm(self) -> None:
        """Let a lone run go in the next step (under the lock that `interrupt`'s callers
        take)."""
        if self._lone is not None:
            self._lone.arm()

    def interrupt(self) -> None:
        """Thread-safe: a lone run under way ends after its decode (a new job, a cancel)."""
        if self._lone is not None:
            self._lone.stop()

    def step(self, events: Events, *, quiet: bool = False) -> None:
        """One step; `quiet`: no other job waits, so a lone stream may run on in C."""
        seqs = self._seqs
        seqs.steps += 1
        running = seqs.running()
        if not running:
            return
        decoding = [s for s in running if not s.prefilling]
        if len(decoding) == len(running) and not self._options.deterministic:
            # every stream decodes (none reads a prompt or waits to copy one): no prompt plan
            draw = self._lone_draw(running[0]) if quiet and len(running) == 1 else None
            guesses = self._guesses(decoding, [], lone=draw is not None)
            if draw is not None and not guesses:
                self._lone_run(running[0], draw, events)
                return
            began, decoding_s, checking_s = time.perf_counter(), self.decode_s, self._checking_s
            self._decode(decoding, [], use_fillers=True, events=events, guesses=guesses)
            if len(decoding) == 1 and self._plan is not None:  # (which a lone run does without)
                spent, decoded_s = time.perf_counter() - began, self.decode_s - decoding_s
                self._plan.time_step(spent - decoded_s - (self._checking_s - checking_s))
                if draw is not None and guesses:  # what its guesses cost beside a lone run's
                    self._plan.time_guessing(decoded_s, len(guesses[decoding[0]]))
            return
        prefilling = sorted(
            (s for s in running if s.prefilling and s.copies_from is None),
            key=lambda s: s.admitted_at,
        )
        waiting: dict[Slot, list[Slot]] = {}  # by source, the jobs waiting for its cells
        for s in running:
            if s.copies_from is not None:
                waiting.setdefault(s.copies_from, []).append(s)
        if self._options.deterministic:
            if decoding:
                self._decode(decoding, [], use_fillers=False, events=events)
            self._prefill_alone(prefilling, events)
            return
        # n_batch prompt tokens whatever runs beside them: taking the running streams' tokens
        # out of it cut admission to a trickle at 256 streams (4.4 s worst TTFT, measured).
        remaining = [len(s.request.prompt_tokens) - s.prompt_pos for s in prefilling]
        waited = [seqs.steps - s.admitted_step for s in prefilling]
        shares = prompt_shares(remaining, waited, self._options.n_batch)
        chunks = [
            (s, self._stop_at_shared_head(s, n, waiting.get(s, [])))
            for s, n in zip(prefilling, shares, strict=True)
            if n > 0
        ]
        lasts = self._prefill_bodies(decoding, chunks, events)
        if lasts is not chunks:  # the bodies' decode made text meanwhile, which may end jobs
            decoding = [s for s in decoding if seqs.holds(s)]
        chunks = lasts
        if decoding or chunks:  # nothing left when the bodies' decode failed alone
            guesses = self._guesses(decoding, chunks)
            self._decode(decoding, chunks, use_fillers=True, events=events, guesses=guesses)
        # Jobs waiting for a source still reading its prompt copy after the step, and read
        # their rest in the next: joining this step's last decode delayed the first tokens
        # of all the others (+15 ms p50 TTFT at 64 streams, bench_gpu).
        for source, others in waiting.items():
            seqs.take_prompt(source, others)

    def _guesses(
        self, decoding: Sequence[Slot], chunks: Sequence[tuple[Slot, int]], *, lone: bool = False
    ) -> dict[Slot, list[int]]:
        """The tokens each stream guesses ahead this step (guess_plan.py); `lone`: without
        them, the one stream would run alone in C."""
        if self._plan is None:
            return {}
        return self._plan.take(decoding, chunks, lone=lone)

    def _stop_at_shared_head(self, slot: Slot, n: int, waiting: Sequence[Slot]) -> int:
        """A chunk cut where a job waiting for this slot's cells can copy them: a model with
        sliding-window layers drops the cells a head's end attends to once the prompt is
        read far past it (window_intact)."""
        n_swa = self._model.n_swa
        if not n_swa:
            return n
        end = slot.prompt_pos + n
        for other in waiting:
            if slot.prompt_pos < other.shared_tokens < end and not window_intact(
                n_swa, end - 1, other.shared_tokens
            ):
                end = other.shared_tokens
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
        free, n_ubatch = self._seqs.free(), self._ctx.n_ubatch
        if not last_tokens_apart(running, share, last, free, n_ubatch, self._widest_hole):
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
        guesses: dict[Slot, list[int]] | None = None,
    ) -> bool:
        """One llama_decode: the next token of each decoding slot (and the tokens it guesses
        after it) and the given prompt chunks, in sequence order (llama.cpp forms its ubatches
        over consecutive sequences), then one sample per slot that has logits (and one per
        guess, up to the first the model does not pick). False where llama.cpp failed it
        (its jobs ended)."""
        guesses = guesses or {}
        kept = self._seqs.kept
        share = {slot.index: n for slot, n in chunks}
        slots = {s.index: s for s in decoding}
        slots.update((slot.index, slot) for slot, _ in chunks)
        fill = fillers(slots, self._seqs.free(), self._widest_hole) if use_fillers else []
        longest = max((s.n_past + len(guesses.get(s, ())) for s in slots.values()), default=0)
        kept.drop_longer(fill, longest)
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        logits: list[int] = []
        rows: list[tuple[Slot, int]] = []  # slots to sample, with their batch index
        ranks: list[int] = []  # each row's place among the batch's outputs
        guessed: list[tuple[Slot, int, int]] = []  # guessing slots: first row, its rank
        outputs = 0
        for seq in sorted([*slots, *fill]):
            slot = slots.get(seq)
            if slot is None:  # a filler: a throw-away token on a free sequence
                tokens.append(self._filler_token)
                positions.append(kept.cells(seq))
                seqs.append(seq)
                logits.append(0)
            elif seq not in share:
                ahead = guesses.get(slot, [])
                if ahead:
                    guessed.append((slot, len(tokens), outputs))
                else:
                    rows.append((slot, len(tokens)))
                    ranks.append(outputs)
                n = 1 + len(ahead)
                tokens.extend([slot.last_token, *ahead])
                positions.extend(range(slot.n_past, slot.n_past + n))
                seqs.extend([seq] * n)
                logits.extend([1] * n)
                outputs += n
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
                    ranks.append(outputs)
                    outputs += 1
        self._batch.fill(tokens, positions, seqs, logits)
        began = time.perf_counter()
        rc = self._ctx.decode(self._batch)
        for seq in fill:
            kept.filled(seq)
        began += self._ctx.waited_s  # (its turn on the CPU is not decoding: cpu_turns.py)
        if rc != 0:
            self.decode_s += time.perf_counter() - began
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
        if self._pending:
            # A GPU is decoding this batch now: meanwhile, turn the last step's tokens into
            # text and hand it out, instead of leaving the device idle while we do it.
            self._make_text(events)
            self._publish(events[:])
            events.clear()
            live = [k for k, (slot, _) in enumerate(rows) if self._seqs.holds(slot)]
            rows, ranks = [rows[k] for k in live], [ranks[k] for k in live]
        if rows or guessed:  # the outputs are needed now: wait for them (sampling would anyway)
            self._ctx.synchronize()
        self.decode_s += time.perf_counter() - began
        if rows:
            sampled = self._sampler.sample(self._ctx.ptr, [(i, s.chain) for s, i in rows], ranks)
            for (slot, i), token in zip(rows, sampled, strict=True):
                self._take(slot, i, token, events)
        checking = time.perf_counter()
        for slot, first, rank in guessed:
            self._check_guesses(slot, guesses[slot], first, rank, events)
        self._checking_s += time.perf_counter() - checking
        return True

    def _lone_draw(self, slot: Slot) -> int | None:
        """How a lone run would draw this stream's tokens (0: greedy, IN_GRAPH: read from the
        graph, else its chain's top-k), or None where it cannot: no library, a draft model,
        logprobs, a chain over the whole vocabulary, engines taking turns on the CPU."""
        if self._lone is None or self._draft is not None or self._ctx.takes_turns():
            return None
        chain = slot.chain
        if slot.request.params.logprobs is not None or chain.grammar is not None:
            return None
        return IN_GRAPH if chain.on_backend else self._sampler.draw_in_c(chain)

    def _lone_run(self, slot: Slot, top_k: int, events: Events) -> None:
        """Run a stream alone in C until its job ends or the run stops (lone_run.py). Its
        tokens go out from the reader thread as they come; what ends the job there waits for
        the run to stop (the decodes use its cells and chain), and is done here."""
        assert self._lone is not None
        if self._pending:  # overlap: the last step's token's text first
            self._make_text(events)
        if events:
            self._publish(events[:])
            events.clear()
        request = slot.request
        limit = min(request.max_tokens - request.tokens_out, self._ctx.n_ctx_seq - slot.n_past - 1)
        if not self._seqs.holds(slot):
            return
        if limit < 1:  # (its last token ends it: the steps' own way, never an idle loop)
            self._decode([slot], [], use_fillers=False, events=events)
            return
        start = slot.n_past
        self._in_lone = True
        try:
            ran = self._lone.run(
                slot.index, slot.last_token, slot.n_past, slot.chain, top_k,
                sorted(request.stop_tokens), request.params.ignore_eos, limit,
                partial(self._lone_tokens, slot, self._guess_may_pay(slot)),
            )  # fmt: skip
        finally:
            self._in_lone = False
        self.decode_s += ran.decode_s
        self.lone_decodes += ran.decoded
        if self._plan is not None:
            self._plan.time_lone_run(ran.decode_s, ran.decoded)
        end, self._lone_end = self._lone_end, None
        if end is not None:  # (cells decoded past its end go: the sequence keeps its text)
            placed = start + ran.decoded - 1
            self._seqs.finish(slot, end[0], events, flush=end[1], placed=placed)
        elif ran.rc == -2:
            raise RuntimeError("the sampler chain selected no token")
        elif ran.rc == -1:  # the last decode's row is ours to sample
            slot.n_past += 1
            token = self._sampler.sample(self._ctx.ptr, [(0, slot.chain)], [0])[0]
            self._take(slot, 0, token, events)
        elif ran.rc:
            self._decode_failed(ran.rc, [slot], events)

    def _guess_may_pay(self, slot: Slot) -> bool:
        """Whether a lone run's reader should look for guesses after its tokens."""
        return self._plan is not None and slot.guesser is not None and self._plan.may_pay_alone()

    def _lone_tokens(self, slot: Slot, looks: bool, tokens: Sequence[int]) -> bool:
        """The reader's part of a lone run: each token's way out, as a step's. False once the
        job ended. Where guesses may pay (`looks`), a step that would guess stops the run
        (the stream goes on in steps)."""
        events: Events = []
        for token in tokens:
            slot.n_past += 1
            self._seqs.steps += 1
            self._on_token(slot, token, events, defer=False)
            if self._lone_end is not None:
                break
        if events:
            self._publish(events)
        if self._lone_end is not None:
            return False
        if looks and self._guesses([slot], [], lone=True) and self._lone is not None:
            self._lone.stop()
        return True

    def _check_guesses(
        self, slot: Slot, ahead: list[int], first: int, rank: int, events: Events
    ) -> None:
        """Sample a guessing stream's rows in order with its own chain, up to the first pick
        that is not its guess (that pick is the step's last token, or the one after every
        guess): the stream's tokens are what it would have drawn one step at a time. The
        cells of the guesses not kept are dropped."""
        if not self._seqs.holds(slot):  # ended by its text meanwhile (overlap)
            self._ctx.trim_sequence(slot.index, slot.n_past)
            return
        picks: list[int] = []
        began = time.perf_counter()
        for j in range(len(ahead) + 1):
            row = first + j
            picks.extend(self._sampler.sample(self._ctx.ptr, [(row, slot.chain)], [rank + j]))
            if j == len(ahead) or picks[-1] != ahead[j] or self._ends(slot, picks[-1]):
                break
        if self._plan is not None:
            self._plan.time_rows(time.perf_counter() - began, len(picks))
        kept = len(picks) - 1  # guesses whose cells stay (the last pick is the next token)
        # A kept guess that ends the job: the guesses after it were never checked, and no
        # miss is learnt from them (one at every quote's end held long runs' rates down).
        ended = len(picks) <= len(ahead) and picks[-1] == ahead[len(picks) - 1]
        checked, matched = (len(picks), len(picks)) if ended else (len(ahead), kept)
        self.guessed += checked
        self.kept += matched
        if slot.guesser is not None:
            slot.guesser.kept(checked, matched)
        slot.n_past += kept  # (its own token is counted already)
        if kept < len(ahead):
            self._ctx.trim_sequence(slot.index, slot.n_past)
        for j, token in enumerate(picks):
            self._take(slot, first + j, token, events)
            if not self._seqs.holds(slot):
                return

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

    def _take(self, slot: Slot, row: int, token: int, events: Events) -> None:
        """A token sampled from a batch row: its logprob where the job asks, then its way on."""
        wanted = slot.request.params.logprobs
        if wanted is not None:
            slot.logprobs.append(token_logprob(self._ctx.ptr, row, token, wanted, self._model))
        self._on_token(slot, token, events, defer=self._options.overlap)

    def _on_token(self, slot: Slot, token: int, events: Events, *, defer: bool) -> None:
        """A sampled token: end the job, or keep it going. What only the text decides (a stop
        string) comes from `_text`, now or, deferred (overlap), during the next decode."""
        request = slot.request
        if request.cancelled:  # checked after sampling, before anything is published
            self._end(slot, "abort", events)
            return
        if slot.first_token_at is None:
            slot.first_token_at = time.perf_counter()
        slot.generated.append(token)
        if self._ends(slot, token):
            self._end(slot, "stop", events)
            return
        request.tokens_out += 1
        full = request.tokens_out >= request.max_tokens or slot.n_past + 1 >= self._ctx.n_ctx_seq
        if defer and not full:
            slot.last_token = token
            self._pending.append((slot, token))
            return
        if not self._text(slot, token, events):
            return
        if full:
            self._end(slot, "length", events)
            return
        slot.last_token = token

    def _end(self, slot: Slot, reason: FinishReason, events: Events, *, flush: bool = True) -> None:
        """End the job; in a lone run, once the run has stopped (`_lone_run`)."""
        if self._in_lone:
            self._lone_end = (reason, flush)
            return
        self._seqs.finish(slot, reason, events, flush=flush)

    def _ends(self, slot: Slot, token: int) -> bool:
        """Whether the token ends the job. ignore_eos (benchmarks) goes past every end, a
        chat's turn markers too, as llama-server's does."""
        request = slot.request
        ends = token in request.stop_tokens or self._model.is_end_of_generation(token)
        return ends and not request.params.ignore_eos

    def _text(self, slot: Slot, token: int, events: Events) -> bool:
        """Publish a token's text; False when a stop string ended the job."""
        text, hit_stop = slot.text(self._model.piece(token))
        if text:
            events.append((slot.request, slot.token_text(text)))
        if hit_stop:
            self._end(slot, "stop", events, flush=False)
        return not hit_stop

    def _make_text(self, events: Events) -> None:
        """Overlap mode: the text of the tokens the last step sampled. A job a stop string ends
        here already has its next token in the batch being decoded; that token is dropped."""
        pending, self._pending = self._pending, []
        for slot, token in pending:
            if not self._seqs.holds(slot):
                continue  # ended meanwhile
            if slot.request.cancelled:
                self._seqs.finish(slot, "abort", events)
                continue
            self._text(slot, token, events)

    def _decode_failed(self, rc: int, slots: Sequence[Slot], events: Events) -> None:
        log.error("llama_decode returned %d for %d sequences; failing them", rc, len(slots))
        error = InferError(ErrorKind.GENERATION_FAILED, f"llama_decode failed (code {rc})")
        for slot in slots:
            self._seqs.finish(slot, "error", events, error=error)
