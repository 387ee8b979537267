"""How the prompt budget of one decode step is shared, and where the graph needs fillers.

Pure functions over plain numbers, so that the batch loop's policy can be tested without a
model.

Fair sharing: every prompt still being prefilled gets an equal share of the step's prompt
budget, and what a short prompt does not need goes to the others (max-min fairness, "water
filling"). No prompt starves: a long one advances every step, and a short one that arrives
behind it finishes in one step instead of queueing after it.

Fillers: llama.cpp runs a decode's ubatch over a contiguous range of KV streams (one stream per
sequence). A free sequence between two running ones would split the step into two ubatches,
each reading every weight again: one throw-away token on that free sequence keeps the range
contiguous, for the cost of one token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def fair_shares(remaining: Sequence[int], budget: int) -> list[int]:
    """Split `budget` tokens among prompts with `remaining` tokens each (in priority order:
    leftover single tokens go to the first). Returns each prompt's share this step."""
    n = len(remaining)
    if n == 0 or budget <= 0:
        return [0] * n
    if sum(remaining) <= budget:
        return list(remaining)
    # the largest level L with sum(min(r, L)) <= budget
    ordered = sorted(remaining)
    spent, level = 0, 0
    for i, r in enumerate(ordered):
        above = n - i  # prompts with at least r tokens left
        if spent + (r - level) * above > budget:
            level += (budget - spent) // above
            break
        spent += (r - level) * above
        level = r
    shares = [min(r, level) for r in remaining]
    left = budget - sum(shares)
    for i, r in enumerate(remaining):
        if left == 0:
            break
        if shares[i] < r:
            shares[i] += 1
            left -= 1
    return shares


def fillers(active: Iterable[int], free: Iterable[int]) -> list[int]:
    """The free sequences that lie between the lowest and highest active one."""
    ids = list(active)
    if not ids:
        return []
    low, high = min(ids), max(ids)
    return [seq for seq in free if low < seq < high]
