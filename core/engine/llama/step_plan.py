"""How the prompt budget of one decode step is shared, and where the graph needs fillers.

Pure functions over plain numbers, so that the batch loop's policy can be tested without a
model.

Sharing: prompts closest to done go first (shortest remaining first), so a short prompt behind
a long one finishes in one step, and prompts of equal length finish one after another, as first
come, first served would have them. Splitting the budget evenly would make them all wait for the
last one, and every extra prompt in a step costs llama.cpp another ubatch (measured, as the two
choices below are, in bench/README.md, "Figures behind the code"). What keeps a long prompt
from starving behind a stream of short ones is age: its claim doubles every AGING_STEPS steps
it has waited, so within a few dozen steps it goes first.

Admission order: llama.cpp cuts a decode into ubatches that are rectangles, a run of
consecutive sequences times as many tokens as the shortest of them has left (`ubatches` below
mirrors its split). Prompt chunks of scattered lengths make a staircase of small ubatches, each
running the whole graph. Prompts admitted together are therefore laid on free sequences in
order of length, so the prompts that finish together sit side by side in rising order.

Last tokens apart: a prompt that finishes in a step needs a logits row, and so does every
running sequence. In one decode, prompts of unequal lengths finish in different ubatches of the
staircase, and each ubatch with rows runs the output layer again (in a small model with a large
vocabulary the largest matrix it has: Gemma 3 270M's is 262k x 640). Where that happens, the
step is two decodes: first the prompts without their last tokens, with no rows, then one token
of every sequence, the running ones and the finishing prompts alike, as one rectangle with all
the step's rows. With nothing running, the split pays from four ubatches with rows on; beside
running sequences it pays from two, as the prompts no longer cut the running sequences'
rectangle.

Fillers: llama.cpp runs a decode's ubatch over a contiguous range of KV streams (one stream per
sequence). A free sequence between two running ones would split the step into two ubatches,
each reading every weight again: one throw-away token on that free sequence keeps the range
contiguous, for the cost of one token. Where a token costs about what reading the weights
does (a CPU), a wide hole costs more in fillers than the ubatch it saves: holes are filled up
to the step's fixed cost in tokens (step_cost.py, measured at load), eight jobs scattered
over 32 sequences by the prompt cache ran at 66 tokens/s with every hole filled, and at
111-114 with only the narrow ones (bundled model, 2 cores, quote-and-edit chats).
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


def admission_order(prompt_lengths: Sequence[int]) -> list[int]:
    """The order (indices) in which prompts admitted in one step take the free sequences,
    lowest first: shortest prompt first, ties in arrival order."""
    return sorted(range(len(prompt_lengths)), key=lambda i: prompt_lengths[i])


def ubatches(chunks: dict[int, int], n_ubatch: int) -> list[tuple[list[int], int]]:
    """How llama.cpp splits a decode of `chunks` (sequence: tokens) over one-stream-per-
    sequence KV caches (`llama_batch_allocr::split_equal`, sequential): each ubatch is a run of
    consecutive sequences and a height, the tokens each gives. The batch loop does not call
    it: it is the model the admission order is argued and tested against."""
    left = {seq: n for seq, n in chunks.items() if n > 0}
    out: list[tuple[list[int], int]] = []
    while left:
        run: list[int] = []
        for seq in sorted(left):
            if not run or seq == run[-1] + 1:
                run.append(seq)
        height = min(min(left[seq] for seq in run), max(1, n_ubatch // len(run)))
        for seq in run:
            left[seq] -= height
            if not left[seq]:
                del left[seq]
        out.append((run, height))
    return out


# From how many ubatches with logits rows in one decode the step is split, where the split
# leaves them in one (see the module's docstring): it must save one output pass fewer.
APART_ALONE = 4  # no sequence is running: the extra decode must win back more
APART_BESIDE_RUNNING = 2


def output_ubatches(chunks: dict[int, int], outputs: Iterable[int], n_ubatch: int) -> int:
    """In how many of a decode's ubatches (see `ubatches`) one of the `outputs` sequences
    gives its last token, that is, how often the output layer runs."""
    left = dict(chunks)
    wanted = set(outputs)
    count = 0
    for run, height in ubatches(chunks, n_ubatch):
        ends = False
        for seq in run:
            left[seq] -= height
            ends |= not left[seq] and seq in wanted
        count += ends
    return count


def last_tokens_apart(
    running: Sequence[int], chunks: dict[int, int], finishing: Iterable[int],
    free: Iterable[int], n_ubatch: int, widest: float = float("inf"),
) -> bool:  # fmt: skip
    """Whether a step should decode its prompt chunks first, without the last token of those
    that finish, and then one token of every sequence in a decode of its own. `running` are
    the sequences giving their next token, `chunks` the prompt tokens each prefilling
    sequence gives, `finishing` those whose prompts end in this step, `free` the sequences
    that hold no job (fillers go there). The split must save output passes: the second
    decode is one ubatch with rows unless a sequence holding a job gives no token to it (a
    prompt that goes on, a job waiting to copy another's cells) and cuts it."""
    ending, idle = set(finishing), list(free)
    if all(chunks[seq] == 1 for seq in ending):
        return False  # every last token is in the one-token rectangle already
    rows = [*running, *ending]
    one = dict.fromkeys(running, 1) | chunks
    one |= dict.fromkeys(fillers(one, idle, widest), 1)
    second = dict.fromkeys(rows, 1)
    second |= dict.fromkeys(fillers(second, idle, widest), 1)
    saved = output_ubatches(one, rows, n_ubatch) - output_ubatches(second, rows, n_ubatch)
    return saved >= (APART_BESIDE_RUNNING if running else APART_ALONE) - 1


def fillers(active: Iterable[int], free: Iterable[int], widest: float = float("inf")) -> list[int]:
    """The free sequences that lie between the lowest and highest active one, in holes of at
    most `widest` sequences: a wider hole costs more in filler tokens than the extra ubatch it
    saves (on a CPU, where a token costs about what a step's fixed part does)."""
    ids = set(active)
    if not ids:
        return []
    low, high = min(ids), max(ids)
    inside = sorted(seq for seq in free if low < seq < high)
    out: list[int] = []
    hole: list[int] = []
    for seq in inside:
        if hole and seq != hole[-1] + 1:  # a running sequence (or a busy one) between
            out.extend(hole if len(hole) <= widest else [])
            hole = []
        hole.append(seq)
    out.extend(hole if len(hole) <= widest else [])
    return out
