"""Engine: what a pool drives, whichever engine it holds.

Two engines implement it: `LlamaEngine` (local.py), a GGUF model decoded here by llama.cpp,
and `UpstreamEngine` (upstream.py), an OpenAI-compatible server somewhere else. The scheduler
admits, queues, cancels and measures jobs the same way on either: it hands over
`GenerationRequest`s and reads the events each engine publishes for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..protocol.common import ChatMessage
from ..protocol.snapshots import EngineParameters, MemoryUsage, SlotSnapshot
from .chat_format import ChatFormat
from .local import LlamaEngine
from .types import AnySpec, GenerationRequest, Publisher, UpstreamSpec
from .upstream import UpstreamEngine

HealthHook = Callable[[str | None], None]
"""Told when an engine stops being reachable (why, in a sentence) or is again (None)."""


class Engine(Protocol):
    """A running engine. Everything but `shutdown` is cheap and called on the event loop."""

    version: str
    n_gpu_layers: int
    chat_format: ChatFormat
    chat_stop_tokens: frozenset[int]
    sampling_defaults: Mapping[str, float]  # for the fields a request leaves unset
    problem: str | None  # why it cannot serve now (an upstream that does not answer); None: it can

    @property
    def description(self) -> str: ...
    @property
    def model_names(self) -> tuple[str, ...]: ...  # what a request's `model` may call it
    @property
    def embeds(self) -> bool: ...
    @property
    def tokenizes(self) -> bool: ...  # prompts become tokens here (else the server reads text)
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_parallel(self) -> int: ...
    @property
    def busy_slots(self) -> int: ...
    @property
    def parameters(self) -> EngineParameters: ...
    @property
    def memory(self) -> MemoryUsage | None: ...
    @property
    def loop_time(self) -> tuple[float, float] | None: ...  # (decoding, busy) seconds
    def placement(self) -> str: ...

    # A prompt as tokens, for admission and the local batch loop; an engine that tokenizes
    # remotely returns none and reads the request's messages or text instead.
    def chat_prompt(
        self, messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]: ...
    def text_prompt(self, prompt: str) -> list[int]: ...

    # Text and tokens both ways, as the model sees them (/tokenize, /detokenize): only an
    # engine that `tokenizes`; any thread.
    def tokenize(self, text: str, *, add_special: bool) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def submit(self, request: GenerationRequest) -> None: ...
    def withdraw(self, request: GenerationRequest) -> bool: ...
    def wake(self) -> None: ...
    def waiting(self) -> list[GenerationRequest]: ...
    def occupancy(self) -> tuple[int, int]: ...
    def slots(self) -> list[SlotSnapshot]: ...
    async def shutdown(self) -> None: ...


async def open_engine(spec: AnySpec, publish: Publisher, on_health: HealthHook) -> Engine:
    """Start the engine a spec describes: load a GGUF (in a worker thread), or connect to an
    upstream server (which reports its reachability through `on_health` from then on)."""
    if isinstance(spec, UpstreamSpec):
        return await UpstreamEngine.open(spec, publish, on_health)
    return await asyncio.to_thread(LlamaEngine.load, spec, publish)
