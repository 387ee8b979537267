"""What a job reports while it runs: admitted to a slot, text, finished.

Plain frozen dataclasses: built on the engine thread once per token, so they stay cheap.
Every face (P2P, HTTP, TUI) reads these through a Job; none reaches into the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ErrorKind, InferError
from .snapshots import FinishReason, TimingStats

ABORTED_RETRY_MS = 2000  # a host's drain or restart: try again in a moment


@dataclass(frozen=True, slots=True)
class Admitted:
    """The job left the queue and owns a slot."""

    slot: int
    queue_wait_ms: float


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's log-probability under the model (before sampling shapes it), and
    the likeliest tokens at that place with theirs, best first."""

    token: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...] = ()


@dataclass(frozen=True, slots=True)
class TokenText:
    """New text for the job. `index` counts emitted chunks; `n_tokens` the tokens so far;
    `logprobs` the tokens behind the text, for a job that asked for them. A local engine's
    first chunk carries `prefill`: the prompt tokens it read (not those copied from cells it
    kept or shared) and the seconds from the slot to the prompt's end, so that the host's
    prompt rate is known when a reply starts, not when it ends."""

    text: str
    index: int
    n_tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()
    prefill: tuple[int, float] | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """The job is over. From the engine, it also means its slot and KV cells are free."""

    finish_reason: FinishReason
    timings: TimingStats
    error: InferError | None = None
    embedding: tuple[float, ...] | None = None  # an embedding job's vector

    @property
    def failure(self) -> InferError | None:
        """What a client that reads a reply to its end must be told instead of a whole reply:
        the error, or that the host cut it short (a drain's deadline, the engine removed or
        reloaded, the host stopping). A client's own cancel ends as "abort" too, but that
        client has stopped reading. Faces without a finish reason of their own for it (HTTP's
        OpenAI and Ollama dialects) report it so; P2P and tasks say "abort"."""
        if self.error is not None or self.finish_reason != "abort":
            return self.error
        return InferError(
            ErrorKind.ABORTED,
            "the host stopped this reply before it was complete",
            retry_after_ms=ABORTED_RETRY_MS,
        )

    @property
    def whole(self) -> bool:
        """Whether the reply came to its end (see `failure`)."""
        return self.error is None and self.finish_reason != "abort"


JobEvent = Admitted | TokenText | Finished
