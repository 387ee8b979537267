"""Job: one accepted request, as its consumer sees it: a stream of events and a cancel().

Race-free cancel (OC-CTRL-2012) rests on one rule: every event reaches the consumer through
`_deliver`, which runs on the event loop, and `cancel()` runs on the event loop too. Once
cancel() has returned, `_deliver` drops every later token, wherever it was in flight, and
the consumer's stream has already received its final `Finished("abort")`.

A consumer that falls behind (a slow client, a busy event loop) gets the text it missed as one
event: tokens waiting for it are merged as they arrive, so its backlog is one growing piece of
text, not thousands of events, and each transport writes once per turn instead of per token.
The batch loop never waits for a consumer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..engine import Engine, GenerationRequest
from ..protocol.common import ChatMessage, SamplingParams
from ..protocol.events import Admitted, Finished, JobEvent, TokenLogprob, TokenText
from ..protocol.shares import Priority
from ..protocol.snapshots import TimingStats

log = logging.getLogger(__name__)

TEXT_TAIL = 240


@dataclass(frozen=True, kw_only=True)
class PreparedJob:
    """A job ready for its engine (HostService.prepare made it): its prompt as the engine's
    tokens, or, for an engine whose server renders and tokenizes, the turns or text to send;
    how to sample it; and who asks (for per-client limits and logs)."""

    params: SamplingParams
    tokens: list[int]  # empty for an engine that tokenizes on its server
    messages: Sequence[ChatMessage] | None = None  # a chat: its turns, rendered for the engine
    prompt: str | None = None  # a plain completion's text
    embed: bool = False  # the prompt's embedding, not a completion of it
    client_id: str | None = None  # the connection, for its limit of jobs at once
    client_limit: int | None = None
    identity: str | None = None  # who asks, for fair shares and budgets; None: the client_id
    priority: Priority | None = None  # None: the identity's usual class
    session_id: str | None = None
    job_id: str | None = None
    correlation_id: str | None = None


def new_job_id() -> str:
    """A random id: a task's id is what lets a client read or cancel it, so not guessable."""
    return f"job-{secrets.token_urlsafe(12)}"


