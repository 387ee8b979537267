"""One sequence in flight in the batch loop: where its job stands in the KV cache, its sampler
chain, and the text side of its tokens (UTF-8 pieces, stop strings, the events they make).

Only the batch loop's thread touches a slot, except `snapshot`, which the event loop reads:
a field read there may be a step old, never torn.
"""

from __future__ import annotations

import time

from ...protocol.events import TokenLogprob, TokenText
from ...protocol.snapshots import SlotSnapshot, TimingStats
from ..types import GenerationRequest
from .drafts import Guesser
from .sampler import SamplerChain
from .text import StopMatcher, Utf8Stream


class Slot:
    """One sequence in flight: its place in the KV cache, its sampler and its text state."""

    __slots__ = (
        "admitted_at", "admitted_step", "cached", "chain", "chunks", "copies_from",
        "first_token_at", "generated", "guesser", "index", "last_token", "logprobs", "n_past",
        "prefill_done_at", "prompt_pos", "request", "shared_tokens", "stops", "utf8",
    )  # fmt: skip

    def __init__(
        self, index: int, request: GenerationRequest, chain: SamplerChain, step: int
    ) -> None:
        self.index = index
        self.admitted_step = step
        self.request = request
        self.chain = chain
        self.prompt_pos = 0  # prompt tokens already decoded
        self.n_past = 0  # tokens in this sequence's KV cells
        # a running slot whose prompt begins as this one's: wait until its cells hold the
        # first `shared` tokens, then copy them (shared_prefix.py)
        self.copies_from: Slot | None = None
        self.shared_tokens = 0
        self.cached = 0  # prompt tokens whose cells came from elsewhere (a source, kept cells)
        self.generated: list[int] = []  # every token sampled, in order
        self.last_token = -1
        self.guesser: Guesser | None = None  # speculative decoding's, where it may guess
        self.chunks = 0
        self.utf8 = Utf8Stream()
        self.logprobs: list[TokenLogprob] = []  # of tokens whose text is not out yet
        self.stops = StopMatcher(request.params.stop)
        self.admitted_at = time.perf_counter()
        self.prefill_done_at: float | None = None
        self.first_token_at: float | None = None

    @property
    def prefilling(self) -> bool:
        return self.prompt_pos < len(self.request.prompt_tokens)

    def text(self, piece: bytes) -> tuple[str, bool]:
        """A token's bytes in: (the text that can go out now, whether a stop string ended the
        job). Text stays back while it could be the start of a stop string or of a character."""
        text = self.utf8.feed(piece)
        return self.stops.feed(text) if text else ("", False)

    def tail(self) -> str:
        """The text held back, for a job that ends without a stop string."""
        return self.stops.feed(self.utf8.flush())[0] + self.stops.flush()

    def token_text(self, text: str) -> TokenText:
        """The event for text going out, with the logprobs of the tokens it holds."""
        logprobs: tuple[TokenLogprob, ...] = ()
        if self.logprobs:
            logprobs, self.logprobs = tuple(self.logprobs), []
        prefill = None
        if self.chunks == 0 and self.prefill_done_at is not None:
            read = len(self.request.prompt_tokens) - self.cached
            prefill = (read, self.prefill_done_at - self.admitted_at)
        event = TokenText(text, self.chunks, self.request.tokens_out, logprobs, prefill)
        self.chunks += 1
        return event

    def timings(self) -> TimingStats:
        request = self.request
        return TimingStats.measured(
            enqueued=request.enqueued_at, end=time.perf_counter(), first_token=self.first_token_at,
            tokens_in=len(request.prompt_tokens), tokens_out=request.tokens_out,
            admitted=self.admitted_at, prefill_done=self.prefill_done_at,
            tokens_cached=self.cached,
        )  # fmt: skip

    def snapshot(self) -> SlotSnapshot:
        request = self.request
        started = self.first_token_at
        elapsed = time.perf_counter() - started if started else 0.0
        out = request.tokens_out
        return SlotSnapshot(
            slot=self.index,
            job_id=request.job_id,
            phase="prefill" if self.prefilling else "decode",
            tokens_in=len(request.prompt_tokens),
            tokens_out=out,
            tps=(out - 1) / elapsed if elapsed > 0 and out > 1 else 0.0,
        )
