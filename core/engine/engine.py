"""Engine: one loaded GGUF model with its context and batch loop, behind a small API.

`Engine.load` blocks (run it in a worker thread); everything else is cheap and safe to call
from the event loop. Prompt preparation (chat format, tokenization) happens here so the
scheduler can check admission before a job is queued.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..protocol.common import ChatMessage
from ..protocol.errors import ErrorKind, InferError
from ..protocol.snapshots import EngineParameters, MemoryUsage, SlotSnapshot
from . import chat_format
from .batch_loop import BatchLoop
from .native import LlamaContext, LlamaModel, engine_version, supports_gpu_offload
from .types import EngineSpec, GenerationRequest, Publisher, default_threads

log = logging.getLogger(__name__)


class Engine:
    """A running model. Create with `Engine.load`; end with `close`."""

    def __init__(
        self, spec: EngineSpec, model: LlamaModel, ctx: LlamaContext, loop: BatchLoop, n_gpu: int
    ) -> None:
        self.spec = spec
        self.model = model
        self._ctx = ctx
        self._loop = loop
        self.n_gpu_layers = n_gpu
        self.chat_format = chat_format.choose_format(model)
        self.chat_stop_tokens = chat_format.turn_stop_tokens(model)
        self.version = engine_version()

    @classmethod
    def load(cls, spec: EngineSpec, publish: Publisher) -> Engine:
        """Load weights, allocate the context and start the batch loop. Blocking."""
        if spec.n_parallel < 1 or spec.n_ctx < 16 or spec.n_batch < 1:
            raise InferError(
                ErrorKind.INVALID_PARAMS, "n_parallel, n_ctx and n_batch must be positive"
            )
        gpu = supports_gpu_offload()
        n_gpu = spec.n_gpu_layers if spec.n_gpu_layers is not None else (-1 if gpu else 0)
        if not gpu:
            n_gpu = 0

        def open_model() -> tuple[LlamaModel, LlamaContext]:
            model = LlamaModel(spec.model_path, n_gpu, spec.main_gpu_id, spec.extra_buffers)
            try:
                threads = spec.n_threads or default_threads()
                ctx = LlamaContext(model, spec.n_ctx, spec.n_parallel, spec.n_batch, threads)
            except BaseException:
                model.free()
                raise
            return model, ctx

        loop = BatchLoop(spec.engine_id, spec.n_parallel, spec.n_batch, publish)
        model, ctx = loop.open(open_model)
        engine = cls(spec, model, ctx, loop, n_gpu)
        log.info(
            "engine %s loaded %s (%s, %s, %d slots x %d ctx, gpu layers %s)",
            spec.engine_id, Path(spec.model_path).name, model.description,
            engine.chat_format.description, spec.n_parallel, ctx.n_ctx_seq, n_gpu,
        )  # fmt: skip
        return engine

    # ---- prompts -----------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """Tokens one job may use: prompt plus output."""
        return self._ctx.n_ctx_seq

    @property
    def n_parallel(self) -> int:
        return self._ctx.n_seq

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> list[int]:
        text = chat_format.render(self.model, self.chat_format, messages)
        bos_text = self.model.token_text(self.model.bos)
        add_bos = self.model.add_bos and not text.startswith(bos_text)
        return self.model.tokenize(text, add_bos=add_bos, parse_special=True)

    def text_prompt(self, prompt: str) -> list[int]:
        """A plain completion prompt: no template, and control tokens are not parsed."""
        return self.model.tokenize(prompt, add_bos=self.model.add_bos, parse_special=False)

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

    @property
    def busy_slots(self) -> int:
        return self._loop.busy_slots

    # ---- status ------------------------------------------------------------------------------

    @property
    def parameters(self) -> EngineParameters:
        return EngineParameters(
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers,
            main_gpu_id=self.spec.main_gpu_id,
            n_threads=self.spec.n_threads or default_threads(),
            n_parallel=self.spec.n_parallel,
        )

    @property
    def memory(self) -> MemoryUsage:
        return MemoryUsage(
            model_size_mb=round(self.model.size_bytes / 2**20, 1),
            context_size_mb=self._ctx.size_mb,
        )

    def close(self) -> None:
        """Stop the loop (its jobs end as aborted); its thread frees llama.cpp's memory."""
        self._loop.stop()
        log.info("engine %s closed", self.spec.engine_id)
