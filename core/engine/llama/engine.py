"""LlamaEngine: one loaded GGUF model with its context and batch loop (interface.py's Engine).

`LlamaEngine.load` blocks (run it in a worker thread); everything else is cheap and safe to call
from the event loop. It offers its tokenizer (prompts.py: the model's chat format and
vocabulary) as a capability: the host turns a prompt into tokens with it, so that the pool
checks admission before the job is queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from ...protocol.errors import ErrorKind, InferError
from ...protocol.snapshots import EngineParameters, MemoryUsage, SlotSnapshot
from .. import chat_format
from ..types import (
    EngineInfo,
    EngineSpec,
    EngineUsage,
    GenerationRequest,
    LoopOptions,
    Publisher,
    default_threads,
)
from .backend import engine_version, idle_nvidia_gpu, supports_gpu_offload
from .batch_loop import BatchLoop
from .devices import MIB, Device, cards_in_use, gpus
from .drafts import MAX_GUESSES
from .embedder import MAX_SEQUENCES
from .memory import auto_parallel
from .native import LlamaContext, LlamaModel
from .prompts import ModelTokenizer
from .recommended import recommended

log = logging.getLogger(__name__)


class LlamaEngine:
    """A running model. Create with `LlamaEngine.load`; end with `close`."""

    def __init__(
        self,
        spec: EngineSpec,
        model: LlamaModel,
        ctx: LlamaContext,
        loop: BatchLoop,
        n_gpu: int,
        options: LoopOptions,
        device_bytes: int = 0,
    ) -> None:
        self.spec = spec
        self.model = model
        self._ctx = ctx
        self._loop = loop
        self.n_gpu_layers = n_gpu
        self.chat_format = chat_format.choose_format(model, spec.chat_template)
        self.tokenizer = ModelTokenizer(model, self.chat_format)
        self.chat_stop_tokens = self.tokenizer.stop_tokens
        self.embeddings = _LoopEmbeddings(loop)
        self.sampling_defaults: Mapping[str, float] = recommended(model.meta, dict(spec.sampling))
        self.version = engine_version()
        self.options = options
        self.device_bytes = device_bytes  # GPU memory the model and its context took to load
        self.problem: str | None = None  # a loaded model can always serve
        self._info = EngineInfo(
            description=model.description,
            version=self.version,
            model_names=spec.names,
            n_ctx=ctx.n_ctx_seq,
            n_parallel=ctx.n_seq,
            n_gpu_layers=n_gpu,
            parameters=EngineParameters(
                n_ctx=ctx.n_ctx_seq,
                n_gpu_layers=n_gpu,
                main_gpu_id=spec.main_gpu_id or 0,
                n_threads=spec.n_threads or default_threads(),
                n_parallel=ctx.n_seq,
            ),
        )

    @classmethod
    def load(cls, spec: EngineSpec, publish: Publisher) -> LlamaEngine:
        """Load weights, allocate the context and start the batch loop. Blocking."""
        bad_parallel = isinstance(spec.n_parallel, int) and spec.n_parallel < 1
        if bad_parallel or spec.n_ctx < 16 or spec.n_batch < 1:
            raise InferError(
                ErrorKind.INVALID_PARAMS, "n_parallel, n_ctx and n_batch must be positive"
            )
        n_gpu = gpu_layers(spec)
        cards = gpus()
        if n_gpu and cards and spec.main_gpu_id is not None and spec.main_gpu_id >= len(cards):
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"there is no GPU {spec.main_gpu_id}: this machine has {len(cards)} "
                f"(0 to {len(cards) - 1})",
                param="main_gpu_id",
            )
        before = {d.index: d.free_bytes for d in cards}

        def open_model() -> tuple[LlamaModel, LlamaContext, LoopOptions]:
            model = LlamaModel(spec.model_path, n_gpu, spec.main_gpu_id, spec.extra_buffers)
            try:
                n_parallel = spec.n_parallel
                if n_parallel == "auto":
                    n_parallel, why = auto_parallel(model, spec.n_ctx, spec.n_batch)
                    log.info("engine %s: %s", spec.engine_id, why)
                on_gpu = bool(cards) and all_layers(n_gpu, model.n_layer)
                in_graph = on_gpu if spec.backend_sampling is None else spec.backend_sampling
                options = LoopOptions(
                    n_batch=spec.n_batch,
                    deterministic=spec.deterministic,
                    backend_sampling=in_graph,
                    overlap=on_gpu if spec.overlap is None else spec.overlap,
                    pooling=spec.pooling,
                    # Guesses need rows of their own, which chains in the graph cannot sample
                    # one after another; deterministic mode keeps every step's shape; and the
                    # cells of dropped guesses must go, which a recurrent state cannot do.
                    speculative=spec.speculative
                    and not in_graph
                    and not spec.deterministic
                    and model.can_trim,
                    draft_path=spec.draft_model_path,
                    draft_gpu_layers=n_gpu,
                )
                threads = spec.n_threads or default_threads()
                guesses = MAX_GUESSES if options.speculative else 0
                flash = flash_attention(spec.flash_attn)
                ctx = LlamaContext(
                    model, spec.n_ctx, n_parallel, spec.n_batch, threads, flash, guesses
                )
            except BaseException:
                model.free()
                raise
            return model, ctx, options

        loop = BatchLoop(spec.engine_id, publish)
        model, ctx, options = loop.open(open_model)
        taken = sum(before[d.index] - d.free_bytes for d in gpus() if d.index in before)
        engine = cls(spec, model, ctx, loop, n_gpu, options, taken)
        log.info(
            "engine %s loaded %s (%s, %s, %d slots x %d ctx, %s sampling, flash attention %s%s%s)",
            spec.engine_id, Path(spec.model_path).name, model.description,
            engine.chat_format.description, ctx.n_seq, ctx.n_ctx_seq,
            "in-graph" if options.backend_sampling else "host",
            {-1: "auto", 0: "off", 1: "on"}[ctx.flash_attn],
            ", deterministic" if options.deterministic else "",
            ", speculative" if options.speculative else "",
        )  # fmt: skip
        log.info("engine %s: %s", spec.engine_id, engine.placement())
        return engine

    def placement(self) -> str:
        """Where the engine runs, in one line: device, layers offloaded, memory it took."""
        cards = cards_in_use(self.cards())
        if cards is None:
            threads = self.spec.n_threads or default_threads()
            return (
                f"CPU ({threads} thread{'' if threads == 1 else 's'}): model "
                f"{self.model.size_bytes / MIB:,.0f} MiB, context {self._ctx.size_mb:,.0f} MiB"
            )
        n_layer = self.model.n_layer
        offloaded = n_layer + 1 if self.n_gpu_layers < 0 else min(self.n_gpu_layers, n_layer + 1)
        return (
            f"GPU {cards.name}: {offloaded}/{n_layer + 1} layers offloaded, "
            f"{self.device_bytes / MIB:,.0f} MiB of VRAM taken, "
            f"{cards.used_bytes / MIB:,.0f} of {cards.total_bytes / MIB:,.0f} MiB in use"
        )

    # ---- jobs --------------------------------------------------------------------------------

    def start(self, request: GenerationRequest) -> None:
        self._loop.start(request)

    def cancel(self, request: GenerationRequest) -> None:
        """The loop frees its slot at its next step (the flag is set already)."""
        request.cancelled = True
        self._loop.wake()

    def slots(self) -> list[SlotSnapshot]:
        return self._loop.slots()

    # For tests and diagnostics: the batch loop's own view of its sequences.
    @property
    def busy_slots(self) -> int:
        return self._loop.busy_slots

    def sequence_length(self, slot: int) -> int:
        return self._loop.sequence_length(slot)

    def kept_cells(self, slot: int) -> int:
        return self._loop.kept_cells(slot)

    # ---- status ------------------------------------------------------------------------------

    def describe(self) -> EngineInfo:
        return self._info

    def usage(self) -> EngineUsage:
        """The sizes of the model and context and the memory of the GPUs it is on, as of now,
        and (seconds decoding, seconds the batch loop had work) since loading."""
        cards = cards_in_use(self.cards())
        memory = MemoryUsage(
            model_size_mb=round(self.model.size_bytes / MIB, 1),
            context_size_mb=self._ctx.size_mb,
            device=cards.name if cards else None,
            device_used_mb=round(cards.used_bytes / MIB) if cards else None,
            device_total_mb=round(cards.total_bytes / MIB) if cards else None,
        )
        return EngineUsage(memory, self._loop.loop_time, self._loop.guesses)

    def cards(self) -> list[Device]:
        """The GPUs that hold the model, read anew: its card with `--main-gpu`, else every
        card (llama.cpp spreads the layers over them); none on the CPU."""
        if self.n_gpu_layers == 0:
            return []
        cards = gpus()
        if self.spec.main_gpu_id is None or not cards:
            return cards
        return [cards[min(self.spec.main_gpu_id, len(cards) - 1)]]

    def close(self) -> None:
        """Stop the loop (its jobs end as aborted); its thread frees llama.cpp's memory."""
        self._loop.stop()
        log.info("engine %s closed", self.spec.engine_id)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self.close)


