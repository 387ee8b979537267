"""Finished jobs' KV cells, kept in their sequences for a prompt that goes on from them.

The batch loop leaves a job that ended well its cells until another job needs the sequence. A
job whose prompt begins with those tokens (the next turn of a chat, which repeats the whole
history) takes that sequence and decodes only the rest, as llama-server's prompt cache does.
A free sequence between running ones also carries a throw-away filler token each step
(step_plan.fillers). That token goes after the kept cells and comes off again after the decode.

`window_intact` is the sliding-window rule. This module and the batch loop's prompt sharing
both obey it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .native import LlamaContext

MIN_REUSE = 16  # fewer kept tokens than this are not worth giving up a fresh sequence for


def window_intact(n_swa: int, highest: int, position: int) -> bool:
    """Whether a sequence whose highest position placed is `highest` still has every cell a
    token at `position` attends to. Sliding-window layers reuse the cell of a position once it
    falls out of the window of the newest token placed (`is_masked_swa` in llama.cpp's
    `find_slot`): cells at or below `highest - n_swa` may be gone, and the token needs those
    above `position - n_swa`."""
    return not n_swa or highest < n_swa or highest <= position


@dataclass(slots=True)
class _Kept:
    tokens: np.ndarray  # the token of each cell, by position
    highest: int  # the highest position ever placed in the sequence


class PromptCache:
    """The free sequences that still hold a finished job's cells. Batch loop thread only."""

    def __init__(self, ctx: LlamaContext, n_swa: int) -> None:
        self._ctx = ctx
        self._n_swa = n_swa
        self._kept: dict[int, _Kept] = {}

    def __contains__(self, seq: int) -> bool:
        return seq in self._kept

    def cells(self, seq: int) -> int:
        """Cells the sequence keeps (0 if none): also where its filler token goes."""
        kept = self._kept.get(seq)
        return len(kept.tokens) if kept is not None else 0

    def keep(self, seq: int, tokens: Sequence[int], highest: int) -> None:
        """A finished job's sequence, cut back to `tokens` (a token may have been in flight)."""
        if self._ctx.trim_sequence(seq, len(tokens)):
            self._kept[seq] = _Kept(np.asarray(tokens, dtype=np.int32), highest)

    def best_for(self, free: Iterable[int], prompt: Sequence[int]) -> tuple[int, int] | None:
        """The free sequence whose kept cells begin this prompt over the most tokens, and how
        many of them a job keeps (all but the prompt's last token at most: it needs a logits
        row). None if none keeps MIN_REUSE."""
        if not self._kept or len(prompt) <= MIN_REUSE:
            return None
        wanted = np.asarray(prompt, dtype=np.int32)
        best: tuple[int, int] | None = None
        for seq in free:
            kept = self._kept.get(seq)
            if kept is None:
                continue
            n = min(len(kept.tokens), len(wanted) - 1)
            differ = np.flatnonzero(kept.tokens[:n] != wanted[:n])
            common = int(differ[0]) if len(differ) else n
            usable = common >= MIN_REUSE and window_intact(self._n_swa, kept.highest, common)
            if usable and (best is None or common > best[1]):
                best = (seq, common)
        return best

    def take(self, seq: int, n: int) -> int:
        """A job takes the sequence: it keeps the first `n` cells (0: none). Returns how many
        it has."""
        if self._kept.pop(seq, None) is None:
            return 0
        return n if self._ctx.trim_sequence(seq, n) else 0

    def drop_longer(self, seqs: Iterable[int], longest: int) -> None:
        """Free the kept cells of these sequences that are longer than `longest`. A ubatch's
        attention spans its longest stream, so a filler must not make one long."""
        for seq in seqs:
            if self.cells(seq) > longest:
                self._ctx.free_sequence(seq)
                del self._kept[seq]

    def filled(self, seq: int) -> None:
        """After a decode that put a filler token on this free sequence: take it off."""
        kept = self._kept.get(seq)
        if kept is None:
            self._ctx.free_sequence(seq)
        elif self._ctx.trim_sequence(seq, len(kept.tokens)):
            kept.highest = max(kept.highest, len(kept.tokens))  # where the filler went
        else:
            del self._kept[seq]
