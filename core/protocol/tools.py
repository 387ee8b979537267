"""Tools (function calling) for the OpenAI dialect: the request's tools, the call format the
model is told, the grammar that forces a call, and reading calls back out of a reply.

The call format in use is the generic JSON one: the tools and the format are described in a
system turn, and a call is the reply `{"tool_calls": [{"name": ..., "arguments": {...}}]}`.
`tool_choice: "required"` or a named tool constrains the reply to exactly that JSON with a
grammar (structured.py), so even a weak model returns a well-formed call of an offered tool.
Replies are also read in the formats models are trained on: Hermes/Qwen `<tool_call>`, Llama
3.x JSON (`parameters`, optionally after `<|python_tag|>`) and Mistral `[TOOL_CALLS]`.
Earlier calls and `tool` results in the history go back to the model as plain turns.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .common import ChatMessage
from .structured import checked_schema

MAX_TOOLS = 128
# JSON read from a reply nests no deeper (pydantic's parser, at the door, allows as much):
# what is read is written and read again further on, deeper in the stack, by recursion
MAX_DEPTH = 200
# The tool-call formats, as the engine status names them.
GENERIC_FORMAT = "generic JSON tool calls"
HERMES = "hermes <tool_call>"
MISTRAL = "mistral [TOOL_CALLS]"
LLAMA3 = "llama 3.x JSON"


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = Field("", max_length=4096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @field_validator("parameters")
    @classmethod
    def _enforceable(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        checked_schema(parameters)  # a keyword the grammar cannot enforce is a 400 here
        return parameters


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedChoice(BaseModel):
    type: Literal["function"] = "function"
    function: dict[str, str]

    @property
    def name(self) -> str:
        return self.function.get("name", "")


ToolChoice = Literal["none", "auto", "required"] | NamedChoice


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = ""

    def with_id(self) -> ToolCall:
        return ToolCall(self.name, self.arguments, self.id or f"call_{secrets.token_hex(8)}")


def system_turn(tools: list[Tool]) -> str:
    """What the model is told about the tools and how to call them."""
    lines = [
        "You can call these tools. To call one or more, reply with only this JSON and "
        'nothing else: {"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}',
        "Otherwise, answer normally.",
        "",
        "Tools:",
    ]
    for tool in tools:
        spec = tool.function
        schema = json.dumps(spec.parameters, separators=(",", ":"))
        lines.append(f"- {spec.name}: {spec.description or '(no description)'} Arguments: {schema}")
    return "\n".join(lines)


def forcing_schema(
    tools: list[Tool], *, parallel: bool, form: str = GENERIC_FORMAT
) -> tuple[str, tuple[str, str] | None]:
    """The JSON Schema of a reply that is a well-formed call of one of `tools` (of several
    calls, if `parallel` and the format has a list), in the call format `form`, with the
    literal text around it: the grammar built from them admits nothing else."""
    arguments = "parameters" if form == LLAMA3 else "arguments"
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool.function.name},
                arguments: tool.function.parameters or {"type": "object"},
            },
            "required": ["name", arguments],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    array: dict[str, Any] = {"type": "array", "items": one, "minItems": 1}
    if not parallel:
        array["maxItems"] = 1
    if form == HERMES:
        return checked_schema(one), ("<tool_call>\n", "\n</tool_call>")
    if form == MISTRAL:
        return checked_schema(array), ("[TOOL_CALLS]", "")
    if form == LLAMA3:
        return checked_schema(one), None
    schema = {
        "type": "object",
        "properties": {"tool_calls": array},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    return checked_schema(schema), None


class RichMessage(ChatMessage):
    """A turn as a chat template that renders tools takes it: `tool` results, and an
    assistant's calls with their arguments as objects (templates write them with tojson)."""

    role: Literal["system", "user", "assistant", "tool"]  # type: ignore[assignment]
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def for_template(self) -> RichMessage:
        if not self.tool_calls:
            return self
        calls = []
        for call in self.tool_calls:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                function["arguments"] = read_json(arguments) or {}
            calls.append({**call, "function": function, **function})  # both shapes templates read
        return self.model_copy(update={"tool_calls": calls})


# ---- reading calls out of a reply -------------------------------------------------------------

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_PREFIXES = ("{", "<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")


def may_be_a_call(text: str) -> bool:
    """Whether a reply that starts so could still turn out to be a tool call (a stream holds
    such text back until it knows)."""
    head = text.lstrip()
    return any(p.startswith(head) or head.startswith(p) for p in _PREFIXES)


