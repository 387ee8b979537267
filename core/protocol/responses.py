"""OpenAI's Responses API (`POST /v1/responses`): the dialect of OpenAI's newer SDK calls and
agents (`client.responses.create`, the Agents SDK, Codex), beside Chat Completions.

A request means a chat completion (`as_chat`): the conversation of the response it continues
(`previous_response_id`) or the items of the conversation it is in (`conversation`, see
conversations.py), both kept by the HTTP face (response_store.py), then its `input`
items become turns (messages, earlier `function_call`s and their
`function_call_output`s), `instructions` the first system turn, its flat function tools and
`tool_choice` the chat's nested ones, `text.format` the `response_format`. So it is
validated, queued, sampled and refused exactly as `/v1/chat/completions` is, and only the
shapes that go out are its own: the response object below, or its stream of typed events.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ErrorKind, InferError
from .openai import ChatCompletionRequest
from .sampling import IgnoreEos, MaxTokens, MinP, Seed, Temperature, TopK, TopP

# A chat field's name in a Responses request, for the param of a 400.
_FIELD = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "tools": "tools",
    "tool_choice": "tool_choice",
    "a forced tool call": "tool_choice",
}
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")  # all read as text
_OTHER_PARTS = ("input_image", "input_file", "input_audio")


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # `metadata`, `user`, `include`...

    model: str = Field(min_length=1, description="engine id (see GET /v1/models)")
    input: str | list[dict[str, Any]] = Field(
        description="a user message, or items: messages, function calls and their outputs"
    )
    instructions: str | None = Field(None, description="a system message before the input")
    max_output_tokens: MaxTokens | None = Field(None, description="None: until the context ends")
    # null is the default, as the SDK sends what it was not given
    temperature: Temperature | None = Field(None, description="1 when not given")
    top_p: TopP | None = Field(None, description="1 when not given")
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True
    text: dict[str, Any] | None = Field(None, description='{"format": {"type": "json_schema"...}}')
    previous_response_id: str | None = Field(
        None, max_length=256, description="a kept response this one continues"
    )
    store: bool | None = Field(True, description="keep it, for later requests to continue")
    service_tier: str | None = Field(None, description='"flex": batch work')
    conversation: str | dict[str, Any] | None = Field(
        None, description='a conversation (id, or {"id": ...}) to read and add this turn to'
    )
    truncation: Literal["auto", "disabled"] | None = Field(
        None, description='"auto": past the context, the oldest turns are left out'
    )
    # beyond OpenAI: llama.cpp's own knobs, as on the chat endpoint
    seed: Seed = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    ignore_eos: IgnoreEos = False

    @property
    def conversation_id(self) -> str | None:
        """The conversation named by `conversation`; a 400 for one both continued and in a
        conversation, as OpenAI refuses it."""
        given = self.conversation
        if given is None:
            return None
        named = given if isinstance(given, str) else given.get("id")
        if not isinstance(named, str) or not named:
            raise _refuse('conversation is an id, or {"id": ...}', "conversation")
        if self.previous_response_id is not None:
            raise _refuse(
                "previous_response_id and conversation cannot be used together", "conversation"
            )
        return named

    def input_items(self) -> list[dict[str, Any]]:
        """`input` as items: a text is one user message."""
        if isinstance(self.input, str):
            return [{"type": "message", "role": "user", "content": self.input}]
        return self.input

    def as_chat(self, before: list[dict[str, Any]] | None = None) -> ChatCompletionRequest:
        """The chat completion this request means, after the items of the conversation it
        continues (`before`; not their instructions, as OpenAI's); an InferError naming the
        field that no chat completion could take."""
        turns, origins = _turns(self.instructions, before or [], self.input_items())
        chat: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "parallel_tool_calls": self.parallel_tool_calls is not False,
            "seed": self.seed,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "ignore_eos": self.ignore_eos,
            "service_tier": self.service_tier,
        }
        # unset, they stay unset: the model's recommended sampling applies, not OpenAI's 1.0
        for name in ("temperature", "top_p"):
            if (value := getattr(self, name)) is not None:
                chat[name] = value
        if self.max_output_tokens is not None:
            chat["max_completion_tokens"] = self.max_output_tokens
        if self.tools is not None:
            chat["tools"] = [_tool(tool) for tool in self.tools]
        if self.tool_choice is not None:
            chat["tool_choice"] = _tool_choice(self.tool_choice)
        if (form := (self.text or {}).get("format")) is not None:
            chat["response_format"] = _response_format(form)
        try:
            return ChatCompletionRequest.model_validate(chat)
        except ValidationError as err:
            raise _as_responses_error(err, origins) from None


def check_items(items: list[dict[str, Any]], param: str) -> None:
    """Items that a response could read, or a 400 naming `param`: messages, function calls
    and their outputs with text content, as `input` takes them."""
    try:
        _turns(None, [], items)
    except InferError as err:
        raise InferError(err.kind, err.message, param=param) from None


def _as_responses_error(err: ValidationError, origins: list[int | None]) -> InferError:
    """A chat request's validation error, named as the Responses request names the field:
    `input.2` for the turn that input item 2 made (`origins`: each turn's item, None for the
    instructions' and the continued conversation's), `tools.0.name` for
    `tools.0.function.name`. A check across fields has no location: the field its message
    begins with is the one."""
    first = err.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    loc = [str(p) for p in first["loc"] if p != "function"]
    if loc[:1] == ["messages"] and len(loc) > 1 and loc[1].isdigit():
        item = origins[int(loc[1])] if int(loc[1]) < len(origins) else None
        loc[1] = "?" if item is None else str(item)
    if not loc:
        named = [name for name in _FIELD if message.startswith(name)]
        field = _FIELD[named[0]] if named else None
        return InferError(ErrorKind.INVALID_PARAMS, message, param=field)
    field = _FIELD.get(loc[0], loc[0])
    where = ".".join([field, *loc[1:]])
    return InferError(ErrorKind.INVALID_PARAMS, f"invalid '{where}': {message}", param=field)


def _refuse(message: str, param: str = "input") -> InferError:
    return InferError(ErrorKind.INVALID_PARAMS, message, param=param)


def _turns(
    instructions: str | None, before: list[dict[str, Any]], items: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[int | None]]:
    """Chat messages from the instructions, the items of the conversation continued, and the
    input items (numbered from 0 in errors), with the input item each message came from
    (None: the instructions, the conversation continued). Consecutive function calls are
    one assistant turn, as a chat client sends them; reasoning items are passed over."""
    turns: list[dict[str, Any]] = []
    origins: list[int | None] = []
    if instructions:
        turns.append({"role": "system", "content": instructions})
        origins.append(None)
    for k, item in enumerate([*before, *items], start=-len(before)):
        kind = item.get("type", "message")
        if kind == "message":
            turns.append({"role": item.get("role"), "content": _content(item.get("content"), k)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "{}")},
            }
            last = turns[-1] if turns else None
            if (
                last
                and last["role"] == "assistant"
                and last.get("tool_calls")
                and not last["content"]
            ):
                last["tool_calls"].append(call)
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content(output, k)
            turns.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":  # a model's reasoning sent back: nothing to read here
            raise _refuse(
                f"input item {k} is a '{kind}': this host reads messages, "
                "function_call and function_call_output items"
            )
        origins += [None if k < 0 else k] * (len(turns) - len(origins))  # its turn, if new
    return turns, origins


def _content(content: object, k: int) -> object:
    """A message's content: text as it is, parts as text joined by newlines."""
    if not isinstance(content, list):
        return content
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        # a model's refusal, sent back in its turn, is its text there
        text = part.get("refusal" if kind == "refusal" else "text") if kind else None
        if kind in _TEXT_PARTS and isinstance(text, str):
            texts.append(text)
        elif kind in _OTHER_PARTS:
            raise _refuse(
                f"input item {k}: '{kind}' content is not supported: the host's "
                "engines read text only"
            )
        else:
            raise _refuse(
                f"input item {k}: a content part is "
                f"{{'type': 'input_text', 'text': ...}}, not {repr(part)[:80]}"
            )
    return "\n".join(texts)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A flat function tool as the chat's nested one; a hosted tool is refused by name."""
    kind = tool.get("type")
    if kind != "function":
        raise _refuse(
            f"a '{kind}' tool runs on OpenAI's servers; this host calls functions only", "tools"
        )
    spec = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key)}
    return {"type": "function", "function": spec}


