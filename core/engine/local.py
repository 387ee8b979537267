"""LlamaEngine: one loaded GGUF model with its context and batch loop (interface.py's Engine).

`LlamaEngine.load` blocks (run it in a worker thread); everything else is cheap and safe to call
from the event loop. Prompt preparation (chat format, tokenization) happens here so the
scheduler can check admission before a job is queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..protocol.common import ChatMessage
from ..protocol.errors import ErrorKind, InferError
from ..protocol.snapshots import EngineParameters, MemoryUsage, SlotSnapshot
from . import chat_format
from .backend import engine_version, idle_nvidia_gpu, supports_gpu_offload
from .batch_loop import BatchLoop
from .devices import MIB, Device, cards_in_use, gpus
from .memory import auto_parallel
from .native import LlamaContext, LlamaModel
from .recommended import recommended
from .types import EngineSpec, GenerationRequest, LoopOptions, Publisher, default_threads

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
        self.chat_stop_tokens = chat_format.turn_stop_tokens(model)
        self.sampling_defaults: Mapping[str, float] = recommended(model.meta, dict(spec.sampling))
        self.version = engine_version()
        self.options = options
        self.device_bytes = device_bytes  # GPU memory the model and its context took to load
        self.problem: str | None = None  # a loaded model can always serve

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
                threads = spec.n_threads or default_threads()
                ctx = LlamaContext(model, spec.n_ctx, n_parallel, spec.n_batch, threads)
            except BaseException:
                model.free()
                raise
            on_gpu = bool(cards) and all_layers(n_gpu, model.n_layer)
            options = LoopOptions(
                n_batch=spec.n_batch,
                deterministic=spec.deterministic,
                backend_sampling=on_gpu if spec.backend_sampling is None else spec.backend_sampling,
                overlap=on_gpu if spec.overlap is None else spec.overlap,
                pooling=spec.pooling,
            )
            return model, ctx, options

        loop = BatchLoop(spec.engine_id, publish)
        model, ctx, options = loop.open(open_model)
        taken = sum(before[d.index] - d.free_bytes for d in gpus() if d.index in before)
        engine = cls(spec, model, ctx, loop, n_gpu, options, taken)
        log.info(
            "engine %s loaded %s (%s, %s, %d slots x %d ctx, %s sampling%s)",
            spec.engine_id, Path(spec.model_path).name, model.description,
            engine.chat_format.description, ctx.n_seq, ctx.n_ctx_seq,
            "in-graph" if options.backend_sampling else "host",
            ", deterministic" if options.deterministic else "",
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

    # ---- prompts -----------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """Tokens one job may use: prompt plus output."""
        return self._ctx.n_ctx_seq

    @property
    def n_parallel(self) -> int:
        return self._ctx.n_seq

    def chat_prompt(
        self, messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return self._prompt(chat_format.render(self.model, self.chat_format, messages, tools))

    @property
    def description(self) -> str:
        return self.model.description

    @property
    def model_names(self) -> tuple[str, ...]:
        return self.spec.names

    @property
    def embeds(self) -> bool:
        return True

    @property
    def tokenizes(self) -> bool:
        return True

    def text_prompt(self, prompt: str) -> list[int]:
        """A plain completion prompt, no template. Control tokens written out in it are read
        as such, as llama-server, llama-cpp-python and Ollama's raw mode read them: a prompt
        in the model's own turn format is what its template would have made."""
        return self._prompt(prompt)

    def _prompt(self, text: str) -> list[int]:
        """Text as prompt tokens, control tokens read, with the model's BOS unless the text
        begins with it already (a template that writes it out, a hand-made prompt)."""
        add_bos = self.model.add_bos and not text.startswith(self.model.token_text(self.model.bos))
        return self.model.tokenize(text, add_bos=add_bos, parse_special=True)

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Control tokens written out (`<start_of_turn>`) are read as such, as llama-server's
        /tokenize does; `add_special` adds the model's BOS where it has one."""
        return self.model.tokenize(
            text, add_bos=add_special and self.model.add_bos, parse_special=True
        )

    def detokenize(self, tokens: Sequence[int]) -> str:
        n_vocab = self.model.n_vocab
        if bad := [t for t in tokens if not 0 <= t < n_vocab]:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"token {bad[0]} is not in the model's vocabulary (0 to {n_vocab - 1})",
                param="tokens",
            )
        return self.model.detokenize(tokens)

    # ---- jobs --------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        self._loop.submit(request)

    def withdraw(self, request: GenerationRequest) -> bool:
        return self._loop.withdraw(request)

    def wake(self) -> None:
        self._loop.wake()

    def waiting(self) -> list[GenerationRequest]:
        return self._loop.waiting()

    def occupancy(self) -> tuple[int, int]:
        return self._loop.occupancy()

    def slots(self) -> list[SlotSnapshot]:
        return self._loop.slots()

    def sequence_length(self, slot: int) -> int:
        return self._loop.sequence_length(slot)

    def kept_cells(self, slot: int) -> int:
        return self._loop.kept_cells(slot)

    @property
    def busy_slots(self) -> int:
        return self._loop.busy_slots

    # ---- status ------------------------------------------------------------------------------

    @property
    def parameters(self) -> EngineParameters:
        return EngineParameters(
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers,
            main_gpu_id=self.spec.main_gpu_id or 0,
            n_threads=self.spec.n_threads or default_threads(),
            n_parallel=self.n_parallel,
        )

    @property
    def loop_time(self) -> tuple[float, float]:
        """(Seconds decoding, seconds the batch loop had work) since loading."""
        return self._loop.loop_time

    @property
    def memory(self) -> MemoryUsage:
        """Sizes of the model and context, and the memory of the GPUs it is on, as of now."""
        cards = cards_in_use(self.cards())
        return MemoryUsage(
            model_size_mb=round(self.model.size_bytes / MIB, 1),
            context_size_mb=self._ctx.size_mb,
            device=cards.name if cards else None,
            device_used_mb=round(cards.used_bytes / MIB) if cards else None,
            device_total_mb=round(cards.total_bytes / MIB) if cards else None,
        )

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
