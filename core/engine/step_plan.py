"""How the prompt budget of one decode step is shared, and where the graph needs fillers.

Pure functions over plain numbers, so that the batch loop's policy can be tested without a
model.

Sharing: prompts closest to done go first (shortest remaining first), so a short prompt behind
a long one finishes in one step, and prompts of equal length finish one after another, as first
come, first served would have them. Splitting the budget evenly would make them all wait for the
last one, and every extra prompt in a step costs llama.cpp another ubatch: measured on 8 prompts
of 808 tokens, an even eighth per step cost 14% in median TTFT (bench/bench_batching.py). What
keeps a long prompt from starving behind a stream of short ones is age: its claim doubles every
AGING_STEPS steps it has waited, so within a few dozen steps it goes first.

Fillers: llama.cpp runs a decode's ubatch over a contiguous range of KV streams (one stream per
sequence). A free sequence between two running ones would split the step into two ubatches,
each reading every weight again: one throw-away token on that free sequence keeps the range
contiguous, for the cost of one token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

AGING_STEPS = 8


def prompt_shares(remaining: Sequence[int], waited: Sequence[int], budget: int) -> list[int]:
    """Split `budget` tokens among prompts with `remaining` tokens each that have waited
    `waited` steps (oldest first). Returns each prompt's share this step."""
    shares = [0] * len(remaining)
    left = budget

    def claim(i: int) -> tuple[int, int]:  # smaller goes first
        return remaining[i] >> min(30, waited[i] // AGING_STEPS), i

    for i in sorted(range(len(remaining)), key=claim):
        if left <= 0:
            break
        shares[i] = min(remaining[i], left)
        left -= shares[i]
    return shares


def fillers(active: Iterable[int], free: Iterable[int]) -> list[int]:
    """The free sequences that lie between the lowest and highest active one."""
    ids = list(active)
    if not ids:
        return []
    low, high = min(ids), max(ids)
    return [seq for seq in free if low < seq < high]
