"""Which prompt format a model gets, and rendering messages with it.

Order of preference: the GGUF's own chat template (llama.cpp's built-in implementation when
it recognises it, else the Jinja template itself); without one, the known turn format of the
model's architecture. `ChatFormat.description` says which applied, for the engine status.
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
from .native import LlamaModel

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


# Control tokens that open a new turn: a reply that reaches one is over.
_TURN_MARKERS = ("<start_of_turn>", "<|im_start|>", "<|start_header_id|>", "<|user|>", "[INST]")


@dataclass(frozen=True, slots=True)
class ChatFormat:
    template: str  # a built-in name ("gemma") or a Jinja template
    use_jinja: bool
    description: str


def turn_stop_tokens(model: LlamaModel) -> frozenset[int]:
    """The model's own single-token turn markers, which end a chat reply."""
    stops = set()
    for marker in _TURN_MARKERS:
        tokens = model.tokenize(marker, add_bos=False, parse_special=True)
        if len(tokens) == 1 and model.token_text(tokens[0]) == marker:
            stops.add(tokens[0])
    return frozenset(stops)


def choose_format(model: LlamaModel) -> ChatFormat:
    if model.chat_template:
        if (
            _render_builtin(model.chat_template, [ChatMessage(role="user", content="x")])
            is not None
        ):
            return ChatFormat(model.chat_template, False, "gguf template (llama.cpp built-in)")
        return ChatFormat(model.chat_template, True, "gguf template (jinja)")
    name = _BY_ARCHITECTURE.get(model.architecture, "chatml")
    why = (
        f"architecture {model.architecture}"
        if model.architecture in _BY_ARCHITECTURE
        else "default"
    )
    return ChatFormat(name, False, f"builtin {name} (no template in the GGUF; {why})")


def render(model: LlamaModel, fmt: ChatFormat, messages: Sequence[ChatMessage]) -> str:
    """The prompt text for a conversation, ending where the assistant's reply begins."""
    if not messages:
        raise InferError(ErrorKind.INVALID_PARAMS, "messages must not be empty", param="messages")
    if fmt.use_jinja:
        formatter = Jinja2ChatFormatter(
            fmt.template,
            eos_token=model.token_text(model.eos),
            bos_token=model.token_text(model.bos),
        )
        try:
            dicts: Any = [m.model_dump() for m in messages]
            return str(formatter(messages=dicts).prompt)
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
