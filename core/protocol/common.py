"""Request building blocks shared by every face: chat messages and sampling parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

Role = Literal["system", "user", "assistant"]
MAX_STOPS = 16  # stop strings per request
MAX_STOP_CHARS = 1024  # characters in one stop string
MAX_MESSAGES = 1024  # turns in one conversation
MAX_PATH = 4096  # bytes in a model path (Linux PATH_MAX)
MAX_PROMPTS = 128  # prompts in one completion request
MAX_SCHEMA_CHARS = 64 * 1024  # a JSON Schema for structured output
MAX_LOGIT_BIAS = 1024  # tokens one request may bias


class ChatMessage(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str

    @field_validator("content")
    @classmethod
    def _no_nul(cls, content: str) -> str:
        # llama.cpp's chat templates take C strings: a NUL would silently cut the turn short
        if "\x00" in content:
            raise ValueError("a message may not contain a NUL character (U+0000)")
        return content


# Every list and string a request carries is bounded: what a job keeps must stay small.
Stop = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
Stops = Annotated[list[Stop], Field(max_length=MAX_STOPS)]
Messages = Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]

T = TypeVar("T")
_SEEDS = 2**32 - 1  # llama.cpp's seeds are 32 bits, and 0xFFFFFFFF means "draw one"


def _seed(value: int | None) -> int | None:
    """A negative seed (llama.cpp's clients send -1) draws a random one; one past 32 bits
    (OpenAI takes any integer) is folded into llama.cpp's range, still reproducible."""
    return None if value is None or value < 0 else value % _SEEDS


Seed = Annotated[int | None, AfterValidator(_seed)]


# llama.cpp's typical-p and Mirostat, with the ranges every dialect takes them in
TypicalP = Annotated[float, Field(ge=0.0, le=1.0)]
MirostatVersion = Literal[0, 1, 2]  # 0: off
MirostatTau = Annotated[float, Field(ge=0.0, le=100.0)]
MirostatEta = Annotated[float, Field(ge=0.0, le=1.0)]


NO_SUFFIX = "fill-in-the-middle ('suffix') is not supported"
NO_IMAGES = "images are not supported: the host's engines read text only"


def refused(reason: str) -> AfterValidator:
    """A field the host cannot honour: an empty or false value passes, any other is refused
    with `reason` (a 400 naming the field). Read past, the reply would look like a good one."""

    def check(value: T) -> T:
        if value:
            raise ValueError(reason)
        return value

    return AfterValidator(check)


def without_oldest_turn(history: Sequence[ChatMessage], start: int) -> int | None:
    """Where the conversation sent as `history[start:]` starts once its oldest exchange is
    left out: at its next user turn. None where only the question asked now is left. A chat
    longer than the model's context goes on this way, as Ollama's does, rather than end (the
    chat app, and /api/chat for Ollama's clients)."""
    for at in range(start + 1, len(history)):
        if history[at].role == "user":
            return at
    return None


class SamplingParams(BaseModel):
    """How the next token is chosen; every field maps onto llama.cpp's native sampler chain.

    Defaults are llama.cpp's own. Ranges follow spec 004 where it sets them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.8, ge=0.0, le=2.0, description="0 is greedy")
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    top_k: int = Field(40, ge=0, description="0 disables top-k")
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=2**32 - 2, description="None draws a random seed")
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(1.0, gt=0.0, le=2.0, description="1.0 disables")
    repeat_last_n: int = Field(64, ge=0, le=4096)
    typical_p: TypicalP = Field(1.0, description="locally typical; 1.0 disables")
    mirostat: MirostatVersion = Field(
        0, description="1 or 2: Mirostat (v1, v2) aims at a perplexity in place of top-k/p"
    )
    mirostat_tau: MirostatTau = Field(5.0, description="Mirostat's target surprise")
    mirostat_eta: MirostatEta = Field(0.1, description="Mirostat's learning rate")
    logit_bias: tuple[tuple[int, float], ...] = Field(
        (), max_length=MAX_LOGIT_BIAS, description="(token, bias added to its logit)"
    )
    stop: tuple[Stop, ...] = Field(
        (), max_length=MAX_STOPS, description="never emitted, not even in part"
    )
    max_tokens: int | None = Field(None, ge=1, description="None: until the context is full")
    ignore_eos: bool = Field(False, description="keep going past end-of-generation (benchmarks)")
    logprobs: int | None = Field(
        None, ge=0, le=20, description="each token's log-probability and this many alternatives"
    )
    json_schema: str | None = Field(
        None, max_length=MAX_SCHEMA_CHARS, description="only JSON that validates comes out"
    )
    json_wrap: tuple[str, str] | None = Field(
        None, description="literal text before and after that JSON (a tool-call format's tags)"
    )
    grammar: str | None = Field(
        None, max_length=MAX_SCHEMA_CHARS, description="a GBNF grammar the reply follows"
    )

    @classmethod
    def of(cls, request: BaseModel, **overrides: object) -> SamplingParams:
        """The sampling a request of any dialect asks for: its fields of the same names that
        are set (None leaves llama.cpp's default); `stop` may be one string or a list."""
        # The request's fields and extras, read from its dicts: getattr on a name the model
        # lacks raises inside pydantic, and that was most of this method's time.
        given = {**(request.__pydantic_extra__ or {}), **request.__dict__}
        values = {name: given.get(name) for name in cls.model_fields}
        values.update(overrides)
        stop = values["stop"]
        if stop is not None:
            values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
        params = cls.model_validate({k: v for k, v in values.items() if v is not None})
        # Only what the client wrote counts as set: a dialect's own default (spec 004's
        # temperature 1.0) yields to the model's recommended sampling (with_defaults).
        written = request.model_fields_set | set(request.__pydantic_extra__ or {})
        written |= {name for name, value in overrides.items() if value is not None}
        object.__setattr__(params, "__pydantic_fields_set__", params.model_fields_set & written)
        return params

    def with_defaults(self, defaults: Mapping[str, float]) -> SamplingParams:
        """These params with `defaults` (an engine's recommended sampling, checked when it
        loaded: `valid_defaults`) in the fields the request left unset; a field it set, even
        to llama.cpp's default value, stays. Once per job: a copy, not a validation."""
        unset = {k: v for k, v in defaults.items() if k not in self.model_fields_set}
        return self.model_copy(update=unset) if unset else self

    @classmethod
    def valid_defaults(cls, defaults: Mapping[str, float]) -> dict[str, float]:
        """The `defaults` that are fields of these params within their ranges; ValueError
        naming the first that is not (a GGUF's key out of range, say)."""
        try:
            checked = cls.model_validate(dict(defaults))
        except ValidationError as err:
            raise ValueError(str(err.errors()[0]["msg"])) from None
        return {name: getattr(checked, name) for name in defaults}

    @property
    def constrained(self) -> bool:
        """Whether a grammar (a schema's, or one given) decides what may come out."""
        return self.json_schema is not None or self.grammar is not None

    @property
    def plain(self) -> bool:
        """Whether the raw logits decide alone: no bias, penalty or grammar shifts them. The
        host's fast paths (one argmax, the top-k prefilter) need it."""
        return not (self.logit_bias or self.uses_penalties or self.constrained)

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )
