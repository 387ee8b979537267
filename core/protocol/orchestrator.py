"""Spec 002: the orchestrator's task queue (data plane) and pools (control plane).

Tasks: `POST /v1/tasks` admits (202 TaskAccepted, or 429 Backpressure), the SSE stream
emits started → token* → end with metrics interleaved, or a terminal error. Pools report
health, drain with a deadline, and reload atomically. Capabilities describe every pool.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from .common import MAX_PATH, Messages
from .errors import InferError
from .sampling import MaxTokens, SamplingParams, Seed, Stops, Temperature, TopK, TopP
from .shares import BudgetLeft, Priority, SessionBudget, priority_of
from .snapshots import MetricsSnapshot, PoolState

API_VERSION = "1.0.0"
OutputMode = Literal["text", "json", "edits"]
SSE_EVENTS = ("started", "token", "metrics", "end", "error")


class TaskRequest(BaseModel):
    """A prompt (plain completion) or messages (chat); one of the two is required."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "anyOf": [
                {"required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
                {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
            ]
        },
    )

    task_id: str | None = Field(
        None, min_length=1, max_length=128, pattern=r"^[^/\s?#%]+$",
        description="yours to choose, unique; it goes in URLs: no /, ?, #, %, spaces, . or ..",
    )  # fmt: skip
    session_id: str | None = None
    model: str | None = Field(None, description="engine id; the default engine when absent")
    pool_id: str | None = Field(None, description="pin: this pool or an error, never another")
    prompt: str | None = None
    messages: Messages | None = None
    max_tokens: MaxTokens = 128
    temperature: Temperature = 0.8
    top_p: TopP = 0.95
    top_k: TopK = 40
    seed: Seed = None
    stop: Stops | None = None
    output_mode: OutputMode | None = Field(
        None, description="a hint, recorded; unknown values are ignored (OC-CTRL-2063)"
    )
    budget: SessionBudget | None = Field(
        None,
        description="the session's budget (OC-CTRL-2068), with session_id: its tasks together "
        "may use this many tokens and this much decode time; a later task may change it",
    )
    priority: Priority | None = Field(
        None,
        description="interactive (a person waits on it) or batch, which takes a free slot "
        "only when no interactive job waits; a number as vLLM's (above 0: batch); unset: the "
        "identity's usual class",
    )

    @field_validator("priority", mode="before")
    @classmethod
    def _rank(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return priority_of(rank=value)
        return value

    @model_validator(mode="after")
    def _needs_input(self) -> TaskRequest:
        if self.prompt is None and not self.messages:
            raise ValueError("a task needs a prompt or messages")
        if self.budget is not None and self.session_id is None:
            raise ValueError("a budget is a session's: give a session_id with it")
        return self

    @field_validator("task_id")
    @classmethod
    def _addressable(cls, value: str | None) -> str | None:
        if value in (".", ".."):  # clients resolve them out of the stream's URL
            raise ValueError("a task_id cannot be . or ..")
        return value

    @field_validator("output_mode", mode="before")
    @classmethod
    def _ignore_unknown_mode(cls, value: Any) -> Any:
        return value if value in ("text", "json", "edits") else None

    def sampling(self) -> SamplingParams:
        return SamplingParams.of(self)


class TaskAccepted(BaseModel):
    task_id: str
    queue_position: int
    predicted_start_ms: int
    pool_id: str
    engine: str
    output_mode: OutputMode | None = None
    stream_url: str


class TaskCancelled(BaseModel):
    task_id: str
    cancelled: bool
    state: str
    tokens_emitted: int = Field(description="token events published; none follow the cancel")


class ArtifactRequest(BaseModel):
    """OC-CTRL-2065: a structured artifact to keep (a plan, a summary, a diff, a trace)."""

    model_config = ConfigDict(extra="ignore")

    kind: str = Field("note", min_length=1, max_length=64, description="plan, summary, diff...")
    content: Any = Field(description="any JSON value; its id is the sha256 of kind and content")
    tags: list[str] = Field(default_factory=list, max_length=64)
    lineage: list[str] = Field(
        default_factory=list, max_length=64, description="ids of artifacts it derives from"
    )
    meta: dict[str, Any] = Field(default_factory=dict)


class ArtifactRecord(BaseModel):
    """OC-CTRL-2066: an artifact and its metadata. A job's record (OC-CTRL-2067) is one of
    kind `job`, under the job's id."""

    id: str
    kind: str
    content: Any
    tags: list[str]
    lineage: list[str]
    meta: dict[str, Any]
    created_at: float = Field(description="unix time")


class OrchestratorError(BaseModel):
    """OC-CTRL-2030/2031/2032: a stable code, a sentence, and advisory fields."""

    code: str
    message: str
    retriable: bool = False
    retry_after_ms: int | None = None
    engine: str | None = None
    pool_id: str | None = None


class Backpressure(OrchestratorError):
    """The 429 body (OC-CTRL-2011)."""

    policy_label: str


# ---- SSE payloads (§3.2) -------------------------------------------------------------------


class SSEStarted(BaseModel):
    queue_position: int
    predicted_start_ms: int


class SSEToken(BaseModel):
    t: str
    i: int


class SSEMetrics(BaseModel):
    """Additive scheduling signals (OC-CTRL-2023)."""

    model_config = ConfigDict(extra="allow")

    queue_depth: int
    on_time_probability: float | None = None
    kv_warmth: bool = False
    tokens_out: int = 0
    decode_tps: float = 0.0
    budget: BudgetLeft | None = Field(None, description="the session's budget, where it has one")


class SSEEnd(BaseModel):
    tokens_out: int
    decode_ms: int
    decode_time_ms: int  # the root spec's canonical name; both are sent during migration
    finish_reason: str | None = None  # additive: stop, length or abort


class SSEError(BaseModel):
    code: str
    message: str
    retriable: bool
    retry_after_ms: int | None = None
    engine: str | None = None


def error_body(err: InferError, *, pool_id: str | None = None) -> OrchestratorError:
    m = err.mapping
    return OrchestratorError(
        code=m.orch_code,
        message=err.message,
        retriable=m.retriable,
        retry_after_ms=err.retry_after_ms,
        engine=err.engine_id,
        pool_id=pool_id or err.engine_id,
    )


def sse_error(err: InferError) -> SSEError:
    """The same fields as error_body, inside an SSE `error` event (OC-CTRL-2028)."""
    return SSEError.model_validate(error_body(err).model_dump(exclude={"pool_id"}))


# ---- control plane -------------------------------------------------------------------------


class PoolHealth(BaseModel):
    pool_id: str
    live: bool
    ready: bool
    draining: bool
    state: PoolState
    engine: str
    model_path: str
    metrics: MetricsSnapshot
    last_error: str | None = None


class DrainRequest(BaseModel):
    deadline_ms: int = Field(ge=0, le=3_600_000)


class DrainResponse(BaseModel):
    pool_id: str
    draining: bool
    cancelled: int | None = None


class ResumeResponse(BaseModel):
    pool_id: str
    ready: bool


class ReloadRequest(BaseModel):
    """A misspelt field is refused: read past, it reloaded the current model and said so."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = Field(
        None, min_length=1, max_length=MAX_PATH,
        validation_alias=AliasChoices("model_path", "new_model_ref"),  # llama-orch's name
        description="the new GGUF (or `new_model_ref`); the current one when absent",
    )  # fmt: skip


class ReloadResponse(BaseModel):
    pool_id: str
    reloaded: bool
    model_path: str


class PoolCapabilities(BaseModel):
    pool_id: str
    engine: str
    engine_version: str
    sampler_profile_version: str | None = "llama.cpp-chain-1"
    model: str
    ctx_max: int
    max_tokens_out: int
    slots: int
    supported_workloads: list[str]
    rate_limits: dict[str, int]
    features: dict[str, bool]


class Capabilities(BaseModel):
    api_version: str = API_VERSION
    pools: list[PoolCapabilities]
