"""Engine: what a pool drives, whichever engine it holds.

Two engines implement it: `LlamaEngine` (llama/engine.py), a GGUF model decoded here by
llama.cpp, and `UpstreamEngine` (upstream/engine.py), an OpenAI-compatible server somewhere
else. An engine runs the jobs it is given, one per slot, and publishes their events; the queue,
admission and forecasts are the scheduler's, the same whichever engine it holds. What only some
engines can do (tokenize here, embed) they offer as capability objects, None where they cannot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..protocol.common import ChatMessage
from ..protocol.snapshots import SlotSnapshot
from .chat_format import ChatFormat
from .llama.engine import LlamaEngine
from .types import AnySpec, EngineInfo, EngineUsage, GenerationRequest, Publisher, UpstreamSpec
from .upstream.engine import UpstreamEngine

HealthHook = Callable[[str | None], None]
"""Told when an engine stops being reachable (why, in a sentence) or is again (None)."""


class Tokenizer(Protocol):
    """Offered by an engine that reads prompts as tokens here (a local model); any thread:
    a long prompt is worth tokenizing on one."""

    stop_tokens: frozenset[int]  # the template's turn markers, which end a chat reply

    def chat_prompt(
        self, messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]: ...
    def text_prompt(self, prompt: str) -> list[int]: ...
    # as the model sees them (/tokenize, /detokenize)
    def tokenize(self, text: str, *, add_special: bool) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...


class Embeddings(Protocol):
    """Offered by an engine that embeds: embedding jobs take no slot, `capacity` at a time."""

    capacity: int

    def start(self, request: GenerationRequest) -> None: ...


class Engine(Protocol):
    """A running engine. Its members are called on the event loop and return at once, but
    `shutdown`, which ends its jobs and frees what it holds; its tokenizer's work may take a
    while, on any thread."""

    problem: str | None  # why it cannot serve now (an upstream that does not answer); None: it can
    sampling_defaults: Mapping[str, float]  # for the fields a request leaves unset
    chat_format: ChatFormat  # how its prompts are rendered, tools included

    # What it can do beyond generating: None where it cannot.
    @property
    def tokenizer(self) -> Tokenizer | None: ...  # None: its server reads messages or text
    @property
    def embeddings(self) -> Embeddings | None: ...

    def describe(self) -> EngineInfo: ...
    def usage(self) -> EngineUsage: ...
    def start(self, request: GenerationRequest) -> None: ...  # only when a slot is free
    def cancel(self, request: GenerationRequest) -> None: ...  # it ends with Finished("abort")
    def slots(self) -> list[SlotSnapshot]: ...
    async def shutdown(self) -> None: ...  # every job it holds ends as aborted


async def open_engine(spec: AnySpec, publish: Publisher, on_health: HealthHook) -> Engine:
    """Start the engine a spec describes: load a GGUF (in a worker thread), or connect to an
    upstream server (which reports its reachability through `on_health` from then on)."""
    if isinstance(spec, UpstreamSpec):
        return await UpstreamEngine.open(spec, publish, on_health)
    return await asyncio.to_thread(LlamaEngine.load, spec, publish)
