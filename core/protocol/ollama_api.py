"""Ollama's own API under /api (chat, generate, tags, show, ps, version), as Ollama's clients
send and read it: the `ollama` Python and JavaScript packages, Open WebUI, editor plugins.

Not spec 001 (the Ollama-*style* `/chat/*`), whose shapes differ. Durations are nanoseconds,
times RFC 3339, and every error is `{"error": "..."}`, as Ollama has them. Options Ollama
knows that do not apply to a running engine here (`num_ctx`, `num_gpu`, ...) are accepted and
ignored, as Ollama does with options a model does not take.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from .common import MAX_MESSAGES, NO_IMAGES, NO_SUFFIX, refused
from .keep_alive import KeepAlive
from .sampling import (
    FrequencyPenalty,
    MinP,
    Mirostat,
    MirostatEta,
    MirostatTau,
    NumPredict,
    PresencePenalty,
    RepeatLastN,
    RepeatPenalty,
    SamplingParams,
    Seed,
    Stops,
    Temperature,
    TopK,
    TopP,
    TypicalP,
)
from .snapshots import TimingStats
from .structured import JSON_OBJECT, checked_schema
from .tools import MAX_TOOLS, RichMessage, Tool

NS_PER_MS = 1_000_000

# The Ollama release whose /api this one answers as, for `GET /api/version`: clients gate
# features on it (tools from 0.3, `format` schemas from 0.5, `capabilities` in /api/show
# from 0.6.4, all here). Not 0.8 or later: tool calls are not streamed token by token, and
# a thinking model's reasoning is not split out into `thinking` (0.9).
OLLAMA_API_VERSION = "0.6.4"


def _untagged(model: str) -> str:
    """`name:latest` is how Ollama's clients name a model; engines have no tags."""
    return model.removesuffix(":latest")


ModelName = Annotated[str, Field(min_length=1), AfterValidator(_untagged)]


def tagged(name: str) -> str:
    """A model's name as Ollama lists it, always with a tag: an engine's id gets `:latest`
    (a client that looks for `name:latest` in the list finds it)."""
    return name if ":" in name.rpartition("/")[2] else f"{name}:latest"


class ApiError(BaseModel):
    """Every error of /api, as Ollama's: one sentence."""

    error: str


class Options(BaseModel):
    """`options`: the sampling knobs Ollama maps onto llama.cpp, under Ollama's names (its
    `num_predict` is max_tokens)."""

    model_config = ConfigDict(extra="ignore")

    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed = None
    num_predict: NumPredict | None = None
    stop: Stops | None = None
    repeat_penalty: RepeatPenalty | None = None
    presence_penalty: PresencePenalty | None = None
    frequency_penalty: FrequencyPenalty | None = None
    repeat_last_n: RepeatLastN | None = None
    typical_p: TypicalP | None = None
    mirostat: Mirostat | None = None
    mirostat_tau: MirostatTau | None = None
    mirostat_eta: MirostatEta | None = None


class _Generation(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: ModelName
    stream: bool = True  # Ollama streams unless told not to
    format: Literal["json", ""] | dict[str, Any] | None = None
    options: Options | None = None
    keep_alive: KeepAlive = None  # seconds a model loaded on demand stays after this
    # true (or a level, as gpt-oss takes it) for a model that cannot think is a 400, as
    # Ollama's; for one that can, its template decides, as it would without the field
    think: bool | Literal["high", "medium", "low"] | None = None

    @field_validator("format")
    @classmethod
    def _checked(cls, fmt: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(fmt, dict):
            checked_schema(fmt)  # a schema the grammar cannot enforce is a 400 here
        return fmt

    def sampling(self) -> SamplingParams:
        options = self.options or Options()
        budget = options.num_predict
        schema = (
            JSON_OBJECT if self.format == "json"
            else checked_schema(self.format) if isinstance(self.format, dict)
            else None
        )  # fmt: skip
        return SamplingParams.of(
            options, max_tokens=budget if budget and budget > 0 else None, json_schema=schema
        )


class ApiMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # {"function": {"name", "arguments": {...}}}
    tool_name: str | None = None  # a tool result's tool

    def rich(self) -> RichMessage:
        if self.images:
            raise ValueError(NO_IMAGES)
        return RichMessage(
            role=self.role, content=self.content, tool_calls=self.tool_calls, name=self.tool_name
        )


class ApiChatRequest(_Generation):
    # none: how Ollama's clients load a model (answered with done_reason "load")
    messages: list[ApiMessage] = Field(default_factory=list, max_length=MAX_MESSAGES)
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None

    def turns(self) -> list[RichMessage]:
        """The messages as the host's prepare step reads them (prepare.py writes them for
        the engine)."""
        return [m.rich() for m in self.messages]

    @field_validator("messages")
    @classmethod
    def _text_only(cls, messages: list[ApiMessage]) -> list[ApiMessage]:
        for m in messages:
            m.rich()
        return messages


class ApiGenerateRequest(_Generation):
    prompt: str = ""
    system: str | None = None
    raw: bool = False  # the prompt as is, without the chat template
    suffix: Annotated[str | None, refused(NO_SUFFIX)] = None
    images: Annotated[list[str] | None, refused(NO_IMAGES)] = None  # as /api/chat's


class ApiEmbeddingsRequest(BaseModel):
    """Ollama's older `/api/embeddings`: one `prompt`, one `embedding` back."""

    model_config = ConfigDict(extra="ignore")

    model: ModelName
    prompt: str = Field(min_length=1)
    keep_alive: KeepAlive = None


class ApiEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: ModelName
    input: str | Annotated[list[str], Field(min_length=1, max_length=256)]
    truncate: bool = True  # inputs beyond the context are refused, never cut: see the README
    keep_alive: KeepAlive = None

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def final_stats(timings: TimingStats, load_ms: float = 0.0) -> dict[str, int]:
    """Ollama's figures for a finished reply, in nanoseconds; the whole of it includes the
    model's load (`load_ms`), as Ollama's does."""
    return {
        "total_duration": int((timings.total_ms + load_ms) * NS_PER_MS),
        "load_duration": int(load_ms * NS_PER_MS),
        "prompt_eval_count": timings.tokens_in,
        "prompt_eval_duration": int(timings.prefill_ms * NS_PER_MS),
        "eval_count": timings.tokens_out,
        "eval_duration": int(timings.decode_ms * NS_PER_MS),
    }


class ModelDetails(BaseModel):
    parent_model: str = ""
    format: str = "gguf"
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str

    @classmethod
    def of(cls, description: str | None) -> ModelDetails:
        """From llama.cpp's one-line description: "gemma3 270M Q4_K - Medium"."""
        family, size, quant = ([*(description or "").split(" ", 2), "", "", ""])[:3]
        family = family or "unknown"
        return cls(family=family, families=[family], parameter_size=size, quantization_level=quant)


class ModelEntry(BaseModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str = Field(description="names the file (name, size, time), not its content")
    details: ModelDetails


class RunningModel(BaseModel):
    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class ShowRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    name: str | None = None  # older clients

    @property
    def engine_id(self) -> str:
        return (self.model or self.name or "").removesuffix(":latest")


class DeleteRequest(BaseModel):
    """DELETE /api/delete: the model by `model` (`name`: older clients)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    name: str | None = None

    @property
    def wanted(self) -> str:
        return self.model or self.name or ""


class PullRequest(DeleteRequest):
    """POST /api/pull, as the `ollama` package sends it."""

    insecure: bool = False
    stream: bool = True


class CopyRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    source: str
    destination: str
