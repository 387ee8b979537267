"""UpstreamEngine: an OpenAI-compatible server (vLLM, SGLang, llama-server, another infertui)
as an engine, so that infertui's queue, cancel, dashboards and Hyperswarm reach stand in front
of an engine it does not run.

It has `concurrency` slots: the scheduler gives it a job when one is free, and the job goes
as one streamed request (chat or text completion). A cancel cancels the job's task, which
closes its stream: the server sees the disconnect. The server's model list is read every few
seconds; when it cannot be read twice running, every job in flight ends with POOL_UNREADY and
the pool is told, and when it can be read again the pool serves again. Timings are measured
here, on the stream as it arrives; token counts come from the server's usage where it sends
one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeGuard

import httpx

from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Admitted, Finished, JobEvent, TokenText
from ...protocol.finish import heard_finish
from ...protocol.snapshots import (
    EngineParameters,
    FinishReason,
    SlotSnapshot,
    TimingStats,
)
from ...protocol.sse_reader import sse_batches
from ...protocol.tools import GENERIC_FORMAT
from ..chat_format import ChatFormat
from ..types import (
    EngineInfo,
    EngineUsage,
    GenerationRequest,
    Publisher,
    UpstreamSpec,
)
from .connection import Sent, UpstreamClient, UpstreamError, os_reason
from .wire import chunk_logprobs, error_message, refusal, request_body

log = logging.getLogger(__name__)

CONNECT_S = 5.0
SILENT_S = 300.0  # a stream that sends nothing for this long is given up
WARM_S = 60.0  # after the last job, the client keeps its connections open this long
PROBES_TO_UNREADY = 2  # failed reads of the model list in a row before the pool is unready
# Where the server does not say its context, admission caps max_tokens at this (the server
# checks the real bound); the engine's status says 0, not known, rather than this made-up one.
UNKNOWN_CTX = 32768


@dataclass(slots=True)
class _Running:
    request: GenerationRequest
    task: asyncio.Task[None]
    admitted_at: float
    first_token_at: float | None = None
    ended_by: InferError | None = None  # why infertui cut it short, where it did
    # A task cancelled before its first step never runs a line (not even a `finally`), so
    # one is only cancelled once started; before that, it looks at its flags when it starts.
    started: bool = False

    def stop(self) -> None:
        if self.started:
            self.task.cancel()


class UpstreamEngine:
    """Jobs sent to one OpenAI-compatible server. Create with `await UpstreamEngine.open`."""

    sampling_defaults: Mapping[str, float] = MappingProxyType({})  # the server applies its own
    tokenizer = None  # the server renders and tokenizes; jobs carry their messages or text
    embeddings = None  # ask the server for them directly
    chat_format = ChatFormat(
        "upstream", use_jinja=False, description="the upstream server's own template",
        tools=GENERIC_FORMAT,  # offered tools travel inside the messages, as JSON
    )  # fmt: skip

    def __init__(
        self,
        spec: UpstreamSpec,
        publish: Publisher,
        on_health: Callable[[str | None], None],
        client: httpx.AsyncClient,
        streams: UpstreamClient,
    ) -> None:
        self.spec = spec
        self.model: str | None = spec.model
        self.version = "OpenAI-compatible upstream"
        self._publish = publish
        self._on_health = on_health
        self._client = client  # for the model list
        self._streams = streams  # for the jobs
        self._n_ctx = spec.n_ctx
        self._slots: list[_Running | None] = [None] * spec.concurrency
        self._failed_probes = 0
        self._closing = False
        self.problem: str | None = None  # why the server is taken to be down; None: up
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, spec: UpstreamSpec, publish: Publisher, on_health: Callable[[str | None], None]
    ) -> UpstreamEngine:
        """Connect, and learn the server's model. A server that is not up yet (vLLM takes
        minutes to load) is no error: the pool starts unready and serves once it answers."""
        if spec.concurrency < 1:
            raise InferError(ErrorKind.INVALID_PARAMS, "an upstream's concurrency must be >= 1")
        if not spec.url.startswith(("http://", "https://")):
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"an upstream URL starts with http:// or https://, not {spec.url!r}",
            )
        headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
        base = spec.url.rstrip("/") + "/"
        # The streams go straight to the server (its client has sockets of its own), so the
        # health check does too: through a proxy it would judge a route the jobs never take.
        client = httpx.AsyncClient(
            base_url=base, headers=headers, timeout=CONNECT_S, trust_env=False
        )
        if proxy := _proxy_for(base):
            log.warning(
                "engine %s: the environment names the proxy %s for %s; infertui reaches "
                "upstreams directly (NO_PROXY silences this)", spec.engine_id, proxy, base,
            )  # fmt: skip
        # Every running job keeps its connection between jobs, and while jobs come, as many
        # stay open as ran at once: opening them when a burst comes costs its TTFT (connection.py).
        streams = UpstreamClient(
            base, headers, connect_s=CONNECT_S, silent_s=SILENT_S, keep=spec.concurrency,
            warm_s=WARM_S,
        )  # fmt: skip
        engine = cls(spec, publish, on_health, client, streams)
        try:
            await engine._probe()
        except InferError as exc:
            engine.problem = exc.message
            log.warning("engine %s: %s; serving once it answers", spec.engine_id, exc.message)
        except BaseException:
            await client.aclose()
            await streams.aclose()
            raise
        engine._watch = asyncio.create_task(engine._watch_health())
        log.info("engine %s: %s", spec.engine_id, engine.placement())
        return engine

    # ---- what the pool reads -----------------------------------------------------------------

    def describe(self) -> EngineInfo:
        model_names = (self.model,) if self.model else ()
        return EngineInfo(
            description=f"{self.model or '(model not known yet)'} at {self.spec.url}",
            version=self.version,
            model_names=model_names,
            n_ctx=self._n_ctx or UNKNOWN_CTX,
            n_parallel=len(self._slots),
            n_gpu_layers=0,  # whatever the server offloads is its own business
            # n_ctx 0: not known (as UpstreamSpec.planned says before the server is reached)
            parameters=EngineParameters(
                n_ctx=self._n_ctx, n_gpu_layers=0, n_parallel=len(self._slots)
            ),
        )

    def usage(self) -> EngineUsage:
        return EngineUsage(memory=None, loop_time=None)  # the decoding is the upstream's own

    def placement(self) -> str:
        state = f"unreachable ({self.problem})" if self.problem else "reachable"
        context = f"{self._n_ctx} tokens" if self._n_ctx else "not known"
        return (
            f"upstream {self.spec.url}, model {self.model or 'not known yet'}, context "
            f"{context}, {len(self._slots)} jobs at a time, {state}"
        )

    # ---- jobs --------------------------------------------------------------------------------

    def start(self, request: GenerationRequest) -> None:
        """Send a job on a free slot: its request is written now where a connection is idle
        (see _send_now), and its task reads the reply."""
        slot = self._slots.index(None)  # the scheduler starts a job only on a free slot
        sent = self._send_now(request)
        task = asyncio.create_task(
            self._run(slot, request, sent), name=f"upstream {request.job_id}"
        )
        self._slots[slot] = _Running(request, task, time.perf_counter())

    def cancel(self, request: GenerationRequest) -> None:
        """Close the job's stream (the server sees the disconnect)."""
        request.cancelled = True
        for running in self._slots:
            if running is not None and running.request is request:
                running.stop()

    def slots(self) -> list[SlotSnapshot]:
        now = time.perf_counter()
        out = []
        for i, running in enumerate(self._slots):
            if running is None:
                out.append(SlotSnapshot(slot=i))
                continue
            request, first = running.request, running.first_token_at
            elapsed = now - first if first else 0.0
            out.append(
                SlotSnapshot(
                    slot=i,
                    job_id=request.job_id,
                    phase="decode" if first else "prefill",
                    tokens_out=request.tokens_out,
                    tps=round(request.tokens_out / elapsed, 1) if elapsed > 0 else 0.0,
                )
            )
        return out

    async def shutdown(self) -> None:
        """End every job (as aborted) and close the connections."""
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        tasks = self._end_all(None)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._client.aclose()
        await self._streams.aclose()
        log.info("engine %s closed", self.spec.engine_id)

    def _send_now(self, request: GenerationRequest) -> Sent | None:
        """The job's request, written now on an idle connection where there is one: its task
        starts only after every callback queued before it, which in a burst is the reading of
        all the other requests (measured in bench/README.md)."""
        if request.cancelled or self._closing:
            return None
        try:
            return self._streams.send_now(*request_body(request, self.model or ""))
        except Exception:  # the task builds the body again, and ends the job with the error
            return None

    async def _run(self, slot: int, request: GenerationRequest, sent: Sent | None) -> None:
        running = self._slots[slot]
        assert running is not None
        running.started = True
        request.slot = slot
        wait_ms = (running.admitted_at - request.enqueued_at) * 1000
        self._publish([(request, Admitted(slot, wait_ms))])
        reason: FinishReason = "stop"
        error: InferError | None = None
        usage: dict[str, Any] = {}
        try:
            if request.cancelled or running.ended_by or self._closing:
                raise asyncio.CancelledError  # stopped before it started
            reason, usage = await self._stream(request, running, sent)
        except asyncio.CancelledError:
            reason, error = ("error", running.ended_by) if running.ended_by else ("abort", None)
        except InferError as exc:
            reason, error = "error", exc
        except (httpx.HTTPError, UpstreamError) as exc:
            reason, error = "error", self._lost(exc)
        except Exception as exc:  # whatever a server sends, the job ends and its slot frees
            log.warning("engine %s: %s failed: %r", self.spec.engine_id, request.job_id, exc)
            reason = "error"
            error = InferError(
                ErrorKind.GENERATION_FAILED, f"the upstream sent a reply infertui cannot read: "
                f"{exc}", engine_id=self.spec.engine_id,
            )  # fmt: skip
        finally:
            if sent is not None and not sent.taken:
                sent.close()  # never read: the server sees the disconnect
            self._slots[slot] = None
            timings = TimingStats.measured(
                enqueued=request.enqueued_at, admitted=running.admitted_at,
                prefill_done=running.first_token_at, first_token=running.first_token_at,
                end=time.perf_counter(),
                tokens_in=_count(usage, "prompt_tokens", 0),
                tokens_out=_count(usage, "completion_tokens", request.tokens_out),
            )  # fmt: skip
            self._publish([(request, Finished(reason, timings, error))])

    async def _stream(
        self, request: GenerationRequest, running: _Running, sent: Sent | None
    ) -> tuple[FinishReason, dict[str, Any]]:
        """Send the job and publish its text as it comes; (how it ended, the server's usage)."""
        chat = request.messages is not None
        # what send_now wrote needs no body again
        path, body = request_body(request, self.model or "") if sent is None else ("", None)
        wrap = request.params.json_wrap
        reason: FinishReason | None = None
        usage: dict[str, Any] = {}
        index = 0
        async with self._streams.stream(path, body, sent) as response:
            if response.status_code != 200:
                await response.aread()
                raise refusal(response, self.spec.engine_id)
            async for chunks in sse_batches(response):
                events: list[tuple[GenerationRequest, JobEvent]] = []
                for chunk in chunks:
                    if "error" in chunk:
                        raise InferError(
                            ErrorKind.GENERATION_FAILED,
                            f"the upstream failed: {error_message(chunk)}",
                            engine_id=self.spec.engine_id,
                        )
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        text = (delta.get("content") if chat else choice.get("text")) or ""
                        logprobs = chunk_logprobs(choice.get("logprobs"))
                        if text or logprobs:
                            if running.first_token_at is None:
                                running.first_token_at = time.perf_counter()
                                text = (wrap[0] if wrap else "") + text
                            request.tokens_out += max(1, len(logprobs))
                            event = TokenText(text, index, request.tokens_out, logprobs)
                            events.append((request, event))
                            index += 1
                        if choice.get("finish_reason"):
                            reason = heard_finish(choice["finish_reason"])
                if events:
                    self._publish(events)
        if reason is None:  # no finish_reason: the stream broke off, whatever its status
            raise InferError(
                ErrorKind.GENERATION_FAILED,
                "the upstream's stream ended before the reply did",
                engine_id=self.spec.engine_id,
            )
        if wrap and running.first_token_at is not None:
            self._publish([(request, TokenText(wrap[1], index, request.tokens_out))])
        return reason, usage

    def _lost(self, exc: httpx.HTTPError | UpstreamError) -> InferError:
        return InferError(
            ErrorKind.POOL_UNREADY,
            f"the upstream {self.spec.url} {_failure(exc)}",
            retry_after_ms=int(self.spec.health_interval_s * 1000),
            engine_id=self.spec.engine_id,
        )

    # ---- health ------------------------------------------------------------------------------

    async def _probe(self) -> None:
        """Read the server's model list; learn the model (and its context) where not given."""
        try:
            # a server that hangs (stopped, swapping) is noticed within a few intervals
            wait = min(CONNECT_S, max(1.0, 3 * self.spec.health_interval_s))
            response = await self._client.get("models", timeout=wait)
        except httpx.HTTPError as exc:
            raise self._lost(exc) from None
        if response.status_code != 200:
            raise refusal(response, self.spec.engine_id)
        try:  # a list that makes no sense still says the server is up
            data = response.json().get("data") or ()
            listed = [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)]
        except (ValueError, AttributeError, TypeError):
            listed = []
        if self.model is None and listed:
            self.model = listed[0]["id"]
            log.info("engine %s: the upstream serves %s", self.spec.engine_id, self.model)
        for entry in listed:
            n_ctx = _context_of(entry)
            if entry["id"] == self.model and not self.spec.n_ctx and n_ctx:
                self._n_ctx = n_ctx

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(self.spec.health_interval_s)
            try:
                await self._probe()
            except Exception as exc:  # whatever the failure, the watch goes on
                if not isinstance(exc, InferError):
                    log.warning("engine %s: probe failed: %r", self.spec.engine_id, exc)
                    exc = InferError(ErrorKind.POOL_UNREADY, f"the upstream's model list: {exc}")
                self._failed_probes += 1
                if self._failed_probes >= PROBES_TO_UNREADY and self.problem is None:
                    self._went_away(exc)
                continue
            self._failed_probes = 0
            if self.problem is not None:
                self.problem = None
                log.info("engine %s: the upstream answers again", self.spec.engine_id)
                self._on_health(None)

    def _went_away(self, exc: InferError) -> None:
        """The server stopped answering: end every job in flight, so that no client waits on
        a stream that will never finish, and have the pool refuse new ones until it is back."""
        self.problem = exc.message
        log.warning("engine %s: %s", self.spec.engine_id, exc.message)
        self._on_health(exc.message)
        self._end_all(exc)

    def _end_all(self, error: InferError | None) -> list[asyncio.Task[None]]:
        """End every job: aborted (None), or with this error. Their tasks, which publish
        their own ends, are returned to be awaited."""
        running = [slot for slot in self._slots if slot is not None]
        for slot in running:
            slot.ended_by = error
            slot.stop()
        return [slot.task for slot in running]


