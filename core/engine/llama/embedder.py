"""Embeddings from an engine's own model, as Ollama gives them: no flag, no second model load.

A context of its own, with embeddings on, is made the first time one is asked for (the weights
are shared). Its pooling is the GGUF's (`<arch>.pooling_type`), else the mean over the tokens,
which is what a decoder model without one gives best. Several inputs go through one decode,
each as a sequence of its own; vectors come back L2-normalised, as OpenAI's and llama-server's
do. Batch loop thread only.
"""

from __future__ import annotations

import ctypes
import time

import llama_cpp as llama
import numpy as np

from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Finished
from ...protocol.snapshots import TimingStats
from ..types import GenerationRequest
from . import cpu_turns
from .backend import CapturedLog
from .native import Batch, LlamaModel, last_error

MAX_INPUT_TOKENS = 2048  # one input; all of it must fit one ubatch for pooling
MAX_SEQUENCES = 16  # inputs per decode

POOLING = {"mean": 1, "cls": 2, "last": 3}  # llama_pooling_type values


def pooling_of(model: LlamaModel, choice: str | None = None) -> int:
    """The pooling asked for (--pooling), else the GGUF's, else mean (NONE would give a
    vector per token)."""
    if choice is not None:
        return POOLING[choice]
    value = model.meta(f"{model.architecture}.pooling_type")
    if value is not None and value.isdigit() and int(value) in (1, 2, 3):
        return int(value)
    return llama.LLAMA_POOLING_TYPE_MEAN


class Embedder:
    def __init__(self, model: LlamaModel, n_threads: int, pooling: str | None = None) -> None:
        self.n_ctx = min(MAX_INPUT_TOKENS, int(llama.llama_model_n_ctx_train(model.ptr)))
        self.n_embd = int(llama.llama_model_n_embd(model.ptr))
        params = llama.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = self.n_ctx
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # the inputs of one decode share the cells
        params.embeddings = True
        params.pooling_type = pooling_of(model, pooling)
        params.n_threads = params.n_threads_batch = n_threads
        params.no_perf = True
        with CapturedLog() as lines:
            ptr = llama.llama_init_from_model(model.ptr, params)
        if not ptr:
            reason = last_error(lines) or "llama.cpp could not create it"
            raise InferError(ErrorKind.OUT_OF_MEMORY, f"no embedding context: {reason}")
        self.ptr = ptr
        self._on_cpu = model.n_gpu_layers == 0
        self._threads = n_threads
        self.memory = llama.llama_get_memory(ptr)
        self.batch = Batch(self.n_ctx)

    def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One vector per input. The caller keeps to MAX_SEQUENCES inputs and n_ctx tokens."""
        batch = self.batch
        batch.clear()
        for seq, tokens in enumerate(inputs):
            for pos, token in enumerate(tokens):
                batch.add(token, pos, seq, True)
        llama.llama_memory_clear(self.memory, True)
        rc, _ = cpu_turns.decode(self.ptr, batch.raw, self._on_cpu, self._threads)
        if rc != 0:
            raise InferError(ErrorKind.GENERATION_FAILED, f"llama_decode failed (code {rc})")
        vectors = []
        for seq in range(len(inputs)):
            pointer = llama.llama_get_embeddings_seq(self.ptr, seq)
            raw = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)),
                                        shape=(self.n_embd,))  # fmt: skip
            norm = float(np.linalg.norm(raw))
            vectors.append((raw / norm if norm > 0 else raw).astype(float).tolist())
        return vectors

    def embed_jobs(
        self, requests: list[GenerationRequest]
    ) -> list[tuple[GenerationRequest, Finished]]:
        """Embedding jobs done in one decode: each ends with its vector and its timings (or
        all with the error)."""
        started = time.perf_counter()
        try:
            vectors = self.embed([list(r.prompt_tokens) for r in requests])
        except InferError as error:
            return [(r, Finished("error", TimingStats(tokens_in=len(r.prompt_tokens)), error))
                    for r in requests]  # fmt: skip
        elapsed_ms = (time.perf_counter() - started) * 1000
        done = []
        for request, vector in zip(requests, vectors, strict=True):
            wait_ms = (started - request.enqueued_at) * 1000
            timings = TimingStats(
                queue_wait_ms=wait_ms, prefill_ms=elapsed_ms, total_ms=wait_ms + elapsed_ms,
                tokens_in=len(request.prompt_tokens),
            )  # fmt: skip
            done.append((request, Finished("stop", timings, embedding=tuple(vector))))
        return done

    def free(self) -> None:
        if self.ptr:
            llama.llama_free(self.ptr)
            self.ptr = None
