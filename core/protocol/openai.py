"""Spec 004: OpenAI-compatible completions, chat, embeddings and models bodies.

Request defaults are the spec's (temperature and top_p 1.0), and so are the ranges of the
sampling fields (declared in sampling.py), but for one: a request without max_tokens runs
until the context is full, as OpenAI's, Ollama's and llama-server's do (the spec's 128 and
16 cut every reply of clients that send no limit); the host's `default_max_tokens` may set
one (None here means "the host's default"). Fields OpenAI
clients send that the spec does not name (`user`, `metadata`, later ones) are ignored rather
than refused, as OpenAI does; those the host cannot honour (`suffix`, `echo`) are refused by
name. llama.cpp's own sampling knobs (`top_k`, `min_p`, `typical_p`, `mirostat`, `grammar`...)
are taken as llama-server takes them. `response_format` constrains the output with a grammar
(structured.py); message content may be a list of parts, whose text parts are joined. The
replies' bodies are in openai_replies.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from .common import MAX_MESSAGES, MAX_PROMPTS, NO_SUFFIX, refused
from .sampling import (
    CompletionTopLogprobs,
    FrequencyPenalty,
    Grammar,
    IgnoreEos,
    LogitBias,
    MaxTokens,
    MinP,
    Mirostat,
    MirostatEta,
    MirostatTau,
    PresencePenalty,
    RepeatPenalty,
    SamplingParams,
    Seed,
    Stop,
    Stops,
    Temperature,
    TopK,
    TopLogprobs,
    TopP,
    TypicalP,
)
from .shares import Priority, priority_of
from .structured import JSON_OBJECT, checked_schema
from .tools import MAX_TOOLS, Forced, NamedChoice, RichMessage, Tool, ToolChoice

MAX_CHOICES = 16  # n: choices in one chat completion


NO_ECHO = "echo is not supported: the reply holds the completion only"
_NO_LIMIT = "unset: until the context is full (or the host's http.default_max_tokens)"


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = Field("response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """`{"type": "json_object"}` (any JSON object; with a `schema`, as llama-server and
    llama-cpp-python take it, JSON of that schema) or `{"type": "json_schema", "json_schema":
    {"name": ..., "schema": {...}}}`: the reply is generated under a grammar that admits only
    such JSON. A schema keyword the grammar cannot enforce is refused, by name."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    object_schema: dict[str, Any] | None = Field(None, alias="schema")
    _schema: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self) -> ResponseFormat:
        if self.type == "json_object":
            given = self.object_schema
            self._schema = JSON_OBJECT if given is None else checked_schema(given)
        elif self.type == "json_schema":
            if self.json_schema is None:
                raise ValueError('"json_schema" is required with type "json_schema"')
            self._schema = checked_schema(self.json_schema.json_schema)
        return self

    @property
    def schema_text(self) -> str | None:
        """The schema the reply must validate against, as JSON text; None: free text."""
        return self._schema