def _proxy_for(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, ALL_PROXY...) names for this URL, unless
    NO_PROXY exempts its host."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        return proxy
    return None


def _failure(exc: httpx.HTTPError | UpstreamError) -> str:
    """What the server did, in words that follow its name: people read this, so never a
    class name ("ConnectError All connection attempts failed" said nothing to them)."""
    if isinstance(exc, UpstreamError):
        return str(exc)  # already such words
    if isinstance(exc, httpx.ConnectTimeout):
        return "cannot be reached (no connection in time)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot be reached ({os_reason(exc)})"
    if isinstance(exc, httpx.TimeoutException):
        return "did not answer in time"
    return f"broke off the exchange ({os_reason(exc)})"


def _context_of(entry: dict[str, Any]) -> int | None:
    """The context per sequence a model list entry says: vLLM's and infertui's
    `max_model_len`, llama-server's `meta.n_ctx` (each slot's share of `-c`). Its
    `meta.n_ctx_train` is the model's training length, not what the server runs with: better
    not known than wrong."""
    meta = entry.get("meta")
    for value in (
        entry.get("max_model_len"),
        meta.get("n_ctx") if isinstance(meta, dict) else None,
    ):
        if _positive(value):
            return value
    return None


def _positive(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _count(usage: dict[str, Any], key: str, default: int) -> int:
    """A token count from a server's usage, where it gave a sane one."""
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else default