def _tool_choice(choice: str | dict[str, Any]) -> object:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _refuse(
        f"tool_choice is 'none', 'auto', 'required' or "
        f"{{'type': 'function', 'name': ...}}, not {repr(choice)[:80]}",
        "tool_choice",
    )


def _response_format(form: dict[str, Any]) -> dict[str, Any]:
    """`text.format` as the chat's `response_format` (the schema nests there)."""
    if form.get("type") != "json_schema":
        return {"type": form.get("type")}
    schema = {key: form[key] for key in ("name", "schema", "strict", "description") if key in form}
    return {"type": "json_schema", "json_schema": schema}


# ---- what goes out ---------------------------------------------------------------------------


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: ItemStatus = "completed"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=list)


class FunctionCallItem(BaseModel):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    status: ItemStatus = "completed"


OutputItem = OutputMessage | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)


class ResponseError(BaseModel):
    code: str
    message: str


class ConversationRef(BaseModel):
    id: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseObject(BaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    conversation: ConversationRef | None = None  # the conversation this turn was added to
    store: bool = True  # kept: a later request may continue it
    temperature: float = 1.0
    top_p: float = 1.0
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def started(
        cls,
        request: ResponsesRequest,
        response_id: str,
        model: str,
        created_at: int,
        conversation: str | None = None,
    ) -> ResponseObject:
        """The response as a request starts it: in progress, no output yet."""
        return cls(
            id=response_id,
            created_at=created_at,
            status="in_progress",
            model=model,
            instructions=request.instructions,
            previous_response_id=request.previous_response_id,
            conversation=ConversationRef(id=conversation) if conversation else None,
            store=request.store is not False,
            max_output_tokens=request.max_output_tokens,
            parallel_tool_calls=request.parallel_tool_calls is not False,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            tool_choice=request.tool_choice or "auto",
            tools=request.tools or [],
            text={"format": {"type": "text"}, **(request.text or {})},
            truncation=request.truncation or "disabled",
        )


class DeletedResponse(BaseModel):
    """What `DELETE /v1/responses/{id}` answers."""

    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True