class _TextRun:
    """Consecutive TokenText events a consumer has not taken yet, merged into one."""

    __slots__ = ("_first", "_last", "_logprobs", "_parts")

    def __init__(self, first: TokenText, second: TokenText) -> None:
        self._first, self._last = first, second
        self._parts = [first.text, second.text]
        self._logprobs = [*first.logprobs, *second.logprobs]  # where a job asked for them

    def add(self, event: TokenText) -> None:
        self._parts.append(event.text)
        if event.logprobs:
            self._logprobs.extend(event.logprobs)
        self._last = event

    def event(self) -> TokenText:
        text, logprobs = "".join(self._parts), tuple(self._logprobs)
        return TokenText(text, self._first.index, self._last.n_tokens, logprobs)


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class Job:
    """A request accepted by a pool. Iterate `events()` (or await `text()`); `cancel()` ends it."""

    def __init__(
        self,
        request: GenerationRequest,
        engine: Engine,
        pool_id: str,
        client_id: str | None,
        on_cancel: Callable[[Job], None],
        on_closed: Callable[[Job, Finished], None],
        queue_position: int,
        predicted_start_ms: int,
    ) -> None:
        self.id = request.job_id
        self.request = request
        self.engine = engine  # the one that tokenized its prompt, and runs it
        self.started = False  # given to the engine (it may not have a slot yet)
        self.pool_id = pool_id
        self.client_id = client_id
        self.identity = client_id or "anonymous"  # who asks (fair shares, budgets, the ledger)
        self.batch = False  # batch work: a free slot goes to interactive work first
        self.session_id: str | None = None
        self.reserved = 0  # tokens it holds of its session's budget until it ends
        self.expected_cost = 0.0  # tokens its start is charged to its identity (queue.py)
        self.arrival = 0  # its place in the order jobs came (queue.py)
        self.queue_position = queue_position
        self.predicted_start_ms = predicted_start_ms
        self.state = JobState.QUEUED
        self.result: Finished | None = None
        self.slot: int | None = None
        self.correlation_id: str | None = None
        self.load_ms = 0.0  # how long its request waited for its model to load (Ollama's figure)
        self.tokens_published = 0  # TokenText events handed to the consumer
        self.prefill_recorded = False  # the pool's metrics counted its prompt at its first text
        self.logprobs: list[TokenLogprob] = []  # what text() read, where the job asked for them
        self.first_token_at: float | None = None  # perf_counter, as the event loop saw it
        self.text_tail = ""  # the last TEXT_TAIL characters, for the host's live view
        self.kept_text: list[str] | None = None  # the whole reply, where the ledger keeps it
        self._pending: deque[JobEvent | _TextRun] = deque()
        self._ready = asyncio.Event()
        self._released = asyncio.Event()  # the engine no longer holds this job
        self._on_cancel = on_cancel
        self._on_closed = on_closed

    @property
    def done(self) -> bool:
        return self.state is JobState.DONE

    @property
    def cancelled(self) -> bool:
        return self.request.cancelled

    @property
    def tokens_in(self) -> int:
        """Prompt tokens: counted here, or, for an engine that tokenizes remotely (an
        upstream server), as it reported them at the end."""
        counted = len(self.request.prompt_tokens)
        return counted or (self.result.timings.tokens_in if self.result else 0)

    @property
    def tokens_out(self) -> int:
        """Tokens the engine has generated so far (some may not be published yet)."""
        return self.request.tokens_out

    @property
    def enqueued_at(self) -> float:
        """When the job was queued, on the perf_counter clock."""
        return self.request.enqueued_at

    # ---- consumer side -----------------------------------------------------------------------

    async def events(self) -> AsyncIterator[JobEvent]:
        """Every event up to and including the Finished one. A consumer that stops
        iterating early (or whose task is cancelled) cancels the job."""
        try:
            while True:
                while not self._pending:
                    self._ready.clear()
                    await self._ready.wait()
                item = self._pending.popleft()
                event = item.event() if isinstance(item, _TextRun) else item
                yield event
                if isinstance(event, Finished):
                    return
        finally:
            if not self.done:
                self.cancel()

    async def text(self) -> tuple[str, Finished]:
        """The whole reply and how it ended."""
        parts: list[str] = []
        async for event in self.events():
            if isinstance(event, TokenText):
                parts.append(event.text)
                self.logprobs.extend(event.logprobs)
            elif isinstance(event, Finished):
                return "".join(parts), event
        raise RuntimeError(f"job {self.id} ended without a Finished event")

    def cancel(self) -> bool:
        """Stop the job. After this returns, no further token of it is published anywhere.
        False if it had already finished."""
        if self.done:
            return False
        self.request.cancelled = True
        self._on_cancel(self)  # out of the queue, or its engine stops it at its next step
        # The engine's own timings arrive later; the consumer's figures come from here.
        now, first = time.perf_counter(), self.first_token_at
        timings = TimingStats.measured(
            enqueued=self.enqueued_at, end=now, first_token=first,
            tokens_in=self.tokens_in, tokens_out=self.tokens_out,
        )  # fmt: skip
        self._close(Finished("abort", timings))
        return True

    async def wait_released(self) -> None:
        """Wait until the engine has freed this job's slot and KV cells."""
        await self._released.wait()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def release(self) -> None:
        """The job never reached its engine (withdrawn from the queue): nothing to free."""
        self._released.set()

    # ---- pool side (event loop) --------------------------------------------------------------

    def _deliver(self, event: JobEvent) -> None:
        if isinstance(event, Finished):
            self._released.set()
            if self.done:  # already closed by cancel(): keep the engine's real timings
                if self.result is not None and event.finish_reason == "abort":
                    self.result = event
                return
            self._close(event)
            return
        if self.done:
            return  # the publish-point check: nothing after cancel reaches the consumer
        if isinstance(event, Admitted):
            self.state = JobState.RUNNING
            self.slot = event.slot
        elif isinstance(event, TokenText):
            self.tokens_published += 1
            self.first_token_at = self.first_token_at or time.perf_counter()
            self.text_tail = (self.text_tail + event.text)[-TEXT_TAIL:]
            if self.kept_text is not None:
                self.kept_text.append(event.text)
            last = self._pending[-1] if self._pending else None
            if isinstance(last, _TextRun):
                last.add(event)  # the consumer is behind: it will get one event for all of it
                return
            if isinstance(last, TokenText):
                self._pending[-1] = _TextRun(last, event)
                return
        self._push(event)

    def _push(self, event: JobEvent) -> None:
        self._pending.append(event)
        self._ready.set()

    def _close(self, final: Finished) -> None:
        self.state = JobState.DONE
        self.result = final
        self._push(final)
        try:
            self._on_closed(self, final)
        except Exception:
            log.exception("job %s: close hook failed", self.id)
