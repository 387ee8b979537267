"""Which prompt format a model gets, and rendering messages with it.

Order of preference: a template given with --chat-template, then the GGUF's own (llama.cpp's
built-in implementation when it recognises it, else the Jinja template itself); without one,
the known turn format of the model's architecture. `ChatFormat.description` says which
applied, for the engine status.

Tools: a Jinja template that renders `tools` decides the tool-call format (Hermes/Qwen
`<tool_call>`, Mistral `[TOOL_CALLS]`, Llama 3.x JSON), and a request with tools is rendered
through it, in a sandboxed Jinja environment (llama-cpp-python's, as llama-server's --jinja
does), with `tool` results and earlier calls as the template takes them. Any other template
gets the generic JSON call format (protocol/tools.py), as plain turns.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp as llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ..protocol.common import ChatMessage
from ..protocol.errors import ErrorKind, InferError
from ..protocol.tool_formats import FORMATS, GENERIC_FORMAT, LLAMA3
from .llama.native import LlamaModel

# Architectures whose turn format is known when a GGUF carries no template.
_BY_ARCHITECTURE = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "llama": "llama3",
    "qwen2": "chatml",
    "qwen3": "chatml",
    "phi3": "phi3",
    "mistral": "mistral-v7",
}


# What a template that has the model think names: a switch for it, or its tags.
_THINKING_MARKERS = ("enable_thinking", "<think>", "reasoning_content", "<|channel|>analysis")

# Control tokens that open a new turn: a reply that reaches one is over.
_TURN_MARKERS = ("<start_of_turn>", "<|im_start|>", "<|start_header_id|>", "<|user|>", "[INST]")


@dataclass(frozen=True, slots=True)
class ChatFormat:
    template: str  # a built-in name ("gemma") or a Jinja template
    use_jinja: bool
    description: str
    source: str | None = None  # the Jinja template, where there is one (even if built in)
    tools: str = GENERIC_FORMAT  # the tool-call format the template renders

    @property
    def renders_tools(self) -> bool:
        return self.source is not None and self.tools != GENERIC_FORMAT

    @property
    def thinks(self) -> bool:
        return template_thinks(self.source)


def template_thinks(source: str | None) -> bool:
    """Whether a Jinja template has the model reason first (Qwen3's `enable_thinking`, the
    `<think>` of DeepSeek-R1 and others): Ollama's "thinking" capability."""
    return source is not None and any(marker in source for marker in _THINKING_MARKERS)


def tool_format(source: str | None) -> str:
    """The tool-call format a Jinja template renders tools in; the generic one if it does not."""
    if not source or "tools" not in source:
        return GENERIC_FORMAT
    for name, written in FORMATS.items():  # the markers each format writes around a call
        if written.opens and written.opens in source:
            return name
    return LLAMA3 if "ipython" in source else GENERIC_FORMAT  # Llama 3's role for results


def turn_stop_tokens(model: LlamaModel) -> frozenset[int]:
    """The model's own single-token turn markers, which end a chat reply."""
    stops = set()
    for marker in _TURN_MARKERS:
        tokens = model.tokenize(marker, add_bos=False, parse_special=True)
        if len(tokens) == 1 and model.token_text(tokens[0]) == marker:
            stops.add(tokens[0])
    return frozenset(stops)


def choose_format(model: LlamaModel, override: str | None = None) -> ChatFormat:
    if override:
        return ChatFormat(
            override, True, "--chat-template (jinja)", override, tool_format(override)
        )
    if model.chat_template:
        source, tools = model.chat_template, tool_format(model.chat_template)
        # llama.cpp's built-in C renderer is taken only where it writes what the template
        # itself writes: SmolLM2's adds a default system turn that the built-in ChatML leaves
        # out, and without it the model rambles (README, "The bundled model").
        if all(_builtin_writes_it(model, source, probe) for probe in _PROBES):
            return ChatFormat(source, False, "gguf template (llama.cpp built-in)", source, tools)
        return ChatFormat(source, True, "gguf template (jinja)", source, tools)
    name = _BY_ARCHITECTURE.get(model.architecture, "chatml")
    why = (
        f"architecture {model.architecture}"
        if model.architecture in _BY_ARCHITECTURE
        else "default"
    )
    return ChatFormat(name, False, f"builtin {name} (no template in the GGUF; {why})")


def render(
    model: LlamaModel,
    fmt: ChatFormat,
    messages: Sequence[ChatMessage],
    tools: Sequence[dict[str, Any]] | None = None,
) -> str:
    """The prompt text for a conversation, ending where the assistant's reply begins; with
    `tools`, through the template's own tool rendering (the format must render tools)."""
    if not messages:
        raise InferError(ErrorKind.INVALID_PARAMS, "messages must not be empty", param="messages")
    if fmt.use_jinja or (tools and fmt.renders_tools):
        try:
            return _jinja(model, fmt.source or fmt.template, messages, tools)
        except Exception as exc:  # a template may raise for role orders it does not accept
            raise InferError(
                ErrorKind.INVALID_PARAMS, f"the model's chat template rejected the messages: {exc}"
            ) from None
    text = _render_builtin(fmt.template, messages)
    if text is None:
        raise InferError(
            ErrorKind.INVALID_PARAMS, "the chat template could not format the messages"
        )
    return text


# Conversations both renderers must write alike for the built-in one to be taken
_PROBES = (
    [ChatMessage(role="user", content="x")],
    [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="x"),
     ChatMessage(role="assistant", content="y"), ChatMessage(role="user", content="z")],
)  # fmt: skip


def _builtin_writes_it(model: LlamaModel, source: str, probe: list[ChatMessage]) -> bool:
    """Whether llama.cpp's built-in renderer knows `source` and writes `probe` as it does;
    where the template itself refuses the probe (a role order it rejects), the built-in's
    word stands."""
    built = _render_builtin(source, probe)
    if built is None:
        return False
    try:
        return built == _jinja(model, source, probe)
    except Exception:  # the template's own refusal, whatever it raises
        return True


def _jinja(
    model: LlamaModel,
    source: str,
    messages: Sequence[ChatMessage],
    tools: Sequence[dict[str, Any]] | None = None,
) -> str:
    """The prompt a Jinja template writes; raises what the template raises."""
    formatter = Jinja2ChatFormatter(
        source, eos_token=model.token_text(model.eos), bos_token=model.token_text(model.bos)
    )
    dicts: Any = [m.model_dump(exclude_none=True) for m in messages]
    extra: Any = {"tools": list(tools)} if tools else {}
    return str(formatter(messages=dicts, **extra).prompt)


def _render_builtin(template: str, messages: Sequence[ChatMessage]) -> str | None:
    chat = (llama.llama_chat_message * len(messages))()
    keep: list[bytes] = []  # the C structs hold pointers into these bytes
    for i, message in enumerate(messages):
        role, content = message.role.encode(), message.content.encode()
        keep.extend((role, content))
        chat[i].role = role
        chat[i].content = content
    size = max(1024, 2 * sum(len(m.content) for m in messages) + 256)
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama.llama_chat_apply_template(template.encode(), chat, len(messages), True, buf, size)
        if n < 0:
            return None
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n + 1
    return None
