"""Which sampler chain sits in the graph for each sequence, and when it changes.

llama.cpp samples in the graph for a sequence once a chain is installed for it
(`llama_set_sampler`). Two facts shape the bookkeeping: a chain can be installed once only in
its life (llama.cpp asserts), and every install or removal re-plans the graph at the next
decode. So a slot's chain outlives its job: a new job with an equal chain (see `chain_key`)
is steered to that slot and reuses it after a reset, and a chain is taken out only after it
has sat idle on a free slot for IDLE_STEPS steps with nobody waiting.
"""

from __future__ import annotations

from collections.abc import Callable

from ...protocol.common import SamplingParams
from .native import LlamaContext
from .sampler import SamplerChain, chain_key

IDLE_STEPS = 64  # not sooner: the next round of a batch, the next turn of a chat come back


class GraphSamplers:
    """The chains installed in one context, one place per sequence. Batch loop thread only."""

    def __init__(self, ctx: LlamaContext, n_vocab: int) -> None:
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._chains: list[SamplerChain | None] = [None] * ctx.n_seq
        self._freed_at = [0] * ctx.n_seq  # the step at which each sequence last fell free

    def place(self, free: list[int], params: SamplingParams) -> tuple[int, SamplerChain]:
        """A free sequence for a job and its installed chain: one whose chain the job can
        reuse, else the lowest (running sequences stay packed, so fewer fillers)."""
        key = chain_key(params)
        index = next((i for i in free if (c := self._chains[i]) and c.key == key), free[0])
        chain = self._chains[index]
        if chain is not None and chain.key == key:
            chain.reset()
            return index, chain
        self._remove(index)
        chain = SamplerChain(params, self._n_vocab)
        self._ctx.set_sampler(index, chain)
        self._chains[index] = chain
        return index, chain

    def place_on_host(self, free: list[int]) -> int:
        """A free sequence with no chain in the graph, for a job sampled on the host (one
        with a grammar): a chain-less one if any, else the first, whose chain comes out."""
        index = next((i for i in free if self._chains[i] is None), free[0])
        self._remove(index)
        return index

    def freed(self, index: int, step: int) -> None:
        """The sequence's job ended; its chain stays for the next job to reuse."""
        self._freed_at[index] = step

    def remove_idle(self, step: int, busy: Callable[[int], bool]) -> None:
        """Take out the chains that sat unused on a free sequence for IDLE_STEPS steps: each
        runs on a dummy row every step. All go at once: one graph re-plan."""
        for index, chain in enumerate(self._chains):
            if chain is not None and not busy(index) and step - self._freed_at[index] > IDLE_STEPS:
                self._remove(index)

    def installed(self, index: int) -> SamplerChain | None:
        return self._chains[index]

    def close(self) -> None:
        for index in range(len(self._chains)):
            self._remove(index)

    def _remove(self, index: int) -> None:
        chain = self._chains[index]
        if chain is not None:
            self._ctx.set_sampler(index, None)
            chain.free()
            self._chains[index] = None