class _Sampling(BaseModel):
    """What chat and text completion requests share: the engine, streaming, the sampling."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, description="engine id (see GET /v1/models)")
    stream: bool = False
    stream_options: dict[str, bool] | None = Field(
        None, description='{"include_usage": true} adds a last chunk with usage'
    )
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    seed: Seed = None
    presence_penalty: PresencePenalty = 0.0
    frequency_penalty: FrequencyPenalty = 0.0
    stop: Stop | Stops | None = None
    # beyond OpenAI: llama.cpp's own knobs, as llama-server accepts them
    top_k: TopK | None = None
    min_p: MinP | None = None
    repeat_penalty: RepeatPenalty | None = None
    typical_p: TypicalP | None = None
    mirostat: Mirostat | None = None
    mirostat_tau: MirostatTau | None = None
    mirostat_eta: MirostatEta | None = None
    ignore_eos: IgnoreEos = False
    response_format: ResponseFormat | None = None
    logit_bias: LogitBias | None = Field(
        None, description='{"token id": bias from -100 to 100}, added to the token\'s logit'
    )
    grammar: Grammar | None = Field(None, description="GBNF the reply follows (llama-server's)")
    service_tier: str | None = Field(
        None, description='"flex": batch work, which takes a free slot only when no '
        "interactive job waits; anything else: interactive"
    )  # fmt: skip
    priority: int | None = Field(None, description="vLLM's: above 0 is batch work")

    @property
    def asked_priority(self) -> Priority | None:
        """The class the request asks for; None: the identity's usual one."""
        return priority_of(self.service_tier, self.priority)

    @field_validator("grammar")
    @classmethod
    def _grammar(cls, grammar: str | None) -> str | None:
        return grammar or None  # an empty one constrains nothing, as llama-server reads it

    @model_validator(mode="after")
    def _one_constraint(self) -> _Sampling:
        form = self.response_format
        if self.grammar is not None and form is not None and form.schema_text is not None:
            raise ValueError("give a grammar or a JSON response_format, not both")
        return self

    def sampling(self, max_tokens: int | None) -> SamplingParams:
        schema = self.response_format.schema_text if self.response_format else None
        bias = tuple((int(token), value) for token, value in (self.logit_bias or {}).items())
        return SamplingParams.of(
            self,
            max_tokens=max_tokens,
            json_schema=schema,
            logprobs=self.alternatives(),
            logit_bias=bias,
        )

    def alternatives(self) -> int | None:
        """Top alternatives per token when logprobs are asked for; None when they are not."""
        return None

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a chunk holding the usage."""
        return bool((self.stream_options or {}).get("include_usage"))


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[RichMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: MaxTokens | None = Field(None, description=_NO_LIMIT)
    max_completion_tokens: MaxTokens | None = Field(None, description="OpenAI's newer max_tokens")
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="choices, decoded side by side")
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True

    def alternatives(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def token_budget(self) -> int | None:
        """The reply's limit; None: the host's default (until the context is full)."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def offered(self) -> list[Tool]:
        """The tools the model may call in this reply (none with tool_choice "none")."""
        if not self.tools or self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, NamedChoice):
            return [t for t in self.tools if t.function.name == self.tool_choice.name]
        return self.tools

    @property
    def forced(self) -> bool:
        """A call must come: "required", or a named tool."""
        return bool(self.offered) and (
            self.tool_choice == "required" or isinstance(self.tool_choice, NamedChoice)
        )

    @model_validator(mode="after")
    def _coherent(self) -> ChatCompletionRequest:
        if isinstance(self.tool_choice, NamedChoice) and not self.offered:
            raise ValueError(f"tool_choice names '{self.tool_choice.name}', not in tools")
        if self.forced and self.grammar is not None:
            raise ValueError("a forced tool call and a grammar cannot both shape the reply")
        if self.top_logprobs and not self.logprobs:  # as OpenAI refuses it: read past, no
            raise ValueError("top_logprobs needs logprobs: true")  # logprobs came back
        return self

    @property
    def forced_calls(self) -> Forced | None:
        """What a forced reply calls: one or more tools ("required", parallel calls allowed),
        or exactly one (a named tool, or parallel calls off); None when no call is forced."""
        if not self.forced:
            return None
        several = self.parallel_tool_calls and self.tool_choice == "required"
        return "several" if several else "one"

    @field_validator("messages", mode="before")
    @classmethod
    def _join_parts(cls, messages: object) -> object:
        """Content given as a list of parts becomes one text: text parts joined by newlines.
        A part of another kind (an image, audio, a file) is refused by name. `developer` is
        `system`; an assistant turn of calls alone has empty content."""
        if not isinstance(messages, list):
            return messages
        return [_turn(_joined(m)) if isinstance(m, dict) else m for m in messages]


def _turn(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("role") == "developer":
        return {**message, "role": "system"}
    if message.get("content") is None:
        return {**message, "content": ""}
    return message


def _joined(message: dict[str, Any]) -> dict[str, Any]:
    parts = message.get("content")
    if not isinstance(parts, list):
        return message
    texts = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "input_audio", "file"):
            raise ValueError(
                f"'{kind}' content is not supported: the host's engines read text only"
            )
        else:
            shown = repr(part)[:80]
            raise ValueError(f"a content part is {{'type': 'text', 'text': ...}}, not {shown}")
    return {**message, "content": "\n".join(texts)}


class CompletionRequest(_Sampling):
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)] = Field(
        description=f"one prompt, or up to {MAX_PROMPTS} (one choice each)"
    )
    max_tokens: MaxTokens | None = Field(None, description=_NO_LIMIT)
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="choices per prompt, side by side")
    logprobs: CompletionTopLogprobs | None = None
    suffix: Annotated[str | None, refused(NO_SUFFIX)] = None
    echo: Annotated[bool, refused(NO_ECHO)] = False

    def alternatives(self) -> int | None:
        return self.logprobs

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt


MAX_EMBED_INPUTS = 256  # inputs in one embeddings request


class EmbeddingRequest(BaseModel):
    """`POST /v1/embeddings`: one text or several, from any loaded engine."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | Annotated[list[str], Field(min_length=1, max_length=MAX_EMBED_INPUTS)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)

    @field_validator("input", mode="before")
    @classmethod
    def _text_only(cls, value: object) -> object:
        if isinstance(value, list) and value and not isinstance(value[0], str):
            raise ValueError("send text: token ids are not taken as input")
        return value

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input
