"""llama.cpp's native sampler chain for one sequence, built from SamplingParams.

Sampling runs in C on the logits llama.cpp already holds; nothing is copied into Python.
The order matches llama.cpp's common defaults: penalties, top-k, top-p, min-p, temperature,
then a seeded draw (or greedy at temperature 0).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import llama_cpp as llama

from ..protocol.common import SamplingParams


class SamplerChain:
    """One native sampler chain; `sample` picks and accepts the next token of a batch row."""

    def __init__(self, params: SamplingParams, n_vocab: int) -> None:
        chain_params = llama.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        self.ptr = llama.llama_sampler_chain_init(chain_params)
        add = self._add
        if params.uses_penalties:
            add(
                llama.llama_sampler_init_penalties(
                    n_vocab,
                    params.repeat_last_n,
                    params.repeat_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                )
            )
        if params.temperature <= 0.0:
            add(llama.llama_sampler_init_greedy())
            return
        if params.top_k > 0:
            add(llama.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            add(llama.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            add(llama.llama_sampler_init_min_p(params.min_p, 1))
        add(llama.llama_sampler_init_temp(params.temperature))
        seed = params.seed if params.seed is not None else random.getrandbits(32) % (2**32 - 1)
        add(llama.llama_sampler_init_dist(seed))

    def _add(self, sampler: object) -> None:
        llama.llama_sampler_chain_add(self.ptr, sampler)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Let the penalties see the prompt, as llama-server does."""
        for token in tokens:
            llama.llama_sampler_accept(self.ptr, token)

    def sample(self, ctx: object, batch_index: int) -> int:
        return int(llama.llama_sampler_sample(self.ptr, ctx, batch_index))

    def free(self) -> None:
        if self.ptr:
            llama.llama_sampler_free(self.ptr)
            self.ptr = None
