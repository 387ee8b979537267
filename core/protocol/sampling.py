"""The sampling fields, declared once: each one's type, bounds and meaning, and the set the
engine samples with (`SamplingParams`, with llama.cpp's defaults).

A dialect's request model names each field it takes with the type declared here, under its
own name and with its own default, and `SamplingParams.of` maps it on:

    dialect                  its own names and defaults
    OpenAI (spec 004)        temperature and top_p 1.0 (they yield to a model's recommended
                             ones: only a field the client wrote counts as set); max_tokens or
                             max_completion_tokens; logprobs + top_logprobs
    Responses                max_output_tokens; it is read as an OpenAI chat request
    Ollama's /api            options.num_predict for max_tokens (-1, -2: no limit)
    spec 001, spec 000       the engine's names, each unset until the client sets it
    tasks (spec 002)         max_tokens 128, the rest llama.cpp's

Where a dialect takes a field within other bounds, its type is declared here too, beside the
one it differs from. The upstream engine writes `SamplingParams` back out in OpenAI's names
(engine/upstream/wire.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

MAX_STOPS = 16  # stop strings per request
MAX_STOP_CHARS = 1024  # characters in one stop string
MAX_SCHEMA_CHARS = 64 * 1024  # a JSON Schema for structured output, or a grammar
MAX_LOGIT_BIAS = 1024  # tokens one request may bias
_SEEDS = 2**32 - 1  # llama.cpp's seeds are 32 bits, and 0xFFFFFFFF means "draw one"


def _seed(value: int | None) -> int | None:
    """A negative seed (llama.cpp's clients send -1) draws a random one; one past 32 bits
    (OpenAI takes any integer) is folded into llama.cpp's range, still reproducible."""
    return None if value is None or value < 0 else value % _SEEDS


def _token_ids(bias: dict[str, float]) -> dict[str, float]:
    if bad := [key for key in bias if not key.isdigit()]:
        raise ValueError(f"logit_bias keys are token ids: {bad[0]!r} is not one")
    return bias


# ---- the fields ------------------------------------------------------------------------------

# A number field that refuses NaN and infinities by name (NaN passed ge/le checks as "should be
# less than or equal to 2").
Finite = Annotated[float, Field(allow_inf_nan=False)]

Temperature = Annotated[
    Finite, Field(ge=0.0, le=2.0, description="how random the choice is; 0: the likeliest token")
]
TopP = Annotated[
    Finite, Field(ge=0.0, le=1.0, description="the likeliest tokens whose chances add up to this")
]
TopK = Annotated[int, Field(ge=0, description="the k likeliest tokens; 0 disables")]
MinP = Annotated[
    Finite, Field(ge=0.0, le=1.0, description="tokens at least this fraction as likely as the best")
]
Seed = Annotated[
    int | None,
    AfterValidator(_seed),
    Field(description="the same seed, the same reply; negative or none: a random one"),
]
PresencePenalty = Annotated[
    Finite, Field(ge=-2.0, le=2.0, description="taken off each token already in the reply")
]
FrequencyPenalty = Annotated[
    Finite, Field(ge=-2.0, le=2.0, description="taken off each token per time it is in the reply")
]
RepeatPenalty = Annotated[
    Finite, Field(gt=0.0, le=2.0, description="divides the logits of recent tokens; 1.0 disables")
]
RepeatLastN = Annotated[
    int, Field(ge=0, le=4096, description="how many recent tokens the penalties look back over")
]
TypicalP = Annotated[Finite, Field(ge=0.0, le=1.0, description="locally typical; 1.0 disables")]
Mirostat = Annotated[
    Literal[0, 1, 2],
    Field(description="1 or 2: Mirostat v1 or v2 aims at a perplexity in place of top-k/p; 0 off"),
]
MirostatTau = Annotated[Finite, Field(ge=0.0, le=100.0, description="Mirostat's target surprise")]
MirostatEta = Annotated[Finite, Field(ge=0.0, le=1.0, description="Mirostat's learning rate")]
Bias = Annotated[Finite, Field(ge=-100.0, le=100.0, description="added to the token's logit")]
# OpenAI's shape of a logit bias: {"token id": bias}
LogitBias = Annotated[dict[str, Bias], Field(max_length=MAX_LOGIT_BIAS), AfterValidator(_token_ids)]
Stop = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
Stops = Annotated[
    list[Stop], Field(max_length=MAX_STOPS, description="never emitted, not even in part")
]
MaxTokens = Annotated[int, Field(ge=1, description="the reply's limit, in tokens")]
# Ollama's max_tokens: its -1 and -2 mean "until the context is full"
NumPredict = Annotated[int, Field(ge=-2, description="-1 or -2: until the context is full")]
IgnoreEos = Annotated[bool, Field(description="generate past end-of-text (benchmarks)")]
TopLogprobs = Annotated[
    int, Field(ge=0, le=20, description="each token's log-probability and this many alternatives")
]
# OpenAI's legacy completions give at most 5 alternatives
CompletionTopLogprobs = Annotated[int, Field(ge=0, le=5, description="alternatives per token")]
Grammar = Annotated[
    str, Field(max_length=MAX_SCHEMA_CHARS, description="a GBNF grammar the reply follows")
]


class SamplingParams(BaseModel):
    """How the next token is chosen; every field maps onto llama.cpp's native sampler chain.
    Defaults are llama.cpp's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Temperature = 0.8
    top_p: TopP = 0.95
    top_k: TopK = 40
    min_p: MinP = 0.05
    seed: Seed = None
    presence_penalty: PresencePenalty = 0.0
    frequency_penalty: FrequencyPenalty = 0.0
    repeat_penalty: RepeatPenalty = 1.0
    repeat_last_n: RepeatLastN = 64
    typical_p: TypicalP = 1.0
    mirostat: Mirostat = 0
    mirostat_tau: MirostatTau = 5.0
    mirostat_eta: MirostatEta = 0.1
    logit_bias: tuple[tuple[int, Bias], ...] = Field(
        (), max_length=MAX_LOGIT_BIAS, description="(token, bias added to its logit)"
    )
    stop: tuple[Stop, ...] = Field(
        (), max_length=MAX_STOPS, description="never emitted, not even in part"
    )
    max_tokens: MaxTokens | None = Field(None, description="None: until the context is full")
    ignore_eos: IgnoreEos = False
    logprobs: TopLogprobs | None = None
    json_schema: str | None = Field(
        None, max_length=MAX_SCHEMA_CHARS, description="only JSON that validates comes out"
    )
    json_wrap: tuple[str, str] | None = Field(
        None, description="literal text before and after that JSON (a tool-call format's tags)"
    )
    grammar: Grammar | None = None

    @classmethod
    def of(cls, request: BaseModel, **overrides: object) -> SamplingParams:
        """The sampling a request of any dialect asks for: its fields of the same names that
        are set (None leaves llama.cpp's default), then `overrides`, the dialect's own names
        mapped on; `stop` may be one string or a list."""
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
        host's one argmax needs it; its top-k prefilter also takes penalties that only push
        tokens down (SamplerChain.top_k)."""
        return not (self.logit_bias or self.uses_penalties or self.constrained)

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )
