"""Immutable snapshots of host state: what transports serialize and dashboards draw.

Nobody reaches into the scheduler or the registry; they read these.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .finish import FinishReason as FinishReason  # where every floor has found it


class SnapshotKind(StrEnum):
    """The snapshots every face serves (P2P message types `engines`, `queue`, `metrics`)."""

    ENGINES = "engines"
    QUEUE = "queue"
    METRICS = "metrics"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class EngineState(StrEnum):
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADED = "unloaded"
    FAILED = "failed"


class PoolState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    DRAINED = "drained"
    FAILED = "failed"


class EngineParameters(_Frozen):
    n_ctx: int
    n_gpu_layers: int
    main_gpu_id: int = 0
    n_threads: int | None = None
    n_parallel: int = 1


class MemoryUsage(_Frozen):
    model_size_mb: float
    context_size_mb: float
    device: str | None = Field(None, description="the GPU holding the model; None on the CPU")
    device_used_mb: float | None = Field(None, description="memory in use on that GPU, by all")
    device_total_mb: float | None = None


class Performance(_Frozen):
    last_inference_tps: float
    total_requests: int


class EngineStatus(_Frozen):
    """An engine as spec 004 reports it, plus what the TUI needs to explain it."""

    engine_id: str
    status: EngineState
    model_path: str
    parameters: EngineParameters
    memory_usage: MemoryUsage | None = None
    performance: Performance = Performance(last_inference_tps=0.0, total_requests=0)
    pool_state: PoolState = PoolState.LOADING
    chat_format: str | None = Field(None, description="which prompt format applies and why")
    model_description: str | None = None
    gpu_offload: bool = False
    error: str | None = None
    on_demand: bool = Field(
        False, description="loaded for a request that named it; unloads after its keep_alive"
    )
    expires_at: float | None = Field(
        None,
        description="when a model loaded on demand unloads if no request comes, Unix seconds; "
        "None: it stays loaded",
    )


class TimingStats(_Frozen):
    """Where one job's time went."""

    queue_wait_ms: float = 0.0
    prefill_ms: float = 0.0
    ttft_ms: float | None = None
    decode_ms: float = 0.0
    total_ms: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0  # of tokens_in, copied from another sequence's cells, not decoded

    @classmethod
    def measured(
        cls,
        *,
        enqueued: float,
        end: float,
        first_token: float | None,
        tokens_in: int,
        tokens_out: int,
        admitted: float | None = None,
        prefill_done: float | None = None,
        tokens_cached: int = 0,
    ) -> TimingStats:
        """From the job's instants on one clock, in seconds: queued, given a slot, prompt
        decoded, first token, end. Where a job never got a slot, those parts are zero."""
        return cls(
            queue_wait_ms=(admitted - enqueued) * 1000 if admitted is not None else 0.0,
            prefill_ms=((prefill_done or end) - admitted) * 1000 if admitted is not None else 0.0,
            ttft_ms=(first_token - enqueued) * 1000 if first_token else None,
            decode_ms=(end - first_token) * 1000 if first_token else 0.0,
            total_ms=(end - enqueued) * 1000,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            tokens_cached=tokens_cached,
        )

    @property
    def decode_tps(self) -> float:
        """Tokens per second after the first one (the steady decode rate)."""
        if self.tokens_out < 2 or self.decode_ms <= 0:
            return 0.0
        return (self.tokens_out - 1) / (self.decode_ms / 1000.0)


class SlotSnapshot(_Frozen):
    slot: int
    job_id: str | None = None
    client_id: str | None = None
    identity: str | None = Field(None, description="who asked (an API key's name, a peer's)")
    phase: Literal["idle", "prefill", "decode"] = "idle"
    tokens_in: int = 0
    tokens_out: int = 0
    tps: float = 0.0


class LiveJob(_Frozen):
    """A job in flight as the host dashboard shows it, with its latest text."""

    job_id: str
    engine: str
    client: str
    state: Literal["queued", "running"]
    tokens_out: int
    tokens_per_s: float
    text_tail: str


class QueueEntry(_Frozen):
    job_id: str
    client_id: str | None
    identity: str | None = Field(None, description="who asked (an API key's name, a peer's)")
    priority: str = Field("interactive", description="interactive or batch")
    position: int
    predicted_start_ms: int
    tokens_in: int
    waited_ms: float


class QueueSnapshot(_Frozen):
    pool_id: str
    capacity: int
    depth: int
    waiting: tuple[QueueEntry, ...] = ()
    slots: tuple[SlotSnapshot, ...] = ()
    loading_for: int = Field(0, description="requests waiting for the engine to load")
    loaded_in_ms: int | None = Field(
        None, description="while it loads for them: about how long until it is ready"
    )


class LibraryEntry(_Frozen):
    """A model of the host's library (`infertui list`): a request naming it loads it."""

    name: str
    size: int = Field(description="bytes, all parts")
    architecture: str = ""
    parameters: str = Field("", description='as Ollama shows it: "135M", "1.2B"')
    quantization: str = ""
    context_length: int | None = None
    modified: float = Field(0.0, description="when it was pulled (Unix seconds)")
    source: str = Field("", description="hf, ollama, url, local, or folder (a model folder's)")
    loaded: bool = False


class Percentiles(_Frozen):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


def load_of(pools: Sequence[MetricsSnapshot]) -> dict[str, int]:
    """A host's load over its pools, as its server_info advertises it: slots, free slots and
    queued jobs."""
    return {
        "slots": sum(p.slots_total for p in pools),
        "free_slots": sum(max(0, p.slots_total - p.slots_busy) for p in pools),
        "queue_depth": sum(p.queue_depth for p in pools),
    }


class MetricsSnapshot(_Frozen):
    """One pool's (or the whole host's) counters and rates at an instant."""

    pool_id: str
    timestamp: float
    queue_depth: int = 0
    queue_capacity: int = 0
    slots_busy: int = 0
    slots_total: int = 0
    accepted: int = 0
    rejected: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    tokens_in_total: int = 0
    tokens_out_total: int = 0
    ttft_ms: Percentiles = Percentiles()
    latency_ms: Percentiles = Percentiles()
    decode_tps_recent: float = 0.0
    decode_tps_lifetime: float = 0.0
    prefill_tps_recent: float = 0.0
    prefill_tps_lifetime: float = 0.0
    errors_by_class: dict[str, int] = Field(default_factory=dict)
    device: str | None = Field(None, description="the GPU the engine runs on; None on the CPU")
    device_memory_used_mb: float | None = None
    device_memory_total_mb: float | None = None
    decode_seconds_total: float | None = Field(
        None,
        description="seconds from starting each decode to its outputs being ready; None for "
        "an upstream",
    )
    busy_seconds_total: float | None = Field(
        None,
        description="seconds its batch loop had work: the decodes and the host's own work "
        "between them (the device idles for the difference)",
    )
    guessed_tokens_total: int = Field(
        0, description="speculative decoding: tokens guessed ahead and checked"
    )
    kept_guesses_total: int = Field(0, description="of them, those the model picked")
