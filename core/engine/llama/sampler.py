"""Choosing each sequence's next token: llama.cpp's native sampler chains, on the device or on
the host.

A chain follows llama.cpp's common order: logit biases, penalties, top-k, typical-p, top-p,
min-p, temperature, then a seeded draw (or greedy at temperature 0); Mirostat, when asked for,
takes the place of everything after the penalties but the temperature. It runs in one of two
places:

- **In the graph** (`backend`): the chain is installed in the context (`llama_set_sampler`) and
  llama.cpp samples on the device that decoded, so only a token id per sequence comes back.
  This is what a GPU wants: no logits cross the bus and no CPU pass over the vocabulary.
- **On the host**: after the decode, from the logits, a whole step's rows at once
  (step_sampler.py).

Both give the same tokens at temperature 0, and each is reproducible with a fixed seed.

A JSON Schema (structured output) becomes a grammar, which always samples on the host, as
llama-server does: the chain picks a token unconstrained, the grammar checks that one token,
and only when it refuses does the grammar mask the candidates for a second pick. Most steps
cost one check. Where the chain keeps at most k tokens (greedy, top-k), both picks look at
the best 1,024 tokens only, which gives the very token the whole vocabulary would.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import llama_cpp as llama
import numpy as np

from ...protocol.common import SamplingParams
from ...protocol.events import TokenLogprob
from .grammar import schema_grammar
from .short_calls import HOLDING, RELEASING, CandidateArray

if TYPE_CHECKING:  # native.py imports this module
    from .native import LlamaModel

RANDOM_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: llama.cpp draws a fresh seed (and on reset)
NO_TOKEN = -1  # LLAMA_TOKEN_NULL
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama's
_NARROW = 1024  # the best tokens a grammar's pick looks at first (see SamplerChain.narrow)


def chain_key(params: SamplingParams) -> tuple[object, ...]:
    """What a chain does, as a value: two jobs with equal keys can share one installed chain
    (after a reset). A random seed is part of the key as None: any such job may take it."""
    penalties = (
        (params.repeat_last_n, params.repeat_penalty, params.frequency_penalty,
         params.presence_penalty)
        if params.uses_penalties else None
    )  # fmt: skip
    constraint = (params.json_schema, params.json_wrap, params.grammar, params.logit_bias)
    if params.temperature <= 0.0:
        return ("greedy", penalties, *constraint)
    mirostat = (params.mirostat, params.mirostat_tau, params.mirostat_eta)
    return (
        params.temperature, params.top_k, params.typical_p, params.top_p, params.min_p,
        mirostat if params.mirostat else None, params.seed, penalties, *constraint,
    )  # fmt: skip


class UnusableParam(ValueError):
    """A sampling parameter llama.cpp cannot take for this model (a 400 naming it)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


