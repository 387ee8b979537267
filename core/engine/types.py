"""What goes into an engine (EngineSpec or UpstreamSpec, GenerationRequest), what it says of
itself (EngineInfo, EngineUsage) and what comes out (events).

The pool makes a GenerationRequest on the event loop and may set `cancelled` at any time; a
local engine's batch-loop thread reads it between steps, an upstream engine on the event loop.
An engine publishes its jobs' events (protocol/events.py) in batches: the batch loop one per
decode step, from its thread; an upstream engine one per read of a reply's stream.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

from ..protocol.common import ChatMessage, SamplingParams
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import JobEvent
from ..protocol.snapshots import EngineParameters, MemoryUsage


def default_threads() -> int:
    """llama.cpp decodes fastest with one thread per physical core; we see logical ones."""
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Everything needed to load one GGUF model as an engine."""

    kind: ClassVar[str] = "llama.cpp"  # what serves it, as spec 002's capabilities name it

    model_path: str
    engine_id: str
    n_ctx: int = 4096  # per slot: each of n_parallel sequences may use all of it
    n_gpu_layers: int | None = None  # None: all layers when the build can offload, else 0
    main_gpu_id: int | None = None  # the one card the model lives on; None: all, by layers
    n_threads: int | None = None
    n_parallel: int | Literal["auto"] = 4  # auto: as many as free memory holds (memory.py)
    n_batch: int = 512  # prompt tokens per decode step: bounds how long a prefill holds streams
    extra_buffers: bool = False  # repacked CPU weight buffers; see native.LlamaModel
    deterministic: bool = False  # each prompt prefilled alone: batching never changes output
    backend_sampling: bool | None = None  # sample in the graph; None: when all layers are on a GPU
    flash_attn: bool | None = None  # None: llama.cpp's choice (engine.flash_attention)
    overlap: bool | None = None  # make text while the next step decodes; None: on a GPU
    speculative: bool = True  # prompt-lookup guesses, as many as pay (drafts.py)
    draft_model_path: str | None = None  # a draft model's guesses instead (draft_model.py)
    chat_template: str | None = None  # a Jinja template in place of the GGUF's (its text)
    pooling: str | None = None  # embeddings: mean, cls or last; None: the GGUF's, else mean
    # SamplingParams fields a request leaves unset, over the GGUF's `general.sampling.*` keys
    sampling: tuple[tuple[str, float], ...] = ()
    aliases: tuple[str, ...] = ()  # other names of it: a library model's without `:latest`

    @property
    def slots_requested(self) -> int:
        """The slots asked for; 0 for auto (the engine knows the number once loaded)."""
        return 0 if self.n_parallel == "auto" else self.n_parallel

    @property
    def names(self) -> tuple[str, ...]:
        """What a request's `model` may call this engine besides its id: its aliases and
        the file's name."""
        path = Path(self.model_path)
        return *self.aliases, path.name, path.stem

    @property
    def planned(self) -> EngineParameters:
        """The parameters asked for, shown until the engine has loaded."""
        return EngineParameters(
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers if self.n_gpu_layers is not None else -1,
            main_gpu_id=self.main_gpu_id or 0,
            n_threads=self.n_threads,
            n_parallel=self.slots_requested,
        )

    def with_model(self, model_path: str) -> EngineSpec:
        """The same engine on another model file (a reload)."""
        return replace(self, model_path=model_path)


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """An OpenAI-compatible server (vLLM, SGLang, llama-server, another infertui) served as
    an engine: jobs go to it `concurrency` at a time and the rest wait in infertui's queue."""

    kind: ClassVar[str] = "openai-upstream"

    url: str  # its OpenAI API root, e.g. http://10.0.0.5:8000/v1
    engine_id: str
    model: str | None = None  # the model to ask it for; None: the first it lists
    api_key: str | None = None
    concurrency: int = 8
    n_ctx: int = 0  # tokens a job may use; 0: what the server says, else unbounded here
    health_interval_s: float = 2.0  # how often its model list is read to tell it is up

    @property
    def model_path(self) -> str:
        """Where it is, in the place where a local engine shows its file."""
        return self.url

    @property
    def slots_requested(self) -> int:
        return self.concurrency

    @property
    def names(self) -> tuple[str, ...]:
        return (self.model,) if self.model else ()

    @property
    def planned(self) -> EngineParameters:
        return EngineParameters(n_ctx=self.n_ctx, n_gpu_layers=0, n_parallel=self.concurrency)

    def with_model(self, model_path: str) -> UpstreamSpec:
        raise InferError(
            ErrorKind.INVALID_PARAMS,
            f"engine '{self.engine_id}' is an upstream server, with no model file; a reload "
            "without model_path connects to it anew",
            param="model_path",
        )


AnySpec = EngineSpec | UpstreamSpec


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What an engine is. An upstream learns its model and context once its server answers,
    so this is asked anew, never kept."""

    description: str
    version: str
    model_names: tuple[str, ...]  # what a request's `model` may call it
    n_ctx: int  # tokens one job may use: prompt plus output
    n_parallel: int  # jobs it runs at once: its slots
    n_gpu_layers: int
    parameters: EngineParameters  # as spec 004 shows them (n_ctx 0: not known)


@dataclass(frozen=True, slots=True)
class EngineUsage:
    """What an engine takes now: memory, and (decoding, busy) seconds of its loop."""

    memory: MemoryUsage | None
    loop_time: tuple[float, float] | None
    guesses: tuple[int, int] = (0, 0)  # speculative decoding's tokens (guessed, kept)


@dataclass(slots=True)
class GenerationRequest:
    """One job as the engine sees it: tokens in, sampling, and a cancel flag."""

    job_id: str
    prompt_tokens: Sequence[int]
    params: SamplingParams
    max_tokens: int
    stop_tokens: frozenset[int] = frozenset()  # beyond end-of-generation (chat turn markers)
    embed: bool = False  # an embedding job: its vector, no tokens (no slot either)
    # The prompt as given, for an engine that renders and tokenizes it itself (an upstream
    # server); a local engine reads prompt_tokens only.
    messages: Sequence[ChatMessage] | None = None
    prompt_text: str | None = None
    enqueued_at: float = field(default_factory=time.perf_counter)
    # Set from the event loop; read by the engine, the batch loop between steps (a bool write
    # is atomic).
    cancelled: bool = False
    # Filled in by the engine that runs it (the batch loop, or an upstream's reader), for
    # snapshots.
    slot: int | None = None
    tokens_out: int = 0


Events = list[tuple[GenerationRequest, JobEvent]]  # one step's or read's, published together
Publisher = Callable[[Events], None]


@dataclass(frozen=True, slots=True)
class LoopOptions:
    """How a local engine's batch loop runs its model (batch_loop.py)."""

    n_batch: int = 512  # prompt tokens per step, beyond one token per running sequence
    deterministic: bool = False  # prefill each prompt alone, at fixed chunk boundaries
    backend_sampling: bool = False  # sample in the graph, on the device that decodes
    # Make text while the device decodes the next step. Only worth it where llama_decode
    # returns before the device is done (a GPU); on the CPU it would delay text by a step.
    overlap: bool = False
    pooling: str | None = None  # embeddings: the GGUF's when None (see embedder.py)
    speculative: bool = False  # streams guess tokens ahead from their own text (drafts.py)
    draft_path: str | None = None  # or a draft model guesses them (draft_model.py)
    draft_gpu_layers: int = 0