class _LoopEmbeddings:
    """Embedding jobs run in the batch loop, beside the slots: as many per step as one decode
    of its embedding context holds."""

    capacity = MAX_SEQUENCES

    def __init__(self, loop: BatchLoop) -> None:
        self.start = loop.start


def gpu_layers(spec: EngineSpec) -> int:
    """The layers to offload: as asked, all (-1) by default where the build can offload, and
    none where it cannot (a CPU build ignores the setting)."""
    if not supports_gpu_offload():
        if idle_nvidia_gpu():
            log.warning(
                "engine %s: this machine has an NVIDIA GPU, but llama-cpp-python was built "
                "without CUDA: it runs on the CPU. Install the CUDA toolkit (nvcc) and run the "
                "README's set-up command again.", spec.engine_id,
            )  # fmt: skip
        return 0
    return spec.n_gpu_layers if spec.n_gpu_layers is not None else -1


def all_layers(n_gpu_layers: int, n_layer: int) -> bool:
    """Whether every layer, the output one too, is offloaded: -1, or as many as the model has
    or more (the habitual -ngl 99, the engine manager's default 100). Sampling in the graph
    and the overlap pay only then: else the logits are made on the CPU."""
    return n_gpu_layers < 0 or n_gpu_layers > n_layer


def flash_attention(asked: bool | None) -> int:
    """llama.cpp's flash_attn_type: what was asked, else llama.cpp's own choice (-1: on where
    the device has the kernel, the CPU included). Without it the CPU decodes long contexts
    faster (1.44x at 512 tokens on the 2-core Xeon), but a row's numbers then depend on how
    many of its sequence's tokens one graph holds: ggml multiplies one row with its own dot
    products and several with llamafile's tiles, which round otherwise. Guessed rows are
    checked several at a time, so greedy text with guesses would part from the text without
    them at near ties (bench/batch_invariance.py; bench/README, "Flash attention on the
    CPU"). With it, each query row is computed alone whatever the graph holds."""
    return -1 if asked is None else int(asked)
