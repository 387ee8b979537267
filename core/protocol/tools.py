"""Tools (function calling) for the OpenAI and Ollama dialects: the request's tools, the call
format the model is told, the grammar that forces a call, and earlier calls and their results
in the history, as the model reads them back.

The call format in use is the generic JSON one unless the model's template renders tools
(tool_formats.py): the tools and the format are described in a system turn, and a call is the
reply `{"tool_calls": [{"name": ..., "arguments": {...}}]}`. `tool_choice: "required"` or a
named tool constrains the reply to exactly that JSON with a grammar (structured.py), so even
a weak model returns a well-formed call of an offered tool. Earlier calls and `tool` results
in the history go back to the model as plain turns. Calls are read back out of a reply, in
every format, by tool_stream.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Some names are re-exported (`as`), where the faces and the engine have found them: the call
# formats' (tool_formats.py) and those of the reader of calls (tool_stream.py).
from .common import ChatMessage
from .json_text import read_json as read_json
from .structured import checked_schema
from .tool_formats import FORMATS
from .tool_formats import GENERIC_FORMAT as GENERIC_FORMAT
from .tool_formats import HERMES as HERMES
from .tool_formats import LLAMA3 as LLAMA3
from .tool_formats import MISTRAL as MISTRAL
from .tool_stream import may_be_a_call as may_be_a_call
from .tool_stream import parse_calls as parse_calls

MAX_TOOLS = 128


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


Forced = Literal["one", "several"]  # a call must come: exactly one, or one or more


def system_turn(tools: Sequence[Tool]) -> str:
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
    tools: Sequence[Tool], *, parallel: bool, form: str = GENERIC_FORMAT
) -> tuple[str, tuple[str, str] | None]:
    """The JSON Schema of a reply that is a well-formed call of one of `tools` (of several
    calls, if `parallel` and the format has a list), in the call format `form`, with the
    literal text around it: the grammar built from them admits nothing else."""
    written = FORMATS.get(form, FORMATS[GENERIC_FORMAT])
    arguments = written.arguments
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
        return checked_schema(one), (f"{written.opens}\n", f"\n{written.closes}")
    if form == MISTRAL:
        return checked_schema(array), (written.opens, "")
    if form == LLAMA3:  # bare, as Llama 3.x writes a call without its python tag
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


# ---- the history, for the model -------------------------------------------------------------


def conversation(
    messages: Sequence[ChatMessage], offered: Sequence[Tool], tool_format: str
) -> list[ChatMessage]:
    """The turns for the chat template. A template that renders tools gets them as they are
    (and the tools beside them); otherwise offered tools are described in the first system
    turn and earlier calls and results become plain turns."""
    if not offered and all(type(m) is ChatMessage for m in messages):
        return list(messages)  # plain turns already (spec 001, P2P): nothing to write
    if offered and tool_format != GENERIC_FORMAT:
        return [m.for_template() if isinstance(m, RichMessage) else m for m in messages]
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