class SamplerChain:
    """One native sampler chain for one sequence."""

    def __init__(self, params: SamplingParams, n_vocab: int, vocab: object = None) -> None:
        if outside := [t for t, _ in params.logit_bias if not 0 <= t < n_vocab]:
            message = f"token {outside[0]} is not in the model's vocabulary (0 to {n_vocab - 1})"
            raise UnusableParam("logit_bias", message)
        self.key = chain_key(params)
        self.n_vocab = n_vocab
        plain = params.plain
        self.greedy = params.temperature <= 0.0 and plain
        # must see every token, wherever it was sampled: penalties count them, Mirostat
        # learns from each draw's surprise
        self.stateful = params.uses_penalties or params.mirostat != 0
        top_k_first = params.temperature > 0 and not params.mirostat
        keeps = 1 if params.temperature <= 0.0 else params.top_k if top_k_first else 0
        # How many of a row's best tokens a candidate set must hold for the chain to draw from
        # it what it draws from the whole vocabulary (StepSampler's prefilter; 0: it needs the
        # whole vocabulary; plain greedy rows are one argmax): a top-k chain keeps k of them.
        # Penalties that only push tokens down (repeat >= 1, frequency and presence >= 0) push
        # at most repeat_last_n of them below the rest, so the best k + repeat_last_n hold the
        # penalised row's best k (the bundled model's card asks a repeat penalty of 1.1).
        lowers_only = (
            params.repeat_penalty >= 1.0
            and params.frequency_penalty >= 0.0
            and params.presence_penalty >= 0.0
        )
        prefiltered = 0 < keeps <= 256 and lowers_only and not params.logit_bias
        if self.greedy or not prefiltered or params.constrained:
            self.top_k = 0
        else:
            self.top_k = keeps + (0 if plain else params.repeat_last_n)
        self.grammar = None
        # A grammar's picks look at the best _NARROW tokens only, where that is exact: a chain
        # that keeps at most `narrow` tokens (greedy: 1, top-k: k) and nothing that could
        # lift one from below (a penalty, a bias). 0: the whole vocabulary.
        lifted = params.uses_penalties or params.logit_bias
        self.narrow = keeps if 0 < keeps <= _NARROW and not lifted else 0
        gbnf = params.grammar
        if params.json_schema is not None:
            try:
                gbnf = schema_grammar(params.json_schema, params.json_wrap)
            except ValueError as err:
                raise UnusableParam("response_format", str(err)) from err
        if gbnf is not None:
            self._every_token = np.arange(n_vocab, dtype=np.int32)  # made once, not per token
            self.grammar = llama.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
            if not self.grammar:
                param = "grammar" if params.grammar is not None else "response_format"
                raise UnusableParam(param, "llama.cpp cannot parse the grammar")
        self._candidates = CandidateArray()  # sample_from's, reused
        self._candidates_at = ctypes.addressof(self._candidates)
        self.on_backend = False  # installed in a context's graph (see LlamaContext.set_sampler)
        chain_params = llama.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        self.ptr = llama.llama_sampler_chain_init(chain_params)
        add = self._add
        if params.logit_bias:  # first, as llama.cpp's common chain has it
            entries = [llama.llama_logit_bias(t, b) for t, b in params.logit_bias]
            bias = (llama.llama_logit_bias * len(entries))(*entries)
            add(llama.llama_sampler_init_logit_bias(n_vocab, len(params.logit_bias), bias))
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
        seed = RANDOM_SEED if params.seed is None else params.seed
        if params.mirostat:  # in place of the truncations and the draw, as in llama.cpp
            add(llama.llama_sampler_init_temp(params.temperature))
            tau, eta = params.mirostat_tau, params.mirostat_eta
            add(
                llama.llama_sampler_init_mirostat(n_vocab, seed, tau, eta, 100)
                if params.mirostat == 1
                else llama.llama_sampler_init_mirostat_v2(seed, tau, eta)
            )
            return
        if params.top_k > 0:
            add(llama.llama_sampler_init_top_k(params.top_k))
        if params.typical_p < 1.0:
            add(llama.llama_sampler_init_typical(params.typical_p, 1))
        if params.top_p < 1.0:
            add(llama.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            add(llama.llama_sampler_init_min_p(params.min_p, 1))
        add(llama.llama_sampler_init_temp(params.temperature))
        add(llama.llama_sampler_init_dist(seed))

    def _add(self, sampler: object) -> None:
        llama.llama_sampler_chain_add(self.ptr, sampler)

    def reset(self) -> None:
        """Ready for a new job: penalties forget their tokens, the draw restarts from its seed
        (a fresh random one when the job gave none), a grammar starts over."""
        llama.llama_sampler_reset(self.ptr)
        if self.grammar is not None:
            llama.llama_sampler_reset(self.grammar)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Let the penalties see the prompt, as llama-server does."""
        for token in tokens:
            llama.llama_sampler_accept(self.ptr, token)

    def sample(self, ctx: object, batch_index: int) -> int:
        """Sample (and accept) on the host; finishes a chain the device ran only in part."""
        if self.grammar is not None:
            return self._sample_constrained(ctx, batch_index)
        return int(llama.llama_sampler_sample(self.ptr, ctx, batch_index))

    def _sample_constrained(self, ctx: object, batch_index: int) -> int:
        logits = np.ctypeslib.as_array(
            llama.llama_get_logits_ith(ctx, batch_index), shape=(self.n_vocab,)
        )
        everything = self._every_token
        narrowed = self.narrow and self.n_vocab > _NARROW
        ids = (
            np.argpartition(logits, -_NARROW)[-_NARROW:].astype(np.int32)
            if narrowed
            else everything
        )
        token = self._pick(ids, logits, constrain=False, need=0)
        if token is None or not self._allowed(token):  # refused: pick among what it allows
            token = self._pick(ids, logits, constrain=True, need=self.narrow)
            if token is None:  # too few allowed among the best: the whole vocabulary then
                token = self._pick(everything, logits, constrain=True, need=0)
        assert token is not None
        llama.llama_sampler_accept(self.grammar, token)
        llama.llama_sampler_accept(self.ptr, token)
        return token

    def _pick(
        self, ids: np.ndarray, logits: np.ndarray, *, constrain: bool, need: int
    ) -> int | None:
        """The chain's choice among `ids` (masked by the grammar first, if `constrain`),
        without accepting it; None if fewer than `need` of them are allowed."""
        candidates = np.empty(len(ids), dtype=TOKEN_DATA)
        candidates["id"] = ids
        candidates["logit"] = logits[ids]
        candidates["p"] = 0.0
        array = llama.llama_token_data_array(
            candidates.ctypes.data_as(llama.llama_token_data_p), len(ids), -1, False
        )
        if constrain:
            llama.llama_sampler_apply(self.grammar, ctypes.byref(array))
            if need and int(np.isfinite(candidates["logit"]).sum()) < need:
                return None
        llama.llama_sampler_apply(self.ptr, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def _allowed(self, token: int) -> bool:
        one = np.array([(token, 0.0, 0.0)], dtype=TOKEN_DATA)
        array = llama.llama_token_data_array(
            one.ctypes.data_as(llama.llama_token_data_p), 1, -1, False
        )
        llama.llama_sampler_apply(self.grammar, ctypes.byref(array))
        return bool(np.isfinite(one["logit"][0]))

    def sample_from(self, candidates: np.ndarray, *, hold_gil: bool = False) -> int:
        """Sample (and accept) from a candidate array of llama_token_data, which must hold
        every token the chain could pick (see StepSampler's top-k prefilter). `hold_gil`
        where no other thread samples beside (short_calls.py)."""
        calls = HOLDING if hold_gil else RELEASING
        array = self._candidates
        array.data, array.size = candidates.ctypes.data, len(candidates)
        array.selected, array.sorted = -1, False
        calls.sampler_apply(self.ptr, self._candidates_at)
        token = int(candidates["id"][array.selected])
        calls.sampler_accept(self.ptr, token)
        return token

    def free(self) -> None:
        if self.ptr:
            llama.llama_sampler_free(self.ptr)
            self.ptr = None
        if self.grammar:
            llama.llama_sampler_free(self.grammar)
            self.grammar = None


def token_logprob(
    ctx: object, row: int, token: int, alternatives: int, model: LlamaModel
) -> TokenLogprob:
    """The token's log-probability under the model's own distribution at this row (a log
    softmax over the logits, before sampling shapes it), and the `alternatives` likeliest
    tokens with theirs."""
    n_vocab, piece = model.n_vocab, model.piece
    logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, row), shape=(n_vocab,))
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak).sum()))
    top: tuple[tuple[bytes, float], ...] = ()
    if alternatives:
        best = np.argpartition(logits, -alternatives)[-alternatives:]
        best = best[np.argsort(-logits[best])]
        top = tuple((piece(int(t)), float(logits[t]) - log_total) for t in best)
    return TokenLogprob(piece(token), float(logits[token]) - log_total, top)
