"""What goes into the engine (EngineSpec, GenerationRequest) and what comes out (events).

A GenerationRequest crosses threads: the event loop creates it and may set `cancelled`;
the batch-loop thread reads it between steps. Events (protocol/events.py) are built on the
engine thread and published to the event loop in one batch per decode step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..protocol.common import SamplingParams
from ..protocol.events import JobEvent


def default_threads() -> int:
    """llama.cpp decodes fastest with one thread per physical core; we see logical ones."""
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Everything needed to load one GGUF model as an engine."""

    model_path: str
    engine_id: str
    n_ctx: int = 4096  # per slot: each of n_parallel sequences may use all of it
    n_gpu_layers: int | None = None  # None: all layers when the build can offload, else 0
    main_gpu_id: int = 0
    n_threads: int | None = None
    n_parallel: int | Literal["auto"] = 4  # auto: as many as free memory holds (memory.py)
    n_batch: int = 512  # prompt tokens per decode step: bounds how long a prefill holds streams
    extra_buffers: bool = False  # repacked CPU weight buffers; see native.LlamaModel
    deterministic: bool = False  # each prompt prefilled alone: batching never changes output
    backend_sampling: bool | None = None  # sample in the graph; None: when all layers are on a GPU
    overlap: bool | None = None  # make text while the next step decodes; None: on a GPU
    chat_template: str | None = None  # a Jinja template in place of the GGUF's (its text)
    pooling: str | None = None  # embeddings: mean, cls or last; None: the GGUF's, else mean

    @property
    def slots_requested(self) -> int:
        """The slots asked for; 0 for auto (the engine knows the number once loaded)."""
        return 0 if self.n_parallel == "auto" else self.n_parallel


@dataclass(slots=True)
class GenerationRequest:
    """One job as the engine sees it: tokens in, sampling, and a cancel flag."""

    job_id: str
    prompt_tokens: Sequence[int]
    params: SamplingParams
    max_tokens: int
    stop_tokens: frozenset[int] = frozenset()  # beyond end-of-generation (chat turn markers)
    embed: bool = False  # an embedding job: its vector, no tokens (no slot either)
    enqueued_at: float = field(default_factory=time.perf_counter)
    # Set from the event loop; read by the batch loop between steps (a bool write is atomic).
    cancelled: bool = False
    # Filled in by the batch loop for snapshots.
    slot: int | None = None
    tokens_out: int = 0


EngineEvent = JobEvent
Publisher = Callable[[list[tuple[GenerationRequest, EngineEvent]]], None]