def parse_calls(text: str, names: set[str]) -> list[ToolCall]:
    """The calls of offered tools in a reply, in any of the formats above; [] if it is not a
    call (text that only looks like one stays text). Total: whatever the model wrote, it
    returns, and each call's arguments are the JSON text of an object (issue 34 §5)."""
    body = text.strip()
    found: list[ToolCall] = []
    if "<tool_call>" in body:  # Hermes, Qwen 2.5/3
        for block in _HERMES.findall(body):
            found.extend(_calls(read_json(block)))
    elif body.startswith("[TOOL_CALLS]"):  # Mistral
        found = list(_calls(read_json(body.removeprefix("[TOOL_CALLS]").strip())))
    else:  # generic {"tool_calls": [...]}, or Llama 3.x {"name": ..., "parameters": ...}
        body = body.removeprefix("<|python_tag|>").strip()
        for part in body.split(";") if body.startswith("{") and ";" in body else [body]:
            found.extend(_calls(read_json(part)))
    return found if found and all(call.name in names for call in found) else []


def read_json(text: Any) -> Any:
    """JSON text parsed (None if it is not JSON); anything else as it is (Ollama sends
    arguments as objects already). Never raises, whatever the model wrote (issue 34 §5).
    Raw control characters in strings are read: llama.cpp's grammar for a forced call lets
    the model write them, and what is read goes out escaped. What cannot go back out as JSON
    in UTF-8 is not JSON here: NaN and inf, a lone surrogate escape (no character), an
    integer past Python's digit limit, nesting deeper than MAX_DEPTH."""
    if not isinstance(text, str):
        return text
    try:
        value = json.loads(text, strict=False, parse_constant=_no_constant)
        if _too_deep(value):
            return None
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_deep(value: Any) -> bool:
    """Whether containers nest deeper than MAX_DEPTH (a loop: recursion is what it guards)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > MAX_DEPTH:
                return True
            todo.extend((child, depth + 1) for child in item)
    return False


def _calls(value: Any) -> Iterator[ToolCall]:
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            item = item["function"]  # OpenAI's own shape, echoed back by some models
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        arguments = item.get("arguments", item.get("parameters", {}))
        if isinstance(arguments, str):  # given as JSON text (OpenAI's shape): an object's
            arguments = read_json(arguments)
        if isinstance(name, str) and isinstance(arguments, dict):
            # written again: what a client's JSON parser reads, whatever the model wrote
            yield ToolCall(name, json.dumps(arguments))


# ---- the history, for the model -------------------------------------------------------------


def conversation(
    messages: list[RichMessage], offered: list[Tool], tool_format: str
) -> list[ChatMessage]:
    """The turns for the chat template. A template that renders tools gets them as they are
    (and the tools beside them); otherwise offered tools are described in the first system
    turn and earlier calls and results become plain turns."""
    if offered and tool_format != GENERIC_FORMAT:
        return [m.for_template() for m in messages]
    dumped = [m.model_dump(exclude_none=True) for m in messages]
    plain = [ChatMessage.model_validate(m) for m in plain_turns(dumped)]
    if not offered:
        return plain
    about = system_turn(offered)
    if plain[0].role == "system":
        return [ChatMessage(role="system", content=f"{plain[0].content}\n\n{about}"), *plain[1:]]
    return [ChatMessage(role="system", content=about), *plain]


def plain_turns(messages: list[Any]) -> list[Any]:
    """OpenAI messages with tool calls and results as the turns a chat template takes:
    an assistant's calls as the JSON it would write, a `tool` result as a user turn naming
    the tool (results in a row share one turn), `developer` as `system`."""
    names: dict[str, str] = {}
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, dict):
            out.append(message)
            continue
        role = message.get("role")
        if role == "developer":
            out.append({**message, "role": "system"})
        elif role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                names[str(call.get("id", ""))] = str(function.get("name", ""))
                arguments = read_json(function.get("arguments", "{}"))
                calls.append({"name": function.get("name"), "arguments": arguments or {}})
            said = message.get("content") or ""
            written = json.dumps({"tool_calls": calls})
            out.append({"role": "assistant", "content": f"{said}\n{written}".strip()})
        elif role == "tool":
            name = message.get("name") or names.get(str(message.get("tool_call_id")), "a tool")
            result = f"Result of {name}: {message.get('content') or ''}"
            if out and isinstance(out[-1], dict) and out[-1].get("tool_result"):
                out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n{result}"}
            else:
                out.append({"role": "user", "content": result, "tool_result": True})
        elif role == "assistant" and message.get("content") is None:
            out.append({**message, "content": ""})
        else:
            out.append(message)
    return [{k: v for k, v in m.items() if k != "tool_result"} if isinstance(m, dict) else m
            for m in out]  # fmt: skip
